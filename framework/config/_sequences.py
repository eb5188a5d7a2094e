"""Scheduling objects: Sequence, Task, Path, EndPath, Schedule (CMSSW's ``SequenceTypes.py``).

``a + b`` and ``a * b`` both chain (CMSSW kept ``*`` for historical dependency
declarations; here both mean "then"). ``~f`` inverts an EDFilter: the Path goes on when
the filter fails. Modules in Tasks associated with a Path (directly, through nested
Tasks, or through Tasks inside its Sequences) are unscheduled: the framework runs them
on demand, when a module consumes their products, not in Path order.

This module knows modules only through their ``kind_()``/``type_()``/``label_()``
methods, so that ``_modules`` can import it for the operators.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from framework.utilities import ConfigurationError

from ._types import ConfigRuntimeError, ConfigTypeError, ConfigValueError, describe_value

__all__ = [
    "FinalPath",
    "EndPath",
    "Labelable",
    "Path",
    "Schedule",
    "Sequence",
    "Sequenceable",
    "Task",
    "ignore",
    "wait",
]

# What a Task may hold (CMSSW): on-demand EDProducers/EDFilters; ES modules and Services too,
# which are configuration only here.
_TASK_KINDS = ("EDProducer", "EDFilter", "ESProducer", "ESSource", "Service")
_RUN_KINDS = ("EDProducer", "EDFilter")


class Labelable:
    """Something attached to a Process under a label (module, Sequence, Path, Task, ...)."""

    _is_config_structure = True  # never a parameter value (see _types.is_config_structure)
    _kind: ClassVar[str] = "?"
    _label: str | None = None

    def kind_(self) -> str:
        return self._kind

    def label_(self) -> str:
        """The label given by ``process.<label> = ...``.

        Raises:
            ConfigurationError: the object is not attached to a process.
        """
        if self._label is None:
            raise ConfigurationError(f"{self._what_()} has no label: it is not attached to a process")
        return self._label

    def hasLabel_(self) -> bool:  # noqa: N802 - CMSSW spelling
        return self._label is not None

    def setLabel(self, label: str | None) -> None:  # noqa: N802 - CMSSW spelling
        """Set the label (the process does, when attaching); None unsets it.

        Raises:
            ~framework.config._types.ConfigValueError: a label set already changed to another
                without being unset first (CMSSW: clone instead).
        """
        if self._label is not None and label is not None and label != self._label:
            raise ConfigValueError(
                f"{self._what_()}: cannot change its label to '{label}' (clone it, or setLabel(None) first)"
            )
        self._label = label

    @property
    def _inProcess(self) -> bool:  # noqa: N802 - CMSSW's name
        return self._label is not None

    def _what_(self) -> str:
        return f"{self._kind} '{self._label}'" if self._label is not None else f"unlabelled {self._kind}"

    def _ref_(self, indent: int = 0) -> str:
        """How a dump refers to this object: ``process.<label>``, or inline if unlabelled."""
        return f"process.{self._label}" if self._label is not None else self.dumpPython_(indent)

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        raise NotImplementedError

    def dumpPython(self, options: Any = None) -> str:  # noqa: N802 - CMSSW spelling
        """As CMSSW's ``dumpPython()``: the Python source of this object, with a final newline."""
        return self.dumpPython_() + "\n"

    def __repr__(self) -> str:
        return self.dumpPython_()


class Sequenceable:
    """Mixin for things that can be chained in a Path: ED modules, Sequences, ``~filter``."""

    def __add__(self, other: Any) -> SequenceExpr:
        return SequenceExpr.chain(self, other)

    __mul__ = __add__


class Inverted(Sequenceable):
    """``~filter``: the filter's decision is inverted on this Path."""

    def __init__(self, module: Any) -> None:
        # CMSSW accepts '~' on any module in a config; building the job checks it is a filter.
        if getattr(module, "_kind", None) not in _SCHEDULED_KINDS:
            raise ConfigTypeError(f"'~' applies to EDFilters, got {_what(module)}")
        self.module = module

    def _ref_(self, indent: int = 0) -> str:
        return f"~{self.module._ref_(indent)}"

    def _str_(self) -> str:
        return f"~{_str_of(self.module)}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Inverted) and other.module is self.module

    __hash__ = None  # type: ignore[assignment]


class _Decorated(Sequenceable):
    """``cms.ignore(m)`` / ``cms.wait(m)``: a module whose place on a Path is qualified."""

    _name = "?"

    def __init__(self, module: Any) -> None:
        if isinstance(module, (_Decorated, Inverted)) or getattr(module, "_kind", None) not in _SCHEDULED_KINDS:
            raise ConfigTypeError(f"cms.{self._name}() takes an ED module, got {_what(module)}")
        self.module = module

    def _ref_(self, indent: int = 0) -> str:
        return f"cms.{self._name}({self.module._ref_(indent)})"

    def _str_(self) -> str:
        return f"cms.{self._name}({_str_of(self.module)})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.module is self.module

    __hash__ = None  # type: ignore[assignment]


class ignore(_Decorated):  # noqa: N801 - CMSSW spelling
    """``cms.ignore(filter)``: the filter runs, and its decision never stops the Path."""

    _name = "ignore"


class wait(_Decorated):  # noqa: N801 - CMSSW spelling
    """``cms.wait(module)``: CMSSW's hint that later modules wait for it; here every module of a
    Path already runs after the ones before it, so it is the module itself."""

    _name = "wait"


_SCHEDULED_KINDS = ("EDProducer", "EDFilter", "EDAnalyzer", "OutputModule")


def _target(item: Any) -> Any:
    """The module behind ``~m``, ``cms.ignore(m)``, ``cms.wait(m)``; the item itself otherwise."""
    return item.module if isinstance(item, (Inverted, _Decorated)) else item


class SequencePlaceholder(Sequenceable):
    """``cms.SequencePlaceholder("name")``: stands for the Sequence (or module) the process
    holds under ``name`` once the config is complete; ``process.resolve()`` (run by
    ``load_config``) puts it in."""

    def __init__(self, name: str) -> None:
        self._name = name

    def _ref_(self, indent: int = 0) -> str:
        return f'cms.SequencePlaceholder("{self._name}")'

    def _str_(self) -> str:
        return self._name

    def resolve(self, objects: dict[str, Any]) -> Any:
        target = objects.get(self._name)
        if target is None or not isinstance(target, Sequenceable):
            raise ConfigRuntimeError(
                f"SequencePlaceholder '{self._name}': the process has no Sequence or module of that name"
            )
        return target


class SequenceExpr(Sequenceable):
    """The result of ``a + b`` before it is wrapped in a Sequence or Path; a flat list of items."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    @staticmethod
    def chain(left: Any, right: Any) -> SequenceExpr:
        if not isinstance(right, Sequenceable):
            hint = " (pass a Task as an extra argument: cms.Path(seq, task))" if isinstance(right, Task) else ""
            raise ConfigTypeError(f"cannot chain {_what(left)} with {_what(right)} using '+'{hint}")
        return SequenceExpr(_expr_items(left) + _expr_items(right))

    def _ref_(self, indent: int = 0) -> str:
        return "+".join(item._ref_(indent) for item in self.items)


def _expr_items(x: Sequenceable) -> list[Any]:
    return list(x.items) if isinstance(x, SequenceExpr) else [x]


def _what(x: Any) -> str:
    return x._what_() if hasattr(x, "_what_") else describe_value(x)


def _str_of(item: Any) -> str:
    """How ``str()`` of a Sequence names an item: its label, or an unlabelled one's content."""
    if hasattr(item, "_str_"):
        return str(item._str_())
    if getattr(item, "_label", None) is not None:
        return str(item._label)
    return str(item._ref_())


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is type(b) and isinstance(a, (Inverted, _Decorated)) and a.module is b.module)


class _Closed:
    """Sequences, Paths and Tasks have no parameters: setting an attribute is an error (CMSSW)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_"):
            raise AttributeError(f"{type(self).__name__} has no attribute '{name}' to set (it holds no parameters)")
        object.__setattr__(self, name, value)


class _ModuleSequence(_Closed, Labelable):
    """Common part of Sequence, Path and EndPath: ordered items plus associated Tasks."""

    def __init__(self, *items: Any) -> None:
        self._items: list[Any] = []
        self._tasks: list[Task] = []
        for item in items:
            self._add(item)

    def _add(self, item: Any) -> None:
        if isinstance(item, Task):
            self.associate(item)
        elif isinstance(item, SequenceExpr):
            self._items.extend(item.items)
        elif isinstance(item, Sequenceable):
            self._items.append(item)
        else:
            raise ConfigTypeError(
                f"cms.{self._kind} cannot hold {_what(item)}: expected ED modules, Sequences, '~filter' or Tasks"
            )

    def __iadd__(self, item: Any) -> _ModuleSequence:
        self._add(item)
        return self

    __imul__ = __iadd__

    # ------------------------------------------------------------ editing (CMSSW's API)

    def _replace_object(self, old: Any, new: Any) -> bool:
        """Every ``old`` (module, Sequence or Task) replaced by ``new`` (None: removed), nested
        Sequences and Tasks included; True if anything changed."""
        changed = False
        items: list[Any] = []
        for item in self._items:
            if item is old:
                changed = True
                if new is not None:
                    items.append(new)
            elif isinstance(item, (Inverted, _Decorated)) and item.module is old:
                changed = True
                if new is not None:
                    keep = getattr(new, "_kind", None) == "EDFilter" or isinstance(item, _Decorated)
                    items.append(type(item)(new) if keep and not isinstance(new, _ModuleSequence) else new)
            else:
                if isinstance(item, _ModuleSequence) and item is not self:
                    changed |= item._replace_object(old, new)
                items.append(item)
        self._items = items
        tasks: list[Task] = []
        for task in self._tasks:
            if task is old:
                changed = True
                if new is not None:
                    tasks.append(new)
            else:
                changed |= task._replace_object(old, new)
                tasks.append(task)
        self._tasks = tasks
        return changed

    def replace(self, original: Any, replacement: Any) -> bool:
        """Replace every ``original`` (module, ``~m``, ``cms.ignore(m)``, Sequence, Task or
        placeholder) by ``replacement``, in nested Sequences and Tasks too (CMSSW's ``replace``).

        As in CMSSW, ``~m`` matches only the negated occurrences of ``m`` (and ``cms.ignore(m)``
        only the ignored ones), while ``m`` also replaces the operand of ``~m``; nested
        Sequences and Tasks are never edited in place: a nested Sequence that changes is
        replaced here by its items (its Tasks join this one's), a Task by an unlabelled copy.
        Returns whether anything was replaced.

        Raises:
            ~framework.config._types.ConfigTypeError: a Task replaced by a non-Task or the reverse.
        """
        if isinstance(original, Task) != isinstance(replacement, Task):
            raise ConfigTypeError(
                f"replace(): both arguments must be Tasks or neither: {_what(original)}, {_what(replacement)}"
            )
        return self._edit(lambda item: replacement if _same(item, original) else item)

    def remove(self, something: Any) -> bool:
        """Remove the first occurrence of ``something`` (module, ``~m``, Sequence, Task),
        searched depth first; nested Sequences and Tasks change as for :meth:`replace`, ``~m``
        and ``cms.ignore(m)`` go with their ``m``. Returns whether it was found."""
        found: list[bool] = []

        def first(item: Any) -> Any:
            if not found and (_same(item, something)):
                found.append(True)
                return None
            return item

        return self._edit(first)

    def _edit(self, operation: Any) -> bool:
        items, tasks, changed = _mutated_sequence(self, operation)
        if changed:
            self._items, self._tasks = items, _unique(tasks)
        return changed

    def insert(self, index: int, item: Any) -> None:
        """Insert a module, ``~filter`` or Sequence at ``index`` of the top level."""
        if not isinstance(item, Sequenceable) or isinstance(item, SequenceExpr):
            raise ConfigTypeError(
                f"{self._what_()}.insert(): expected a module, '~filter' or Sequence, got {_what(item)}"
            )
        self._items.insert(index, item)

    def index(self, item: Any) -> int:
        """Position of ``item`` in the top level.

        Raises:
            ~framework.config._types.ConfigValueError: not there.
        """
        for i, x in enumerate(self._items):
            if _same(x, item):
                return i
        raise ConfigValueError(f"{_what(item)} is not in {self._what_()}")

    def copy(self) -> Any:
        """A new unlabelled object of the same kind holding the same items (not copies of them)."""
        new = type(self).__new__(type(self))
        new._items, new._tasks = list(self._items), list(self._tasks)
        return new

    def copyAndExclude(self, exclude: Iterable[Any]) -> Any:  # noqa: N802 - CMSSW spelling
        """A copy without the modules, ``~m``, ``cms.ignore(m)``, Sequences, Tasks or placeholders
        in ``exclude`` (found everywhere, as :meth:`replace` finds them: excluding ``m`` drops
        ``~m`` too, excluding ``~m`` only the negated ones). Nothing held is changed: Sequences
        and Tasks that lose something are replaced in the copy (see :meth:`replace`)."""
        excluded = list(exclude)
        items, tasks, _ = _mutated_sequence(self, lambda item: None if any(_same(item, e) for e in excluded) else item)
        new = self.copy()
        new._items, new._tasks = items, _unique(tasks)
        return new

    def expandAndClone(self) -> Any:  # noqa: N802 - CMSSW spelling
        """A copy whose nested Sequences are replaced by the modules they hold (Tasks kept)."""
        new = self.copy()
        new._items, new._tasks = [], list(self._tasks)
        for item in self._items:
            if isinstance(item, _ModuleSequence):
                expanded = item.expandAndClone()
                new._items.extend(expanded._items)
                new._tasks.extend(t for t in expanded._tasks if all(t is not x for x in new._tasks))
            else:
                new._items.append(item)
        return new

    def moduleNames(self) -> set[str]:  # noqa: N802 - CMSSW spelling
        """Labels of every module reached: in order, in nested Sequences, and in associated Tasks."""
        names = {m.label_() for m, _ in self._entries_() if m.hasLabel_()}
        for task in self._all_tasks_():
            names |= task.moduleNames()
        return names

    def contains(self, item: Any) -> bool:
        """Whether ``item`` (module, Sequence or Task) is reached from here, Tasks included."""
        target = _target(item)
        for x in self._items:
            x_target = _target(x)
            if x_target is target or (isinstance(x, _ModuleSequence) and x.contains(target)):
                return True
        return any(t is target or t.contains(target) for t in self._tasks)

    def visit(self, visitor: Any) -> None:
        """CMSSW's visitor: ``visitor.enter(item)`` and ``visitor.leave(item)`` for each item,
        depth first (nested Sequences entered), then for each associated Task."""
        for item in self._items:
            visitor.enter(item)
            if isinstance(item, _ModuleSequence):
                item.visit(visitor)
            elif isinstance(item, (Inverted, _Decorated)):
                visitor.enter(item.module)
                visitor.leave(item.module)
            visitor.leave(item)
        for task in self._tasks:
            visitor.enter(task)
            task.visit(visitor)
            visitor.leave(task)

    def isEmpty(self) -> bool:  # noqa: N802
        return not self._items and not self._tasks

    def _replace_content_(self, other: _ModuleSequence) -> None:
        self._items, self._tasks = list(other._items), list(other._tasks)

    def __str__(self) -> str:
        """As CMSSW prints a Sequence: the module labels in order, nested Sequences expanded,
        joined by ``+`` (``~f``, ``cms.ignore(f)``), then the associated Tasks."""
        parts = [self._expanded()] if self._items else []
        parts += [_str_of(task) for task in self._tasks]
        return ", ".join(p for p in parts if p)

    def _expanded(self) -> str:
        return "+".join(
            item._expanded() if isinstance(item, _ModuleSequence) else _str_of(item) for item in self._items
        )

    def _str_(self) -> str:
        return self._expanded()

    def associate(self, *tasks: Task) -> None:
        """Associate Tasks (CMSSW's ``associate``); same as passing them to the constructor.
        A Task associated twice is kept once (CMSSW's ordered set)."""
        for task in tasks:
            if not isinstance(task, Task):
                raise ConfigTypeError(f"{self._what_()}.associate() takes Tasks, got {_what(task)}")
            if self._kind == "FinalPath":
                raise ConfigTypeError(f"cms.FinalPath holds OutputModules only, not {_what(task)} (CMSSW)")
            if all(t is not task for t in self._tasks):
                self._tasks.append(task)

    def _entries_(self, stack: tuple[int, ...] = ()) -> Iterator[tuple[Any, bool | None]]:
        """(module object, inverted) in execution order, Sequences flattened; inverted is
        None for ``cms.ignore(m)`` (the decision does not count)."""
        if id(self) in stack:
            raise ConfigurationError(f"{self._what_()} contains itself")
        stack = stack + (id(self),)
        for item in self._items:
            if isinstance(item, Inverted):
                yield item.module, True
            elif isinstance(item, ignore):
                yield item.module, None
            elif isinstance(item, wait):
                yield item.module, False
            elif isinstance(item, _ModuleSequence):
                yield from item._entries_(stack)
            elif isinstance(item, SequencePlaceholder):
                raise ConfigRuntimeError(f"{self._what_()} holds an unresolved SequencePlaceholder '{item._name}'")
            else:
                yield item, False

    def resolve(self, objects: dict[str, Any], keepUnresolvedSequencePlaceholders: bool = False) -> None:  # noqa: N803
        """Put in the objects that SequencePlaceholders and TaskPlaceholders stand for
        (``objects``: label -> object, e.g. the process's), nested ones too."""
        items = []
        for item in self._items:
            if isinstance(item, SequencePlaceholder):
                if keepUnresolvedSequencePlaceholders and item._name not in objects:
                    items.append(item)
                    continue
                item = item.resolve(objects)
            elif isinstance(item, _ModuleSequence):
                item.resolve(objects, keepUnresolvedSequencePlaceholders)
            items.append(item)
        self._items = items
        self._tasks = [_resolved_task(t, objects, keepUnresolvedSequencePlaceholders) for t in self._tasks]
        for task in self._tasks:
            task.resolve(objects, keepUnresolvedSequencePlaceholders)

    def _all_tasks_(self, stack: tuple[int, ...] = ()) -> Iterator[Task]:
        """Associated Tasks, including those of nested Sequences (not nested Tasks)."""
        if id(self) in stack:
            raise ConfigurationError(f"{self._what_()} contains itself")
        yield from self._tasks
        for item in self._items:
            if isinstance(item, _ModuleSequence):
                yield from item._all_tasks_(stack + (id(self),))

    def moduleEntries_(self) -> list[tuple[str, bool | None]]:  # noqa: N802
        """``(label, inverted)`` for each module in execution order, Sequences flattened.

        A module reached twice (through two Sequences) is kept at its first place.
        ``inverted`` is None for ``cms.ignore(m)``: its decision never stops the path.

        Raises:
            ConfigurationError: a module has no label (not attached to the process), or
                one module appears both plain and inverted.
        """
        seen: dict[str, bool | None] = {}
        for module, inverted in self._entries_():
            label = self._label_of(module)
            if seen.setdefault(label, inverted) != inverted:
                raise ConfigurationError(f"{self._what_()}: module '{label}' appears both plain and inverted ('~')")
        return list(seen.items())

    def taskLabels_(self) -> set[str]:  # noqa: N802
        """Labels of the modules in Tasks associated with this path, recursively."""
        return {self._label_of(m) for task in self._all_tasks_() for m in task._modules_()}

    def _label_of(self, module: Any) -> str:
        if not module.hasLabel_():
            raise ConfigurationError(
                f"{self._what_()} refers to an {module.kind_()} of type '{module.type_()}' "
                "that is not attached to the process"
            )
        label: str = module.label_()
        return label

    def _flat_refs(self, indent: int) -> tuple[list[str], list[Task]]:
        """Item references and associated Tasks as CMSSW dumps them: an unlabelled nested
        Sequence is written as its items, its Tasks joining this one's."""
        refs: list[str] = []
        tasks: list[Task] = list(self._tasks)
        for item in self._items:
            if isinstance(item, _ModuleSequence) and item._label is None:
                inner, inner_tasks = item._flat_refs(indent)
                refs += inner
                tasks += inner_tasks
            else:
                refs.append(item._ref_(indent))
        return refs, tasks

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        refs, tasks = self._flat_refs(indent)
        args = ["+".join(refs)] if refs else []
        args += sorted({t._ref_(indent) for t in tasks})  # associated Tasks once each as written, sorted (CMSSW)
        return f"cms.{self._kind}({', '.join(args)})"

    def dumpSequencePython(self) -> str:  # noqa: N802 - CMSSW spelling
        """The items as Python: ``process.a+process.b+~process.f``."""
        return "+".join(self._flat_refs(0)[0])


class Sequence(_ModuleSequence, Sequenceable):
    """An ordered, reusable group: ``cms.Sequence(process.a + process.b, task)``.

    Several plain arguments are chained in order (CMSSW accepts only one).
    """

    _kind = "Sequence"


class Path(_ModuleSequence):
    """``cms.Path(process.a + process.seq + ~process.filter, task)``: runs in order, stops
    at the first filter that rejects the event (or inverted filter that accepts it)."""

    _kind = "Path"


class EndPath(_ModuleSequence):
    """``cms.EndPath(process.out)``: runs after all Paths; for analyzers and output modules."""

    _kind = "EndPath"


class FinalPath(EndPath):
    """``cms.FinalPath(process.out)``: CMSSW's last path (output modules); runs as an EndPath here."""

    _kind = "FinalPath"


class Task(_Closed, Labelable):
    """An unordered set of EDProducers/EDFilters run on demand: ``cms.Task(process.a, other_task)``.

    It may hold ES modules, Services, other Tasks and TaskPlaceholders too; an object added
    twice is held once; iterating gives the items in the order added (nested Tasks as they are).
    """

    _kind = "Task"

    def __init__(self, *items: Any) -> None:
        self._items: list[Any] = []
        self.add(*items)

    def resolve(self, objects: dict[str, Any], keepUnresolvedSequencePlaceholders: bool = False) -> None:  # noqa: N803
        """Put in what TaskPlaceholders stand for (a Task or a module: CMSSW), nested ones too;
        with ``keepUnresolvedSequencePlaceholders``, those naming nothing stay."""
        keep = keepUnresolvedSequencePlaceholders
        resolved = [i.resolve_placeholder(objects, keep) if isinstance(i, TaskPlaceholder) else i for i in self._items]
        self._items = []
        self.add(*resolved)
        for item in self._items:
            if isinstance(item, Task) and item is not self:
                item.resolve(objects, keep)

    def add(self, *items: Any) -> None:
        """Add modules, ES modules, Services or Tasks (CMSSW's ``Task.add``); one already held is not added again.

        Raises:
            ~framework.config._types.ConfigRuntimeError: anything else (an EDAnalyzer, ...).
        """
        for item in items:
            if not _task_component(item):
                raise ConfigRuntimeError(
                    f"cms.{self._kind} cannot hold {_what(item)}: a Task holds EDProducers, EDFilters, ES modules, "
                    "Services and Tasks"
                )
            if all(x is not item for x in self._items):
                self._items.append(item)

    def __iter__(self) -> Iterator[Any]:
        return iter(list(self._items))

    def _replace_object(self, old: Any, new: Any) -> bool:
        changed = False
        items: list[Any] = []
        for item in self._items:
            if item is old:
                changed = True
                if new is not None and _task_component(new):
                    items.append(new)
            else:
                if isinstance(item, Task) and item is not self:
                    changed |= item._replace_object(old, new)
                items.append(item)
        self._items = items
        return changed

    def replace(self, original: Any, replacement: Any) -> bool:
        """Replace ``original`` (a module, Service, ES module or Task) by ``replacement``,
        nested Tasks included; a nested Task that changes is replaced here by an unlabelled
        copy (CMSSW: never edited in place). Returns whether anything was replaced.

        Raises:
            ~framework.config._types.ConfigTypeError: either argument cannot be on a Task.
        """
        if not _task_component(original) or (replacement is not None and not _task_component(replacement)):
            raise ConfigTypeError(
                f"Task.replace() works with what can be on a Task, got {_what(original)} and {_what(replacement)}"
            )
        return self._edit(lambda item: replacement if item is original else item)

    def remove(self, something: Any) -> bool:
        """Remove the first ``something`` (searched depth first); a nested Task that loses it
        is replaced by an unlabelled copy, or dropped if it becomes empty. Returns whether found.

        Raises:
            ~framework.config._types.ConfigTypeError: ``something`` cannot be on a Task.
        """
        if not _task_component(something):
            raise ConfigTypeError(f"Task.remove() works with what can be on a Task, got {_what(something)}")
        found: list[bool] = []

        def first(item: Any) -> Any:
            if not found and item is something:
                found.append(True)
                return None
            return item

        return self._edit(first)

    def _edit(self, operation: Any) -> bool:
        items, changed = _mutated_task_items(self._items, operation)
        if changed:
            self._items = []
            self.add(*items)
        return changed

    def _blank(self) -> Task:
        return type(self)()

    def copy(self) -> Task:
        """A new unlabelled Task of the same kind holding the same items (not copies of them)."""
        new = self._blank()
        new._items = list(self._items)
        return new

    def copyAndExclude(self, exclude: Iterable[Any]) -> Task:  # noqa: N802 - CMSSW spelling
        """A copy without the items in ``exclude`` (nested Tasks copied where they change).

        Raises:
            ~framework.config._types.ConfigTypeError: something in ``exclude`` cannot be on a Task.
        """
        excluded = list(exclude)
        for item in excluded:
            if not _task_component(item):
                raise ConfigTypeError(f"Task.copyAndExclude() excludes what can be on a Task, got {_what(item)}")
        items, _ = _mutated_task_items(self._items, lambda item: None if any(item is e for e in excluded) else item)
        new = self._blank()
        new.add(*items)
        return new

    def moduleNames(self) -> set[str]:  # noqa: N802 - CMSSW spelling
        """Labels of everything held, nested Tasks included: modules, ES modules and Services
        (a Service's label is its type), as CMSSW's."""
        return {leaf.label_() for leaf in self._leaves_() if leaf.hasLabel_()}

    def _leaves_(self, stack: tuple[int, ...] = ()) -> Iterator[Any]:
        """Every module, ES module and Service held, nested Tasks included (not placeholders)."""
        if id(self) in stack:
            raise ConfigurationError(f"{self._what_()} contains itself")
        for item in self._items:
            if isinstance(item, Task):
                yield from item._leaves_(stack + (id(self),))
            else:
                yield item

    def contains(self, item: Any) -> bool:
        return any(x is item or (isinstance(x, Task) and x.contains(item)) for x in self._items)

    def visit(self, visitor: Any) -> None:
        for item in self._items:
            visitor.enter(item)
            if isinstance(item, Task):
                item.visit(visitor)
            visitor.leave(item)

    def isEmpty(self) -> bool:  # noqa: N802
        return not self._items

    def _replace_content_(self, other: Task) -> None:
        self._items = list(other._items)

    def __str__(self) -> str:
        return "cms.Task(" + ", ".join(_str_of(i) for i in self._items) + ")"

    def _str_(self) -> str:
        return self._label if self._label is not None else str(self)

    def _modules_(self, stack: tuple[int, ...] = ()) -> Iterator[Any]:
        if id(self) in stack:
            raise ConfigurationError(f"{self._what_()} contains itself")
        for item in self._items:
            if isinstance(item, Task):
                yield from item._modules_(stack + (id(self),))
            elif item._kind in _RUN_KINDS:  # ES modules and Services are configuration only
                yield item

    def moduleLabels_(self) -> set[str]:  # noqa: N802
        """Labels of the modules in this Task and its nested Tasks."""
        out = set()
        for m in self._modules_():
            if not m.hasLabel_():
                raise ConfigurationError(
                    f"{self._what_()} holds an {m.kind_()} of type '{m.type_()}' that is not attached to the process"
                )
            out.add(m.label_())
        return out

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        # CMSSW prints a Task's content sorted and once each (a Task is a set), an unlabelled
        # nested Task as its content.
        return f"cms.{self._kind}({', '.join(sorted(self._refs_(indent)))})"

    def _refs_(self, indent: int) -> set[str]:
        refs: set[str] = set()
        for item in self._items:
            nested = isinstance(item, Task) and not isinstance(item, TaskPlaceholder) and item._label is None
            refs |= item._refs_(indent) if nested else {item._ref_(indent)}
        return refs


class ConditionalTask(Task):
    """``cms.ConditionalTask(...)``: CMSSW runs its modules only when a module on the Path
    consumes their products; that is how every Task's producers run here (on demand)."""

    _kind = "ConditionalTask"


class TaskPlaceholder(Task):
    """``cms.TaskPlaceholder("name")``: stands for the Task, or the module (CMSSW), that the
    process holds under ``name`` once the config is complete; ``process.resolve()`` puts it in."""

    _kind = "TaskPlaceholder"

    def __init__(self, name: str) -> None:
        super().__init__()
        self._name = name

    def _blank(self) -> Task:
        return type(self)(self._name)

    def resolve_placeholder(self, objects: dict[str, Any], keep: bool = False) -> Any:
        """The Task or module named; itself if nothing has that name and ``keep``.

        Raises:
            ~framework.config._types.ConfigRuntimeError: nothing of that name (and not ``keep``),
                or something that cannot be on a Task.
        """
        target = objects.get(self._name)
        if target is None and keep:
            return self
        if target is None or not _task_component(target) or isinstance(target, TaskPlaceholder):
            raise ConfigRuntimeError(
                f"{self._kind} '{self._name}': the process has no Task or module of that name that can be on a Task"
            )
        return target

    def _modules_(self, stack: tuple[int, ...] = ()) -> Iterator[Any]:
        raise ConfigRuntimeError(f"unresolved {self._kind} '{self._name}'")

    def _leaves_(self, stack: tuple[int, ...] = ()) -> Iterator[Any]:
        return iter(())  # nothing yet

    def _str_(self) -> str:
        return self._name

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        return f'cms.{self._kind}("{self._name}")'


class ConditionalTaskPlaceholder(TaskPlaceholder):
    """``cms.ConditionalTaskPlaceholder("name")``: a TaskPlaceholder for a ConditionalTask (CMSSW)."""

    _kind = "ConditionalTaskPlaceholder"


def _task_component(item: Any) -> bool:
    """Whether ``item`` may be on a Task: a module that can run unscheduled, ES module, Service or Task."""
    return isinstance(item, Task) or getattr(item, "_kind", None) in _TASK_KINDS


def _resolved_task(task: Task, objects: dict[str, Any], keep: bool) -> Task:
    """A placeholder associated with a Path or the Schedule, resolved: it must name a Task there."""
    if not isinstance(task, TaskPlaceholder):
        return task
    target = task.resolve_placeholder(objects, keep)
    if not isinstance(target, Task):
        raise ConfigRuntimeError(f"{task._kind} '{task._name}' is associated with a Path, but names {_what(target)}")
    return target


def _unique(items: Iterable[Any]) -> list[Any]:
    """The items once each (by identity), in order: CMSSW's ordered sets."""
    out: list[Any] = []
    for item in items:
        if all(x is not item for x in out):
            out.append(item)
    return out


# CMSSW's _MutatingSequenceVisitor, on pysonic's lists: an operation maps each item (module,
# ~m, Sequence, Task, placeholder) to itself (unchanged), to another item, or to None
# (removed). What a container holds is never edited in place: a nested Sequence that changes
# is replaced by its items (its Tasks joining the top level's), a Task by a new unlabelled
# Task of what is left, dropped when nothing is; ~m and cms.ignore(m) follow their m.


def _mutated_sequence(seq: _ModuleSequence, operation: Any) -> tuple[list[Any], list[Task], bool]:
    """``(items, tasks, changed)`` of ``seq`` after ``operation``."""
    items: list[Any] = []
    tasks: list[Task] = []
    changed = False
    for item in seq._items:
        new = operation(item)
        if new is not item:
            changed = True
            if new is not None:
                items.extend(_expr_items(new) if isinstance(new, SequenceExpr) else [new])
            continue
        if isinstance(item, (Inverted, _Decorated)):
            operand = operation(item.module)
            if operand is not item.module:
                changed = True
                if operand is not None:
                    items.append(type(item)(operand))
                continue
        elif isinstance(item, _ModuleSequence):
            inner_items, inner_tasks, inner_changed = _mutated_sequence(item, operation)
            if inner_changed:
                changed = True
                items += inner_items
                tasks += inner_tasks
                continue
        items.append(item)
    own, tasks_changed = _mutated_task_items(seq._tasks, operation)
    return items, tasks + own, changed or tasks_changed


def _mutated_task_items(items: list[Any], operation: Any) -> tuple[list[Any], bool]:
    """``(items, changed)``: what a Task holds (or the Tasks of a Sequence) after ``operation``."""
    out: list[Any] = []
    changed = False
    for item in items:
        new = operation(item)
        if new is not item:
            changed = True
            if new is not None:
                out.append(new)
            continue
        if isinstance(item, Task) and not isinstance(item, TaskPlaceholder):
            inner, inner_changed = _mutated_task_items(item._items, operation)
            if inner_changed:
                changed = True
                if inner:
                    replacement = type(item)()
                    replacement.add(*inner)
                    out.append(replacement)
                continue
        out.append(item)
    return out, changed


class Schedule(Labelable):
    """The Paths and EndPaths to run, in order: ``cms.Schedule(process.p1, process.e, tasks=[t])``.

    Without a schedule the process runs all Paths, then all EndPaths, in definition order.
    """

    _kind = "Schedule"

    def __init__(self, *paths: Path | EndPath | Iterable[Path | EndPath], tasks: Task | Iterable[Task] = ()) -> None:
        # One list or tuple argument holds the paths; append() checks each entry's type.
        entries: Iterable[Any] = paths[0] if len(paths) == 1 and isinstance(paths[0], (list, tuple)) else paths
        self._paths: list[Path | EndPath] = []
        self._tasks: list[Task] = []
        self.extend(entries)
        if isinstance(tasks, Task):  # CMSSW takes one Task as well as a list
            tasks = [tasks]
        elif not isinstance(tasks, Iterable):
            raise ConfigRuntimeError(f"cms.Schedule: tasks= takes a Task or a list of Tasks, got {_what(tasks)}")
        self.associate(*tasks)

    def append(self, path: Path | EndPath) -> None:
        if not isinstance(path, (Path, EndPath)):
            raise ConfigTypeError(f"cms.Schedule holds Paths and EndPaths, got {_what(path)}")
        self._paths.append(path)

    def extend(self, paths: Iterable[Path | EndPath]) -> None:
        for path in paths:
            self.append(path)

    def associate(self, *tasks: Task) -> None:
        for task in tasks:
            if not isinstance(task, Task):
                raise ConfigTypeError(f"Schedule.associate() takes Tasks, got {_what(task)}")
            if all(t is not task for t in self._tasks):  # an ordered set, as in CMSSW
                self._tasks.append(task)

    def tasks(self) -> list[Task]:
        """The associated Tasks (labelled or not), in order."""
        return list(self._tasks)

    def copy(self) -> Schedule:
        """A new Schedule with the same Paths and Tasks (not copies of them)."""
        return Schedule(list(self._paths), tasks=list(self._tasks))

    def resolve(self, objects: dict[str, Any], keepUnresolvedSequencePlaceholders: bool = False) -> None:  # noqa: N803
        """Put in the Tasks that TaskPlaceholders of the Schedule stand for, nested ones too."""
        keep = keepUnresolvedSequencePlaceholders
        self._tasks = _unique(_resolved_task(t, objects, keep) for t in self._tasks)
        for task in self._tasks:
            task.resolve(objects, keep)

    def _replace_object(self, old: Any, new: Any) -> bool:
        changed = any(p is old for p in self._paths) or any(t is old for t in self._tasks)
        self._paths = [new if p is old else p for p in self._paths if p is not old or isinstance(new, (Path, EndPath))]
        self._tasks = [new if t is old else t for t in self._tasks if t is not old or isinstance(new, Task)]
        return changed

    def insert(self, index: int, path: Path | EndPath) -> None:
        if not isinstance(path, (Path, EndPath)):
            raise ConfigTypeError(f"cms.Schedule holds Paths and EndPaths, got {_what(path)}")
        self._paths.insert(index, path)

    def remove(self, path: Path | EndPath) -> None:
        self._paths = [p for p in self._paths if p is not path]

    def index(self, path: Path | EndPath) -> int:
        for i, p in enumerate(self._paths):
            if p is path:
                return i
        raise ConfigValueError(f"{_what(path)} is not in the Schedule")

    def __getitem__(self, index: int) -> Path | EndPath:
        return self._paths[index]

    def contains(self, item: Any) -> bool:
        """Whether ``item`` is one of the paths, in one of them, or in an associated Task."""
        return any(p is item or p.contains(item) for p in self._paths) or any(
            t is item or t.contains(item) for t in self._tasks
        )

    def moduleNames(self) -> set[str]:  # noqa: N802
        names: set[str] = set()
        for p in self._paths:
            names |= p.moduleNames()
        for t in self._tasks:
            names |= t.moduleNames()
        return names

    def __iter__(self) -> Iterator[Path | EndPath]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        args = "*[ " + ", ".join(p._ref_(indent) for p in self._paths) + " ]" if self._paths else ""
        if self._tasks:  # sorted, as CMSSW writes them
            tasks = ", ".join(sorted({t._ref_(indent) for t in self._tasks}))
            args += (", " if args else "") + "tasks=[" + tasks + "]"
        return f"cms.Schedule({args})"
