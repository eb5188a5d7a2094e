"""The command layer: ``cmsrun`` (CMSSW's ``cmsRun``) and everything it is made of.

Above the data path (config -> core -> io -> modules -> sonic), which never imports it: it
loads a config, builds the job (:mod:`framework.core`), runs it under ``trio.run`` with a
progress bar and signal handling, and prints the summary; or runs a config over the
datasets of a coffea fileset, one after the other or on a Dask cluster.

Files, in the direction of their imports (each imports only files above it):

* ``_progress``: the progress bar (rich's).
* ``_summary``: the end-of-job report (TrigReport, TimeReport, the services' tables) and its
  mergeable per-unit records.
* ``_timing``: ``FastTimerService`` (the JSON summary and the Perfetto trace), found by name
  through the core's registry.
* ``_datasets``: ``cmsrun --dataset``: one job per dataset (:func:`plan_datasets`), and
  :func:`run_unit` for one work unit.
* ``_signals``: Ctrl-C and SIGTERM: the job's trio loop on a thread of its own, a graceful
  first stop, an immediate second one naming where the job was stuck.
* ``executor``: ``cmsrun --executor dask``, a package of its own (the only one that knows
  Dask), built on the files above.
* ``_main``: the command line (:func:`main`, :func:`edm_config_dump`); it reaches the
  executor lazily, for ``--executor dask`` only.
"""

from ._datasets import plan_datasets as plan_datasets
from ._datasets import run_unit as run_unit
from ._main import edm_config_dump as edm_config_dump
from ._main import main as main
from ._progress import progress_bar as progress_bar
from ._summary import merge_records as merge_records
from ._summary import print_summary as print_summary
from ._summary import print_summary_dict as print_summary_dict
from ._summary import summary_dict as summary_dict
from ._summary import summary_from_record as summary_from_record
from ._summary import unit_record as unit_record
from ._timing import FastTimerService as FastTimerService
