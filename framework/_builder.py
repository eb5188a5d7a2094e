"""From a validated ``cms.Process`` to a runnable :class:`Job`.

Everything that can be checked before the first event is checked here: each module type
exists, each parameter set matches its type's ``fill_descriptions``, Paths refer to
modules, and the ``consumes`` declarations form no cycle. Errors are ConfigurationError
naming the module label and type.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import trio

from . import config as cms
from ._activity import ActivityRegistry
from ._errors import ConfigurationError, FileReadError
from ._module import EDFilter, EDModule, OutputModule
from ._registry import find_type
from ._services import ServiceRegistry, _constructing, _current
from ._source_base import Source
from ._worker import Worker

__all__ = ["Job", "PathSpec", "ProductDescription", "ProductRegistry", "build_job"]


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
    if getattr(cls, "kind", None) != expected_kind and not _kind_matches(cls, expected_kind):
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
    except Exception as exc:
        raise ConfigurationError(f"{context}: construction failed: {type(exc).__name__}: {exc}") from exc
    finally:
        _constructing.reset(token)
    return instance


def _implicit_service(type_name: str) -> Any:
    """The declaration of a service a module needs but the config lacks: the parameters of
    the class's ``implicit_parameters()`` if it has one, else its defaults."""
    cls: Any = find_type(type_name, context=f"Service '{type_name}'")
    parameters = cls.implicit_parameters() if hasattr(cls, "implicit_parameters") else {}
    return cms.Service(type_name, **parameters)


def _kind_matches(cls: type, expected: str) -> bool:
    # An EDFilter may stand where an EDProducer is declared? No: CMSSW is strict, so are we.
    return False


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
    options = process.options_()
    threads = threads if threads is not None else options["numberOfThreads"]
    streams = streams if streams is not None else options["numberOfStreams"]
    if threads < 0 or streams < 0 or (max_events is not None and max_events < -1):
        raise ConfigurationError(
            f"build_job: threads {threads} and streams {streams} must be >= 0 (0: CMSSW's default), "
            f"max_events {max_events} >= -1 (-1: all)"
        )
    if threads == 0:  # CMSSW's cmsRun: numberOfThreads 0 = one thread per available core
        threads = available_cores()
    if streams == 0:  # CMSSW's EventProcessor: numberOfStreams 0 = as many streams as threads
        streams = threads
    limiter = trio.CapacityLimiter(threads) if threads > 1 else None

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
            "EDProducer": process.producers_(),
            "EDFilter": process.filters_(),
            "EDAnalyzer": process.analyzers_(),
            "OutputModule": process.outputModules_(),
        }
        for kind, modules in kinds.items():
            for label, obj in modules.items():
                workers[label] = Worker(_construct(obj, kind, label), limiter)
    finally:
        _current.reset(token)

    paths = [_path_spec(name, p, workers, end=False) for name, p in process.paths_().items()]
    endpaths = [_path_spec(name, p, workers, end=True) for name, p in process.endpaths_().items()]
    _check_dependencies(workers)
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
    )
    for worker in workers.values():
        worker.activity = job.activity
    for service in registry.services.values():
        service.subscribe(job.activity)
    return job


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
