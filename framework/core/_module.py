"""The module API: what a module author subclasses.

Module kinds follow CMSSW: :class:`EDProducer` (``produce``), :class:`EDFilter`
(``filter`` returns whether the Path goes on), :class:`EDAnalyzer` (``analyze``, read-only),
:class:`OutputModule` (``write``). The :class:`ExternalWork` ability splits the work of a
producer or filter in two, as CMSSW's ``edm::ExternalWork``: a synchronous
``acquire(event, holder)`` starts work elsewhere without blocking and a synchronous
``produce(event, result)`` (or ``filter(event, result)``) runs when it is done; the
framework owns the wait in between and serves other events meanwhile.

Every module type declares its parameters in the classmethod ``fill_descriptions``
(CMSSW's ``fillDescriptions``); the framework validates the config against it and
passes the validated :class:`~framework.config.ParameterSet` to ``__init__``.

Lifecycle (every transition is a method of :class:`EDModule` with an empty default;
override those you need)::

    __init__(params)                 construction: declare consumes/produces, no I/O
    begin_job()                      once, before the first event (metadata is set)
      begin_unit()                   before each run of events: open per-unit files
        produce / filter / analyze   per event (acquire first for ExternalWork)
      end_unit()                     after a run that succeeded: close (rename) them
    end_job()                        once, after the last run, if the job succeeded

When the job fails, ``abort_unit()`` replaces ``end_unit()`` (remove that run's partial
files) and ``abort_job()`` replaces ``end_job()``; a module whose ``begin_unit`` or
``begin_job`` never ran gets neither. A plain ``cmsrun`` job (and each dataset of
``cmsrun --dataset``) has ONE run of events; the Dask executor (``framework.cmsrun.executor``)
builds and begins a job once per worker and dataset, then runs each of its work units
between ``begin_unit`` and ``end_unit`` (CMSSW's output file transitions,
``OutputModule::openFile`` / ``reallyCloseFile``), so that each unit writes its own part,
and ends the job when the worker closes. What a module keeps in memory at ``end_job``
therefore stays on its worker: results meant for the user go to files, declared with
:meth:`EDModule.declared_outputs` and named with ``framework.io.output_path``.

Threads. ``__init__`` runs on cmsrun's main thread (a Dask worker's task thread), before
trio starts. The transitions run on the trio thread (the one running ``trio.run``: cmsrun's
main thread; a Dask worker's task thread). ``produce``/``filter``/``analyze``/``write`` and
``acquire`` run on the trio thread too, one call at a time, unless the module type sets
``thread_safe = True`` and the job has ``numberOfThreads`` > 1: then on a worker thread,
at most ``numberOfThreads`` of them at once, while other events go on. An ExternalWork
module's ``holder.done_waiting`` may be called from any thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from framework.utilities import ConfigurationError

from ._bridge import WaitingTaskHolder
from ._event import Event, product_key

if TYPE_CHECKING:
    from framework.config import ParameterSet, ParameterSetDescription

_NO_METADATA: Mapping[str, Any] = MappingProxyType({})

__all__ = [
    "EDModule",
    "EDProducer",
    "EDFilter",
    "EDAnalyzer",
    "OutputModule",
    "ExternalWork",
    "Consumed",
]


class Consumed:
    """A declared dependency (CMSSW's ``EDGetToken``), returned by ``consumes``.

    Attributes:
        label, instance: the product's module label and instance; a label that is no
            module's refers to a source collection (``"Jet"``, ``"PFCands"``).
        branches: for a source collection, the fields to read (``None`` = all).
    """

    __slots__ = ("label", "instance", "branches")

    def __init__(self, label: str, instance: str = "", branches: tuple[str, ...] | None = None):
        self.label = label
        self.instance = instance
        self.branches = branches

    def __repr__(self) -> str:
        tag = f"{self.label}:{self.instance}" if self.instance else self.label
        return f"Consumed({tag!r}" + (f", branches={list(self.branches)}" if self.branches else "") + ")"


class EDModule:
    """Base of every module kind. Subclass one of the kinds below, not this.

    Class attributes a module type may set:
        thread_safe: True if ``acquire``/``produce``/``filter``/``analyze`` may run on a
            worker thread while other modules run (numpy and onnxruntime release the GIL).
            ``process.options.numberOfThreads`` bounds how many such calls run at once.
            Modules that are not thread-safe run on the scheduler's thread, one at a time.

    Set by the framework before ``__init__`` runs:
        label: the module label in the config (``process.<label> = ...``).
        type_name: the registered type name (``cms.EDProducer("<type_name>", ...)``).

    Set by the framework before ``begin_job`` and before each ``begin_unit``:
        metadata: the dataset the job runs on (see :attr:`~framework.core.EDModule.metadata`).
    """

    kind: ClassVar[str] = "EDModule"
    thread_safe: ClassVar[bool] = False

    label: str
    type_name: str

    def _fw_bind(self, label: str, type_name: str) -> None:
        # Called by the framework on the bare instance, before __init__.
        self.label = label
        self.type_name = type_name
        self._fw_consumes: list[Consumed] = []
        self._fw_produces: dict[str, str] = {}
        self._fw_metadata: Mapping[str, Any] = _NO_METADATA

    @property
    def metadata(self) -> Mapping[str, Any]:
        """The dataset this job runs on, ``{"dataset": name, **its metadata}``, read-only.

        With ``cmsrun --dataset FILESET`` (sequential or ``--executor dask``), ``dataset``
        is the fileset's key and the other keys are the dataset's fileset ``metadata`` as
        given (coffea's ``isMC``, ``xsec``, ...: whatever the fileset holds). Empty for a
        job without a fileset (a config's own ``fileNames``). Valid from ``begin_job`` on
        (not in ``__init__``) and constant for a job: a job runs on one dataset (cmsrun
        builds one per dataset; a Dask worker one per dataset, for all of its units). Read
        it in ``begin_job`` or ``begin_unit``; per event, ``event.metadata`` adds the
        event's file and entry range (:attr:`framework.Event.metadata`).
        """
        return getattr(self, "_fw_metadata", _NO_METADATA)

    @classmethod
    def fill_descriptions(cls, desc: ParameterSetDescription) -> None:
        """Declare the parameters of this module type (default: none)."""

    def __init__(self, params: ParameterSet) -> None:  # noqa: D107 - documented on the class
        pass

    def esConsumes(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 - CMSSW spelling
        """CMSSW's EventSetup access: there is no EventSetup here.

        A config may define ``cms.ESSource``/``cms.ESProducer``/``cms.ESPrefer`` (they are
        configuration objects only), but no module can read conditions.

        Raises:
            ConfigurationError: always, naming the module.
        """
        raise ConfigurationError(
            f"module '{getattr(self, 'label', '?')}' asks for the EventSetup: pysonic has none "
            "(ESSource/ESProducer are accepted in configs but never run)"
        )

    def consumes(self, tag: Any, *, branches: Iterable[str] | None = None) -> Consumed:
        """Declare that this module reads ``tag``; returns the token to pass to ``event.get``.

        Args:
            tag: ``InputTag``, ``"label[:instance]"``: a product of another module, or a
                source collection such as ``"Jet"``.
            branches: for a source collection, the fields that are read (e.g.
                ``["pt", "eta", "phi"]``), so that the source reads only those branches.

        The framework uses these declarations to order modules and to run on-demand
        (Task) producers before the modules that consume their products.
        """
        label, instance = product_key(tag)
        token = Consumed(label, instance, tuple(branches) if branches is not None else None)
        self._fw_consumes.append(token)
        return token

    def declared_outputs(self) -> dict[str, Any]:
        """The files this module writes: parameter name -> configured path (``str`` or
        ``Path``, before ``framework.io.output_path``). cmsrun checks them before the first
        event (``framework.io.check_outputs``: a missing folder, a path given twice, an
        input overwritten, each one line naming the module and parameter), per dataset
        with ``--dataset``. Default: none."""
        return {}

    def begin_job(self) -> None:
        """Called once before the first event, on the trio thread, after every module was
        constructed, the services began (a fallback Triton server is up) and the source
        opened its first file; :attr:`~framework.core.EDModule.metadata` is set. Connect to services, load what
        every run of events needs. Raising here fails the job before any event."""

    def end_job(self) -> None:
        """Called once after the last run of events, when the job succeeded (trio thread),
        before the services end. Under the Dask executor: when the worker closes, once per
        worker and dataset."""

    def abort_job(self) -> None:
        """Called instead of ``end_job`` when the job fails (trio thread, after
        ``abort_unit``): drop partial outputs here. Must not raise (errors are ignored)."""

    def begin_unit(self) -> None:
        """Called before the events of a run (the whole job, or one work unit under the
        Dask executor), on the trio thread; :attr:`~framework.core.EDModule.metadata` is set again. Open the files
        written per unit here (``framework.io.output_path`` names them: per dataset and
        per unit when cmsrun runs those) and reset what is counted per unit."""

    def end_unit(self) -> None:
        """Called after the last event of a run that succeeded (trio thread): close the
        files opened in ``begin_unit``, writing each atomically (a temporary name, then
        a rename: ``framework.io.atomic_write``)."""

    def abort_unit(self) -> None:
        """Called instead of ``end_unit`` when the run fails or is cancelled (trio thread):
        remove that run's partial files. Must not raise (errors are ignored)."""


class _Producing(EDModule):
    def produces(self, instance: str = "", *, doc: str = "") -> None:
        """Declare a product ``(self.label, instance)`` that this module puts into events."""
        self._fw_produces[instance] = doc


class EDProducer(_Producing):
    """A module that adds products to the event (CMSSW's ``EDProducer``): implement
    ``produce(event)``, which stores (``event.put``) every product declared with ``produces()``.

    Runs at most once per event: when its Path reaches it, or on demand (a ``cms.Task``)
    when a module that consumes its products needs them. The lifecycle and threads are
    :class:`~framework.core.EDModule`'s.
    """

    kind = "EDProducer"

    def produce(self, event: Event) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement produce(event)")


class EDFilter(_Producing):
    """A module that decides whether its Path goes on (CMSSW's ``EDFilter``): implement
    ``filter(event) -> bool``; it may ``put`` products too (declared with ``produces()``).

    False ends the Path for this event (``~label`` in a Path inverts the decision,
    ``cms.ignore(label)`` ignores it); an EndPath's ``SelectEvents`` reads the Paths'
    results. The lifecycle and threads are :class:`~framework.core.EDModule`'s.
    """

    kind = "EDFilter"

    def filter(self, event: Event) -> bool:
        raise NotImplementedError(f"{type(self).__name__} must implement filter(event)")


class EDAnalyzer(EDModule):
    """A module that reads events and puts nothing (CMSSW's ``EDAnalyzer``): implement
    ``analyze(event)``; fill histograms or counters there.

    On a Path it runs for the events that reach it, on an EndPath for every event. What
    it accumulates lives in the module (one instance per job, one job per Dask worker):
    write it to a file in ``end_unit``, named with ``framework.io.output_path`` and listed
    by :meth:`~framework.core.EDModule.declared_outputs`. The lifecycle and threads are
    :class:`~framework.core.EDModule`'s.
    """

    kind = "EDAnalyzer"

    def analyze(self, event: Event) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement analyze(event)")


class OutputModule(EDModule):
    """A module that writes events out: implement ``select(registry)`` and ``write(event)``.

    ``select`` runs once, after every module was constructed and the source opened: it
    receives the :class:`~framework.ProductRegistry` (source branches and module products)
    and calls ``consumes`` for what it will write (``outputCommands``). ``write`` runs for
    every event that reaches the output module (its EndPath, ``SelectEvents``).
    """

    kind = "OutputModule"

    def select(self, registry: Any) -> None:
        """Choose what to write; call ``self.consumes`` for each product/collection."""

    def selected(self, event: Event) -> bool:
        """Whether ``event`` is to be written (default: always; see ``SelectEvents``)."""
        return True

    def write(self, event: Event) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement write(event)")


class ExternalWork:
    """The ExternalWork ability (mix it into an EDProducer or EDFilter, listed first).

    Implement ``acquire(event, holder)``: synchronous, prepares inputs, starts the work
    and returns at once. Finish the work with ``holder.done_waiting(result)`` from any
    thread, or hand an async function to ``holder.run_async`` (see
    :class:`~framework.WaitingTaskHolder`). Then ``produce(event, result)`` (or
    ``filter(event, result)``) runs on a stream with the result. Other events are served
    during the wait. ``acquire`` may return before ``done_waiting`` is called: what finishes
    the work keeps the holder; a holder dropped without either call fails the event.

    Example::

        class Doubler(ExternalWork, EDProducer):
            def acquire(self, event, holder):
                x = event.get(self.src)
                pool.submit(lambda: holder.done_waiting(2 * x))
            def produce(self, event, result):
                event.put(result)
    """

    def acquire(self, event: Event, holder: WaitingTaskHolder) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement acquire(event, holder)")

    # Framework hooks. Subclasses such as SonicEDProducer override these to adapt a
    # different user-facing signature; plain ExternalWork modules never touch them.
    def _fw_acquire(self, event: Event, holder: WaitingTaskHolder) -> None:
        self.acquire(event, holder)

    def _fw_complete(self, event: Event, result: Any) -> Any:
        if isinstance(self, EDFilter):
            return self.filter(event, result)  # type: ignore[call-arg]  # a mixin: the filter's ExternalWork form
        return self.produce(event, result)  # type: ignore[attr-defined]  # a mixin: the producer's
