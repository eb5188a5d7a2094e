"""The scale-out executor: ``cmsrun CONFIG --dataset FILESET --executor dask``.

The only part of the framework that knows Dask (the layering: :mod:`framework`). It sits
above the data path (config -> builder -> scheduler -> io -> modules -> sonic) and drives
it: the datasets' work units (``framework.io``) become Dask tasks, each worker builds and
begins the job once (``framework.core.begin_job``) and runs unit after unit
(``process_events``), and the driver merges the parts and the units' summaries.

Files:

* ``_host_triton``: :class:`HostTritonServer`, a Dask nanny plugin: one fallback Triton
  server per host (``filelock``), shared by the host's workers;
* ``_unit_task``: the worker side: :class:`JobSpec`, the per-worker
  :class:`~framework.cmsrun.executor._unit_task.JobCache` (a worker plugin), the task
  :func:`run_unit_task` and its :class:`UnitOutcome`;
* ``_report``: the one summary of the run (``framework.cmsrun._summary`` merged, plus workers,
  units retried/skipped, merge times, Triton servers);
* ``_address``: ``--scheduler ADDRESS`` checked within a bounded time (a malformed
  address, nothing listening, something that is not a Dask scheduler: one line each);
* ``_hosts``: hosts simulated on one machine (a UTS and mount namespace each, a worker on
  its own 127.0.0.N): the multi-host tests and ``cmsbench scale``;
* ``_dask``: the driver: cluster, preprocessing on the cluster, submission, progress,
  faults, merge (:func:`run_on_dask`).
"""

from ._dask import DaskOptions as DaskOptions
from ._dask import run_on_dask as run_on_dask
from ._host_triton import HostTritonServer as HostTritonServer
from ._hosts import namespaces_missing as namespaces_missing
from ._hosts import simulated_cluster as simulated_cluster
from ._hosts import worker_pids as worker_pids
from ._unit_task import JobSpec as JobSpec
from ._unit_task import UnitOutcome as UnitOutcome
from ._unit_task import run_unit_task as run_unit_task
