"""Modifiers and eras (CMSSW's ``FWCore/ParameterSet/python/Config.py``: Modifier, ModifierChain,
ProcessModifier).

A Modifier is a switch defined once (``run3 = cms.Modifier()``) and *chosen* by giving it to
``cms.Process("NAME", run3)``; from then on ``run3.toModify(obj, ...)`` edits ``obj`` and
``run3.toReplaceWith(a, b)`` makes ``a`` a copy of ``b``; an unchosen Modifier does nothing.
A ModifierChain (an era) chooses all it holds. ``m1 & m2``, ``m1 | m2`` and ``~m1`` combine
conditions. A ProcessModifier (``m.makeProcessModifier(func)``) calls ``func(process)`` when a
fragment holding it is loaded into a process where ``m`` is chosen.

As in CMSSW (one cmsRun = one Python process), being chosen is a property of the Modifier
object. ``load_config`` runs a config as one cmsRun would: the fragments it imports are
re-imported by the next config, and the Modifiers it chose are unchosen once it has run,
so that one config's choice does not carry over to the next one run in the same interpreter.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any

from ._types import ConfigTypeError, describe_value

__all__ = ["Modifier", "ModifierChain", "ProcessModifier"]


class _BoolModifierBase:
    """What ``toModify`` and friends need: ``_isChosen()``."""

    def _isChosen(self) -> bool:  # noqa: N802 - CMSSW spelling
        raise NotImplementedError

    def isChosen(self) -> bool:  # noqa: N802
        return self._isChosen()

    def toModify(self, obj: Any, func: Callable[[Any], Any] | None = None, **kw: Any) -> _BoolModifierBase:  # noqa: N802
        """If chosen: ``func(obj)``, or set the parameters ``kw`` on ``obj`` as ``clone`` does
        (a dict edits a nested PSet, None removes a parameter).

        Raises:
            ~framework.config._types.ConfigTypeError: both ``func`` and parameters given.
            KeyError: a parameter that ``obj`` lacks given an untyped value.
        """
        if func is not None and kw:
            raise ConfigTypeError("toModify takes an argument 'func' or parameters, but not both")
        if self._isChosen():
            if func is not None:
                func(obj)
            else:
                _modify_parameters(obj, kw)
        return self

    def toReplaceWith(self, to_obj: Any, from_obj: Any) -> _BoolModifierBase:  # noqa: N802
        """If chosen: ``to_obj`` takes the content of ``from_obj`` (same kind), keeping its label.

        Raises:
            ~framework.config._types.ConfigTypeError: the two are not of the same class.
        """
        if type(to_obj) is not type(from_obj):
            raise ConfigTypeError(
                f"toReplaceWith requires both arguments to be the same class type, got "
                f"{type(to_obj).__name__} and {type(from_obj).__name__}"
            )
        if self._isChosen():
            to_obj._replace_content_(from_obj)
        return self

    def makeProcessModifier(self, func: Callable[[Any], Any]) -> ProcessModifier:  # noqa: N802
        """A ProcessModifier calling ``func(process)`` where this is chosen."""
        return ProcessModifier(self, func)

    def __and__(self, other: _BoolModifierBase) -> _BoolModifierBase:
        return _AndModifier(self, other)

    def __or__(self, other: _BoolModifierBase) -> _BoolModifierBase:
        return _OrModifier(self, other)

    def __invert__(self) -> _BoolModifierBase:
        return _NotModifier(self)


def _modify_parameters(obj: Any, kw: dict[str, Any]) -> None:
    from ._pset import ParameterHolder

    if not isinstance(obj, ParameterHolder):
        for name, value in kw.items():
            setattr(obj, name, value)
        return
    obj._apply_overrides(kw, KeyError)


class _AndModifier(_BoolModifierBase):
    def __init__(self, left: _BoolModifierBase, right: _BoolModifierBase) -> None:
        self._left, self._right = left, right

    def _isChosen(self) -> bool:  # noqa: N802
        return self._left._isChosen() and self._right._isChosen()


class _OrModifier(_AndModifier):
    def _isChosen(self) -> bool:  # noqa: N802
        return self._left._isChosen() or self._right._isChosen()


class _NotModifier(_BoolModifierBase):
    def __init__(self, modifier: _BoolModifierBase) -> None:
        self._modifier = modifier

    def _isChosen(self) -> bool:  # noqa: N802
        return not self._modifier._isChosen()


# Modifiers and chains in the order they were chosen: load_config un-chooses those its config
# chose, once the config has run (see the module docstring).
CHOSEN: list[Any] = []


class Modifier(_BoolModifierBase):
    """A switch that configs test and act on (``cms.Modifier()``); chosen by ``cms.Process``."""

    def __init__(self) -> None:
        self._chosen = False

    def _setChosen(self) -> None:  # noqa: N802 - CMSSW spelling
        if not self._chosen:
            CHOSEN.append(self)
        self._chosen = True

    def _isChosen(self) -> bool:  # noqa: N802
        return self._chosen

    def _isOrContains(self, other: Any) -> bool:  # noqa: N802 - CMSSW spelling
        return other is self

    def __deepcopy__(self, memo: dict[int, Any]) -> Modifier:
        return self  # a Modifier is a global switch, never copied with a config


class ModifierChain(_BoolModifierBase):
    """Several Modifiers chosen together: an era (``cms.ModifierChain(run3, sonic)``)."""

    def __init__(self, *modifiers: Modifier | ModifierChain) -> None:
        for m in modifiers:
            if not isinstance(m, (Modifier, ModifierChain)):
                raise ConfigTypeError(f"cms.ModifierChain takes Modifiers, got {describe_value(m)}")
        self._modifiers = tuple(modifiers)
        self._chosen = False

    def _setChosen(self) -> None:  # noqa: N802
        if not self._chosen:
            CHOSEN.append(self)
        self._chosen = True
        for m in self._modifiers:
            m._setChosen()

    def _isChosen(self) -> bool:  # noqa: N802
        return self._chosen

    def _isOrContains(self, other: Any) -> bool:  # noqa: N802 - CMSSW spelling
        return other is self or self._holds(other)

    def _holds(self, modifier: Any) -> bool:
        return any(m is modifier or (isinstance(m, ModifierChain) and m._holds(modifier)) for m in self._modifiers)

    def copyAndExclude(self, exclude: Iterable[Modifier | ModifierChain]) -> ModifierChain:  # noqa: N802
        """A new chain without ``exclude`` (searched in nested chains too)."""
        excluded = list(exclude)
        kept: list[Modifier | ModifierChain] = []
        for m in self._modifiers:
            if any(m is e for e in excluded):
                continue
            kept.append(m.copyAndExclude(excluded) if isinstance(m, ModifierChain) else m)
        return ModifierChain(*kept)

    def copyAndAdd(self, *modifiers: Modifier | ModifierChain) -> ModifierChain:  # noqa: N802
        return ModifierChain(*self._modifiers, *modifiers)

    def __deepcopy__(self, memo: dict[int, Any]) -> ModifierChain:
        return self


class ProcessModifier:
    """``func(process)`` applied once when a fragment holding this is loaded, if ``modifier`` is chosen."""

    def __init__(self, modifier: _BoolModifierBase, func: Callable[[Any], Any]) -> None:
        self._modifier, self._func = modifier, func

    def apply(self, process: Any) -> None:
        if self._modifier._isChosen():
            self._func(process)

    def __deepcopy__(self, memo: dict[int, Any]) -> ProcessModifier:
        return copy.copy(self)
