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

from ._pset import ParameterHolder, PSet, VPSet, _check_clone_overrides
from ._sequences import Inverted, Labelable, Sequenceable
from ._types import ConfigRuntimeError, ConfigTypeError, ConfigValueError, string

__all__ = [
    "EDAlias",
    "EDAnalyzer",
    "EDFilter",
    "EDProducer",
    "ESPrefer",
    "ESProducer",
    "ESSource",
    "OutputModule",
    "Looper",
    "Service",
    "Source",
    "SwitchProducer",
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
        """A deep copy, without label, with ``overrides`` applied (as :meth:`PSet.clone`).

        Raises:
            ~framework.config._types.ConfigAttributeError: ``allowAnyLabel_`` among the overrides (CMSSW).
        """
        _check_clone_overrides(self, overrides)
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


class Looper(_Module):
    """``process.looper = cms.Looper("Type", ...)``: CMSSW's looper (event loops repeated, e.g.
    for alignment). It loads and dumps; a job with one is not run here (NotSupportedError when
    the job is built): run the job again instead."""

    _kind = "Looper"


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

    @staticmethod
    def allProducts() -> VPSet:  # noqa: N802 - CMSSW spelling
        """Every product of a module, for an alias: ``cms.EDAlias(src=cms.EDAlias.allProducts())``
        (CMSSW's: a VPSet of one PSet with ``type = '*'``)."""
        return VPSet(PSet(type=string("*")))

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        if not self._parameters:
            return "cms.EDAlias()"
        return f"cms.EDAlias(\n{self._dump_parameters(indent)}\n{' ' * indent})"


class SwitchProducer(EDProducer):
    """One product label, made by one of several producers chosen by accelerator (CMSSW's
    ``cms.SwitchProducer``; ``FWCore/ParameterSet/python/Modules.py``).

    Concrete switches derive from it and name their cases with functions of the selected
    accelerators that return ``(enabled, priority)``::

        class SwitchProducerFoo(cms.SwitchProducer):
            def __init__(self, **cases):
                super().__init__(dict(cpu=cms.SwitchProducer.getCpu(), gpu=gpu_case), **cases)

        process.foo = SwitchProducerFoo(cpu=cms.EDProducer("FooCPU"), gpu=cms.EDProducer("FooGPU"))

    Cases are EDProducers or EDAliases, set, edited (``clone``, Modifiers) and dumped like
    parameters; attached as ``process.foo``, case ``cpu`` is labelled ``foo@cpu``. The job runs
    the enabled case of highest priority under the label ``foo`` (the accelerators are
    ``process.options.accelerators`` among those available: see
    :meth:`~framework.config.Process.selectAccelerators_`).

    Raises:
        ~framework.config._types.ConfigValueError: a case the switch does not know.
        ~framework.config._types.ConfigTypeError: a case that is not an EDProducer or EDAlias.
    """

    def __init__(self, caseFunctionDict: dict[str, Any], **cases: Any) -> None:  # noqa: N803 - CMSSW's name
        object.__setattr__(self, "_caseFunctionDict", dict(caseFunctionDict))
        super().__init__("SwitchProducer", **cases)

    @staticmethod
    def getCpu() -> Any:  # noqa: N802 - CMSSW spelling
        """The case function of the CPU: always enabled, priority 1 (CMSSW's)."""
        return _switch_cpu

    # The label: set by the process; the cases follow it (CMSSW's "label@case").
    @property
    def _label(self) -> str | None:
        return self.__dict__.get("_switch_label")

    @_label.setter
    def _label(self, label: str | None) -> None:
        self.__dict__["_switch_label"] = label
        for case, producer in self._parameters.items():
            producer._label = self.caseLabel_(label, case) if label is not None else None

    def caseLabel_(self, name: str, case: str) -> str:  # noqa: N802 - CMSSW spelling
        """``name@case``: the label CMSSW gives a case of the switch labelled ``name``."""
        return f"{name}@{case}"

    def _set_parameter(self, name: str, value: Any) -> None:
        if name not in self._caseFunctionDict:
            raise ConfigValueError(
                f"{self._what_()}: case '{name}' is not allowed (allowed ones are {', '.join(self._caseFunctionDict)})"
            )
        if not (isinstance(value, EDProducer) and not isinstance(value, SwitchProducer)) and not isinstance(
            value, EDAlias
        ):
            raise ConfigTypeError(f"{self._what_()}: case '{name}' can only be a cms.EDProducer or cms.EDAlias")
        self._parameters[name] = value
        if self._label is not None:
            value._label = self.caseLabel_(self._label, name)

    def _replace_content_(self, other: ParameterHolder) -> None:
        super()._replace_content_(other)
        self._label = self._label  # the cases taken are labelled label@case

    def __delattr__(self, name: str) -> None:
        case = self._parameters.get(name)
        super().__delattr__(name)
        if case is not None:
            case._label = None

    def _apply_overrides(self, overrides: Any, unknown: type[Exception] = ConfigTypeError) -> None:
        # clone() and Modifiers: None removes a case, a dict edits it, a module replaces it.
        for name, value in overrides.items():
            if value is None:
                if name not in self._parameters:
                    raise unknown(f"{self._what_()}: no case '{name}' to remove")
                delattr(self, name)
            elif isinstance(value, dict):
                if name not in self._parameters:
                    raise unknown(f"{self._what_()}: no case '{name}' to modify")
                self._parameters[name]._apply_overrides(value, unknown)
            else:
                self._set_parameter(name, copy.deepcopy(value))

    def _chooseCase(self, accelerators: list[str]) -> str:  # noqa: N802 - CMSSW spelling
        """The enabled case of highest priority for ``accelerators`` (CMSSW's rule).

        Raises:
            ~framework.config._types.ConfigRuntimeError: every case is disabled.
        """
        best: tuple[int, str] | None = None
        for case in self._parameters:
            enabled, priority = self._caseFunctionDict[case](accelerators)
            if enabled and (best is None or best[0] < priority):
                best = (priority, case)
        if best is None:
            raise ConfigRuntimeError(
                f"{self._what_()}: all cases {list(self._parameters)} are disabled for accelerators {accelerators}"
            )
        return best[1]

    def _getProducer(self, accelerators: list[str]) -> Any:  # noqa: N802 - CMSSW spelling
        """The case chosen for ``accelerators``: its EDProducer or EDAlias (labelled ``label@case``)."""
        return self._parameters[self._chooseCase(accelerators)]

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        pad = " " * (indent + 4)
        cases = ",".join(
            f"\n{pad}{case} = {self._parameters[case].dumpPython_(indent + 4)}" for case in sorted(self._parameters)
        )
        return f"{type(self).__name__}({cases}\n{' ' * indent})"


def _switch_cpu(accelerators: list[str]) -> tuple[bool, int]:
    # A module-level function, so that a config with a SwitchProducer pickles (as CMSSW's).
    return True, 1
