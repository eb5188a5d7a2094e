"""pysonic's event-processing framework: CMSSW's model on trio.

Layering (read this first; ``tests/test_layering.py`` keeps it true):

* ``framework.config`` - the configuration language (``import framework.config as cms``):
  pure Python, knows nothing of trio, ROOT or Triton.
* core (``_module``, ``_event``, ``_bridge``, ``_worker``, ``_builder``, ``_scheduler``,
  ``_services``, ``_registry``) - the module API and the trio scheduler. Knows trio;
  knows nothing of ROOT files or Triton.
* ``_pool_source``, ``samples`` - ROOT input with uproot/awkward (the only core-level
  files that import uproot).
* ``framework.sonic`` - everything Triton: client, TritonService, local server,
  SONIC module bases and their direct (in-process onnxruntime) twins. Built on the
  core's ExternalWork; the core never imports it (TritonService is found by name
  through the registry). Its own file map and import direction: its ``__init__``.
* ``_cmsrun``, ``_summary``, ``_timing`` - the ``cmsrun`` command, the end-of-job report
  (rich) and FastTimerService (JSON summary, Perfetto trace).
* ``framework.bench`` - ``cmsbench``: the benchmarks (delaying proxy, experiments, plots);
  it drives configs like a user (``configs/bench``, which name ``modules`` types), and
  reaches Triton through ``framework.sonic``, except ``bench/_triton.py``: the bare
  tritonclient loop that SONIC is measured against, and edited model configs.
* ``modules/`` (a sibling package) - concrete producers, filters, analyzers and outputs,
  modules only. ``framework`` never imports ``modules``.

Module authors need only the names exported here.
"""

from ._bridge import ThreadSafeFuture as ThreadSafeFuture
from ._bridge import WaitingTaskHolder as WaitingTaskHolder
from ._builder import ProductDescription as ProductDescription
from ._builder import ProductRegistry as ProductRegistry
from ._errors import ConfigurationError as ConfigurationError
from ._errors import EventProcessingError as EventProcessingError
from ._errors import ExternalFailure as ExternalFailure
from ._errors import FileOpenError as FileOpenError
from ._errors import FileReadError as FileReadError
from ._errors import FrameworkError as FrameworkError
from ._errors import ProductNotFound as ProductNotFound
from ._event import Event as Event
from ._event import EventID as EventID
from ._module import Consumed as Consumed
from ._module import EDAnalyzer as EDAnalyzer
from ._module import EDFilter as EDFilter
from ._module import EDProducer as EDProducer
from ._module import ExternalWork as ExternalWork
from ._module import OutputModule as OutputModule
from ._registry import register_type as register_type
from ._services import Service as Service
from ._services import get_service as get_service
from ._source_base import Source as Source
from ._source_base import SourceEvent as SourceEvent
