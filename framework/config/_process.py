"""``cms.Process``: the root of a config (CMSSW's ``FWCore/ParameterSet/python/Config.py``).

Introspection API used by the framework (stable):

- ``process.name_()`` -> str
- ``process.source_()`` -> :class:`Source` or None
- ``process.producers_()``, ``.filters_()``, ``.analyzers_()``, ``.outputModules_()``,
  ``.services_()`` -> dict label -> declaration, in definition order;
  ``process.modules_()``: the four ED kinds together, in definition order
- ``process.paths_()``, ``process.endpaths_()`` -> dict name -> Path/EndPath, in schedule
  order if ``process.schedule`` is set (then only the scheduled ones), else in
  definition order; without a schedule all Paths run, then all EndPaths
- ``path.moduleEntries_()`` -> list of ``(label, inverted)`` in execution order
- ``path.taskLabels_()`` -> set of module labels in Tasks associated with the path
- ``process.tasks_()`` -> dict name -> Task; ``process.sequences_()``, ``process.psets_()``
- ``process.unscheduledLabels_()`` -> set of labels of modules in any Task (attached to the
  process, associated with a Path/EndPath or with the schedule)
- ``process.maxEvents_()`` -> int (-1 = all events);
  ``process.options_()`` -> dict with defaults filled (see ``OPTIONS``)
- ``process.validate_()``; ``process.dumpPython_()`` -> Python source of the config.

Labels share one namespace: a module label can never also be a Path or Task name.

CMSSW's own API is there too, with CMSSW's semantics (its unit tests are the reference):
``load``, ``extend``, ``add_``, ``prefer``, ``globalReplace``, ``prune``, ``resolve``,
``isUsingModifier``, ``dumpPython``, the read-only dictionaries ``process.producers``,
``paths`` (every Path, scheduled or not), ... and label replacement and ``del`` that reach
every Sequence, Path, Task and the Schedule.
"""

from __future__ import annotations

import copy
import importlib
import types
from collections.abc import Mapping
from typing import Any

from framework.utilities import ConfigurationError, NotSupportedError

from ._accelerators import ProcessAccelerator, ProcessForProcessAccelerator, select_accelerators
from ._modifiers import Modifier, ModifierChain, ProcessModifier
from ._modules import (
    EDAlias,
    EDAnalyzer,
    EDFilter,
    EDProducer,
    ESPrefer,
    ESProducer,
    ESSource,
    Looper,
    OutputModule,
    Service,
    Source,
    SwitchProducer,
)
from ._pset import ParameterHolder, ProxyParameter, PSet, SecSource, VPSet, optional, untracked
from ._sequences import (
    ConditionalTask,
    EndPath,
    FinalPath,
    Labelable,
    Path,
    Schedule,
    Sequence,
    Task,
    TaskPlaceholder,
    _ModuleSequence,
)
from ._types import (
    ConfigRuntimeError,
    ConfigTypeError,
    ConfigValueError,
    _bool,
    closest,
    describe_value,
    int32,
    plain_value,
    string,
    uint32,
    vstring,
)

__all__ = ["MAX_EVENTS", "OPTIONS", "Process", "ProcessFragment", "SubProcess"]

# name -> (untracked type, default, doc). ``process.options``: CMSSW's names and defaults
# (FWCore/Framework's EventProcessor options); those marked "accepted" have no effect here.
OPTIONS: dict[str, tuple[Any, Any, str]] = {
    "numberOfStreams": (uint32, 0, "events processed concurrently; 0 = as many as threads"),
    "numberOfThreads": (uint32, 1, "threads for thread-safe module calls; 0 = one per available core (CMSSW)"),
    "wantSummary": (_bool, False, "print the per-module time and event summary at the end"),
    "numberOfConcurrentRuns": (uint32, 1, "accepted (one run at a time here)"),
    "numberOfConcurrentLuminosityBlocks": (uint32, 0, "accepted (no luminosity-block transitions here)"),
    "fileMode": (string, "FULLMERGE", "accepted"),
    "forceEventSetupCacheClearOnNewRun": (_bool, False, "accepted (no EventSetup here)"),
    "throwIfIllegalParameter": (_bool, True, "accepted (unknown parameters are always errors here)"),
    "printDependencies": (_bool, False, "accepted"),
    "deleteNonConsumedUnscheduledModules": (_bool, True, "accepted"),
    "dumpOptions": (_bool, False, "accepted"),
    "accelerators": (
        vstring,
        ["*"],
        "accelerators the job may use (patterns): they choose the cases of SwitchProducers; Triton servers "
        "pick their own devices",
    ),
    "modulesToIgnoreForDeleteEarly": (vstring, [], "accepted"),
    "canDeleteEarly": (vstring, [], "accepted"),
    "holdsReferencesToDeleteEarly": (VPSet, [], "accepted"),
    "eventSetup": (PSet, {}, "accepted (no EventSetup here)"),
    "sizeOfStackForThreadsInKB": (uint32, 0, "accepted (0: the system's default)"),
    # Exception policy: exception categories (e.g. "ExternalFailure", "ProductNotFound",
    # "ValueError"; "*" = all) mapped to actions, as CMSSW's options of the same names.
    "Rethrow": (vstring, [], "categories that end the job (the default for every category)"),
    "TryToContinue": (
        vstring,
        [],
        "categories after which dependent modules are skipped, their "
        "Paths marked as errored, and the event goes on to the EndPaths",
    ),
    "IgnoreCompletely": (vstring, [], "categories ignored: the module counts as passed"),
}
MAX_EVENTS: dict[str, tuple[Any, Any, str]] = {
    "input": (int32, -1, "number of events to read; -1 = all"),
    "output": (None, None, "accepted (events written per output module: not supported here)"),
}
MAX_LUMIS: dict[str, tuple[Any, Any, str]] = {"input": (int32, -1, "accepted (no luminosity blocks here)")}
MAX_SECONDS: dict[str, tuple[Any, Any, str]] = {"input": (int32, -1, "accepted")}
_SPECIAL = {  # in CMSSW's dump order
    "maxEvents": MAX_EVENTS,
    "maxLuminosityBlocks": MAX_LUMIS,
    "maxSecondsUntilRampdown": MAX_SECONDS,
    "options": OPTIONS,
}
_ED_KINDS = (EDProducer, EDFilter, EDAnalyzer, OutputModule)
_SEQUENCEABLE = (*_ED_KINDS, Sequence)
_ROLES: tuple[Any, ...] = (_SEQUENCEABLE, Task, (Path, EndPath), (Service, ESSource, ESProducer))
# process.<name>: CMSSW's read-only dictionaries of the process's content, by label.
_DICTS = {
    "producers": "producers_",
    "filters": "filters_",
    "analyzers": "analyzers_",
    "outputModules": "outputModules_",
    "services": "services_",
    "es_sources": "es_sources_",
    "es_producers": "es_producers_",
    "es_prefers": "es_prefers_",
    "sequences": "sequences_",
    "tasks": "tasks_",
    "paths": "_all_paths",  # CMSSW's process.paths: every Path, scheduled or not
    "endpaths": "_all_endpaths",
    "psets": "psets_",
    "vpsets": "vpsets_",
    "aliases": "aliases_",
    "finalpaths": "_all_finalpaths",
    "conditionaltasks": "conditionaltasks_",
    "switchProducers": "switchProducers_",
    "processAccelerators": "processAccelerators_",
}


def _default_pset(spec: Mapping[str, tuple[Any, Any, str]]) -> PSet:
    def make(cls: Any, default: Any) -> Any:
        if cls is None:  # CMSSW's maxEvents.output: an int32, or a PSet by output module
            return optional.untracked.allowed(int32, PSet)
        if cls is PSet:
            return untracked.PSet()
        return untracked(cls(*default) if cls is VPSet else cls(default))

    pset: PSet = untracked.PSet(**{name: make(cls, default) for name, (cls, default, _) in spec.items()})
    return pset


def _merge_special(which: str, value: Any) -> PSet:
    """The defaults of ``process.<which>`` overridden by ``value``, types kept untracked.

    Values are taken by value (tracked or not, typed or plain), so that
    ``cms.PSet(numberOfStreams=cms.int32(4))`` works like the untracked spelling.
    """
    spec = _SPECIAL[which]
    if isinstance(value, PSet):
        items = value.parameters_()
    elif isinstance(value, Mapping):
        items = dict(value)
    else:
        raise ConfigurationError(f"process.{which} must be a cms.untracked.PSet, got {describe_value(value)}")
    merged = _default_pset(spec)
    for name, v in items.items():
        if name not in spec:
            near = closest(name, spec)
            hint = f" ({near})" if near.startswith("did") else ""
            raise ConfigurationError(f"process.{which}: unknown parameter '{name}'{hint}; known: {', '.join(spec)}")
        try:
            if isinstance(v, ProxyParameter) and not v.isSet_():
                continue  # still the default placeholder
            if isinstance(v, ProxyParameter):
                v = v._value
            if spec[name][0] is None:
                setattr(merged, name, v)
            elif isinstance(v, (PSet, VPSet)):
                v = copy.deepcopy(v)
                v.setIsTracked(False)
                setattr(merged, name, v)
            else:
                getattr(merged, name).setValue(plain_value(v))
        except ConfigurationError as e:
            raise ConfigurationError(f"process.{which}.{name}: {e.args[0]}") from None
    return merged


def _what(obj: Any) -> str:
    return obj._what_() if hasattr(obj, "_what_") else describe_value(obj)


class ProcessFragment:
    """A named bundle of configuration objects for ``process.extend(fragment)`` (CMSSW's
    ``cms.ProcessFragment``): ``frag = cms.ProcessFragment("NAME"); frag.a = cms.EDProducer(...)``."""

    def __init__(self, name: str) -> None:
        self.__dict__["_name"] = name

    def name_(self) -> str:
        return str(self.__dict__["_name"])


class Process:
    """A config: ``process = cms.Process("NAME", *modifiers)``, then ``process.<label> = ...``.

    Plain attributes are the config's content (modules, Services, ES modules, Sequences,
    Paths, EndPaths, Tasks, PSets); methods end in ``_``, except CMSSW's own (``load``,
    ``extend``, ``add_``, ``prefer``, ``dumpPython``). Special attributes: ``source``,
    ``maxEvents``, ``options`` (with CMSSW's defaults; assigning a PSet overrides only the
    keys it has) and ``schedule``. ``modifiers`` (Modifiers, ModifierChains, eras) are
    chosen: their ``toModify``/``toReplaceWith`` calls take effect from then on.

    As in CMSSW: assigning a new object to an existing label replaces the old one in every
    Sequence, Path, Task and the Schedule (but a fragment loaded with ``load`` may not
    override a label in use: ValueError); ``del process.x`` removes ``x`` from all of them.

    Raises:
        ConfigurationError: invalid process name or label, a value that cannot be attached,
            unknown keys in ``options``/``maxEvents``.
    """

    _is_config_structure = True
    # CMSSW's flag: no Process was made yet in this job (load_config sets it for each config,
    # as each cmsRun starts afresh); then a Process may choose Modifiers.
    _firstProcess = True  # noqa: N815 - CMSSW's name
    # Set through __dict__ in __init__ (plain attributes are the config's content).
    _name: str
    _source: Source | None
    _schedule: Schedule | None

    def __init__(self, name: str, *modifiers: Modifier | ModifierChain) -> None:
        if not isinstance(name, str) or not name.isascii() or not name.isalnum():
            raise ConfigRuntimeError(f"process name must be a non-empty alphanumeric string, got {name!r}")
        d = self.__dict__
        d["_name"] = name
        d["_objects"] = {}
        d["_source"] = None
        d["_schedule"] = None
        d["_in_extend"] = False
        d["_applied_process_modifiers"] = set()
        d["_looper"] = None
        d["_subprocesses"] = []
        for special, spec in _SPECIAL.items():
            d["_" + special] = _default_pset(spec)
        for modifier in modifiers:
            if not isinstance(modifier, (Modifier, ModifierChain)):
                raise ConfigTypeError(
                    f"cms.Process({name!r}, ...): modifiers must be cms.Modifier, got {_what(modifier)}"
                )
        # CMSSW: once a Process exists, a later one may not choose new Modifiers (being chosen
        # is global, so it would change what the first one's toModify calls do).
        if not Process._firstProcess and any(not m._isChosen() for m in modifiers):
            raise ConfigRuntimeError(
                f"The Process {name} tried to redefine which Modifiers to use after another Process was already started"
            )
        Process._firstProcess = False
        for modifier in modifiers:
            modifier._setChosen()
        d["_modifiers"] = modifiers

    # ------------------------------------------------------------ attributes

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        d = self.__dict__
        if name == "source":
            if d["_source"] is None:
                raise AttributeError("process has no source (set process.source = cms.Source(...))")
            return d["_source"]
        if name in ("schedule", "looper"):
            return d["_" + name]
        if name == "subProcesses":
            return d["_subprocesses"]
        if name in _SPECIAL:
            return d["_" + name]
        if name in _DICTS:
            return types.MappingProxyType(getattr(self, _DICTS[name])())
        try:
            return d["_objects"][name]
        except KeyError:
            hint = closest(name, d["_objects"])
            raise AttributeError(f"process '{d['_name']}' has no '{name}' ({hint})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        d = self.__dict__
        if name == "source":
            if not isinstance(value, Source):
                raise ConfigTypeError(f"process.source must be a cms.Source, got {_what(value)}")
            value._label = "source"
            d["_source"] = value
        elif name in _SPECIAL:
            d["_" + name] = _merge_special(name, value)
        elif name == "schedule":
            if value is not None and not isinstance(value, Schedule):
                raise ConfigTypeError(f"process.schedule must be a cms.Schedule, got {_what(value)}")
            # CMSSW checks the paths; Tasks may be unlabelled (their modules are checked at validation).
            for item in (*value, *(t for t in value._tasks if t.hasLabel_())) if value is not None else ():
                if not item.hasLabel_() or d["_objects"].get(item.label_()) is not item:
                    raise ConfigRuntimeError(
                        f"process.schedule: {_what(item)} is not attached to the process (attach it first)"
                    )
            d["_schedule"] = value
        elif name == "looper":
            if value is not None and not isinstance(value, Looper):
                raise ConfigTypeError(f"process.looper must be a cms.Looper, got {_what(value)}")
            if value is not None:
                value._label = "looper"
            d["_looper"] = value
        elif name in _DICTS:
            raise ConfigValueError(f"process.{name} is read-only (the {name} of the process, by label)")
        else:
            self._attach(name, value)

    def __delattr__(self, name: str) -> None:
        d = self.__dict__
        if name in ("source", "schedule", "looper"):
            d["_" + name] = None
        elif name in _SPECIAL:
            d["_" + name] = _default_pset(_SPECIAL[name])
        elif name in d["_objects"]:
            obj = d["_objects"].pop(name)
            self._replace_everywhere(obj, None)
            if isinstance(obj, Labelable):
                obj._label = None
        else:
            raise AttributeError(f"process '{d['_name']}' has no '{name}'")

    def _containers(self) -> list[Any]:
        out: list[Any] = [o for o in self._objects.values() if isinstance(o, (_ModuleSequence, Task))]
        return out

    def _replace_everywhere(self, old: Any, new: Any) -> None:
        """``old`` replaced by ``new`` (or removed: None) in every Sequence, Path, Task and the Schedule."""
        for container in self._containers():
            container._replace_object(old, new)
        if self._schedule is not None:
            self._schedule._replace_object(old, new)

    def _used_by(self, obj: Any) -> Any:
        for container in self._containers():
            if container is not obj and container.contains(obj):
                return container
        return None

    def _attach(self, label: str, obj: Any) -> None:
        if not label.isidentifier() or label.startswith("_") or label.endswith("_"):
            raise ConfigValueError(f"invalid label '{label}': a Python identifier not starting or ending with '_'")
        if isinstance(obj, Source):
            raise ConfigValueError(f"process.{label}: a Source must be assigned to process.source")
        if isinstance(obj, Looper):
            raise ConfigValueError(f"process.{label}: a Looper must be assigned to process.looper (CMSSW)")
        if isinstance(obj, ProcessAccelerator):
            if label != obj.type_():
                raise ConfigTypeError(
                    f"a ProcessAccelerator is attached under its class name: process.{obj.type_()} = ..., "
                    f"not process.{label}"
                )
            self.__dict__["_objects"][label] = obj
            return
        if not isinstance(obj, (Labelable, PSet, VPSet)) or isinstance(obj, Schedule):
            raise ConfigTypeError(
                f"process.{label}: cannot attach {_what(obj)}; expected a module, Service, ES module, "
                "Sequence, Path, EndPath, Task, PSet or VPSet"
            )
        objects = self.__dict__["_objects"]
        existing = objects.get(label)
        if existing is obj:
            return
        if isinstance(obj, Service) and label != obj.type_():
            raise ConfigTypeError(
                f"a Service is attached under its type name: process.{obj.type_()} = ..., not process.{label}"
            )
        # CMSSW relabels an object unless this process holds it under its old label.
        if (
            isinstance(obj, Labelable)
            and obj.hasLabel_()
            and obj.label_() != label
            and objects.get(obj.label_()) is obj
        ):
            raise ConfigValueError(
                f"cannot attach {_what(obj)} as '{label}': it is already attached as "
                f"'{obj.label_()}' (use .clone() for a copy)"
            )
        if isinstance(obj, Task) and not isinstance(obj, TaskPlaceholder):
            self._check_task_attached(label, obj)
        if existing is not None:
            user = self._used_by(existing)
            if self._in_extend and user is not None:
                raise ConfigValueError(
                    f"Trying to override definition of process.{label} (used by {_what(user)}) "
                    f"while loading a fragment: already {_what(existing)}"
                )
            if isinstance(obj, EDAlias) and user is not None:
                # CMSSW: an alias never silently takes the place of a module in use.
                raise ConfigValueError(
                    f"Trying to override definition of process.{label} with an EDAlias while it is used by "
                    f"{_what(user)}"
                )
            # The new object takes the old one's place where it can stand there (a module or
            # Sequence in sequences, a Task in Tasks, a Path in the Schedule); else it is removed.
            same_role = any(isinstance(obj, r) and isinstance(existing, r) for r in _ROLES)
            replacement = obj if same_role else None
            self._replace_everywhere(existing, replacement)
            if isinstance(existing, Labelable):
                existing._label = None
            del objects[label]
        if isinstance(obj, Labelable):
            obj._label = label
        objects[label] = obj

    def _check_task_attached(self, label: str, task: Task) -> None:
        """CMSSW checks a Task when it is attached: everything in it (nested Tasks too, not
        placeholders) must be attached to the process already."""
        for leaf in task._leaves_():
            if not leaf.hasLabel_():
                raise ConfigRuntimeError(
                    f"process.{label}: an entry of {task._what_()}, {_what(leaf)}, is not attached to the process "
                    "(attach it first: process.<label> = ...)"
                )

    def add_(self, *items: Service | ESSource | ESProducer | ESPrefer | ProcessAccelerator) -> None:
        """Attach Services (and ProcessAccelerators) under their type names and unlabelled ES
        modules (CMSSW's ``process.add_``)."""
        for item in items:
            if isinstance(item, (Service, ProcessAccelerator)):
                self._attach(item.type_(), item)
            elif isinstance(item, (ESSource, ESProducer, ESPrefer)):
                label = item._label or item.type_()
                if isinstance(item, ESPrefer):
                    label = "es_prefer_" + label
                self._attach(label, item)
            else:
                raise ConfigTypeError(
                    f"process.add_() takes Services and ES modules, got {_what(item)}; "
                    "attach others as process.<label> = ..."
                )

    def prefer(self, label: Any, *args: Any, **kwargs: Any) -> None:
        """``process.prefer("esLabel")``: an ESPrefer for that ES source or producer (CMSSW)."""
        if isinstance(label, (ESSource, ESProducer)) and label.hasLabel_():
            label = label.label_()  # CMSSW accepts the ES module itself too
        target = self._objects.get(label)
        if not isinstance(target, (ESSource, ESProducer)):
            raise ConfigValueError(f"process.prefer('{label}'): no ESSource or ESProducer labelled '{label}'")
        self._attach("es_prefer_" + label, ESPrefer(target.type_(), label, *args, **kwargs))

    # ------------------------------------------------------------ load / extend / modifiers

    def load(self, module_name: str) -> types.ModuleType:
        """Import a fragment (``_cff``/``_cfi``) by dotted name and :meth:`extend` the process with it.

        Slashes are accepted as dots (``"FWCore/MessageService/MessageLogger_cfi"``), as in CMSSW.

        Raises:
            ModuleNotFoundError: no such module on ``sys.path``.
        """
        module = importlib.import_module(module_name.replace("/", "."))
        self.extend(module)
        return module

    def extend(self, other: Any, items: tuple[Any, ...] = ()) -> None:
        """Attach every configuration object of ``other`` (a module or a namespace) under its name.

        Modules, ES modules, PSets and VPSets are attached first, then Tasks, Sequences,
        Paths and EndPaths; Services by type; a ``ProcessModifier`` found there is applied
        if its Modifier is chosen. Names starting with ``_`` are skipped.
        """
        d = self.__dict__
        names = [n for n in dir(other) if not n.startswith("_")]
        late: list[tuple[str, Any]] = []
        process_modifiers: list[ProcessModifier] = []
        d["_in_extend"] = True
        try:
            for name in names:
                item = getattr(other, name)
                if name == "source" and isinstance(item, Source):
                    self.source = item
                elif name in _SPECIAL and isinstance(item, PSet):
                    setattr(self, name, item)
                elif name == "schedule" and isinstance(item, Schedule):
                    self.schedule = item
                elif isinstance(item, (Service, ProcessAccelerator)):
                    self.add_(item)
                elif isinstance(item, (_ModuleSequence, Task)):
                    late.append((name, item))
                elif isinstance(item, ProcessModifier):
                    process_modifiers.append(item)
                elif isinstance(item, (Labelable, PSet, VPSet)) and not isinstance(item, (Schedule, Process)):
                    if isinstance(item, Labelable) and item.hasLabel_() and item.label_() != name:
                        continue  # an alias of an object attached under its own name
                    self._attach(name, item)
            for name, item in sorted(late, key=lambda x: isinstance(x[1], (Path, EndPath))):
                self._attach(name, item)
        finally:
            d["_in_extend"] = False
        for modifier in process_modifiers:
            self._apply_process_modifier(modifier)

    def _apply_process_modifier(self, modifier: ProcessModifier) -> None:
        applied = self.__dict__["_applied_process_modifiers"]
        if id(modifier) not in applied:
            applied.add(id(modifier))
            modifier.apply(self)

    def isUsingModifier(self, modifier: Modifier) -> bool:  # noqa: N802 - CMSSW spelling
        """Whether ``modifier`` (or a chain holding it) was given to ``cms.Process``."""
        return any(m is modifier or (isinstance(m, ModifierChain) and m._holds(modifier)) for m in self._modifiers)

    # ------------------------------------------------------------ introspection

    def name_(self) -> str:
        return self._name

    def source_(self) -> Source | None:
        return self._source

    def schedule_(self) -> Schedule | None:
        return self._schedule

    def resolve(self, keepUnresolvedSequencePlaceholders: bool = False) -> None:  # noqa: N803
        """Replace every SequencePlaceholder and TaskPlaceholder by the process's object of
        that name (CMSSW's ``resolve``; ``load_config`` runs it).

        Raises:
            ~framework.config._types.ConfigRuntimeError: a placeholder names nothing the process holds.
        """
        for obj in list(self._objects.values()):
            if isinstance(obj, (_ModuleSequence, Task)):
                obj.resolve(self._objects, keepUnresolvedSequencePlaceholders)
        if self._schedule is not None:
            self._schedule.resolve(self._objects, keepUnresolvedSequencePlaceholders)

    def setSchedule_(self, schedule: Schedule | None) -> None:  # noqa: N802 - CMSSW spelling
        self.__setattr__("schedule", schedule)

    def _by_type(self, cls: Any) -> dict[str, Any]:
        return {label: obj for label, obj in self._objects.items() if isinstance(obj, cls)}

    def producers_(self) -> dict[str, EDProducer]:
        """EDProducers, SwitchProducers apart (CMSSW: ``switchProducers_``)."""
        return {label: obj for label, obj in self._by_type(EDProducer).items() if not isinstance(obj, SwitchProducer)}

    def switchProducers_(self) -> dict[str, SwitchProducer]:  # noqa: N802 - CMSSW spelling
        return self._by_type(SwitchProducer)

    def processAccelerators_(self) -> dict[str, ProcessAccelerator]:  # noqa: N802 - CMSSW spelling
        return self._by_type(ProcessAccelerator)

    def looper_(self) -> Looper | None:
        return self.__dict__["_looper"]  # type: ignore[no-any-return]

    def setLooper_(self, looper: Looper | None) -> None:  # noqa: N802 - CMSSW spelling
        self.looper = looper

    def subProcesses_(self) -> list[SubProcess]:  # noqa: N802 - CMSSW spelling
        return self.__dict__["_subprocesses"]  # type: ignore[no-any-return]

    def addSubProcess(self, subprocess: SubProcess) -> None:  # noqa: N802 - CMSSW spelling
        """Append a ``cms.SubProcess`` (CMSSW's); it loads and dumps, a job with one is not run here.

        Raises:
            ~framework.config._types.ConfigTypeError: not a cms.SubProcess.
        """
        if not isinstance(subprocess, SubProcess):
            raise ConfigTypeError(f"process.addSubProcess() takes a cms.SubProcess, got {_what(subprocess)}")
        self.__dict__["_subprocesses"].append(subprocess)

    def selectAccelerators_(self) -> list[str]:  # noqa: N802
        """The accelerators the job uses (CMSSW's ``@selected_accelerators``, sorted): those of
        ``process.options.accelerators`` among the available ones ("cpu" and what the
        ProcessAccelerators enable); each ProcessAccelerator's ``apply`` then customizes the
        Services for them, as CMSSW does when the job starts. The builder calls it.

        Raises:
            ~framework.config._types.ConfigValueError: invalid ``process.options.accelerators``.
        """
        accelerators = list(self.processAccelerators_().values())
        selected = select_accelerators(self.options_()["accelerators"], accelerators)
        for accelerator in accelerators:
            accelerator.apply(ProcessForProcessAccelerator(self), selected)
        return selected

    def checkRunnable_(self) -> None:  # noqa: N802
        """Refuse what a config may build and dump but pysonic does not run (the builder calls
        it): a looper, SubProcesses, a ``cms.SecSource`` (pile-up mixing).

        Raises:
            ConfigurationError: (a ``NotSupportedError``) naming the feature.
        """
        if self.__dict__["_looper"] is not None:
            raise NotSupportedError("a looper (process.looper = cms.Looper(...))", "run the job again instead")
        if self.__dict__["_subprocesses"]:
            raise NotSupportedError(
                "a SubProcess (process.addSubProcess)", "run a second cmsrun job on this one's output"
            )
        for label, obj in self._objects.items():
            where = _secondary_source(obj)
            if where is not None:
                place = f"process.{label}" + (f".{where}" if where else "")
                raise NotSupportedError(f"cms.SecSource ({place})", "no pile-up mixing here")

    def filters_(self) -> dict[str, EDFilter]:
        return self._by_type(EDFilter)

    def analyzers_(self) -> dict[str, EDAnalyzer]:
        return self._by_type(EDAnalyzer)

    def outputModules_(self) -> dict[str, OutputModule]:  # noqa: N802 - CMSSW spelling
        return self._by_type(OutputModule)

    def modules_(self) -> dict[str, Any]:
        """All EDProducers, EDFilters, EDAnalyzers and OutputModules, in definition order."""
        return self._by_type(_ED_KINDS)

    def services_(self) -> dict[str, Service]:
        return self._by_type(Service)

    def es_sources_(self) -> dict[str, ESSource]:
        return self._by_type(ESSource)

    def es_producers_(self) -> dict[str, ESProducer]:
        return self._by_type(ESProducer)

    def es_prefers_(self) -> dict[str, ESPrefer]:
        return self._by_type(ESPrefer)

    def sequences_(self) -> dict[str, Sequence]:
        return self._by_type(Sequence)

    def tasks_(self) -> dict[str, Task]:
        return self._by_type(Task)

    def psets_(self) -> dict[str, PSet]:
        """Top-level PSets (``process.common = cms.PSet(...)``)."""
        return self._by_type(PSet)

    def vpsets_(self) -> dict[str, VPSet]:
        return self._by_type(VPSet)

    def aliases_(self) -> dict[str, EDAlias]:
        return self._by_type(EDAlias)

    def _all_finalpaths(self) -> dict[str, FinalPath]:
        return self._by_type(FinalPath)

    def conditionaltasks_(self) -> dict[str, ConditionalTask]:
        return self._by_type(ConditionalTask)

    def finalpaths_(self) -> dict[str, FinalPath]:
        return self._scheduled(FinalPath)

    def prune(self, verbose: bool = False, keepUnresolvedSequencePlaceholders: bool = False) -> None:  # noqa: N803
        """Remove what no scheduled Path, EndPath or Schedule Task reaches (CMSSW's ``prune``):
        ED modules, Sequences, Tasks, tracked top-level PSets and VPSets; without a schedule
        every Path and EndPath counts, with one the unscheduled paths go too. Services, ES
        modules, untracked PSets and the source stay. Placeholders are resolved first (as in
        CMSSW), so what a SequencePlaceholder or TaskPlaceholder names is kept; with
        ``keepUnresolvedSequencePlaceholders`` those naming nothing stay as they are.

        Raises:
            ~framework.config._types.ConfigRuntimeError: a placeholder names nothing (unless kept).
        """
        self.resolve(keepUnresolvedSequencePlaceholders)
        paths = [*self.paths_().values(), *self.endpaths_().values()]
        keep: set[int] = {id(p) for p in paths}
        roots: list[Any] = list(paths) + (list(self._schedule._tasks) if self._schedule is not None else [])

        class _Collect:
            def enter(self, item: Any) -> None:
                keep.add(id(item))

            def leave(self, item: Any) -> None:
                pass

        for root in roots:
            keep.add(id(root))
            root.visit(_Collect())
        for label, obj in list(self._objects.items()):
            prunable = isinstance(obj, (*_ED_KINDS, Sequence, Task, Path, EndPath)) or (
                isinstance(obj, (PSet, VPSet)) and obj.isTracked()
            )
            if prunable and id(obj) not in keep:
                if verbose:
                    print(f"prune: removing {_what(obj)}")
                delattr(self, label)

    def globalReplace(self, label: str, new: Any) -> None:  # noqa: N802 - CMSSW spelling
        """Replace the object labelled ``label`` by ``new`` in the process and in every
        Sequence, Path, Task and the Schedule (CMSSW's ``globalReplace``).

        Raises:
            ~framework.config._types.ConfigValueError: no object has that label.
        """
        if label not in self._objects:
            raise ConfigValueError(f"globalReplace: process '{self._name}' has no '{label}'")
        self._attach(label, new)

    def _scheduled(self, cls: type[Path] | type[EndPath]) -> dict[str, Any]:
        if self._schedule is None:
            return self._by_type(cls)
        return {p.label_(): p for p in self._schedule if isinstance(p, cls)}

    def _all_paths(self) -> dict[str, Path]:
        return self._by_type(Path)

    def _all_endpaths(self) -> dict[str, EndPath]:
        return {label: obj for label, obj in self._objects.items() if type(obj) is EndPath}

    def paths_(self) -> dict[str, Path]:
        return self._scheduled(Path)

    def endpaths_(self) -> dict[str, EndPath]:
        return self._scheduled(EndPath)

    def _names(self, getter: str) -> str:
        return " ".join(getattr(self, getter)())

    def producerNames(self) -> str:  # noqa: N802 - CMSSW spelling
        return self._names("producers_")

    def switchProducerNames(self) -> str:  # noqa: N802 - CMSSW spelling
        return self._names("switchProducers_")

    def filterNames(self) -> str:  # noqa: N802
        return self._names("filters_")

    def analyzerNames(self) -> str:  # noqa: N802
        return self._names("analyzers_")

    def outputModuleNames(self) -> str:  # noqa: N802
        return self._names("outputModules_")

    def pathNames(self) -> str:  # noqa: N802
        return " ".join(self._by_type(Path))

    def endpathNames(self) -> str:  # noqa: N802
        return " ".join(self._by_type(EndPath))

    def unscheduledLabels_(self) -> set[str]:  # noqa: N802
        """Labels of modules in any Task: attached, or associated with a path or the schedule.

        (CMSSW runs a Task's modules only if the Task is associated with a Path, EndPath
        or the Schedule; here a Task attached to the process is enough.)
        """
        labels: set[str] = set()
        for task in self.tasks_().values():
            labels |= task.moduleLabels_()
        for path in (*self.paths_().values(), *self.endpaths_().values()):
            labels |= path.taskLabels_()
        for task in self._schedule._tasks if self._schedule is not None else ():
            labels |= task.moduleLabels_()
        return labels

    def maxEvents_(self) -> int:  # noqa: N802
        """``process.maxEvents.input``: events to process, -1 for all."""
        value: int = _merge_special("maxEvents", self._maxEvents).input.value()
        if value < -1:
            raise ConfigurationError(f"process.maxEvents.input must be >= -1 (-1 = all events), got {value}")
        return value

    def options_(self) -> dict[str, Any]:
        """``process.options`` as a plain dict, defaults filled (keys: see ``OPTIONS``)."""
        return _merge_special("options", self._options).value()  # uint32s: never negative

    # ------------------------------------------------------------ validation

    def validate_(self) -> None:
        """Check the structure: everything Paths, Sequences, Tasks and the schedule refer to
        is attached; no module is both plain and inverted on a Path; ``options`` and
        ``maxEvents`` are valid. Module parameters are validated later, against each
        module type's description.

        Raises:
            ConfigurationError: naming the Path (Sequence, Task) and the module type.
        """
        self.options_()
        self.maxEvents_()
        for seq in (*self.sequences_().values(), *self._by_type((Path, EndPath)).values()):
            for module, _ in seq._entries_():
                self._check_attached(seq, module)
            seq.moduleEntries_()
            for task in seq._all_tasks_():
                for module in task._modules_():
                    self._check_attached(seq, module)
        for task in self.tasks_().values():
            for module in task._modules_():
                self._check_attached(task, module)
        if self._schedule is not None:
            for item in (*self._schedule, *self._schedule._tasks):
                unlabelled_task = isinstance(item, Task) and not item.hasLabel_()  # CMSSW allows those
                if not unlabelled_task and (not item.hasLabel_() or self._objects.get(item.label_()) is not item):
                    raise ConfigurationError(
                        f"process.schedule refers to {_what(item)} that is not attached to the process"
                    )
                if isinstance(item, Task):
                    for module in item._modules_():
                        self._check_attached(item, module)

    def _check_attached(self, owner: Labelable, module: Any) -> None:
        if module.hasLabel_() and self._objects.get(module.label_()) is module:
            return
        elsewhere = f" (it is labelled '{module.label_()}' elsewhere)" if module.hasLabel_() else ""
        raise ConfigurationError(
            f"{owner._what_()} refers to an {module.kind_()} of type '{module.type_()}' "
            f"that is not attached to the process{elsewhere}"
        )

    # ------------------------------------------------------------ dump

    def dumpPython(self, options: Any = None) -> str:  # noqa: N802 - CMSSW spelling
        """Python source that rebuilds this config, in CMSSW's layout (``edmConfigDump``,
        ``cmsrun --dump``): the header, ``process = cms.Process("NAME")``, then one statement
        per object, separated by blank lines, in CMSSW's order: source, PSets (maxEvents,
        options, ... first), VPSets, SubProcesses, modules by kind (SwitchProducers after
        EDProducers), Services, ProcessAccelerators, ES modules, Tasks and Sequences (each
        after those it holds), Paths, EndPaths, the schedule. SwitchProducers and
        ProcessAccelerators are written with their class names, imported in the header from
        the module that defines them (as CMSSW's special imports)."""
        out = [f'process = cms.Process("{self._name}")']
        if self._source is not None:
            out.append(f"process.source = {self._source.dumpPython_()}")
        if self.__dict__["_looper"] is not None:
            out.append(f"process.looper = {self.__dict__['_looper'].dumpPython_()}")
        for special in _SPECIAL:
            out.append(f"process.{special} = {self.__dict__['_' + special].dumpPython_()}")
        emitted: set[int] = set()

        def emit(label: str, obj: Any) -> None:
            if id(obj) in emitted:
                return
            emitted.add(id(obj))
            for dep in _dependencies(obj):  # a Sequence or Task must be defined before use
                if dep.hasLabel_() and self._objects.get(dep.label_()) is dep:
                    emit(dep.label_(), dep)
            out.append(f"process.{label} = {obj.dumpPython_()}")

        kinds = (
            PSet,
            VPSet,
            SubProcess,
            EDProducer,
            SwitchProducer,
            EDFilter,
            EDAnalyzer,
            OutputModule,
            Service,
            ProcessAccelerator,
            ESProducer,
            ESSource,
            ESPrefer,
            Task,
            Sequence,
            Path,
            EndPath,
            EDAlias,
        )
        for kind in kinds:
            if kind is SubProcess:
                out += [sub.dumpPython_() for sub in self.__dict__["_subprocesses"]]
            for label, obj in self._objects.items():
                if isinstance(obj, kind) and not (kind is EDProducer and isinstance(obj, SwitchProducer)):
                    emit(label, obj)
        if self._schedule is not None:
            out.append(f"process.schedule = {self._schedule.dumpPython_()}")
        imports = sorted(
            {
                f"from {type(obj).__module__} import {type(obj).__name__}"
                for obj in self._objects.values()
                if isinstance(obj, (SwitchProducer, ProcessAccelerator))
                and type(obj).__module__ not in ("__config__", "__main__")
            }
        )
        header = "\n".join(["import FWCore.ParameterSet.Config as cms", *imports])
        return header + "\n\n" + "\n\n".join(out) + "\n"

    dumpPython_ = dumpPython  # pysonic's spelling (methods end in "_")

    def __repr__(self) -> str:
        return f"<cms.Process {self._name!r}: {len(self.modules_())} modules, {len(self._by_type(Path))} paths>"


def _secondary_source(obj: Any, where: str = "") -> str | None:
    """The parameter path at which ``obj`` (a module, PSet or VPSet) holds a cms.SecSource
    (``""``: it is one), or None."""
    if isinstance(obj, SecSource):
        return where
    if isinstance(obj, VPSet):
        items = [(f"{where}[{i}]", value) for i, value in enumerate(obj)]
    elif isinstance(obj, ParameterHolder):
        items = [(f"{where}.{name}" if where else name, value) for name, value in obj.parameters_().items()]
    else:
        return None
    return next((found for path, value in items if (found := _secondary_source(value, path)) is not None), None)


class SubProcess:
    """``process.addSubProcess(cms.SubProcess(child, SelectEvents=..., outputCommands=...))``:
    CMSSW's second process run on the first one's events in one job. It loads and dumps; a job
    with one is not run here (NotSupportedError when the job is built).

    Raises:
        ~framework.config._types.ConfigValueError: arguments of the wrong types (CMSSW's checks).
    """

    _is_config_structure = True

    def __init__(self, process: Process, SelectEvents: Any = None, outputCommands: Any = None) -> None:  # noqa: N803
        SelectEvents = untracked.PSet() if SelectEvents is None else SelectEvents  # noqa: N806
        outputCommands = untracked.vstring() if outputCommands is None else outputCommands  # noqa: N806
        if not isinstance(process, Process):
            raise ConfigValueError(
                f"cms.SubProcess: the 'process' argument must be a cms.Process, got {_what(process)}"
            )
        if not isinstance(SelectEvents, PSet):
            raise ConfigValueError("cms.SubProcess: 'SelectEvents' must be a cms.untracked.PSet")
        if not isinstance(outputCommands, vstring):
            raise ConfigValueError("cms.SubProcess: 'outputCommands' must be a cms.untracked.vstring")
        self._process, self._select, self._commands = process, SelectEvents, outputCommands

    def getProcessName(self) -> str:  # noqa: N802 - CMSSW spelling
        return self._process.name_()

    def process(self) -> Process:
        return self._process

    def SelectEvents(self) -> PSet:  # noqa: N802 - CMSSW spelling
        return self._select

    def outputCommands(self) -> vstring:  # noqa: N802 - CMSSW spelling
        return self._commands

    def type_(self) -> str:
        return "subProcess"

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        # CMSSW's layout: the child process's dump between two swaps of the name "process".
        parent = f"parentProcess{abs(hash(self))}"
        child = self._process.dumpPython().split("\n\n", 1)[1]  # without the import line
        return (
            f"{parent} = process\n{child}childProcess = process\nprocess = {parent}\n"
            f"process.addSubProcess(cms.SubProcess(process = childProcess, SelectEvents = "
            f"{self._select.dumpPython_()}, outputCommands = {self._commands.dumpPython_()}))"
        )


def _dependencies(obj: Any) -> list[Any]:
    if isinstance(obj, Task):
        return [item for item in obj._items if isinstance(item, Task)]
    if isinstance(obj, (Sequence, Path, EndPath)):
        return [item for item in obj._items if isinstance(item, Sequence)] + list(obj._tasks)
    return []
