"""From a validated ``cms.Process`` to a runnable :class:`Job`.

Everything that can be checked before the first event is checked here: each module type
exists, each parameter set matches its type's ``fill_descriptions``, Paths refer to
modules, and the ``consumes`` declarations form no cycle. Errors are ConfigurationError
naming the module label and type.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from framework import config as cms
from framework.utilities import ConfigurationError, FileReadError, NotSupportedError

from ._activity import ActivityRegistry
from ._module import EDFilter, EDModule, OutputModule
from ._registry import find_type
from ._services import ServiceRegistry, _constructing, _current
from ._source_base import Source
from ._worker import Worker

__all__ = ["Job", "PathSpec", "ProductDescription", "ProductRegistry", "build_job", "concurrency"]

log = logging.getLogger("pysonic")


@dataclass(frozen=True)
class ProductDescription:
    """A product some module declared with ``produces``."""

    label: str
    instance: str
    type_name: str
    doc: str = ""


@dataclass
class ProductRegistry:
    """What an event can hold, given to ``OutputModule.select``.

    Attributes:
        source_collections: collection name -> field names, from the source.
        products: every declared module product.
    """

    source_collections: dict[str, tuple[str, ...]]
    products: list[ProductDescription]


@dataclass
class PathSpec:
    """A Path or EndPath with its TrigReport counters.

    ``entries`` are (worker, inverted) in execution order; inverted is None for a module
    whose decision is ignored (``cms.ignore``). Counters per entry: visited,
    passed, failed (filter said no), errors.
    """

    name: str
    entries: list[tuple[Worker, bool | None]]
    end: bool = False
    visited: int = 0
    passed: int = 0
    errors: int = 0
    entry_visited: list[int] = field(default_factory=list)
    entry_passed: list[int] = field(default_factory=list)
    entry_errors: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.entries)
        self.entry_visited = [0] * n
        self.entry_passed = [0] * n
        self.entry_errors = [0] * n


@dataclass
class Job:
    """Everything needed to run a process; built by :func:`build_job`."""

    process_name: str
    source: Source
    services: ServiceRegistry
    workers: dict[str, Worker]
    paths: list[PathSpec]
    endpaths: list[PathSpec]
    max_events: int
    streams: int
    threads: int
    want_summary: bool
    limiter: trio.CapacityLimiter | None = None
    exception_actions: dict[str, str] = field(default_factory=dict)
    activity: ActivityRegistry = field(default_factory=ActivityRegistry)
    begun: list[EDModule] = field(default_factory=list)  # modules whose begin_job ran
    # time.perf_counter() when build_job began: the start of the job's total wall time
    created: float = field(default_factory=time.perf_counter)
    # The job-level transition under way, (what, since: time.monotonic seconds), e.g.
    # ("end_job() of EDAnalyzer 'a' (type A)", t): what cmsrun's immediate stop names when
    # no module is processing an event (framework.core._scheduler sets it).
    transition: tuple[str, float] | None = None

    def declared_outputs(self) -> list[tuple[str, str]]:
        """Every file the job's modules and services write, as configured:
        ``(who, path)`` with ``who`` naming the parameter ("OutputModule 'out' (type
        NanoAODOutputModule): parameter 'fileName'"); checked by ``framework.io.check_outputs``."""
        outputs = [
            (f"{w.describe()}: parameter '{name}'", str(path))
            for w in self.workers.values()
            for name, path in w.module.declared_outputs().items()
        ]
        for service in self.services.services.values():
            who = f"Service '{service.label}' (type {service.type_name})"
            outputs += [(f"{who}: parameter '{name}'", str(path)) for name, path in service.declared_outputs().items()]
        return outputs

    def reset_counters(self) -> None:
        """Zero the TrigReport counters and module timings (between work units, so that each
        unit's report counts its own events)."""
        for spec in self.paths + self.endpaths:
            spec.visited = spec.passed = spec.errors = 0
            spec.__post_init__()
        for worker in self.workers.values():
            worker.reset_counters()

    def action_for(self, category: str) -> str:
        """The exception policy's action for a category: Rethrow, TryToContinue or IgnoreCompletely."""
        actions = self.exception_actions
        return actions.get(category) or actions.get("*") or "Rethrow"

    @property
    def modules(self) -> list[EDModule]:
        return [w.module for w in self.workers.values()]

    def product_registry(self, source_collections: dict[str, tuple[str, ...]]) -> ProductRegistry:
        products = [
            ProductDescription(w.label, inst, w.type_name, w.module._fw_produces.get(inst, ""))
            for w in self.workers.values()
            for inst in sorted(w.produces)
        ]
        return ProductRegistry(dict(source_collections), products)

    def assemble(self, source_collections: dict[str, tuple[str, ...]]) -> None:
        """The last construction step, once the source knows its collections (first file).

        Output modules choose what they write from the product registry
        (``OutputModule.select``), and what they consume becomes a dependency; the source
        is told which collections and fields any module consumes, so it reads only those.

        Raises:
            FileReadError: a consumed collection or field is not in the input; the message
                also names the modules that consume it.
        """
        registry = self.product_registry(source_collections)
        for worker in self.workers.values():
            if worker.kind == "OutputModule":
                worker.module.select(registry)  # type: ignore[attr-defined]  # an OutputModule's
                worker.consumes = list(worker.module._fw_consumes)
        try:
            self.source.set_branch_request(self.branch_request())
        except FileReadError as err:
            raise self._name_consumers(err) from err

    def branch_request(self) -> dict[str, set[str] | None]:
        """Source collections consumed by any module: name -> fields (None = all fields)."""
        request: dict[str, set[str] | None] = {}
        for worker in self.workers.values():
            for c in worker.consumes:
                if c.label in self.workers:
                    continue
                fields = request.get(c.label, set())
                request[c.label] = None if c.branches is None or fields is None else fields | set(c.branches)
        return request

    def _name_consumers(self, err: FileReadError) -> FileReadError:
        """The source's error about a collection or branch, plus the modules that consume it.

        The source knows files and branches, not modules; the job knows who consumed which
        collection, so it completes the message here, from the error's fields.
        """

        def concerned(label: str) -> bool:
            branch = err.branch or ""
            return label == err.collection or branch == label or branch.startswith(label + "_")

        culprits = [
            w.describe()
            for w in self.workers.values()
            if any(concerned(c.label) for c in w.consumes if c.label not in self.workers)
        ]
        if not culprits:
            return err
        return FileReadError(
            f"{err.args[0]}; consumed by {', '.join(culprits)}",
            file=err.file,
            collection=err.collection,
            branch=err.branch,
            nearest=err.nearest,
            entries=err.entries,
        )


def _construct(obj: Any, expected_kind: str, label: str) -> Any:
    type_name = obj.type_()
    context = f"{expected_kind} '{label}' (type {type_name})"
    # Duck-typed: a module, source or service class (fill_descriptions, kind, __init__(params)).
    cls: Any = find_type(type_name, context=f"{expected_kind} '{label}'")
    if getattr(cls, "kind", None) != expected_kind:  # CMSSW is strict: a filter is no producer
        raise ConfigurationError(
            f"{context}: type {type_name} is a {getattr(cls, 'kind', type(cls).__name__)}, not a {expected_kind}"
        )
    desc = cms.ParameterSetDescription()
    cls.fill_descriptions(desc)
    params = desc.validate(obj, context)
    instance = cls.__new__(cls)
    if isinstance(instance, EDModule):
        instance._fw_bind(label, type_name)
    else:
        instance.label = label
        instance.type_name = type_name
    token = _constructing.set(label if isinstance(instance, EDModule) else None)
    try:
        instance.__init__(params)
    except ConfigurationError:
        raise
    except (Exception, SystemExit) as exc:  # a module's sys.exit() in __init__: not the config's
        raise ConfigurationError(f"{context}: construction failed: {type(exc).__name__}: {exc}") from exc
    finally:
        _constructing.reset(token)
    return instance


def _chosen_case(label: str, switch: Any, accelerators: list[str]) -> Any:
    """The case of a SwitchProducer that runs for ``accelerators`` (CMSSW's choice): its
    EDProducer declaration, labelled ``label@case``; the job runs it as ``label``."""
    case = switch._getProducer(accelerators)
    if isinstance(case, cms.EDAlias):
        raise NotSupportedError(
            f"an EDAlias as the chosen case of SwitchProducer '{label}' ({case.label_()})",
            "EDAliases are configuration only here",
        )
    return case


def _implicit_service(type_name: str) -> Any:
    """The declaration of a service a module needs but the config lacks: the parameters of
    the class's ``implicit_parameters()`` if it has one, else its defaults."""
    cls: Any = find_type(type_name, context=f"Service '{type_name}'")
    parameters = cls.implicit_parameters() if hasattr(cls, "implicit_parameters") else {}
    return cms.Service(type_name, **parameters)


def build_job(
    process: Any, *, max_events: int | None = None, streams: int | None = None, threads: int | None = None
) -> Job:
    """Construct source, services and modules of ``process`` and resolve its schedule.

    Args:
        process: a ``cms.Process`` (already loaded and structurally validated).
        max_events, streams, threads: command-line overrides of ``process.maxEvents.input``,
            ``process.options.numberOfStreams`` and ``numberOfThreads``.

    Raises:
        ConfigurationError: anything wrong with the configuration.
    """
    created = time.perf_counter()
    if max_events is not None and max_events < -1:
        raise ConfigurationError(f"build_job: max_events {max_events} must be >= -1 (-1: all)")
    streams, threads = concurrency(process.options_(), streams, threads)
    options = process.options_()
    limiter = trio.CapacityLimiter(threads) if threads > 1 else None
    process.checkRunnable_()  # a looper, SubProcess, SecSource: loaded and dumped, not run here
    accelerators = process.selectAccelerators_()  # before the Services: it may customize them

    registry = ServiceRegistry()
    registry._factory = lambda type_name: _construct(_implicit_service(type_name), "Service", type_name)
    token = _current.set(registry)
    try:
        for label, svc in process.services_().items():
            registry.services[svc.type_()] = _construct(svc, "Service", label)
        if getattr(process, "source", None) is None:
            raise ConfigurationError("the process has no source (process.source = cms.Source(...))")
        source = _construct(process.source, "Source", "source")
        workers: dict[str, Worker] = {}
        kinds = {
            "EDProducer": process.producers_() | process.switchProducers_(),
            "EDFilter": process.filters_(),
            "EDAnalyzer": process.analyzers_(),
            "OutputModule": process.outputModules_(),
        }
        # CMSSW's Schedule: an analyzer or output module on no Path or EndPath is removed (it
        # would run for no event, and an output module would still replace its file).
        scheduled = {
            label
            for path in [*process.paths_().values(), *process.endpaths_().values()]
            for label, _ in path.moduleEntries_()
        }
        unused = [label for kind in ("EDAnalyzer", "OutputModule") for label in kinds[kind] if label not in scheduled]
        if unused:
            log.warning(
                "The following module labels are not assigned to any path: %s (an EDAnalyzer or "
                "OutputModule on no Path or EndPath does not run, as in CMSSW)",
                ", ".join(f"'{label}'" for label in unused),
            )
        for kind, modules in kinds.items():
            for label, obj in modules.items():
                if label in unused:
                    continue
                if isinstance(obj, cms.SwitchProducer):  # its chosen case runs under its label
                    obj = _chosen_case(label, obj, accelerators)
                workers[label] = Worker(_construct(obj, kind, label), limiter)
    finally:
        _current.reset(token)

    paths = [_path_spec(name, p, workers, end=False) for name, p in process.paths_().items()]
    endpaths = [_path_spec(name, p, workers, end=True) for name, p in process.endpaths_().items()]
    _check_dependencies(workers)
    for spec in paths + endpaths:
        _check_path_order(spec)
    for kind, group in (("Path", process.paths_()), ("EndPath", process.endpaths_())):
        for name, path in group.items():
            _warn_repeated(kind, name, path)
    mx = max_events if max_events is not None else process.maxEvents_()
    job = Job(
        process.name_(),
        source,
        registry,
        workers,
        paths,
        endpaths,
        mx,
        streams,
        threads,
        bool(options["wantSummary"]),
        limiter,
        _exception_actions(options),
        created=created,
    )
    for worker in workers.values():
        worker.activity = job.activity
    for service in registry.services.values():
        service.subscribe(job.activity)
    return job


def concurrency(options: Any, streams: int | None = None, threads: int | None = None) -> tuple[int, int]:
    """``(streams, threads)`` of a job: the one place where CMSSW's rule is applied.

    Args:
        options: ``process.options_()`` (``numberOfStreams``, ``numberOfThreads``).
        streams, threads: command-line overrides (``-j``/``-t``; None: the config's).

    Returns:
        tuple[int, int]: the numbers the job runs with; ``numberOfThreads`` 0 is one thread
        per core this process may use (cmsRun's rule), ``numberOfStreams`` 0 as many
        streams as threads (CMSSW's EventProcessor).

    Raises:
        ConfigurationError: a negative number.
    """
    threads = threads if threads is not None else int(options["numberOfThreads"])
    streams = streams if streams is not None else int(options["numberOfStreams"])
    if threads < 0 or streams < 0:
        raise ConfigurationError(
            f"build_job: threads {threads} and streams {streams} must be >= 0 (0: CMSSW's default)"
        )
    if threads == 0:  # CMSSW's cmsRun: numberOfThreads 0 = one thread per available core
        threads = available_cores()
    if streams == 0:  # CMSSW's EventProcessor: numberOfStreams 0 = as many streams as threads
        streams = threads
    return streams, threads


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _exception_actions(options: dict[str, Any]) -> dict[str, str]:
    """``process.options`` Rethrow / TryToContinue / IgnoreCompletely -> {category: action}."""
    actions: dict[str, str] = {}
    for action in ("Rethrow", "TryToContinue", "IgnoreCompletely"):
        for category in options.get(action, []):
            if category in actions and actions[category] != action:
                raise ConfigurationError(
                    f"process.options: exception category '{category}' is listed under both "
                    f"{actions[category]} and {action}"
                )
            actions[category] = action
    return actions


def _path_spec(name: str, path: Any, workers: dict[str, Worker], *, end: bool) -> PathSpec:
    entries = []
    for label, inverted in path.moduleEntries_():
        if label not in workers:
            raise ConfigurationError(f"{'EndPath' if end else 'Path'} '{name}' refers to unknown module '{label}'")
        worker = workers[label]
        if inverted and not isinstance(worker.module, EDFilter):
            raise ConfigurationError(
                f"Path '{name}': '~{label}' inverts a {worker.kind}, only EDFilters can be inverted"
            )
        if not end and isinstance(worker.module, OutputModule):
            raise ConfigurationError(f"Path '{name}': OutputModule '{label}' belongs on an EndPath")
        entries.append((worker, inverted))
    return PathSpec(name, entries, end=end)


def _check_path_order(spec: PathSpec) -> None:
    """A module placed on a Path before the module whose products it consumes: CMSSW refuses
    the schedule ("Unrunnable schedule": a module on a Path runs in its place, not on
    demand, so the job could deadlock); so does pysonic, which would otherwise run the
    producer early. A producer meant to run on demand belongs in a Task."""
    place = {worker.label: i for i, (worker, _) in enumerate(spec.entries)}
    kind = "EndPath" if spec.end else "Path"
    for i, (worker, _) in enumerate(spec.entries):
        for c in worker.consumes:
            j = place.get(c.label)
            if j is not None and j > i:
                raise ConfigurationError(
                    f"Unrunnable schedule: {worker.describe()} is on {kind} '{spec.name}' and consumes "
                    f"products of module '{c.label}', which follows it on the {kind}; put '{c.label}' "
                    f"before '{worker.label}', or in a Task to run on demand"
                )


def _warn_repeated(kind: str, name: str, path: Any) -> None:
    """One warning per module placed twice on one Path (directly or through Sequences): it
    runs once per event, at its first place, as CMSSW's would (its schedule checks take a
    module's first place on a Path); a second place is most likely a slip."""
    seen: dict[str, int] = {}
    for i, (module, _) in enumerate(path._entries_(), 1):
        label = module.label_() if module.hasLabel_() else None
        if label is None:
            continue
        if label in seen and (kind, name, label) not in _warned:
            _warned.add((kind, name, label))  # once per process: a --dataset run builds a job per dataset
            log.warning(
                "%s '%s': module '%s' is placed twice (entries %d and %d); it runs once per event, at entry %d",
                kind,
                name,
                label,
                seen[label],
                i,
                seen[label],
            )
        else:
            seen.setdefault(label, i)


_warned: set[tuple[str, str, str]] = set()


def _check_dependencies(workers: dict[str, Worker]) -> None:
    """Consumed module products must come from producers/filters, without cycles."""
    for w in workers.values():
        for c in w.consumes:
            dep = workers.get(c.label)
            if dep is None:
                continue  # a source collection; the source checks it exists
            if dep.kind not in ("EDProducer", "EDFilter"):
                raise ConfigurationError(
                    f"{w.describe()} consumes '{c.label}', which is a {dep.kind} and produces nothing"
                )
            if c.instance not in dep.produces:
                declared = ", ".join(repr(i) for i in sorted(dep.produces)) or "none"
                raise ConfigurationError(
                    f"{w.describe()} consumes '{c.label}:{c.instance}', but {dep.describe()} does not "
                    f"produce instance '{c.instance}' (it produces: {declared})"
                )
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(label: str, chain: list[str]) -> None:
        if state.get(label) == 2:
            return
        if state.get(label) == 1:
            cycle = " -> ".join(chain[chain.index(label) :] + [label])
            raise ConfigurationError(f"circular product dependency between modules: {cycle}")
        state[label] = 1
        for c in workers[label].consumes:
            if c.label in workers:
                visit(c.label, chain + [label])
        state[label] = 2

    for label in workers:
        visit(label, [])
