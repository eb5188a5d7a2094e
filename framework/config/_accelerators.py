"""Accelerators of a job (CMSSW's ``ProcessAccelerator`` in ``FWCore/ParameterSet/python/Config.py``).

A ``ProcessAccelerator`` attached to a process (``process.ProcessAcceleratorFoo =
ProcessAcceleratorFoo()``, under its class name) names accelerator labels (``labels()``) and
those present on this machine (``enabledLabels()``). ``"cpu"`` is always there.
``process.options.accelerators`` (default ``["*"]``) picks among the available ones with
shell patterns; the result chooses the case of every ``SwitchProducer``. pysonic declares no
accelerator of its own: the framework runs on CPUs (GPUs serve inference through Triton), so
without a ProcessAccelerator in the config the selection is ``["cpu"]``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Any

from ._types import ConfigTypeError, ConfigValueError

__all__ = ["ProcessAccelerator", "ProcessForProcessAccelerator", "select_accelerators"]


class ProcessAccelerator:
    """Base of the accelerators a config declares (CMSSW's hooks, overridden by subclasses).

    Attached under its class name (``process.X = X()``), configuration only: dumped as
    ``process.X = X(<dumpPythonImpl>)`` with ``from <module> import X`` in the header.
    """

    _is_config_structure = True  # never a parameter value

    def type_(self) -> str:
        """The class name: the label it is attached under."""
        return type(self).__name__

    def labels(self) -> list[str]:
        """Every accelerator label this kind of accelerator knows."""
        return []

    def enabledLabels(self) -> list[str]:  # noqa: N802 - CMSSW spelling
        """The labels of those present on this machine."""
        return []

    def apply(self, process: ProcessForProcessAccelerator, accelerators: list[str]) -> None:
        """Customize Services for the selected ``accelerators`` (patterns already expanded);
        ``process`` gives access to Services only."""

    def dumpPythonImpl(self, options: Any) -> str:  # noqa: N802 - CMSSW spelling
        """The body of the dump (``enabled = [...]``), if the subclass has state to write."""
        return ""

    def dumpPython_(self, indent: int = 0) -> str:  # noqa: N802
        body = self.dumpPythonImpl(_DumpOptions(indent + 4))
        return f"{type(self).__name__}(" + (f"\n{body}\n" if body else "") + ")"

    def dumpPython(self, options: Any = None) -> str:  # noqa: N802 - CMSSW spelling
        return self.dumpPython_() + "\n"

    def __repr__(self) -> str:
        return self.dumpPython_()


class _DumpOptions:
    """What ``dumpPythonImpl`` reads of CMSSW's PrintOptions: the indentation."""

    def __init__(self, indent: int) -> None:
        self._indent = indent

    def indentation(self) -> str:
        return " " * self._indent


class ProcessForProcessAccelerator:
    """The process as ``ProcessAccelerator.apply`` sees it: its Services only (CMSSW's wrapper).

    Raises:
        ~framework.config._types.ConfigTypeError: getting, setting or adding anything but a Service.
    """

    def __init__(self, process: Any) -> None:
        object.__setattr__(self, "_process", process)

    def __getattr__(self, label: str) -> Any:
        value = getattr(self._process, label)
        if getattr(value, "_kind", None) != "Service":
            raise ConfigTypeError(f"ProcessAccelerator.apply() can get only Services, not '{label}'")
        return value

    def __setattr__(self, label: str, value: Any) -> None:
        if getattr(value, "_kind", None) != "Service":
            raise ConfigTypeError(f"ProcessAccelerator.apply() can set only Services, not '{label}'")
        setattr(self._process, label, value)

    def add_(self, value: Any) -> None:
        if getattr(value, "_kind", None) != "Service":
            raise ConfigTypeError("ProcessAccelerator.apply() can add only Services")
        self._process.add_(value)


def select_accelerators(patterns: Iterable[str], accelerators: Iterable[ProcessAccelerator]) -> list[str]:
    """The accelerators a job uses (CMSSW's ``@selected_accelerators``), sorted.

    Args:
        patterns: ``process.options.accelerators``: ``["*"]`` (every available one) or shell
            patterns (``"gpu-*"``).
        accelerators: the process's ProcessAccelerators.

    Raises:
        ~framework.config._types.ConfigValueError: ``"*"`` with other patterns, or a pattern
            that matches no accelerator label at all (available or not).
    """
    patterns = list(patterns)
    known, available = {"cpu"}, {"cpu"}
    for accelerator in accelerators:
        known.update(accelerator.labels())
        available.update(accelerator.enabledLabels())
    if "*" in patterns:
        if len(patterns) > 1:
            raise ConfigValueError(
                f"process.options.accelerators may contain '*' only as its only element, got {patterns}"
            )
        return sorted(available)
    invalid = [p for p in patterns if not any(fnmatch.fnmatchcase(a, p) for a in known)]
    if invalid:
        raise ConfigValueError(
            f"process.options.accelerators: {', '.join(invalid)} match(es) no accelerator; "
            f"valid: {', '.join(sorted(known))} or patterns of them"
        )
    return sorted(a for a in available if any(fnmatch.fnmatchcase(a, p) for p in patterns))
