"""Module declarations: ``cms.EDProducer("TypeName", **params)`` and its siblings.

A declaration is a parameter holder (like a PSet) with a type name and a kind; the
framework finds the module class registered under ``type_()`` and validates the
parameters against that class's ``fill_descriptions``. The label is set when the
declaration is attached to a process (``process.jets = cms.EDProducer(...)``).
"""

from __future__ import annotations

import copy
from typing import Any

from framework.utilities import ConfigurationError

from ._pset import ParameterHolder, PSet
from ._sequences import Inverted, Labelable, Sequenceable

__all__ = [
    "EDAlias",
    "EDAnalyzer",
    "EDFilter",
    "EDProducer",
    "ESPrefer",
    "ESProducer",
    "ESSource",
    "OutputModule",
    "Service",
    "Source",
]


class _Module(Labelable, ParameterHolder):
    """A typed, labelled parameter holder (CMSSW's ``_TypedParameterizable``)."""

    _type: str  # set with object.__setattr__: plain attributes are parameters

    def __init__(self, type_name: str, *psets: PSet, **params: Any) -> None:
        if not isinstance(type_name, str) or not type_name or any(c.isspace() for c in type_name):
            raise ConfigurationError(f"cms.{self._kind} needs a module type name as first argument, got {type_name!r}")
        object.__setattr__(self, "_type", type_name)
        ParameterHolder.__init__(self, *psets, **params)

    def type_(self) -> str:
        """The module type name, e.g. ``"ParticleNetSonicProducer"``."""
        return self._type

    def _what_(self) -> str:
        if self._label is None:
            return f"{self._kind} of type '{self._type}'"
        return f"{self._kind} '{self._label}' (type {self._type})"

    def _replace_content_(self, other: ParameterHolder) -> None:
        super()._replace_content_(other)
        object.__setattr__(self, "_type", other._type)

    def copy(self) -> Any:
        """A deep copy without label (CMSSW's ``copy()``; ``clone()`` takes changes too)."""
        return self.clone()

    def clone(self, *psets: PSet, **overrides: Any) -> Any:
        """A deep copy, without label, with ``overrides`` applied (as :meth:`PSet.clone`)."""
        new = copy.deepcopy(self)
        object.__setattr__(new, "_label", None)
        for pset in psets:  # CMSSW: positional PSets add their parameters
            new.update_(copy.deepcopy(pset))
        new._apply_overrides(overrides)
        return new

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        if not self._parameters:
            return f'cms.{self._kind}("{self._type}")'
        return f'cms.{self._kind}("{self._type}",\n{self._dump_parameters(indent)}\n{" " * indent})'

    def dumpPython(self, options: Any = None) -> str:  # noqa: N802 - CMSSW spelling
        """As CMSSW's ``dumpPython()``: the Python source of this declaration, with a final newline."""
        return self.dumpPython_() + "\n"

    def __repr__(self) -> str:
        return self.dumpPython_()


class _EDModule(_Module, Sequenceable):
    def __invert__(self) -> Inverted:
        return Inverted(self)


class EDProducer(_EDModule):
    """Declares a producer: ``cms.EDProducer("TypeName", param=...)``."""

    _kind = "EDProducer"


class EDFilter(_EDModule):
    """Declares a filter; ``~process.f`` in a Path inverts its decision."""

    _kind = "EDFilter"


class EDAnalyzer(_EDModule):
    """Declares an analyzer (reads events, puts nothing)."""

    _kind = "EDAnalyzer"


class OutputModule(_EDModule):
    """Declares an output module, usually placed on an EndPath."""

    _kind = "OutputModule"


class Source(_Module):
    """Declares the event source: ``process.source = cms.Source("PoolSource", fileNames=...)``."""

    _kind = "Source"


class Service(_Module):
    """Declares a service; its label is its type name (``process.add_(cms.Service("X"))``)."""

    _kind = "Service"


class _ESModule(_Module):
    """EventSetup modules: configuration objects only (nothing here has an EventSetup).

    A config that defines them loads, dumps and runs; the framework never constructs them.
    """


class ESSource(_ESModule):
    """Declares an EventSetup source (CMSSW's ``cms.ESSource``); configuration only here."""

    _kind = "ESSource"


class ESProducer(_ESModule):
    """Declares an EventSetup producer (CMSSW's ``cms.ESProducer``); configuration only here."""

    _kind = "ESProducer"


class ESPrefer(_ESModule):
    """``cms.ESPrefer("Type", "label", record=cms.vstring(...))``: which ES module wins; configuration only."""

    _kind = "ESPrefer"

    def __init__(self, type_name: str, target_label: str = "", *psets: PSet, **params: Any) -> None:
        super().__init__(type_name, *psets, **params)
        object.__setattr__(self, "_target", target_label)

    def targetLabel_(self) -> str:  # noqa: N802
        return self._target  # type: ignore[no-any-return]

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        head = f'cms.ESPrefer("{self._type}","{self._target}"' if self._target else f'cms.ESPrefer("{self._type}"'
        if not self._parameters:
            return head + ")"
        return f"{head},\n{self._dump_parameters(indent)}\n{' ' * indent})"


class EDAlias(_Module):
    """``cms.EDAlias(label = cms.VPSet(cms.PSet(type = cms.string("Foo"))))``: CMSSW's product
    aliases; a configuration object only here (it loads and dumps, and aliases nothing)."""

    _kind = "EDAlias"

    def __init__(self, *psets: PSet, **params: Any) -> None:
        object.__setattr__(self, "_type", "")
        ParameterHolder.__init__(self, *psets, **params)

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        if not self._parameters:
            return "cms.EDAlias()"
        return f"cms.EDAlias(\n{self._dump_parameters(indent)}\n{' ' * indent})"
