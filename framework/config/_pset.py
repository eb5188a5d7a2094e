"""PSet, VPSet and the ``untracked`` namespace (CMSSW's ``Types.py`` and ``Mixins.py``).

:class:`ParameterHolder` stores named parameters as attributes; it is the base of
:class:`PSet` and of the module declarations in ``_modules``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .._errors import ConfigurationError
from ._types import (
    FileInPath,
    InputTag,
    VInputTag,
    _bool,
    _dump_any,
    _Invalid,
    _ParameterTypeBase,
    _Scalar,
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
    vdouble,
    vint32,
    vint64,
    vstring,
    vuint32,
    vuint64,
)

__all__ = ["PSet", "ParameterHolder", "UntrackedType", "VPSet", "untracked"]


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
                raise ConfigurationError(
                    f"{self._what_()}: positional arguments must be PSets to copy parameters from, "
                    f"got {describe_value(pset)}"
                )
            for name, value in pset.parameters_().items():
                self._set_parameter(name, copy.deepcopy(value))
        for name, value in params.items():
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
        if not name.isidentifier() or name.startswith("_") or name.endswith("_"):
            raise ConfigurationError(
                f"{self._what_()}: invalid parameter name '{name}' "
                "(a Python identifier, not starting or ending with '_')"
            )
        if hasattr(type(self), name):
            raise ConfigurationError(
                f"{self._what_()}: parameter name '{name}' is reserved (a method of {type(self).__name__})"
            )
        if is_config_structure(value):
            raise ConfigurationError(f"{self._what_()}: parameter '{name}' cannot hold a {type(value).__name__}")
        existing = self._parameters.get(name)
        if isinstance(existing, (_Scalar, _Vector, InputTag)) and not isinstance(value, _ParameterTypeBase):
            try:
                existing.setValue(value)
            except ConfigurationError as e:
                raise ConfigurationError(f"{self._what_()}: parameter '{name}': {e.args[0]}") from None
            return
        self._parameters[name] = value

    def parameterNames_(self) -> list[str]:  # noqa: N802 - CMSSW spelling
        """Parameter names in definition order."""
        return list(self._parameters)

    def parameters_(self) -> dict[str, Any]:
        """A new dict name -> typed parameter (or the plain value given), in definition order."""
        return dict(self._parameters)

    def _apply_overrides(self, overrides: Mapping[str, Any]) -> None:
        # CMSSW clone() semantics: None removes a parameter, a dict edits a nested PSet.
        for name, value in overrides.items():
            if value is None:
                if name not in self._parameters:
                    raise ConfigurationError(f"{self._what_()}: clone(): no parameter '{name}' to remove")
                del self._parameters[name]
            elif isinstance(value, Mapping) and isinstance(self._parameters.get(name), PSet):
                self._parameters[name]._apply_overrides(value)
            else:
                self._set_parameter(name, value)

    def _dump_parameters(self, indent: int) -> str:
        pad = " " * (indent + 4)
        return ",\n".join(f"{pad}{n} = {_dump_any(v, indent + 4)}" for n, v in self._parameters.items())


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

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        prefix = "cms." if self._tracked else "cms.untracked."
        if not self._values:
            return f"{prefix}VPSet()"
        pad = " " * (indent + 4)
        items = ",\n".join(pad + p.dumpPython_(indent + 4) for p in self._values)
        return f"{prefix}VPSet(\n{items}\n{' ' * indent})"


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
    PSet = UntrackedType(PSet)
    VPSet = UntrackedType(VPSet)

    def __call__(self, param: _ParameterTypeBase) -> _ParameterTypeBase:
        if not isinstance(param, _ParameterTypeBase):
            raise ConfigurationError(f"cms.untracked() takes a typed parameter, got {describe_value(param)}")
        param.setIsTracked(False)
        return param

    def __repr__(self) -> str:
        return "cms.untracked"


untracked = _Untracked()
