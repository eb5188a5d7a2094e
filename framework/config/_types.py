"""Typed parameters of the config language (CMSSW's ``FWCore/ParameterSet/python/Types.py``).

Scalars ``int32``, ``uint32``, ``int64``, ``uint64``, ``double``, ``bool``, ``string``;
``FileInPath`` (a file found on ``CMSSW_SEARCH_PATH``); ``InputTag``; vectors ``vint32``,
``vuint32``, ``vint64``, ``vuint64``, ``vdouble``, ``vstring``, ``VInputTag``; the containers
``PSet`` and ``VPSet``; and the ``untracked`` namespace (``cms.untracked.int32(4)`` or ``cms.untracked(cms.int32(4))``).

Every typed parameter has ``value()`` (a plain Python value), ``setValue(v)``,
``isTracked()``, ``setIsTracked(b)`` and ``configTypeName()`` (``"untracked double"``).
Values are checked when set: a bad one raises :class:`~framework.ConfigurationError`.

Integer ranges are those of the C++ types CMSSW stores: int32 is [-2**31, 2**31 - 1],
uint32 [0, 2**32 - 1], int64 [-2**63, 2**63 - 1], uint64 [0, 2**64 - 1]. ``bool`` is never
accepted as a number (Python's ``True`` is an ``int``, but ``cms.int32(True)`` is a bug).

The class for booleans is named ``_bool`` here and exported as ``cms.bool`` by the package,
so that this module (and ``_pset``) keep the builtin ``bool``. PSet, VPSet and the
``untracked`` namespace are in ``_pset``.
"""

from __future__ import annotations

import copy
import difflib
import math
import numbers
import os
import pathlib
from collections.abc import Iterable, Mapping, MutableSequence
from typing import Any, ClassVar

from framework.utilities import ConfigurationError, project_data_directory

__all__ = [
    "SEARCH_PATH_VARIABLE",
    "FileInPath",
    "ESInputTag",
    "InputTag",
    "VESInputTag",
    "VInputTag",
    "double",
    "int32",
    "int64",
    "is_config_structure",
    "plain_value",
    "search_path",
    "string",
    "uint32",
    "uint64",
    "vbool",
    "vdouble",
    "vint32",
    "vint64",
    "vstring",
    "vuint32",
    "vuint64",
]


class ConfigTypeError(ConfigurationError, TypeError):
    """A value of the wrong kind (an untyped value, a bad vector element): CMSSW raises TypeError here."""


class ConfigRuntimeError(ConfigurationError, RuntimeError):
    """Something CMSSW refuses with RuntimeError (an EDAnalyzer added to a Task)."""


class ConfigValueError(ConfigurationError, ValueError):
    """A value that does not fit its type (``cms.int32("i")``): CMSSW raises ValueError here."""


class ConfigFormatError(ConfigValueError, RuntimeError):
    """A value of the right type in a form CMSSW refuses with RuntimeError: an InputTag of four
    parts, an ESInputTag without ':', a value that ``allowed(...)`` cannot convert or converts
    ambiguously. A ValueError too, as the value is what is wrong."""


class ConfigAttributeError(ConfigurationError, AttributeError):
    """An attribute CMSSW refuses to change with AttributeError (``clone(allowAnyLabel_=...)``)."""


class _Invalid(ValueError):
    """A value does not fit a type. ``out_of_range`` distinguishes range from type errors.

    Internal: the constructors turn it into a ConfigurationError, the description
    validator into its own message that names the parameter path.
    """

    def __init__(self, reason: str, *, out_of_range: bool = False, form: bool = False) -> None:
        super().__init__(reason)
        self.out_of_range = out_of_range
        self.form = form  # a malformed value CMSSW refuses with RuntimeError (ConfigFormatError)


def describe_value(value: Any) -> str:
    """Short ``"<type> <repr>"`` of a value for error messages (``"string 'abc'"``)."""
    if isinstance(value, _ParameterTypeBase):
        kind, shown = value.configTypeName(), value.value()
    else:
        kind, shown = _PLAIN_TYPE_NAMES.get(type(value), type(value).__name__), value
    text = repr(shown)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}"


_PLAIN_TYPE_NAMES = {
    str: "string",
    int: "int",
    float: "float",
    bool: "bool",
    list: "list",
    tuple: "tuple",
    dict: "dict",
    type(None): "None",
}


def closest(name: str, candidates: Iterable[str]) -> str:
    """A hint naming the nearest candidates (difflib), or listing all of them if none is near."""
    candidates = list(candidates)
    near = difflib.get_close_matches(name, candidates, n=3, cutoff=0.6)
    if near:
        return "did you mean " + " or ".join(repr(n) for n in near) + "?"
    if not candidates:
        return "there are none"
    return "valid: " + ", ".join(candidates)


class _ParameterTypeBase:
    """Base of every typed parameter: tracked-ness and the type name."""

    _type_name: ClassVar[str] = "?"
    _family: ClassVar[str] = "?"  # types of one family convert into each other (see _description)

    def __init__(self) -> None:
        self._tracked = True

    def isTracked(self) -> bool:  # noqa: N802 - CMSSW spelling
        """False for ``cms.untracked.X``: the value does not enter the job's provenance."""
        return self._tracked

    def setIsTracked(self, tracked: bool) -> None:  # noqa: N802 - CMSSW spelling
        self._tracked = tracked

    def configTypeName(self) -> str:  # noqa: N802 - CMSSW spelling
        """``"int32"``, ``"untracked double"``, ..."""
        return self._type_name if self._tracked else f"untracked {self._type_name}"

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        """Python source that rebuilds this parameter (``cms.untracked.int32(4)``)."""
        prefix = "cms." if self._tracked else "cms.untracked."
        return f"{prefix}{self._type_name}({self._dump_args(indent)})"

    def _dump_args(self, indent: int) -> str:
        raise NotImplementedError

    def dumpPython(self, options: Any = None) -> str:  # noqa: N802 - CMSSW spelling
        """As CMSSW's ``dumpPython()``: the Python source of this parameter."""
        return self.dumpPython_()

    def isCompatibleCMSType(self, other: type) -> bool:  # noqa: N802 - CMSSW spelling
        return type(self) is other

    def value(self) -> Any:
        """The plain Python value (each type says which)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.dumpPython_()

    @classmethod
    def _check(cls, value: Any) -> Any:
        """``_convert`` that raises ConfigurationError (for constructors and setValue)."""
        try:
            return cls._convert(value)
        except _Invalid as e:
            raise (ConfigFormatError if e.form else cls._error)(f"cms.{cls._type_name}: {e}") from None

    # Scalars raise ValueError for a bad value, vectors TypeError for a bad element (as CMSSW).
    _error: ClassVar[type[ConfigurationError]] = ConfigValueError

    @classmethod
    def _convert(cls, value: Any) -> Any:
        raise NotImplementedError


# ---------------------------------------------------------------- scalars


class _Scalar(_ParameterTypeBase):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self._value = self._check(value)

    def value(self) -> Any:
        """The plain Python value (int, float, bool or str)."""
        return self._value

    def setValue(self, value: Any) -> None:  # noqa: N802 - CMSSW spelling
        self._value = self._check(value)

    def _dump_args(self, indent: int) -> str:
        return _dump_any(self._value, indent)

    # A typed scalar behaves as the value it holds (CMSSW's _SimpleParameterTypeBase):
    # truthiness, comparisons, and Python's arithmetic, which gives plain values.
    def __eq__(self, other: object) -> bool:
        return bool(self._value == _unwrap(other))

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __lt__(self, other: Any) -> Any:
        return self._value < _unwrap(other)

    def __le__(self, other: Any) -> Any:
        return self._value <= _unwrap(other)

    def __gt__(self, other: Any) -> Any:
        return self._value > _unwrap(other)

    def __ge__(self, other: Any) -> Any:
        return self._value >= _unwrap(other)

    def __bool__(self) -> bool:
        return bool(self._value)

    def __str__(self) -> str:
        return str(self._value)

    def __format__(self, spec: str) -> str:
        return format(self._value, spec)

    __hash__ = None  # type: ignore[assignment]  # mutable through setValue


def _unwrap(value: Any) -> Any:
    # cms.double(cms.int32(3)) is accepted: a typed scalar stands for its value.
    return value.value() if isinstance(value, _Scalar) else value


def _arithmetic(name: str) -> Any:
    def op(self: _Scalar, other: Any) -> Any:
        return getattr(self._value, name)(_unwrap(other))

    op.__name__ = name
    return op


class _Number(_Scalar):
    """int32, ..., double: arithmetic on the value gives a plain Python number."""

    __add__ = _arithmetic("__add__")
    __radd__ = _arithmetic("__radd__")
    __sub__ = _arithmetic("__sub__")
    __rsub__ = _arithmetic("__rsub__")
    __mul__ = _arithmetic("__mul__")
    __rmul__ = _arithmetic("__rmul__")
    __truediv__ = _arithmetic("__truediv__")
    __rtruediv__ = _arithmetic("__rtruediv__")
    __floordiv__ = _arithmetic("__floordiv__")
    __rfloordiv__ = _arithmetic("__rfloordiv__")
    __mod__ = _arithmetic("__mod__")
    __rmod__ = _arithmetic("__rmod__")
    __pow__ = _arithmetic("__pow__")
    __rpow__ = _arithmetic("__rpow__")

    def __neg__(self) -> Any:
        return -self._value

    def __abs__(self) -> Any:
        return abs(self._value)

    def __float__(self) -> float:
        return float(self._value)

    def __int__(self) -> int:
        return int(self._value)


class _Integer(_Number):
    _family = "int"
    _min: ClassVar[int]
    _max: ClassVar[int]

    def __index__(self) -> int:
        return int(self._value)

    @classmethod
    def _convert(cls, value: Any) -> int:
        value = _unwrap(value)
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise _Invalid(f"expected an integer, got {describe_value(value)}")
        number = int(value)
        if not cls._min <= number <= cls._max:
            raise _Invalid(f"{number} is out of range [{cls._min}, {cls._max}]", out_of_range=True)
        return number


class int32(_Integer):
    """Signed 32-bit integer, [-2**31, 2**31 - 1]."""

    _type_name, _min, _max = "int32", -(2**31), 2**31 - 1


class uint32(_Integer):
    """Unsigned 32-bit integer, [0, 2**32 - 1]."""

    _type_name, _min, _max = "uint32", 0, 2**32 - 1


class int64(_Integer):
    """Signed 64-bit integer, [-2**63, 2**63 - 1]."""

    _type_name, _min, _max = "int64", -(2**63), 2**63 - 1


class uint64(_Integer):
    """Unsigned 64-bit integer, [0, 2**64 - 1]."""

    _type_name, _min, _max = "uint64", 0, 2**64 - 1


class double(_Number):
    """Double-precision float; an integer is accepted and stored as float."""

    _type_name, _family = "double", "float"

    @classmethod
    def _convert(cls, value: Any) -> float:
        value = _unwrap(value)
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise _Invalid(f"expected a number, got {describe_value(value)}")
        return float(value)


class _bool(_Scalar):  # noqa: N801 - exported as cms.bool
    """Boolean; only ``True``/``False`` (not 0/1)."""

    _type_name, _family = "bool", "bool"

    @classmethod
    def _convert(cls, value: Any) -> bool:
        value = _unwrap(value)
        if not isinstance(value, bool):
            raise _Invalid(f"expected True or False, got {describe_value(value)}")
        return value


class string(_Scalar):
    """Character string; ``+`` and ``len`` work on the value, as on a str."""

    _type_name, _family = "string", "string"

    def __add__(self, other: Any) -> Any:
        return self._value + _unwrap(other)

    def __radd__(self, other: Any) -> Any:
        return _unwrap(other) + self._value

    def __len__(self) -> int:
        return len(self._value)

    @classmethod
    def _convert(cls, value: Any) -> str:
        value = _unwrap(value)
        if not isinstance(value, str):
            raise _Invalid(f"expected a str, got {describe_value(value)}")
        return value


# ---------------------------------------------------------------- FileInPath

SEARCH_PATH_VARIABLE = "CMSSW_SEARCH_PATH"
"""The environment variable CMSSW's ``edm::FileInPath`` searches: folders separated by ``:``."""


def search_path() -> list[pathlib.Path]:
    """The folders a :class:`FileInPath` is looked for in, in order.

    Those of ``$CMSSW_SEARCH_PATH`` (colon-separated; empty entries skipped; read at each
    call), then the project's own ``data/`` folder (so ``models/deepmet/config.pbtxt``
    names ``data/models/deepmet/config.pbtxt`` unless a search-path folder has one).
    """
    folders = [pathlib.Path(p) for p in os.environ.get(SEARCH_PATH_VARIABLE, "").split(":") if p]
    return [*folders, project_data_directory()]


class FileInPath(_Scalar):
    """A file named by a path relative to the search path (CMSSW's ``edm::FileInPath``).

    ``cms.FileInPath("RecoBTag/Combined/data/models/particlenet/config.pbtxt")`` names the
    first ``<folder>/<relative path>`` that exists, ``folder`` running over
    ``search_path`` (``$CMSSW_SEARCH_PATH``, then the project's ``data/``), as CMSSW
    resolves it. :meth:`relativePath` gives the path as written, :meth:`fullPath` the file
    found (absolute, as a str); ``os.fspath(f)`` and ``pathlib.Path(f)`` give the file too.
    The value (``value()``, ``dumpPython``) is the relative path. An empty path means "not
    set": ``bool(f)`` is False and it resolves to nothing.

    Differences from CMSSW: the search path is read when the file is first looked for
    (validation of the module that holds it), not when the process starts; an absolute
    path is taken as it is if it exists (CMSSW would look for it under each folder).

    Raises:
        ConfigurationError: at construction, a value that is not a str; from
            :meth:`fullPath`, a path found in no folder (one line with the path and the
            folders searched) or naming a folder.
    """

    _type_name, _family = "FileInPath", "FileInPath"

    def __init__(self, value: Any = "") -> None:
        super().__init__(value)
        self._full: str | None = None

    @classmethod
    def _convert(cls, value: Any) -> str:
        value = _unwrap(value)
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        if not isinstance(value, str):
            raise _Invalid(f"expected a relative path (str), got {describe_value(value)}")
        return value

    def setValue(self, value: Any) -> None:  # noqa: N802 - CMSSW spelling
        super().setValue(value)
        self._full = None

    def relativePath(self) -> str:  # noqa: N802 - CMSSW spelling
        """The path as written in the configuration."""
        return str(self._value)

    def fullPath(self) -> str:  # noqa: N802 - CMSSW spelling
        """The absolute path of the file found (looked for once, then remembered).

        Raises:
            ConfigurationError: empty path; no search-path folder has the file; it is a folder.
        """
        if self._full is None:
            self._full = str(_resolve(self.relativePath()))
        return self._full

    def __fspath__(self) -> str:
        return self.fullPath()

    def __bool__(self) -> bool:
        return bool(self._value)

    def __str__(self) -> str:
        return self.relativePath()


def _resolve(relative: str) -> pathlib.Path:
    if not relative:
        raise ConfigurationError("cms.FileInPath: the path is empty")
    path = pathlib.Path(relative)
    folders = search_path()
    candidates = [path] if path.is_absolute() else [folder / path for folder in folders]
    for candidate in candidates:
        if candidate.is_dir():
            raise ConfigurationError(f"cms.FileInPath '{relative}': {candidate} is a directory, not a file")
        if candidate.exists():
            return pathlib.Path(os.path.abspath(candidate))  # normalised, symlinks kept (as CMSSW)
    if path.is_absolute():
        raise ConfigurationError(f"cms.FileInPath '{relative}': no such file")
    searched = ":".join(str(f) for f in folders[:-1]) or "unset"
    raise ConfigurationError(
        f"cms.FileInPath '{relative}': not found in {SEARCH_PATH_VARIABLE} ({searched}) nor in the project's "
        f"{folders[-1]}; point {SEARCH_PATH_VARIABLE} at the folder that holds it "
        "(a CMSSW data area or a clone of the cms-data repositories)"
    )


# ---------------------------------------------------------------- InputTag


class InputTag(_ParameterTypeBase):
    """A product reference ``label:instance:process`` (CMSSW's ``edm::InputTag``).

    ``InputTag("jets:pt")`` or ``InputTag("jets", "pt", "RECO")``; empty instance and
    process mean "the default instance" and "the latest process". ``str()`` gives the
    encoded form without trailing empty parts (``"jets"``, ``"jets:pt"``, ``"jets::RECO"``).
    Equal (and hashed) by value, also to its encoded string: ``InputTag("a") == "a"``.
    Do not change a tag (``setValue``) while it is a dict key.

    Raises:
        ConfigurationError: a part is not a str, contains ``":"``, or the encoded form
            has more than three parts.
    """

    _type_name, _family = "InputTag", "InputTag"
    label: str
    instance: str
    process: str

    def __init__(self, moduleLabel: Any = "", productInstanceLabel: str = "", processName: str = "") -> None:  # noqa: N803
        super().__init__()
        self.label, self.instance, self.process = self._check(_Parts((moduleLabel, productInstanceLabel, processName)))

    # CMSSW's read-write properties.
    @property
    def moduleLabel(self) -> str:  # noqa: N802
        return self.label

    @moduleLabel.setter
    def moduleLabel(self, value: str) -> None:  # noqa: N802
        self.label = self._check((value, self.instance, self.process))[0]

    @property
    def productInstanceLabel(self) -> str:  # noqa: N802
        return self.instance

    @productInstanceLabel.setter
    def productInstanceLabel(self, value: str) -> None:  # noqa: N802
        self.instance = self._check((self.label, value, self.process))[1]

    @property
    def processName(self) -> str:  # noqa: N802
        return self.process

    @processName.setter
    def processName(self, value: str) -> None:  # noqa: N802
        self.process = self._check((self.label, self.instance, value))[2]

    def setModuleLabel(self, value: str) -> None:  # noqa: N802
        self.moduleLabel = value

    def setProductInstanceLabel(self, value: str) -> None:  # noqa: N802
        self.productInstanceLabel = value

    def setProcessName(self, value: str) -> None:  # noqa: N802
        self.processName = value

    @staticmethod
    def skipCurrentProcess() -> str:  # noqa: N802
        return "@skipCurrentProcess"

    @staticmethod
    def currentProcess() -> str:  # noqa: N802
        return "@currentProcess"

    def setSkipCurrentProcess(self) -> None:  # noqa: N802
        self.process = "@skipCurrentProcess"

    def __lt__(self, other: InputTag) -> bool:
        return (self.label, self.instance, self.process) < (other.label, other.instance, other.process)

    @classmethod
    def _convert(cls, value: Any) -> tuple[str, str, str]:
        # A value given: an InputTag, "label:instance:process", or (CMSSW) a tuple or list of
        # at most 3 str, joined with ':'; the constructor's arguments come as _Parts.
        if isinstance(value, InputTag):
            return value.label, value.instance, value.process
        if isinstance(value, _Parts):
            label, instance, process = value
            if isinstance(label, InputTag) and not instance and not process:
                return label.label, label.instance, label.process
        elif isinstance(value, (str, tuple, list)):
            label, instance, process = value, "", ""
        else:
            raise _Invalid(f"expected a str or an InputTag, got {describe_value(value)}")
        label = _joined(label, 3, "InputTag")
        for part in (label, instance, process):
            if not isinstance(part, str):
                raise _Invalid(f"expected a str, got {describe_value(part)}")
        if ":" in label and not instance and not process:
            parts = label.split(":")
            if len(parts) > 3:
                raise _Invalid(f"'{label}' has more than 3 ':'-separated parts", form=True)
            label, instance, process = (parts + ["", ""])[:3]
        for part in (label, instance, process):
            if ":" in part:
                raise _Invalid(f"part '{part}' contains ':' (give either one encoded string or 3 parts)")
        return label, instance, process

    def value(self) -> str:
        """The encoded form ``"label:instance:process"`` (as CMSSW's ``InputTag.value()``)."""
        return self.encode()

    def setValue(self, value: Any) -> None:  # noqa: N802 - CMSSW spelling
        self.label, self.instance, self.process = self._check(value)

    def encode(self) -> str:
        parts = [self.label, self.instance, self.process]
        while len(parts) > 1 and not parts[-1]:
            parts.pop()
        return ":".join(parts)

    # CMSSW spellings of the attributes.
    def getModuleLabel(self) -> str:  # noqa: N802
        return self.label

    def getProductInstanceLabel(self) -> str:  # noqa: N802
        return self.instance

    def getProcessName(self) -> str:  # noqa: N802
        return self.process

    def __str__(self) -> str:
        return self.encode()

    def _dump_args(self, indent: int) -> str:
        # CMSSW's form: cms.InputTag("label","instance","process"), trailing empty parts dropped.
        parts = [self.label, self.instance, self.process]
        while len(parts) > 1 and not parts[-1]:
            parts.pop()
        return ",".join(f'"{p}"' for p in parts)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, InputTag):
            return (self.label, self.instance, self.process) == (other.label, other.instance, other.process)
        if isinstance(other, str):
            return self.encode() == other
        return NotImplemented

    def __hash__(self) -> int:
        # Equal to the hash of the encoded string, since the two compare equal.
        return hash(self.encode())


class ESInputTag(_ParameterTypeBase):
    """An EventSetup product reference ``module:data`` (CMSSW's ``ESInputTag``); configuration only here.

    ``ESInputTag("module:data")``, ``ESInputTag("module", "data")``, ``ESInputTag(data="d")``; a
    value given later may also be a tuple or list of two str (or none: ``""``).

    Raises:
        ~framework.config._types.ConfigFormatError: (CMSSW's RuntimeError) one str without ':' and no data label, more
            than one ':', or a tuple of one or of more than two parts.
    """

    _type_name, _family = "ESInputTag", "ESInputTag"

    def __init__(self, module: Any = "", data: str | None = None) -> None:
        super().__init__()
        self._module: str
        self._data: str
        self._module, self._data = self._check(_Parts((module, data)))

    @classmethod
    def _convert(cls, value: Any) -> tuple[str, str]:
        if isinstance(value, ESInputTag):
            return value._module, value._data
        module, data = value if isinstance(value, _Parts) else (value, None)
        if isinstance(module, ESInputTag) and data is None:
            return module._module, module._data
        if isinstance(module, (tuple, list)):
            if len(module) not in (0, 2):
                raise _Invalid(f"expected 2 parts (module, data) or none, got {len(module)}", form=True)
            module = _joined(module, 2, "ESInputTag") if module else ":"
        if not isinstance(module, str) or not isinstance(data, (str, type(None))):
            raise _Invalid(f"expected a str, got {describe_value(module if not isinstance(module, str) else data)}")
        if data is not None:
            if ":" in module:
                raise _Invalid(f"module label '{module}' contains ':' while a data label is given too", form=True)
            return module, data
        if module.count(":") > 1:
            raise _Invalid(f"'{module}' has more than one ':' (expected module:data)", form=True)
        if module and ":" not in module:
            raise _Invalid(
                f"'{module}' has no ':': write 'module:data' (':data', 'module:') or give two str", form=True
            )
        label, _, data = module.partition(":")
        return label, data

    def value(self) -> str:
        return f"{self._module}:{self._data}"

    def setValue(self, value: Any) -> None:  # noqa: N802
        self._module, self._data = self._check(value)

    def getModuleLabel(self) -> str:  # noqa: N802
        return self._module

    def getDataLabel(self) -> str:  # noqa: N802
        return self._data

    def _dump_args(self, indent: int) -> str:
        return f'"{self._module}","{self._data}"'

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ESInputTag):
            return (self._module, self._data) == (other._module, other._data)
        if isinstance(other, str):
            return self.value() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


class _Parts(tuple):  # type: ignore[type-arg]
    """The constructor's arguments of an InputTag or ESInputTag, told apart from a tuple value."""


def _joined(value: Any, most: int, what: str) -> Any:
    """A tuple or list of str joined with ':' (CMSSW's tag values); anything else unchanged."""
    if not isinstance(value, (tuple, list)):
        return value
    if not all(isinstance(part, str) for part in value):
        raise _Invalid(f"expected str parts, got {describe_value(value)}")
    if len(value) > most:
        raise _Invalid(f"{what} may have at most {most} parts, got {len(value)}", form=True)
    return ":".join(value)


# ---------------------------------------------------------------- vectors


class _Vector(_ParameterTypeBase, MutableSequence[Any]):
    """A list of one scalar type; behaves like a Python list, checking every element.

    ``vint32(1, 2, 3)`` (CMSSW style) or ``vint32([1, 2, 3])`` (one iterable argument).
    """

    _item: ClassVar[type[_ParameterTypeBase]]
    _error = ConfigTypeError

    def __init__(self, *values: Any) -> None:
        super().__init__()
        if len(values) == 1 and _is_list_like(values[0]):
            values = tuple(values[0])
        self._values = self._check(values)

    @classmethod
    def _convert(cls, values: Any) -> list[Any]:
        if not _is_list_like(values):
            raise _Invalid(f"expected a list, got {describe_value(values)}")
        out = []
        for i, v in enumerate(values):
            try:
                out.append(cls._convert_item(v))
            except _Invalid as e:
                raise _Invalid(f"element [{i}]: {e}", out_of_range=e.out_of_range, form=e.form) from None
        return out

    @classmethod
    def _convert_item(cls, value: Any) -> Any:
        return cls._item._convert(value)

    def value(self) -> list[Any]:
        """A new plain list of the elements' plain values."""
        return [plain_value(v) for v in self._values]

    def setValue(self, values: Iterable[Any]) -> None:  # noqa: N802 - CMSSW spelling
        self._values = self._check(values)

    # CMSSW's layout of a vector: items per line (_per_line), a new line after every
    # _per_line items when there are more than that, and a tuple for 256 items or more
    # (CMSSW keeps that form from Pythons whose calls took at most 255 arguments).
    _per_line: ClassVar[int] = 5

    def _dump_args(self, indent: int) -> str:
        n, per_line = len(self._values), self._per_line
        inner = indent + 4 if n > per_line else indent
        out = " (" if n >= 256 else ""
        for i, v in enumerate(self._values):
            if i == 0:
                out += "\n" + " " * inner if n > per_line else ""
            else:
                out += ",\n" + " " * inner if i % per_line == 0 else ", "
            out += self._dump_item(v, inner)
        if n > per_line:
            out += "\n" + " " * indent
        return out + (" ) " if n >= 256 else "")

    def _dump_item(self, value: Any, indent: int) -> str:
        return _dump_any(value, indent)

    def _replace_content_(self, other: _Vector) -> None:
        self._values = list(other._values)

    # MutableSequence protocol; the mixin adds append, extend, +=, pop, remove, ...
    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index: Any) -> Any:
        return self._values[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            self._values[index] = self._check(value)
        else:
            self._values[index] = self._check_item(value, index)

    def __delitem__(self, index: Any) -> None:
        del self._values[index]

    def insert(self, index: int, value: Any) -> None:
        self._values.insert(index, self._check_item(value, index))

    @classmethod
    def _check_item(cls, value: Any, index: int) -> Any:
        try:
            return cls._convert_item(value)
        except _Invalid as e:
            error = ConfigFormatError if e.form else ConfigTypeError
            raise error(f"cms.{cls._type_name}: element [{index}]: {e}") from None

    def __add__(self, other: Iterable[Any]) -> _Vector:
        new = copy.deepcopy(self)
        new.extend(other)
        return new

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (_Vector, list, tuple)):
            return list(self._values) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # unhashable: equal by value, and mutable


def _is_list_like(value: Any) -> bool:
    # A typed vector counts as a list; a str, a dict or another typed parameter does not.
    if isinstance(value, _Vector):
        return True
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping, _ParameterTypeBase))


class vint32(_Vector):
    _type_name, _family, _item = "vint32", "vint", int32


class vuint32(_Vector):
    _type_name, _family, _item = "vuint32", "vint", uint32


class vint64(_Vector):
    _type_name, _family, _item = "vint64", "vint", int64


class vuint64(_Vector):
    _type_name, _family, _item = "vuint64", "vint", uint64


class vdouble(_Vector):
    _type_name, _family, _item = "vdouble", "vfloat", double


class vbool(_Vector):
    _type_name, _family, _item = "vbool", "vbool", _bool


class vstring(_Vector):
    _type_name, _family, _item = "vstring", "vstring", string


class VInputTag(_Vector):
    """A list of :class:`InputTag`; strings are parsed (``VInputTag("a", "b:i")``), tuples and
    lists of up to 3 str are joined (``("b", "i")`` is ``"b:i"``), as in CMSSW."""

    _type_name, _family, _item = "VInputTag", "VInputTag", InputTag

    @classmethod
    def _convert_item(cls, value: Any) -> InputTag | str:
        # CMSSW keeps each item as given: a str stays a str (checked), an InputTag a tag.
        parts = InputTag._convert(value)
        if isinstance(value, (str, tuple, list)):
            return str(_joined(value, 3, "InputTag"))
        tag = InputTag()
        tag.label, tag.instance, tag.process = parts
        return tag

    def _dump_item(self, value: Any, indent: int) -> str:
        return f'"{value}"' if isinstance(value, str) else _dump_any(value, indent)

    def value(self) -> list[str]:
        """The encoded strings of the tags."""
        return [t if isinstance(t, str) else t.encode() for t in self._values]


class VESInputTag(_Vector):
    """A list of :class:`ESInputTag` (CMSSW's ``cms.VESInputTag``): strings ``"module:data"``
    are kept as strings, tuples and lists of two str joined; configuration only here."""

    _type_name, _family, _item = "VESInputTag", "VESInputTag", ESInputTag

    @classmethod
    def _convert_item(cls, value: Any) -> ESInputTag | str:
        ESInputTag._convert(value)  # the checks
        if isinstance(value, (str, tuple, list)):
            return ":" if isinstance(value, (tuple, list)) and not value else str(_joined(value, 2, "ESInputTag"))
        return value  # type: ignore[no-any-return]  # an ESInputTag

    def _dump_item(self, value: Any, indent: int) -> str:
        return f'"{value}"' if isinstance(value, str) else _dump_any(value, indent)

    def value(self) -> list[str]:
        """The encoded strings ``"module:data"``."""
        return [t if isinstance(t, str) else t.value() for t in self._values]


def is_config_structure(value: Any) -> bool:
    """True for modules, Sequences, Paths, Tasks, Processes: things that are not parameters."""
    return getattr(value, "_is_config_structure", False)


def plain_value(value: Any) -> Any:
    """The plain Python value of a typed parameter; plain values are returned as they are.

    PSet -> dict, VPSet -> list of dict, InputTag -> encoded str, vectors -> list.
    """
    if isinstance(value, _ParameterTypeBase):
        return value.value()
    return value


def _dump_any(value: Any, indent: int) -> str:
    if isinstance(value, _ParameterTypeBase):
        return value.dumpPython_(indent)
    if isinstance(value, float) and not math.isfinite(value):
        # CMSSW writes float('inf'), -float('inf'), float('nan'): valid Python, unlike repr.
        return f"float('{value}')" if value > 0 or math.isnan(value) else "-float('inf')"
    return repr(value)
