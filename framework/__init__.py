"""pysonic's event-processing framework: CMSSW's model on trio.

Layering (read this first; it is written here only, the sub-packages' docstrings and
``docs/architecture.md`` point here, and ``tests/test_layering.py`` keeps it true). Every
package is a folder, listed here from the bottom up; data flows
config -> core (builder, scheduler) -> io -> modules -> sonic, and the command layer drives it:

* ``framework.utilities`` - the bottom layer every package shares: the errors (one line
  naming the culprit), TCP ports, the project's data folder, owner tags of temporary files.
  Imports no other part of pysonic, nor trio, ROOT or Triton; its public module
  ``framework.utilities.triton_config`` (see SONIC below) is the one exception to "no Triton".
* ``framework.config`` - the configuration language (``import framework.config as cms``):
  pure Python, knows nothing of trio, ROOT or Triton; built on ``framework.utilities``.
* ``framework.core`` - the module API and the trio scheduler (module kinds, events,
  ExternalWork's bridge, workers, services, the registry of types by name, the builder,
  the scheduler, CMSSW's MessageLogger over Python logging). Knows trio; knows nothing of
  ROOT files or Triton, and imports neither ``framework.io`` nor the SONIC packages
  (PoolSource, TritonService and FastTimerService are found by name through the registry).
  Other packages import it through ``framework.core``'s exported names.
  The job's outputs are committed through ``framework.utilities`` (written under temporary
  names, renamed once the job succeeded).
* ``framework.io`` - ROOT input and output with uproot/awkward: PoolSource (local files,
  ``root://``/``https://`` URLs, ``/store/`` names through redirectors, bounded waits), the
  NanoAOD tree writer, atomic file writing, datasets (coffea filesets), preprocessing
  and work units, output names per dataset/unit and the merge of unit parts, the real
  CMS samples (``framework.io.samples``). Built on the core's source protocol and
  events and on ``framework.utilities`` only; knows nothing of Triton, the scheduler or the modules. Only
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
  is one neutral module below them, ``framework.utilities.triton_config``, which imports only
  protobuf and tritonclient's config schema. None of them knows ROOT files. Inside each
  package, imports go one way (its ``__init__`` lists the files in that order); torch is
  imported only by the torch runner, and only lazily.
* ``framework.inference`` - the model modules' base classes: one data conversion
  (``ModelConversion``) run by Triton (``SonicConversionProducer``) or in-process with the
  server side's ONNX runner (``OnnxDirectProducer``). Nothing of the framework imports it.
* ``framework.cmsrun`` - the command layer: ``cmsrun`` (its Ctrl-C/SIGTERM handling: a
  graceful first stop, an immediate second one; its ``--dataset`` runs: one job per dataset,
  ``run_unit`` for one work unit), the end-of-job report (rich), FastTimerService (JSON
  summary, Perfetto trace) and the progress bar; above the data path, which never imports
  it. Its sub-package ``framework.cmsrun.executor`` is ``cmsrun --executor dask``: the
  datasets' work units on a Dask cluster (a job begun once per worker, unit after unit;
  one server per host for the fallback; merge and one summary), the only package that
  imports Dask (``dask``, ``distributed``) and ``filelock``; ``cmsrun``'s command line
  reaches it lazily, for ``--executor dask`` only.
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

from framework.core import Consumed as Consumed
from framework.core import EDAnalyzer as EDAnalyzer
from framework.core import EDFilter as EDFilter
from framework.core import EDProducer as EDProducer
from framework.core import Event as Event
from framework.core import EventID as EventID
from framework.core import ExternalWork as ExternalWork
from framework.core import OutputModule as OutputModule
from framework.core import ProductDescription as ProductDescription
from framework.core import ProductRegistry as ProductRegistry
from framework.core import Service as Service
from framework.core import Source as Source
from framework.core import SourceEvent as SourceEvent
from framework.core import ThreadSafeFuture as ThreadSafeFuture
from framework.core import WaitingTaskHolder as WaitingTaskHolder
from framework.core import get_service as get_service
from framework.core import register_type as register_type
from framework.utilities import ConfigurationError as ConfigurationError
from framework.utilities import EventProcessingError as EventProcessingError
from framework.utilities import ExternalFailure as ExternalFailure
from framework.utilities import FileOpenError as FileOpenError
from framework.utilities import FileReadError as FileReadError
from framework.utilities import FileWriteError as FileWriteError
from framework.utilities import FrameworkError as FrameworkError
from framework.utilities import ProductNotFound as ProductNotFound
