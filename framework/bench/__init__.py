"""Benchmarks that reproduce the SONIC studies of the seed talks on this machine.

``python -m framework.bench all [--quick] [--repeat N] [--out results/]`` (see ``_cli``);
what each experiment measures and its targets: ``docs/performance.md``. The soak run
(memory over 50,000 events): ``python -m framework.bench._soak``.

Every benchmark lives here: the experiments (``_exp_*``), their jobs (``configs/``,
package data, run by ``cmsrun`` too) and the module types those jobs use
(``_modules.py``, named ``framework.bench._modules:Class`` in the configs: no public
``pysonic.modules`` entry points).

Layering: this package sits on top of everything (core, ``framework.sonic``, ``modules``);
nothing imports it. ``_proxy`` (the delaying TCP proxy) knows only trio; ``_harness`` runs
the jobs of ``configs/`` in-process, starts servers and takes the median of runs;
``_exp_*`` are the experiments; ``_plots`` needs matplotlib (the ``bench`` extra).
"""

from ._proxy import DelayProxy as DelayProxy
from ._proxy import serve_delay_proxy as serve_delay_proxy
