"""A module type's ``_cfi`` file: its declaration with every default, as CMSSW's build writes it.

CMSSW's build runs each plugin's ``fillDescriptions`` and writes, per ``descriptions.add``
label, a ``<label>_cfi.py`` holding ``<label> = cms.EDProducer('<Type>', ...)`` with every
parameter at its default, ``cms.required.X`` for a parameter without one and
``cms.optional.X`` for an optional one (FWCore/ParameterSet's ``ParameterSetDescription::
writeCfi``). :func:`cfi_source` writes the same text from a pysonic description;
``scripts/generate_cfis.py`` writes the files under ``cmssw/`` and a test keeps them in step.

Layout: two-space indent, single-quoted strings, one parameter per line, as CMSSW's
generated files.
"""

from __future__ import annotations

from typing import Any

from ._description import _OPTIONAL, _REQUIRED, ParameterSetDescription, _Entry
from ._pset import PSet, VPSet
from ._types import InputTag, _ParameterTypeBase, _Vector

__all__ = ["cfi_source"]

HEADER = "import FWCore.ParameterSet.Config as cms\n"


def cfi_source(label: str, kind: str, type_name: str, desc: ParameterSetDescription, generator: str = "") -> str:
    """The text of ``<label>_cfi.py``: ``<label> = cms.<kind>('<type_name>', <parameters>)``.

    Args:
        label: the module label (CMSSW: the type name with a lower-case first letter, or the
            label given to ``descriptions.add``; a service keeps its type name).
        kind: ``EDProducer``, ``EDFilter``, ``EDAnalyzer`` or ``Service``.
        generator: a line naming what wrote the file (a comment under the import).
    """
    lines = [HEADER]
    if generator:
        lines.append(f"\n# {generator}\n")
    body = _parameters(desc, 1)
    head = f"{label} = cms.{kind}('{type_name}'"
    lines.append(f"\n{head},\n{body}\n)\n" if body else f"\n{head})\n")
    return "".join(lines)


def _parameters(desc: ParameterSetDescription, depth: int, values: dict[str, Any] | None = None) -> str:
    pad = "  " * depth
    out = [f"{pad}{name} = {_entry(entry, depth, values)}" for name, entry in desc._entries.items()]
    return ",\n".join(out)


def _prefix(kind: str, entry: _Entry) -> str:
    return f"cms.{kind + '.' if kind else ''}{'' if entry.tracked else 'untracked.'}"


def _entry(entry: _Entry, depth: int, values: dict[str, Any] | None) -> str:
    """``entry`` at its default, or at ``values[entry.name]`` (a VPSet item's value)."""
    type_name = entry.type_._type_name
    given = values is not None and entry.name in values
    default = values[entry.name] if given and values is not None else entry.default
    if default is _OPTIONAL:
        return f"{_prefix('optional', entry)}{type_name}"
    if default is _REQUIRED:
        return f"{_prefix('required', entry)}{type_name}"
    if entry.type_ is PSet:
        assert entry.nested is not None
        item_values = _plain(default) if given else None
        body = _parameters(entry.nested, depth + 1, item_values)
        return f"{_prefix('', entry)}PSet(\n{body}\n{'  ' * depth})" if body else f"{_prefix('', entry)}PSet()"
    if entry.type_ is VPSet:
        assert entry.nested is not None
        if not default:
            return f"{_prefix('', entry)}VPSet()"
        pad = "  " * (depth + 1)
        items = [f"{pad}cms.PSet(\n{_parameters(entry.nested, depth + 2, _plain(item))}\n{pad})" for item in default]
        return f"{_prefix('', entry)}VPSet(\n" + ",\n".join(items) + f"\n{'  ' * depth})"
    return f"{_prefix('', entry)}{type_name}({_arguments(default)})"


def _plain(item: Any) -> dict[str, Any]:
    if isinstance(item, PSet):
        return dict(item.parameters_())
    return dict(item)


def _arguments(value: Any) -> str:
    if isinstance(value, InputTag):
        parts = [value.label, value.instance, value.process]
        while len(parts) > 1 and not parts[-1]:
            parts.pop()
        return ", ".join(repr(p) for p in parts)
    if isinstance(value, _Vector):
        return ", ".join(_scalar(v) for v in value)
    if isinstance(value, _ParameterTypeBase):
        return _scalar(value.value())
    if isinstance(value, (list, tuple)):
        return ", ".join(_scalar(v) for v in value)
    return _scalar(value)


def _scalar(value: Any) -> str:
    if isinstance(value, _ParameterTypeBase):
        value = value.value()
    if isinstance(value, InputTag):
        return repr(value.encode())
    return repr(value)
