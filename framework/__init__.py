"""pysonic's event-processing framework: CMSSW's model on trio.

Layering (read this first; it is written here only, the sub-packages' docstrings and
``docs/architecture.md`` point here, and ``tests/test_layering.py`` keeps it true). Data flows
config -> builder -> scheduler -> io -> modules -> sonic:

* ``framework.config`` - the configuration language (``import framework.config as cms``):
  pure Python, knows nothing of trio, ROOT or Triton.
* core (``_module``, ``_event``, ``_bridge``, ``_worker``, ``_builder``, ``_scheduler``,
  ``_services``, ``_registry``, ``_source_base``, ``_errors``, ``_activity``, ``_messagelogger``, ``_paths``,
  ``_owners``, ``_commit``) - the module API and the trio scheduler (and CMSSW's MessageLogger
  service over Python logging), and the commit of a job's outputs (written under temporary
  names, renamed once the job succeeded).
  Knows trio; knows nothing of ROOT files or Triton, and imports neither
  ``framework.io`` nor the SONIC packages (PoolSource and TritonService are found by
  name through the registry).
* ``framework.io`` - ROOT input and output with uproot/awkward: PoolSource (local files,
  ``root://``/``https://`` URLs, ``/store/`` names through redirectors, bounded waits), the
  NanoAOD tree writer, atomic file writing, datasets (coffea filesets), preprocessing
  and work units, output names per dataset/unit and the merge of unit parts, the real
  CMS samples (``framework.samples`` re-exports them). Built on the core's source
  protocol and errors only; knows nothing of Triton, the scheduler or the modules. Only
  ``framework.io`` (and the benchmarks' bare-uproot baselines) imports uproot.
* SONIC, in three packages (each with its file map in its ``__init__``):

  - ``framework.sonic`` - the client: TritonClient, requests in the three modes, retries,
    routing, cross-event batching, shared memory, ``SonicEDProducer``. Built on the core's
    ExternalWork; knows Triton only through ``tritonclient``;
  - ``framework.serving`` - the servers: the ``tritonserver`` binary, its processes,
    ``LocalTritonServer``, ``cmstriton``, the Python-backend runtime that runs inside it;
  - ``framework.service`` - the thin layer joining them: ``TritonService`` (discovery,
    assignment, the fallback server's orchestration, end-of-job statistics).

  The client and the server sides never import each other; only the service layer and
  ``framework.inference`` import both. What both read of a model's ``config.pbtxt`` (the
  parse, the ``checksum`` agent's sums, the parameter prefix the servers keep them under)
  is one neutral module below them, ``framework._triton_config``, which imports only
  protobuf and tritonclient's config schema. None of them knows ROOT files. Inside each
  package, imports go one way (its ``__init__`` lists the files in that order); torch is
  imported only by the torch runner, and only lazily.
* ``framework.inference`` - the model modules' base classes: one data conversion
  (``ModelConversion``) run by Triton (``SonicConversionProducer``) or in-process with the
  server side's ONNX runner (``OnnxDirectProducer``). Nothing of the framework imports it.
* ``_cmsrun``, ``_datasets``, ``_summary``, ``_timing``, ``_progress`` - the ``cmsrun``
  command (and its ``--dataset`` runs: one job per dataset, ``run_unit`` for one work
  unit), the end-of-job report (rich), FastTimerService (JSON summary, Perfetto trace)
  and the progress bar.
* ``framework.executor`` - ``cmsrun --executor dask``: the datasets' work units on a Dask
  cluster (a job begun once per worker, unit after unit; one server per host for the
  fallback; merge and one summary). The only package that imports Dask (``dask``,
  ``distributed``) and ``filelock``; above the data path, which never imports it
  (``cmsrun`` reaches it lazily for ``--executor dask``).
* ``framework.bench`` - ``cmsbench``: every benchmark (delaying proxy, experiments, plots,
  the soak run, and the benchmarks' own jobs and module types: ``framework/bench/configs``,
  ``_modules.py``); it drives those configs like a user, and
  reaches Triton through the SONIC packages, except for its bare tritonclient baselines
  (``_triton.py``, ``_load.py``) and Triton's own statistics.
* ``modules/`` (a sibling package) - concrete producers, filters, analyzers and outputs,
  modules only, built on the names exported here, ``framework.io`` (files),
  ``framework.sonic`` and ``framework.inference`` (the base classes of the model modules).
  ``framework`` never imports ``modules``, except ``framework.bench``, which builds real
  inputs for its bare load generators with the modules' own code.

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
from ._errors import FileWriteError as FileWriteError
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
