"""The core: the module API and the trio scheduler (CMSSW's ``FWCore/Framework``).

Built on :mod:`framework.utilities` (errors) and :mod:`framework.config` (the configuration
language); knows trio, and nothing of ROOT files or Triton: it imports neither
``framework.io`` nor the SONIC packages (``PoolSource``, ``TritonService`` and
``FastTimerService`` are found by name through the registry). Every other package imports
the core through the names exported here; module authors use the smaller set that
:mod:`framework` re-exports.

Files, in the direction of their imports (each imports only files above it):

* ``_activity``: the signals services watch (CMSSW's ``ActivityRegistry``).
* ``_bridge``: re-entering trio from other threads (:class:`~framework.ThreadSafeFuture`), and
  :class:`~framework.WaitingTaskHolder`, the completion half of ExternalWork.
* ``_event``: event ids, the per-event data (:class:`EventPrincipal`) and the module's view
  of it (:class:`~framework.Event`).
* ``_services``: framework services (:class:`~framework.Service`, :func:`~framework.get_service`).
* ``_messagelogger``: CMSSW's ``MessageLogger`` service over Python's logging.
* ``_module``: the module API (:class:`~framework.EDProducer`, :class:`~framework.EDFilter`,
  :class:`~framework.EDAnalyzer`, :class:`~framework.OutputModule`,
  :class:`~framework.ExternalWork`) and its lifecycle.
* ``_source_base``: the source protocol (:class:`~framework.Source`, :class:`~framework.SourceEvent`) and
  ``EmptySource``.
* ``_registry``: module, source and service types by name (CMSSW's plugin factory).
* ``_worker``: one module's runner (timers, exceptions named, worker threads).
* ``_builder``: from a validated ``cms.Process`` to a runnable :class:`Job` (every check
  that can run before the first event); the streams and threads of a job.
* ``_scheduler``: streams, Paths, on-demand producers and ExternalWork waits
  (:func:`run_job`, or :func:`begin_job`, :func:`process_events`, :func:`end_job`).
"""

from ._activity import ActivityRegistry as ActivityRegistry
from ._bridge import ThreadSafeFuture as ThreadSafeFuture
from ._bridge import WaitingTaskHolder as WaitingTaskHolder
from ._builder import Job as Job
from ._builder import PathSpec as PathSpec
from ._builder import ProductDescription as ProductDescription
from ._builder import ProductRegistry as ProductRegistry
from ._builder import available_cores as available_cores
from ._builder import build_job as build_job
from ._builder import concurrency as concurrency
from ._event import Event as Event
from ._event import EventID as EventID
from ._event import EventPrincipal as EventPrincipal
from ._messagelogger import MessageLogger as MessageLogger
from ._module import Consumed as Consumed
from ._module import EDAnalyzer as EDAnalyzer
from ._module import EDFilter as EDFilter
from ._module import EDModule as EDModule
from ._module import EDProducer as EDProducer
from ._module import ExternalWork as ExternalWork
from ._module import OutputModule as OutputModule
from ._registry import TypeInfo as TypeInfo
from ._registry import available_types as available_types
from ._registry import find_type as find_type
from ._registry import register_type as register_type
from ._registry import type_catalog as type_catalog
from ._scheduler import JobReport as JobReport
from ._scheduler import abort_job as abort_job
from ._scheduler import begin_job as begin_job
from ._scheduler import end_job as end_job
from ._scheduler import process_events as process_events
from ._scheduler import run_job as run_job
from ._services import Service as Service
from ._services import constructing_module as constructing_module
from ._services import get_service as get_service
from ._source_base import NO_METADATA as NO_METADATA
from ._source_base import Source as Source
from ._source_base import SourceEvent as SourceEvent
