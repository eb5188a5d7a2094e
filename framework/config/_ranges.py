"""CMSSW's event and luminosity-block identifiers and ranges (``FWCore/ParameterSet/python/Types.py``).

``cms.EventID(run, lumi, event)``, ``cms.LuminosityBlockID(run, lumi)``,
``cms.EventRange("1:1:1-1:1:10")`` and ``cms.LuminosityBlockRange("1:1-1:5")``, with their
vectors (``cms.VEventID``, ``cms.VLuminosityBlockID``, ``cms.VEventRange``,
``cms.VLuminosityBlockRange``). Configuration values only: PoolSource here selects no
events by them (a config that sets ``lumisToProcess`` is told so by the source's checks).
"""

from __future__ import annotations

from typing import Any, ClassVar

from framework.utilities import ConfigurationError

from ._types import ConfigRuntimeError, _Invalid, _ParameterTypeBase, _Vector, describe_value

__all__ = [
    "EventID",
    "EventRange",
    "LuminosityBlockID",
    "LuminosityBlockRange",
    "VEventID",
    "VEventRange",
    "VLuminosityBlockID",
    "VLuminosityBlockRange",
]


def _numbers(text: str, count: int, what: str) -> tuple[int, ...]:
    parts = text.strip().split(":")
    if len(parts) == count - 1 and count == 3:  # run:event (lumi 0), as CMSSW reads it
        parts = [parts[0], "0", parts[1]]
    if len(parts) != count:
        raise _Invalid(f"{what} '{text}' needs {count} ':'-separated numbers")
    try:
        return tuple(int(p) if p.upper() != "MAX" else 0xFFFFFFFF for p in parts)
    except ValueError:
        raise _Invalid(f"{what} '{text}' is not made of numbers") from None


class _Id(_ParameterTypeBase):
    _fields: tuple[str, ...] = ()

    def __init__(self, *values: Any) -> None:
        super().__init__()
        self._values: tuple[int, ...] = self._check(values)

    @classmethod
    def _convert(cls, value: Any) -> tuple[int, ...]:
        if isinstance(value, cls):
            return value._values
        if isinstance(value, tuple) and len(value) == 1:
            value = value[0]
        if isinstance(value, str):
            return _numbers(value, len(cls._fields), cls._type_name)
        if isinstance(value, cls):
            return value._values
        if not (isinstance(value, tuple) and len(value) == len(cls._fields)):
            raise _Invalid(f"expected {', '.join(cls._fields)}, got {describe_value(value)}")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise _Invalid(f"expected non-negative integers, got {value!r}")
        return tuple(value)

    def value(self) -> str:
        return ":".join(str(v) for v in self._values)

    def setValue(self, value: Any) -> None:  # noqa: N802
        self._values = self._check((value,) if not isinstance(value, tuple) else value)

    def _dump_args(self, indent: int) -> str:
        return ", ".join(str(v) for v in self._values)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self)) and other._values == self._values

    __hash__ = None  # type: ignore[assignment]


class EventID(_Id):
    """``cms.EventID(run, luminosityBlock, event)``."""

    _type_name, _family, _fields = "EventID", "EventID", ("run", "luminosityBlock", "event")

    def run(self) -> int:
        return self._values[0]

    def luminosityBlock(self) -> int:  # noqa: N802
        return self._values[1]

    def event(self) -> int:
        return self._values[2]


class LuminosityBlockID(_Id):
    """``cms.LuminosityBlockID(run, luminosityBlock)``."""

    _type_name, _family, _fields = "LuminosityBlockID", "LuminosityBlockID", ("run", "luminosityBlock")

    def run(self) -> int:
        return self._values[0]

    def luminosityBlock(self) -> int:  # noqa: N802
        return self._values[1]


class _Range(_ParameterTypeBase):
    """A range ``start-end`` of ids (CMSSW's ``EventRange``, ``LuminosityBlockRange``).

    In a string, the last number of each end may be ``MIN`` or ``MAX`` (any case): as in
    CMSSW, ``MIN`` (and a start of ``0``) is 1, ``MAX`` is 0, which means "no limit" at the
    end. Spaces are ignored; one id (``"5:3"``) is the range from it to itself.

    Raises:
        ConfigRuntimeError: the end comes before the start (CMSSW's RuntimeError "out of order").
    """

    _id: type[_Id]

    def __init__(self, *values: Any) -> None:
        super().__init__()
        self._start: tuple[int, ...]
        self._end: tuple[int, ...]
        self._start, self._end = self._check(values)
        self._check_order()

    @classmethod
    def _convert(cls, value: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
        n = len(cls._id._fields)
        if isinstance(value, cls):
            return value._start, value._end
        if isinstance(value, tuple) and len(value) == 1:
            value = value[0]
        if isinstance(value, str):
            return cls._parse(value)
        if isinstance(value, tuple) and len(value) == 4 and n == 3:  # run, event, run, event
            value = (value[0], 0, value[1], value[2], 0, value[3])
        if isinstance(value, tuple) and len(value) == 2 * n:
            return cls._id._convert(value[:n]), cls._id._convert(value[n:])
        raise _Invalid(f"expected 'start-end' or {2 * n} numbers, got {describe_value(value)}")

    @classmethod
    def _parse(cls, text: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        n = len(cls._id._fields)
        start, sep, end = text.replace(" ", "").partition("-")
        ends = [start.split(":"), (end if sep else start).split(":")]
        short = 2 if n == 3 else n  # an EventRange may leave out the lumi: run:event
        if len(ends[0]) != len(ends[1]) or len(ends[0]) not in (n, short):
            counts = f"{n} (or {short})" if short != n else f"{n}"
            raise _Invalid(f"{cls._type_name} '{text}' needs {counts} ':'-separated numbers at each end")
        numbers = []
        for i, parts in enumerate(ends):
            last = parts[-1].upper()
            # CMSSW's markers: MIN (and a start of 0) is 1, MAX is 0 ("no limit").
            parts[-1] = {"MIN": "1", "MAX": "0"}.get(last, "1" if i == 0 and last == "0" else last)
            if len(parts) < n:  # run:event, lumi 0
                parts = [parts[0], "0", parts[1]]
            try:
                numbers.append(tuple(int(p) for p in parts))
            except ValueError:
                raise _Invalid(f"{cls._type_name} '{text}' is not made of numbers (or MIN/MAX)") from None
            if any(v < 0 for v in numbers[-1]):
                raise _Invalid(f"{cls._type_name} '{text}' has a negative number")
        return numbers[0], numbers[1]

    def _check_order(self) -> None:
        # CMSSW: the runs (and lumis of an EventRange) must not go backwards; the last number
        # too, within one run (and lumi), unless it is 0 (no limit).
        start, end = self._start, self._end
        if end[:-1] < start[:-1] or (end[:-1] == start[:-1] and end[-1] != 0 and end[-1] < start[-1]):
            raise ConfigRuntimeError(f"cms.{self._type_name} {self.value()} out of order")

    def value(self) -> str:
        return ":".join(map(str, self._start)) + "-" + ":".join(map(str, self._end))

    def setValue(self, value: Any) -> None:  # noqa: N802
        self._start, self._end = self._check(value)
        self._check_order()

    def start(self) -> str:
        return ":".join(map(str, self._start))

    def end(self) -> str:
        return ":".join(map(str, self._end))

    def _dump_args(self, indent: int) -> str:
        # CMSSW writes the numbers: cms.EventRange(1, 0, 1, 3, 0, 0)
        return ", ".join(map(str, (*self._start, *self._end)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, type(self)) and (other._start, other._end) == (self._start, self._end)

    __hash__ = None  # type: ignore[assignment]


class EventRange(_Range):
    """``cms.EventRange("1:1:1-1:1:10")``, ``cms.EventRange("5:MIN-7:MAX")`` (run:event, lumi 0),
    ``cms.EventRange(1, 1, 1, 1, 1, 10)`` or ``cms.EventRange(1, 1, 1, 10)`` (run, event, run, event)."""

    _type_name, _family, _id = "EventRange", "EventRange", EventID


class LuminosityBlockRange(_Range):
    """``cms.LuminosityBlockRange("1:1-1:5")``, ``"1:MIN-3:MAX"``, or ``cms.LuminosityBlockRange(1, 1, 1, 5)``."""

    _type_name, _family, _id = "LuminosityBlockRange", "LuminosityBlockRange", LuminosityBlockID


class _IdVector(_Vector):
    """A vector of ids or ranges; items given as strings or objects, written as strings."""

    _item: ClassVar[Any]  # an _Id or _Range class (built from one string)

    @classmethod
    def _convert_item(cls, value: Any) -> Any:
        if isinstance(value, cls._item):
            return value
        try:
            return cls._item(value)
        except ConfigurationError as e:
            raise _Invalid(str(e.args[0])) from None

    def _dump_item(self, value: Any, indent: int) -> str:
        return f"'{value.value()}'"

    def value(self) -> list[str]:
        return [v.value() for v in self._values]


class VEventID(_IdVector):
    _type_name, _family, _item = "VEventID", "VEventID", EventID


class VLuminosityBlockID(_IdVector):
    _type_name, _family, _item = "VLuminosityBlockID", "VLuminosityBlockID", LuminosityBlockID


class VEventRange(_IdVector):
    _type_name, _family, _item = "VEventRange", "VEventRange", EventRange


class VLuminosityBlockRange(_IdVector):
    _type_name, _family, _item = "VLuminosityBlockRange", "VLuminosityBlockRange", LuminosityBlockRange
