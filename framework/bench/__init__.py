"""Benchmarks that reproduce the SONIC studies of the seed talks on this machine.

``python -m framework.bench all [--quick] [--repeat N] [--out results/]`` (see ``_cli``);
what each experiment measures and its targets: ``docs/performance.md``.

Layering: this package sits on top of everything (core, ``framework.sonic``, ``modules``);
nothing imports it. ``_proxy`` (the delaying TCP proxy) knows only trio; ``_harness`` runs
configs from ``configs/bench`` in-process and starts servers; ``_exp_sonic`` and
``_exp_local`` are the experiments; ``_plots`` needs matplotlib (the ``bench`` extra).
"""

from ._proxy import DelayProxy as DelayProxy
from ._proxy import serve_delay_proxy as serve_delay_proxy
