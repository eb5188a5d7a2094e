"""TritonService: the thin layer that joins the SONIC client to the Triton servers.

Layering: with ``framework.inference`` (the model modules' base classes), the layer joining
``framework.sonic`` (the client) and ``framework.serving`` (the servers); what it may import
is written once, in :mod:`framework`. It holds what needs both sides:

* ``_fallback``: the fallback server's life (start on demand, restart, load, stop): a
  :class:`~framework.serving.LocalTritonServer` behind the client's
  :class:`~framework.sonic._routing.Fallback` interface;
* ``_service_stats``: the end-of-job numbers and tables (client counters and Triton's
  own statistics);
* ``_service``: :class:`TritonService` (CMSSW's ``TritonService``, a framework ``Service``):
  parameters, discovery of what each server serves and assignment at begin_job, the
  fallback when no server serves a model, end_job.

Public names: :class:`TritonService`, and :func:`snapshot` (Triton's own cumulative
counters per (model, server), which ``cmsrun --executor dask`` reads for its servers).
"""

from ._service import TritonService as TritonService
from ._service_stats import snapshot as snapshot
