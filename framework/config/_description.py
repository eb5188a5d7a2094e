"""Parameter descriptions (CMSSW's ``fillDescriptions``) and the validated ``ParameterSet``.

A module type declares its parameters::

    @classmethod
    def fill_descriptions(cls, desc):
        desc.add("src", cms.InputTag("Jet"), "AK4 jet collection")      # tracked, default
        desc.add("modelName", cms.string, "Triton model name")          # a type: required
        desc.add("verbose", cms.untracked.bool(False), "log requests")  # untracked
        desc.add("Client", client_desc, "Triton client settings")       # nested PSet
        desc.add_vpset("histograms", item_desc, "one per histogram", default=[])

and the framework calls ``desc.validate(module_declaration, context)``, which returns a
read-only :class:`ParameterSet` of plain Python values with defaults filled.

Accepted values (CMSSW itself is stricter: types must match exactly):

- a typed parameter of the declared type; any typed integer for an integer type
  (range-checked); likewise for vectors. A typed integer for a ``double`` is refused, as
  CMSSW refuses it ("should be defined as a tracked double");
- plain Python values where unambiguous: int (not bool) for integer types, int or float
  for ``double``, bool for ``bool``, str for ``string`` and ``InputTag``, lists of those
  for vectors, dict for ``PSet``, list of dict/PSet for ``VPSet``.

Plain values have no tracked-ness; a typed value must match the declared tracked-ness.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from framework.utilities import ConfigurationError

from ._pset import ParameterHolder, ProxyParameter, PSet, UntrackedType, VPSet
from ._types import (
    FileInPath,
    InputTag,
    VInputTag,
    _Invalid,
    _ParameterTypeBase,
    _Vector,
    closest,
    describe_value,
    plain_value,
)

__all__ = ["DescriptionRow", "ParameterSet", "ParameterSetDescription"]

# Typed values of these families convert into the key's family (range-checked).
# A FileInPath given for a string parameter stands for its relative path (CMSSW modules
# such as BoostedJetONNXJetTagsProducer take a string and resolve it as a FileInPath).
_COMPATIBLE = {"string": {"string", "FileInPath"}}


class _Missing:
    """The "default" of a parameter without one; compared by identity."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_REQUIRED, _OPTIONAL = _Missing("required"), _Missing("optional")


class DescriptionRow(NamedTuple):
    """One line of a module's documentation (``cmsrun --describe``).

    ``name`` is dotted for nested PSets (``Client.timeout``) and uses ``[]`` for VPSet
    items (``histograms[].name``); ``default`` is Python source, ``"required"`` or
    ``"optional"``; ``extension`` marks a parameter that pysonic adds to a CMSSW module's
    (or service's) parameters (the nested parameters of an extension are extensions too).
    """

    name: str
    type_name: str
    default: str
    doc: str
    extension: bool = False


class _Entry:
    """One declared parameter. ``nested`` is set for PSet (the description) and VPSet (items)."""

    def __init__(
        self,
        name: str,
        type_: type[_ParameterTypeBase],
        tracked: bool,
        default: Any,
        doc: str,
        nested: ParameterSetDescription | None = None,
        extension: bool = False,
    ) -> None:
        self.name, self.type_, self.tracked, self.default, self.doc = name, type_, tracked, default, doc
        self.nested = nested
        self.extension = extension

    def type_name(self) -> str:
        return self.type_._type_name if self.tracked else f"untracked {self.type_._type_name}"


class ParameterSetDescription:
    """The parameters a module type (or a nested PSet) accepts, with types, defaults and docs."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._allow_unknown: str | None = None

    # ------------------------------------------------------------ declaring

    def add(self, name: str, value: Any, doc: str = "", *, tracked: bool = True, extension: bool = False) -> None:
        """Declare a parameter.

        Args:
            name: parameter name.
            value: a typed value (``cms.double(30.0)``, ``cms.untracked.bool(False)``): the
                default, its type and tracked-ness; a type (``cms.string``,
                ``cms.untracked.uint32``): a required parameter; a
                ParameterSetDescription: a nested PSet whose defaults are filled; the
                class ``cms.PSet``: a required free-form PSet.
            doc: one-line documentation (units, meaning).
            tracked: for a type or a nested description (a typed default carries its own).
            extension: a pysonic extension of a module (or service) CMSSW also has, shown
                as such by ``cmsrun --describe`` (:attr:`DescriptionRow.extension`).

        Raises:
            TypeError: ``value`` is none of the above; ValueError: ``name`` is declared twice.
        """
        self._add(name, value, doc, tracked, required=True, extension=extension)

    def add_optional(
        self, name: str, value: Any, doc: str = "", *, tracked: bool = True, extension: bool = False
    ) -> None:
        """Declare a parameter that may be absent (no default; absent from the result).

        ``value`` is a type (``cms.string``) or a nested description, as in :meth:`add`.
        """
        if isinstance(value, _ParameterTypeBase):
            raise TypeError(f"add_optional('{name}'): give a type (e.g. cms.string), not a value")
        self._add(name, value, doc, tracked, required=False, extension=extension)

    def add_vpset(
        self,
        name: str,
        item: ParameterSetDescription,
        doc: str = "",
        *,
        default: list[Any] | None = None,
        tracked: bool = True,
        extension: bool = False,
    ) -> None:
        """Declare a VPSet whose items follow ``item``; ``default=None`` makes it required.

        Default items (PSets or dicts) are validated against ``item`` now; ``extension`` as
        in :meth:`add`.
        """
        if not isinstance(item, ParameterSetDescription):
            raise TypeError(f"add_vpset('{name}'): item must be a ParameterSetDescription")
        entry = _Entry(name, VPSet, tracked, _REQUIRED, doc, item, extension)
        if default is not None:
            _check_vpset(entry, default, f"default of '{name}'", name)  # fail early on author errors
            entry.default = list(default)
        self._put(entry)

    def allow_unknown_(self, doc: str = "") -> None:  # noqa: N802 - spelled as the spec asks
        """Accept parameters that are not declared (a free-form PSet); they pass through."""
        self._allow_unknown = doc

    def _add(self, name: str, value: Any, doc: str, tracked: bool, *, required: bool, extension: bool) -> None:
        missing = _REQUIRED if required else _OPTIONAL
        if isinstance(value, ParameterSetDescription):
            entry = _Entry(name, PSet, tracked, missing if not required else {}, doc, value)
        elif isinstance(value, UntrackedType):
            entry = self._type_entry(name, value.param_type, False, doc, missing)
        elif isinstance(value, type) and issubclass(value, _ParameterTypeBase):
            entry = self._type_entry(name, value, tracked, doc, missing)
        elif isinstance(value, (PSet, VPSet)):
            raise TypeError(
                f"add('{name}'): describe a nested PSet with a ParameterSetDescription, a VPSet with add_vpset"
            )
        elif isinstance(value, _ParameterTypeBase):
            entry = _Entry(name, type(value), value.isTracked(), value, doc)
        else:
            raise TypeError(f"add('{name}'): expected a typed default, a cms type or a description, got {value!r}")
        entry.extension = extension
        self._put(entry)

    @staticmethod
    def _type_entry(name: str, cls: type, tracked: bool, doc: str, missing: _Missing) -> _Entry:
        if cls is PSet:  # a bare cms.PSet: free-form content
            free = ParameterSetDescription()
            free.allow_unknown_()
            return _Entry(name, PSet, tracked, missing, doc, free)
        if cls is VPSet:
            raise TypeError(f"add('{name}'): declare VPSets with add_vpset")
        return _Entry(name, cls, tracked, missing, doc)

    def _put(self, entry: _Entry) -> None:
        if entry.name in self._entries:
            raise ValueError(f"parameter '{entry.name}' is declared twice")
        if not entry.name.isidentifier():
            raise ValueError(f"invalid parameter name {entry.name!r}")
        self._entries[entry.name] = entry

    def parameterNames_(self) -> list[str]:  # noqa: N802
        return list(self._entries)

    # ------------------------------------------------------------ validating

    def validate(self, pset: Any, context: str) -> ParameterSet:
        """Check ``pset`` against this description and return its plain values.

        Args:
            pset: a module declaration, ``cms.PSet``, mapping, or None (no parameters).
            context: what is validated, starting every error message, e.g.
                ``"module 'particleNetAK4' (type ParticleNetSonicProducer)"``.

        Returns:
            A read-only :class:`ParameterSet`; defaults filled, optional absent ones left out.

        Raises:
            ConfigurationError: ``"<context>: parameter '<path>': <problem>"`` for the first
                problem: unknown parameter (with the nearest names), missing required
                parameter, wrong type, tracked/untracked mismatch, out of range.
        """
        return _validate_pset(self, pset, context, "")

    # ------------------------------------------------------------ documenting

    def describe(self, prefix: str = "", *, extension: bool = False) -> list[DescriptionRow]:
        """Rows (name, type name, default, doc, extension) for every parameter, nested ones
        flattened; ``extension`` marks every row (the nested rows of an extension)."""
        rows = []
        for e in self._entries.values():
            name, ext = prefix + e.name, extension or e.extension
            if e.nested is not None and e.type_ is PSet:
                rows.append(DescriptionRow(name, e.type_name(), _show_default(e.default, nested=True), e.doc, ext))
                rows += e.nested.describe(name + ".", extension=ext)
            elif e.nested is not None:
                rows.append(DescriptionRow(name, e.type_name(), _show_default(e.default), e.doc, ext))
                rows += e.nested.describe(name + "[].", extension=ext)
            else:
                rows.append(DescriptionRow(name, e.type_name(), _show_default(e.default), e.doc, ext))
        if self._allow_unknown is not None:
            rows.append(
                DescriptionRow(prefix + "*", "any", "", self._allow_unknown or "any other parameter", extension)
            )
        return rows


def _show_default(default: Any, nested: bool = False) -> str:
    if isinstance(default, _Missing):
        return default.name
    if nested:
        return ""  # the nested rows show the defaults
    if isinstance(default, _ParameterTypeBase):
        return repr(default.value())
    return repr([plain_value(d) for d in default])  # a VPSet's default items


# ---------------------------------------------------------------- validation helpers


def _items_of(pset: Any, context: str, path: str) -> dict[str, Any]:
    if pset is None:
        return {}
    if isinstance(pset, ParameterHolder):
        # cms.required.X / cms.optional.X never given a value: absent (the description decides).
        items = pset.parameters_()
        return {
            n: (v._value if isinstance(v, ProxyParameter) else v)
            for n, v in items.items()
            if not isinstance(v, ProxyParameter) or v._value is not None
        }
    if isinstance(pset, (Mapping, ParameterSet)):
        return dict(pset.items())
    where = f"parameter '{path}': " if path else ""
    raise ConfigurationError(f"{context}: {where}expected PSet, got {describe_value(pset)}")


def _validate_pset(desc: ParameterSetDescription, pset: Any, context: str, path: str) -> ParameterSet:
    items = _items_of(pset, context, path.rstrip("."))
    if desc._allow_unknown is None:
        # Unknown names first: a misspelt name would otherwise show up as a missing one.
        for name in items:
            if name not in desc._entries:
                raise ConfigurationError(
                    f"{context}: unknown parameter '{path}{name}' ({closest(name, desc._entries)})"
                )
    out: dict[str, Any] = {}
    for name, entry in desc._entries.items():
        where = path + name
        if name in items:
            out[name] = _check_value(entry, items[name], context, where)
        elif entry.default is _REQUIRED:
            doc = f": {entry.doc}" if entry.doc else ""
            raise ConfigurationError(f"{context}: missing required parameter '{where}' ({entry.type_name()}{doc})")
        elif entry.default is not _OPTIONAL:
            out[name] = _check_value(entry, copy.deepcopy(entry.default), context, where)
    for name, value in items.items():
        if name not in desc._entries:
            out[name] = _to_plain(value)
    return ParameterSet(out, context if not path else f"{context}: '{path.rstrip('.')}'")


def _check_value(entry: _Entry, value: Any, context: str, where: str) -> Any:
    if entry.type_ is PSet:
        if isinstance(value, _ParameterTypeBase) and not isinstance(value, PSet):
            raise ConfigurationError(f"{context}: parameter '{where}': expected PSet, got {describe_value(value)}")
        _check_tracked(entry, value, context, where)
        assert entry.nested is not None  # PSet and VPSet entries always carry their description
        return _validate_pset(entry.nested, value, context, where + ".")
    if entry.type_ is VPSet:
        result = _check_vpset(entry, value, context, where)
    else:
        result = _check_scalar(entry, value, context, where)
    _check_tracked(entry, value, context, where)  # after the type: a wrong type is the bigger news
    return result


def _check_tracked(entry: _Entry, value: Any, context: str, where: str) -> None:
    # Plain values have no tracked-ness and fit either.
    if isinstance(value, _ParameterTypeBase) and value.isTracked() != entry.tracked:
        fix = f"use cms.untracked.{entry.type_._type_name}(...)" if not entry.tracked else "drop cms.untracked"
        raise ConfigurationError(
            f"{context}: parameter '{where}': expected {entry.type_name()}, got {value.configTypeName()} ({fix})"
        )


def _check_scalar(entry: _Entry, value: Any, context: str, where: str) -> Any:
    """Scalars, InputTag and vectors of those; returns the plain value."""
    cls = entry.type_
    if isinstance(value, _ParameterTypeBase):
        ok = value._family in _COMPATIBLE.get(cls._family, {cls._family})
        raw = list(value) if isinstance(value, _Vector) else value.value()
    else:
        # Plain values: a str is not a list; a bool is never a number (_types rejects it).
        ok = not (issubclass(cls, _Vector) and not isinstance(value, (list, tuple)))
        raw = value
    reason = ""
    if ok and cls is FileInPath:
        # Kept as a FileInPath (modules call fullPath()), resolved now: a missing file is a
        # configuration error of this module, before the job starts.
        try:
            found = FileInPath(cls._convert(raw))
        except _Invalid:
            found = None  # the wrong type: reported below as for any parameter
        if found:
            try:
                found.fullPath()
            except ConfigurationError as err:
                raise ConfigurationError(f"{context}: parameter '{where}': {err.args[0]}") from None
        if found is not None:
            return found
    if ok:
        try:
            result = _plain_result(cls._convert(raw))
            if cls is VInputTag:  # a VInputTag keeps strings as given; modules get InputTags
                result = [InputTag(v) if isinstance(v, str) else v for v in result]
            if cls._family in ("float", "vfloat"):
                _refuse_nan(result, context, where)
            return result
        except _Invalid as e:
            # Ranges and vector elements need the detail; a scalar of the wrong type does not.
            if e.out_of_range or issubclass(cls, _Vector):
                reason = f": {e}"
    if (
        isinstance(value, _ParameterTypeBase)
        and cls._family in ("float", "vfloat")
        and value._family in ("int", "vint")
    ):
        typed = "cms." + entry.type_name().replace(" ", ".")
        reason = f" (CMSSW's types must match: {typed}({raw if cls._family == 'float' else '...'}))"
    raise ConfigurationError(
        f"{context}: parameter '{where}': expected {entry.type_name()}, got {describe_value(value)}{reason}"
    )


def _check_vpset(entry: _Entry, value: Any, context: str, where: str) -> list[ParameterSet]:
    if isinstance(value, _ParameterTypeBase) and not isinstance(value, VPSet) or isinstance(value, (str, Mapping)):
        raise ConfigurationError(f"{context}: parameter '{where}': expected VPSet, got {describe_value(value)}")
    if not isinstance(value, (VPSet, list, tuple)):
        raise ConfigurationError(f"{context}: parameter '{where}': expected VPSet, got {describe_value(value)}")
    assert entry.nested is not None  # PSet and VPSet entries always carry their description
    return [_validate_pset(entry.nested, item, context, f"{where}[{i}].") for i, item in enumerate(value)]


def _refuse_nan(value: float | list[float], context: str, where: str) -> None:
    """A NaN compares false with everything: as a cut it silently rejects (or keeps) every
    object. CMSSW's language accepts ``float('nan')``; pysonic refuses it in a double
    parameter (infinities stay valid: "no cut")."""
    values = value if isinstance(value, list) else [value]
    bad = [i for i, v in enumerate(values) if isinstance(v, float) and math.isnan(v)]
    if bad:
        at = "" if not isinstance(value, list) else f" (element {bad[0]})"
        raise ConfigurationError(
            f"{context}: parameter '{where}': nan is not a number{at}; every comparison with it is false"
        )


def _plain_result(converted: Any) -> Any:
    # _convert gives plain values, except the (label, instance, process) triple of an
    # InputTag and the InputTag elements of a VInputTag.
    if isinstance(converted, tuple):
        return InputTag(*converted)
    if isinstance(converted, list):
        return [copy.copy(v) for v in converted]
    return converted


def _to_plain(value: Any) -> Any:
    """Plain value of an undeclared parameter (free-form PSets): nested sets as ParameterSet."""
    if isinstance(value, (PSet, Mapping)):
        return ParameterSet({n: _to_plain(v) for n, v in _items_of(value, "", "").items()}, "free-form PSet")
    if isinstance(value, InputTag):
        return InputTag(value)
    if isinstance(value, _Vector):
        return [_to_plain(v) for v in value]
    if isinstance(value, _ParameterTypeBase):
        return value.value()
    if isinstance(value, list):
        return [_to_plain(v) for v in value]
    return value


# ---------------------------------------------------------------- ParameterSet


class ParameterSet(Mapping[str, Any]):
    """A validated, read-only set of plain parameter values (what a module's ``__init__`` gets).

    Values: int, float, bool, str, list[int | float | str], :class:`InputTag`,
    list[InputTag], nested ParameterSet (PSet), list[ParameterSet] (VPSet). Read by
    attribute (``params.minPt``) or item (``params["minPt"]``, needed for names that are
    Mapping methods such as ``get`` or ``items``); ``get``, ``in``, iteration over names,
    ``len`` and ``to_dict()`` work as for a dict. Unknown names raise AttributeError /
    KeyError naming the nearest parameters.
    """

    __slots__ = ("_values", "_context")

    def __init__(self, values: Mapping[str, Any], context: str = "ParameterSet") -> None:
        object.__setattr__(self, "_values", dict(values))
        object.__setattr__(self, "_context", context)

    def __getitem__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise KeyError(f"{self._context}: no parameter '{name}' ({closest(name, self._values)})") from None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"{self._context}: no parameter '{name}' ({closest(name, self._values)})") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self._context}: ParameterSet is read-only (cannot set '{name}')")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{self._context}: ParameterSet is read-only (cannot delete '{name}')")

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dicts and lists; InputTags as their encoded strings."""
        return {n: _dictify(v) for n, v in self._values.items()}

    def __repr__(self) -> str:
        return "ParameterSet(" + ", ".join(f"{n}={v!r}" for n, v in self._values.items()) + ")"

    def __reduce__(self) -> Any:
        return (ParameterSet, (self._values, self._context))


def _dictify(value: Any) -> Any:
    if isinstance(value, ParameterSet):
        return value.to_dict()
    if isinstance(value, InputTag):
        return value.encode()
    if isinstance(value, FileInPath):
        return value.relativePath()
    if isinstance(value, list):
        return [_dictify(v) for v in value]
    return value
