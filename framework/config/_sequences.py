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

from .._errors import ConfigurationError
from ._types import describe_value

__all__ = ["EndPath", "Labelable", "Path", "Schedule", "Sequence", "Sequenceable", "Task"]

_TASK_KINDS = ("EDProducer", "EDFilter")


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

    def _what_(self) -> str:
        return f"{self._kind} '{self._label}'" if self._label is not None else f"unlabelled {self._kind}"

    def _ref_(self, indent: int = 0) -> str:
        """How a dump refers to this object: ``process.<label>``, or inline if unlabelled."""
        return f"process.{self._label}" if self._label is not None else self.dumpPython_(indent)

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        raise NotImplementedError

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
        if module.kind_() != "EDFilter":
            raise ConfigurationError(f"'~' applies only to EDFilters; {module._what_()} is an {module.kind_()}")
        self.module = module

    def _ref_(self, indent: int = 0) -> str:
        return f"~{self.module._ref_(indent)}"


class SequenceExpr(Sequenceable):
    """The result of ``a + b`` before it is wrapped in a Sequence or Path; a flat list of items."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    @staticmethod
    def chain(left: Any, right: Any) -> SequenceExpr:
        if not isinstance(right, Sequenceable):
            hint = " (pass a Task as an extra argument: cms.Path(seq, task))" if isinstance(right, Task) else ""
            raise ConfigurationError(f"cannot chain {_what(left)} with {_what(right)} using '+'{hint}")
        return SequenceExpr(_expr_items(left) + _expr_items(right))

    def _ref_(self, indent: int = 0) -> str:
        return "+".join(item._ref_(indent) for item in self.items)


def _expr_items(x: Sequenceable) -> list[Any]:
    return list(x.items) if isinstance(x, SequenceExpr) else [x]


def _what(x: Any) -> str:
    return x._what_() if hasattr(x, "_what_") else describe_value(x)


class _ModuleSequence(Labelable):
    """Common part of Sequence, Path and EndPath: ordered items plus associated Tasks."""

    def __init__(self, *items: Any) -> None:
        self._items: list[Any] = []
        self._tasks: list[Task] = []
        for item in items:
            self._add(item)

    def _add(self, item: Any) -> None:
        if isinstance(item, Task):
            self._tasks.append(item)
        elif isinstance(item, SequenceExpr):
            self._items.extend(item.items)
        elif isinstance(item, Sequenceable):
            self._items.append(item)
        else:
            raise ConfigurationError(
                f"cms.{self._kind} cannot hold {_what(item)}: expected ED modules, Sequences, '~filter' or Tasks"
            )

    def __iadd__(self, item: Any) -> _ModuleSequence:
        self._add(item)
        return self

    __imul__ = __iadd__

    def associate(self, *tasks: Task) -> None:
        """Associate Tasks (CMSSW's ``associate``); same as passing them to the constructor."""
        for task in tasks:
            if not isinstance(task, Task):
                raise ConfigurationError(f"{self._what_()}.associate() takes Tasks, got {_what(task)}")
            self._tasks.append(task)

    def _entries_(self, stack: tuple[int, ...] = ()) -> Iterator[tuple[Any, bool]]:
        """(module object, inverted) in execution order, Sequences flattened."""
        if id(self) in stack:
            raise ConfigurationError(f"{self._what_()} contains itself")
        stack = stack + (id(self),)
        for item in self._items:
            if isinstance(item, Inverted):
                yield item.module, True
            elif isinstance(item, _ModuleSequence):
                yield from item._entries_(stack)
            else:
                yield item, False

    def _all_tasks_(self, stack: tuple[int, ...] = ()) -> Iterator[Task]:
        """Associated Tasks, including those of nested Sequences (not nested Tasks)."""
        if id(self) in stack:
            raise ConfigurationError(f"{self._what_()} contains itself")
        yield from self._tasks
        for item in self._items:
            if isinstance(item, _ModuleSequence):
                yield from item._all_tasks_(stack + (id(self),))

    def moduleEntries_(self) -> list[tuple[str, bool]]:  # noqa: N802
        """``(label, inverted)`` for each module in execution order, Sequences flattened.

        A module reached twice (through two Sequences) is kept at its first place.

        Raises:
            ConfigurationError: a module has no label (not attached to the process), or
                one module appears both plain and inverted.
        """
        seen: dict[str, bool] = {}
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

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        args = ["+".join(item._ref_(indent) for item in self._items)] if self._items else []
        args += [task._ref_(indent) for task in self._tasks]
        return f"cms.{self._kind}({', '.join(args)})"


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


class Task(Labelable):
    """An unordered set of EDProducers/EDFilters run on demand: ``cms.Task(process.a, other_task)``."""

    _kind = "Task"

    def __init__(self, *items: Any) -> None:
        self._items: list[Any] = []
        self.add(*items)

    def add(self, *items: Any) -> None:
        """Add modules or Tasks (CMSSW's ``Task.add``)."""
        for item in items:
            if not isinstance(item, Task) and getattr(item, "_kind", None) not in _TASK_KINDS:
                raise ConfigurationError(
                    f"cms.Task cannot hold {_what(item)}: a Task holds EDProducers, EDFilters and Tasks"
                )
            self._items.append(item)

    def _modules_(self, stack: tuple[int, ...] = ()) -> Iterator[Any]:
        if id(self) in stack:
            raise ConfigurationError(f"{self._what_()} contains itself")
        for item in self._items:
            if isinstance(item, Task):
                yield from item._modules_(stack + (id(self),))
            else:
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
        return f"cms.Task({', '.join(item._ref_(indent) for item in self._items)})"


class Schedule(Labelable):
    """The Paths and EndPaths to run, in order: ``cms.Schedule(process.p1, process.e, tasks=[t])``.

    Without a schedule the process runs all Paths, then all EndPaths, in definition order.
    """

    _kind = "Schedule"

    def __init__(self, *paths: Path | EndPath | Iterable[Path | EndPath], tasks: Iterable[Task] = ()) -> None:
        # One list or tuple argument holds the paths; append() checks each entry's type.
        entries: Iterable[Any] = paths[0] if len(paths) == 1 and isinstance(paths[0], (list, tuple)) else paths
        self._paths: list[Path | EndPath] = []
        self._tasks: list[Task] = []
        self.extend(entries)
        self.associate(*tasks)

    def append(self, path: Path | EndPath) -> None:
        if not isinstance(path, (Path, EndPath)):
            raise ConfigurationError(f"cms.Schedule holds Paths and EndPaths, got {_what(path)}")
        self._paths.append(path)

    def extend(self, paths: Iterable[Path | EndPath]) -> None:
        for path in paths:
            self.append(path)

    def associate(self, *tasks: Task) -> None:
        for task in tasks:
            if not isinstance(task, Task):
                raise ConfigurationError(f"Schedule.associate() takes Tasks, got {_what(task)}")
            self._tasks.append(task)

    def __iter__(self) -> Iterator[Path | EndPath]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        args = ", ".join(p._ref_(indent) for p in self._paths)
        if self._tasks:
            args += ", tasks=[" + ", ".join(t._ref_(indent) for t in self._tasks) + "]"
        return f"cms.Schedule({args})"
