"""PSet, VPSet and the ``untracked`` namespace (CMSSW's ``Types.py`` and ``Mixins.py``).

:class:`ParameterHolder` stores named parameters as attributes; it is the base of
:class:`PSet` and of the module declarations in ``_modules``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from framework.utilities import ConfigurationError

from ._ranges import (
    EventID,
    EventRange,
    LuminosityBlockID,
    LuminosityBlockRange,
    VEventID,
    VEventRange,
    VLuminosityBlockID,
    VLuminosityBlockRange,
)
from ._types import (
    ConfigAttributeError,
    ConfigFormatError,
    ConfigTypeError,
    ConfigValueError,
    ESInputTag,
    FileInPath,
    InputTag,
    VESInputTag,
    VInputTag,
    _bool,
    _dump_any,
    _Invalid,
    _ParameterTypeBase,
    _Vector,
    closest,
    describe_value,
    double,
    int32,
    int64,
    is_config_structure,
    plain_value,
    string,
    uint32,
    uint64,
    vbool,
    vdouble,
    vint32,
    vint64,
    vstring,
    vuint32,
    vuint64,
)

__all__ = [
    "PSet",
    "ParameterHolder",
    "ProxyParameter",
    "SecSource",
    "UntrackedType",
    "VPSet",
    "optional",
    "required",
    "untracked",
]

_MISSING = object()


class ParameterHolder:
    """Named parameters stored in definition order, read and set as attributes.

    Base of :class:`PSet` and of the module declarations. Setting a plain value on an
    existing typed scalar, vector or InputTag keeps its type and tracked-ness and checks
    the value (``process.options.numberOfStreams = 4``); a typed value replaces it.
    Method names of the class are reserved and cannot be parameter names.
    """

    def __init__(self, *psets: PSet, **params: Any) -> None:
        object.__setattr__(self, "_parameters", {})
        for pset in psets:
            if not isinstance(pset, PSet):
                raise ConfigValueError(
                    f"{self._what_()}: positional arguments must be PSets to copy parameters from, "
                    f"got {describe_value(pset)}"
                )
            for name, value in pset.parameters_().items():
                self._set_new_parameter(name, copy.deepcopy(value))
        # CMSSW adds keyword parameters in sorted order (its dumps and parameterNames_ show it).
        for name in sorted(params):
            self._set_new_parameter(name, params[name])

    def _set_new_parameter(self, name: str, value: Any) -> None:
        # CMSSW: a name given twice to a constructor (two PSets, or a PSet and a keyword) is
        # an error, never "the last one wins".
        if name in self._parameters:
            raise ConfigValueError(
                f"{self._what_()}: parameter '{name}' given twice (by two PSets, or by a PSet and a keyword)"
            )
        self._set_parameter(name, value)

    def _what_(self) -> str:
        return type(self).__name__

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails; private names never are parameters
        # (and copy/pickle probe them before __init__ ran).
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self.__dict__["_parameters"][name]
        except KeyError:
            hint = closest(name, self._parameters)
            raise AttributeError(f"{self._what_()} has no parameter '{name}' ({hint})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self._set_parameter(name, value)

    def __delattr__(self, name: str) -> None:
        if name.startswith("_"):
            object.__delattr__(self, name)
        elif name in self._parameters:
            del self._parameters[name]
        else:
            raise AttributeError(f"{self._what_()} has no parameter '{name}'")

    def __contains__(self, name: object) -> bool:
        return name in self._parameters

    def _set_parameter(self, name: str, value: Any) -> None:
        if name == "allowAnyLabel_":
            # CMSSW's wildcard of generated cfis: any new name, its value of this type.
            if not isinstance(value, ProxyParameter):
                raise ConfigTypeError(f"{self._what_()}: allowAnyLabel_ takes cms.required.X or cms.optional.X")
            object.__setattr__(self, "_any_label", value)
            return
        # CMSSW's names: identifiers, and ':' for MessageLogger categories ("Module:Category").
        valid = name.replace(":", "_").isidentifier() and not name.startswith("_") and not name.endswith("_")
        if not valid and name != "refToPSet_":  # CMSSW's reference to a top-level PSet
            raise ConfigValueError(
                f"{self._what_()}: invalid parameter name '{name}' "
                "(a Python identifier, ':' allowed, not starting or ending with '_')"
            )
        if hasattr(type(self), name):
            raise ConfigurationError(
                f"{self._what_()}: parameter name '{name}' is reserved (a method of {type(self).__name__})"
            )
        if is_config_structure(value):
            raise ConfigurationError(f"{self._what_()}: parameter '{name}' cannot hold a {type(value).__name__}")
        existing = self._parameters.get(name)
        if isinstance(existing, ProxyParameter):
            # cms.required.X / cms.optional.X of a generated cfi: the value takes the declared type.
            try:
                self._parameters[name] = existing.make(value)
            except ConfigurationError as e:
                raise type(e)(f"{self._what_()}: parameter '{name}': {e.args[0]}") from None
            return
        if isinstance(value, _ParameterTypeBase):
            self._parameters[name] = value  # a typed value replaces (CMSSW), type and tracked-ness included
            return
        any_label = self.__dict__.get("_any_label")
        if existing is None and any_label is not None:
            try:
                self._parameters[name] = any_label.make(value)
            except ConfigurationError as e:
                raise ConfigValueError(f"{self._what_()}: parameter '{name}': {e.args[0]}") from None
            return
        if existing is None:
            # No type to suggest: the module declares it (an int may be meant for an InputTag).
            module_type = self.__dict__.get("_type")
            declared = f"'cmsrun --describe {module_type}' lists them" if module_type else "as the module declares it"
            raise ConfigTypeError(
                f"{self._what_()}: parameter '{name}' does not exist yet, so it can only be set to a typed "
                f"value (cms.double(...), cms.InputTag(...), ...: {declared}), got {describe_value(value)}"
            )
        if isinstance(existing, PSet) and isinstance(value, Mapping):
            existing.update_(value)
            return
        try:
            existing.setValue(value)
        except ConfigurationError as e:
            raise type(e)(f"{self._what_()}: parameter '{name}': {e.args[0]}") from None

    def parameterNames_(self) -> list[str]:  # noqa: N802 - CMSSW spelling
        """Parameter names in definition order."""
        return list(self._parameters)

    def parameters_(self) -> dict[str, Any]:
        """A new dict name -> typed parameter (or the plain value given), in definition order."""
        return dict(self._parameters)

    def _replace_content_(self, other: ParameterHolder) -> None:
        """Take ``other``'s parameters (Modifier.toReplaceWith)."""
        self._parameters.clear()
        self._parameters.update(other._parameters)

    def hasParameter(self, name: str | list[str]) -> bool:  # noqa: N802 - CMSSW spelling
        """Whether the parameter exists; a list is a path into nested PSets (``["Client", "mode"]``)."""
        return self._find(name) is not _MISSING

    def getParameter(self, name: str | list[str]) -> Any:  # noqa: N802 - CMSSW spelling
        """The parameter (a path as in :meth:`hasParameter`), or None when absent."""
        found = self._find(name)
        return None if found is _MISSING else found

    def _find(self, name: str | list[str]) -> Any:
        holder: Any = self
        for part in [name] if isinstance(name, str) else name:
            if not isinstance(holder, ParameterHolder) or part not in holder._parameters:
                return _MISSING
            holder = holder._parameters[part]
        return holder

    def update_(self, values: Mapping[str, Any] | ParameterHolder) -> None:
        """Set parameters from a dict or a PSet, as ``clone(**values)`` does but in place (CMSSW's ``update_``).

        A dict edits a nested PSet, ``{index: dict}`` an item of a VPSet, None removes.

        Raises:
            ~framework.config._types.ConfigTypeError: a new parameter given an untyped value, or None for an absent one.
        """
        if isinstance(values, ParameterHolder):
            values = values.parameters_()
        self._apply_overrides(values)

    def _apply_overrides(self, overrides: Mapping[str, Any], unknown: type[Exception] = ConfigTypeError) -> None:
        # CMSSW's rules (clone, update_, Modifier.toModify): None removes a parameter, a dict
        # edits a nested PSet, or items of a VPSet or vector by index, a plain value keeps the
        # parameter's type; ``unknown`` is raised for names that do not exist (KeyError for
        # Modifiers), IndexError for an index out of range, TypeError for a non-integer one.
        for name, value in overrides.items():
            existing = self._parameters.get(name)
            if value is None:
                if name not in self._parameters:
                    raise unknown(f"{self._what_()}: no parameter '{name}' to remove")
                del self._parameters[name]
            elif isinstance(value, Mapping) and isinstance(existing, PSet):
                existing._apply_overrides(value, unknown)
            elif isinstance(value, Mapping) and isinstance(existing, _Vector):
                for index, item in value.items():
                    if not isinstance(index, int) or isinstance(index, bool):
                        raise ConfigTypeError(f"{self._what_()}: parameter '{name}': index {index!r} is not an integer")
                    if not -len(existing) <= index < len(existing):
                        raise IndexError(f"{self._what_()}: parameter '{name}' has no item [{index}]")
                    if isinstance(existing, VPSet) and isinstance(item, Mapping):
                        existing[index]._apply_overrides(item, unknown)
                    else:
                        existing[index] = item
            elif isinstance(value, Mapping) and existing is None:
                raise unknown(f"{self._what_()}: no parameter '{name}' to modify")
            elif existing is None and not isinstance(value, _ParameterTypeBase) and unknown is not ConfigTypeError:
                raise unknown(f"Unknown parameter name '{name}' specified while calling Modifier")
            else:
                self._set_parameter(name, value)

    def _dump_parameters(self, indent: int) -> str:
        pad = " " * (indent + 4)
        items = sorted(self._parameters.items())  # CMSSW's dumps list parameters sorted by name
        if "_any_label" in self.__dict__:
            items.append(("allowAnyLabel_", self.__dict__["_any_label"]))
        return ",\n".join(f"{pad}{n} = {_dump_any(v, indent + 4)}" for n, v in items)


def _check_clone_overrides(holder: ParameterHolder, overrides: Mapping[str, Any]) -> None:
    if "allowAnyLabel_" in overrides:
        raise ConfigAttributeError(f"{holder._what_()}: clone() may not change allowAnyLabel_ (CMSSW)")


class PSet(ParameterHolder, _ParameterTypeBase):
    """A set of named parameters: ``cms.PSet(a=cms.int32(1), b=cms.PSet(...))``.

    Positional PSets are copied in first (CMSSW's "include" idiom). ``value()`` returns
    a nested plain dict; ``clone(**overrides)`` a deep copy with overrides applied
    (``None`` removes a parameter, a dict edits a nested PSet).
    """

    _type_name, _family = "PSet", "PSet"

    def __init__(self, *psets: PSet, **params: Any) -> None:
        _ParameterTypeBase.__init__(self)
        ParameterHolder.__init__(self, *psets, **params)

    def value(self) -> dict[str, Any]:
        return {n: plain_value(v) for n, v in self._parameters.items()}

    def setValue(self, values: Mapping[str, Any]) -> None:  # noqa: N802 - CMSSW spelling
        self._parameters.clear()
        self._apply_overrides(dict(values))

    def clone(self, **overrides: Any) -> PSet:
        """A deep copy with ``overrides`` applied (``allowAnyLabel_`` kept).

        Raises:
            ~framework.config._types.ConfigAttributeError: ``allowAnyLabel_`` among the overrides (CMSSW).
        """
        _check_clone_overrides(self, overrides)
        new = copy.deepcopy(self)
        new._apply_overrides(overrides)
        return new

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        prefix = "cms." if self._tracked else "cms.untracked."
        if not self._parameters:
            return f"{prefix}PSet()"
        return f"{prefix}PSet(\n{self._dump_parameters(indent)}\n{' ' * indent})"


class VPSet(_Vector):
    """A list of :class:`PSet`: ``cms.VPSet(cms.PSet(...), cms.PSet(...))``."""

    _type_name, _family = "VPSet", "VPSet"

    @classmethod
    def _convert_item(cls, value: Any) -> PSet:
        if not isinstance(value, PSet):
            raise _Invalid(f"expected a PSet, got {describe_value(value)}")
        return value

    _per_line = 1  # CMSSW: one PSet per line


class SecSource(PSet):
    """``cms.SecSource("EmbeddedRootSource", fileNames=...)``: CMSSW's secondary input of mixing
    modules (pile-up). It loads, dumps and is attached like a PSet; a job holding one is not
    run here (NotSupportedError when the job is built)."""

    _type_name = "SecSource"

    def __init__(self, type_name: str, *psets: PSet, **params: Any) -> None:
        if not isinstance(type_name, str) or not type_name:
            raise ConfigTypeError(f"cms.SecSource needs a source type name as first argument, got {type_name!r}")
        object.__setattr__(self, "_type", type_name)
        super().__init__(*psets, **params)

    def type_(self) -> str:
        """The secondary source's type name (``"EmbeddedRootSource"``)."""
        return str(self.__dict__["_type"])

    def configTypeName(self) -> str:  # noqa: N802 - CMSSW spelling
        return "secsource"

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        if not self._parameters:
            return f'cms.SecSource("{self.type_()}")'
        return f'cms.SecSource("{self.type_()}",\n{self._dump_parameters(indent)}\n{" " * indent})'


# ---------------------------------------------------------------- untracked


class UntrackedType:
    """``cms.untracked.X``: builds an untracked X; as a bare class it means "required untracked X"."""

    def __init__(self, param_type: type[_ParameterTypeBase]) -> None:
        self.param_type = param_type

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        param = self.param_type(*args, **kwargs)
        param.setIsTracked(False)
        return param

    def __repr__(self) -> str:
        return f"cms.untracked.{self.param_type._type_name}"


class _Untracked:
    """``cms.untracked.int32(4)``, or ``cms.untracked(cms.int32(4))``."""

    int32 = UntrackedType(int32)
    uint32 = UntrackedType(uint32)
    int64 = UntrackedType(int64)
    uint64 = UntrackedType(uint64)
    double = UntrackedType(double)
    bool = UntrackedType(_bool)
    string = UntrackedType(string)
    FileInPath = UntrackedType(FileInPath)
    InputTag = UntrackedType(InputTag)
    vint32 = UntrackedType(vint32)
    vuint32 = UntrackedType(vuint32)
    vint64 = UntrackedType(vint64)
    vuint64 = UntrackedType(vuint64)
    vdouble = UntrackedType(vdouble)
    vstring = UntrackedType(vstring)
    VInputTag = UntrackedType(VInputTag)
    VESInputTag = UntrackedType(VESInputTag)
    vbool = UntrackedType(vbool)
    ESInputTag = UntrackedType(ESInputTag)
    EventID = UntrackedType(EventID)
    LuminosityBlockID = UntrackedType(LuminosityBlockID)
    EventRange = UntrackedType(EventRange)
    LuminosityBlockRange = UntrackedType(LuminosityBlockRange)
    VEventID = UntrackedType(VEventID)
    VLuminosityBlockID = UntrackedType(VLuminosityBlockID)
    VEventRange = UntrackedType(VEventRange)
    VLuminosityBlockRange = UntrackedType(VLuminosityBlockRange)
    PSet = UntrackedType(PSet)
    VPSet = UntrackedType(VPSet)

    def __call__(self, param: _ParameterTypeBase) -> _ParameterTypeBase:
        if not isinstance(param, _ParameterTypeBase):
            raise ConfigTypeError(f"cms.untracked() takes a typed parameter, got {describe_value(param)}")
        param.setIsTracked(False)
        return param

    def __repr__(self) -> str:
        return "cms.untracked"


untracked = _Untracked()


# ---------------------------------------------------------------- required / optional / allowed

# The types a placeholder may name (cms.required.int32, cms.optional.untracked.vstring, ...).
PARAMETER_TYPES: dict[str, type[_ParameterTypeBase]] = {
    cls._type_name: cls
    for cls in (
        int32,
        uint32,
        int64,
        uint64,
        double,
        _bool,
        string,
        FileInPath,
        InputTag,
        vint32,
        vuint32,
        vint64,
        vuint64,
        vdouble,
        vstring,
        vbool,
        VInputTag,
        ESInputTag,
        VESInputTag,
        EventID,
        LuminosityBlockID,
        EventRange,
        LuminosityBlockRange,
        VEventID,
        VLuminosityBlockID,
        VEventRange,
        VLuminosityBlockRange,
        PSet,
        VPSet,
    )
}


class ProxyParameter(_ParameterTypeBase):
    """A parameter of a generated cfi that has no value yet: ``cms.required.int32``,
    ``cms.optional.untracked.vstring``, ``cms.optional.allowed(cms.int32, cms.string)``,
    ``cms.required.PSetTemplate(a = cms.int32(1))``.

    Assigning a value (``process.m.n = 5``) replaces the placeholder by the typed value
    (plain values take the placeholder's type; with several allowed types, the first that
    accepts the value); ``setValue`` stores it in the placeholder, which then acts as that
    value. An unset optional parameter is absent for validation; an unset required one is
    reported missing. ``value()`` is None while unset.
    """

    _type_name, _family = "proxy", "proxy"

    def __init__(self, types: tuple[Any, ...], required: bool, tracked: bool, allowed: bool = False) -> None:
        super().__init__()
        self._types, self._required = types, required
        self._tracked = tracked
        self._allowed = allowed  # made by allowed(...): CMSSW's conversion rules (see make)
        self._value: _ParameterTypeBase | None = None

    def isRequired_(self) -> bool:  # noqa: N802
        return self._required

    def isSet_(self) -> bool:  # noqa: N802
        return self._value is not None

    def __bool__(self) -> bool:
        return self._value is not None and bool(self._value)

    def value(self) -> Any:
        return None if self._value is None else self._value.value()

    def setValue(self, value: Any) -> None:  # noqa: N802 - CMSSW spelling
        self._value = self.make(value)

    def make(self, value: Any) -> _ParameterTypeBase:
        """The typed parameter for ``value``.

        Raises:
            ~framework.config._types.ConfigTypeError: a typed value of none of the allowed types.
            ~framework.config._types.ConfigValueError: a plain value that none of the allowed types accepts.
        """
        classes = tuple(t.param_class() if isinstance(t, PSetTemplate) else t for t in self._types)
        param: _ParameterTypeBase | None = None
        if isinstance(value, _ParameterTypeBase):
            if not isinstance(value, classes):
                raise ConfigTypeError(f"expected {self._names()}, got {describe_value(value)}")
            param = value
        elif not self._allowed:
            try:
                t = self._types[0]
                param = t(value) if not (isinstance(value, (list, tuple)) and issubclass(t, _Vector)) else t(*value)
            except (ConfigurationError, TypeError, ValueError):
                raise ConfigValueError(f"expected {self._names()}, got {describe_value(value)}") from None
        else:
            # CMSSW's allowed(): a plain value takes the one type that accepts it (PSets take
            # only PSets); none, or several (42 fits int32 and uint32), is an error.
            fits = [p for p in map(lambda t: _plain_as(t, value), self._types) if p is not None]
            if len(fits) != 1:
                why = "ambiguous: it fits " + " and ".join(f.configTypeName() for f in fits) if fits else "none fits"
                raise ConfigFormatError(f"expected {self._names()}, got {describe_value(value)} ({why})")
            param = fits[0]
        param.setIsTracked(self._tracked)
        return param

    def _names(self) -> str:
        return " or ".join(t._type_name for t in self._types)

    def configTypeName(self) -> str:  # noqa: N802
        return ("" if self._tracked else "untracked ") + self._names()

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        if self._value is not None:
            return self._value.dumpPython_(indent)
        head = "cms." + ("required." if self._required else "optional.") + ("" if self._tracked else "untracked.")
        if len(self._types) == 1:
            t = self._types[0]
            return head + (t.dumpPython_(indent) if isinstance(t, PSetTemplate) else t._type_name)
        # CMSSW writes allowed(cms.int32,cms.string): no space
        return head + "allowed(" + ",".join("cms." + t._type_name for t in self._types) + ")"

    def __eq__(self, other: object) -> bool:
        if self._value is not None:
            return bool(self._value == other)
        return other is self

    __hash__ = None  # type: ignore[assignment]


class PSetTemplate:
    """The shape of a PSet not given yet: ``cms.required.PSetTemplate(a = cms.int32(1))``
    (CMSSW's generated cfis, ``allowAnyLabel_``); calling it with a dict or PSet makes the PSet."""

    _type_name = "PSetTemplate"

    def __init__(self, **params: Any) -> None:
        self._template = PSet(**params)

    @staticmethod
    def param_class() -> type[PSet]:
        return PSet

    def __call__(self, value: Any = None) -> PSet:
        pset = copy.deepcopy(self._template)
        if isinstance(value, PSet):
            value = value.parameters_()
        if value is not None:
            if not isinstance(value, Mapping):
                raise ConfigValueError(f"PSetTemplate: expected a dict or PSet, got {describe_value(value)}")
            pset._apply_overrides(value)
        return pset

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        inner = self._template.dumpPython_(indent)
        return "PSetTemplate" + inner[inner.index("(") :]


class _ProxyFactory:
    """``cms.required`` and ``cms.optional`` (and their ``.untracked``)."""

    def __init__(self, required: bool, tracked: bool = True) -> None:
        self._required, self._tracked = required, tracked

    @property
    def untracked(self) -> _ProxyFactory:
        return _ProxyFactory(self._required, False)

    def __getattr__(self, name: str) -> ProxyParameter:
        if name.startswith("_"):
            raise AttributeError(name)
        cls = PARAMETER_TYPES.get(name)
        if cls is None:
            raise AttributeError(f"cms.{self._what()}: no parameter type '{name}' ({closest(name, PARAMETER_TYPES)})")
        return ProxyParameter((cls,), self._required, self._tracked)

    def allowed(self, *types: Any, default: _ParameterTypeBase | None = None) -> ProxyParameter:
        """A placeholder that takes a value of one of ``types`` (CMSSW's ``allowed``); with
        ``default`` (a value of one of them) it holds that value until another is set.

        Raises:
            ~framework.config._types.ConfigTypeError: ``default`` of none of the types.
        """
        proxy = ProxyParameter(_type_classes(types), self._required, self._tracked, allowed=True)
        if default is not None:
            proxy.setValue(default)
        return proxy

    def PSetTemplate(self, **params: Any) -> ProxyParameter:  # noqa: N802 - CMSSW spelling
        """A placeholder for a PSet of this shape (CMSSW's ``required.PSetTemplate(...)``)."""
        return ProxyParameter((PSetTemplate(**params),), self._required, self._tracked)

    def _what(self) -> str:
        return ("required" if self._required else "optional") + ("" if self._tracked else ".untracked")

    def __repr__(self) -> str:
        return "cms." + self._what()


def _plain_as(t: Any, value: Any) -> _ParameterTypeBase | None:
    """``value`` (plain) as a ``t``, or None if ``t`` does not take it (PSets take no plain value,
    vectors only lists and tuples)."""
    if isinstance(t, PSetTemplate) or issubclass(t, PSet):
        return None
    if issubclass(t, _Vector) != isinstance(value, (list, tuple)):
        return None
    try:
        param: _ParameterTypeBase = t(*value) if isinstance(value, (list, tuple)) else t(value)
    except (ConfigurationError, TypeError, ValueError):
        return None
    return param


def _type_classes(types: tuple[Any, ...]) -> tuple[type[_ParameterTypeBase], ...]:
    out = []
    for t in types:
        if isinstance(t, UntrackedType):
            t = t.param_type
        if not (isinstance(t, type) and issubclass(t, _ParameterTypeBase)):
            raise ConfigTypeError(f"cms.allowed() takes parameter types (cms.int32, ...), got {t!r}")
        out.append(t)
    return tuple(out)


required = _ProxyFactory(True)
optional = _ProxyFactory(False)


def allowed(*types: Any, default: _ParameterTypeBase | None = None) -> _ParameterTypeBase:
    """``cms.allowed(cms.int32, cms.string, default=cms.int32(1))``: the default if given, else
    a required placeholder taking any of ``types``."""
    classes = _type_classes(types)
    if default is None:
        return ProxyParameter(classes, True, True, allowed=True)
    if not isinstance(default, classes):
        raise ConfigTypeError(f"cms.allowed(): default {describe_value(default)} is none of the allowed types")
    return default
