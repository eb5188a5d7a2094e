"""CMSSW's ``MessageLogger`` service mapped onto Python's :mod:`logging`.

What a CMSSW config sets, and what it does here:

- ``cerr.threshold`` (``cout.threshold`` when ``cout.enable`` and not ``cerr.enable``):
  ``DEBUG``/``INFO``/``WARNING``/``ERROR``, the lowest level shown; ``DEBUG`` only with
  ``debugModules`` non-empty (as CMSSW: LogDebug is off otherwise). Sets the level of the
  ``pysonic`` loggers for the job.
- ``cerr.enable = False`` (and no ``cout``): only errors are shown.
- a category PSet with ``limit = 0`` (``cerr.TritonClient = cms.untracked.PSet(limit =
  cms.untracked.int32(0))``): that category is silenced. CMSSW's categories of SONIC
  (``TritonClient``, ``TritonService``, ``SonicClient``...) are the ``pysonic.sonic``
  logger; ``FwkReport`` is ``pysonic`` (cmsrun's event reports); any other category is
  the logger of that name (``logging.getLogger("MyCategory")`` in a module); names with
  ``:`` (``"Module:Category"``) are accepted. Other limits, ``reportEvery``,
  ``timespan``, ``noTimeStamps`` are accepted and have no effect.
- ``files = cms.untracked.PSet(name = cms.untracked.PSet(threshold = ...))``: a log file
  ``name.log`` (``name`` kept if it has an extension) in the working directory.
- ``suppressInfo``/``suppressWarning``/``suppressDebug``/``suppressFwkInfo``: module labels
  (or categories) whose messages of that level and below are dropped.

The settings take effect when the job begins and are undone at its end (levels, handlers,
filters).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ._services import Service

__all__ = ["MessageLogger"]

_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}
# CMSSW categories of what pysonic logs, by logger.
_CATEGORY_LOGGERS = {
    "TritonClient": "pysonic.sonic",
    "TritonService": "pysonic.sonic",
    "SonicClient": "pysonic.sonic",
    "SonicTriton": "pysonic.sonic",
    "FwkReport": "pysonic",
    "FwkSummary": "pysonic",
}
_DESTINATION_KEYS = {
    "enable",
    "threshold",
    "noTimeStamps",
    "noLineBreaks",
    "lineLength",
    "enableStatistics",
    "resetStatistics",
    "statisticsThreshold",
    "default",
    "INFO",
    "WARNING",
    "ERROR",
    "DEBUG",
    "FWKINFO",
    "extension",
    "filename",
    "output",
}


def _get(pset: Any, name: str, default: Any) -> Any:
    return pset[name] if pset is not None and name in pset else default


class _Suppress(logging.Filter):
    """Drops records of silenced categories, and suppressed labels at or below a level."""

    def __init__(self, silenced: set[str], suppressed: dict[int, set[str]]) -> None:
        super().__init__()
        self.silenced, self.suppressed = silenced, suppressed

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name in self.silenced:
            return False
        message = record.getMessage()
        for level, labels in self.suppressed.items():
            if record.levelno <= level and any(f"'{label}'" in message or record.name == label for label in labels):
                return False
        return True


class MessageLogger(Service):
    """CMSSW's MessageLogger configuration, applied to Python logging (see the module docstring)."""

    @classmethod
    def fill_descriptions(cls, desc: Any) -> None:
        desc.allow_unknown_("CMSSW's MessageLogger parameters (cerr, cout, files, categories, debugModules, ...)")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self._saved_levels: dict[str, int] = {}
        self._handlers: list[logging.Handler] = []
        self._filter: _Suppress | None = None

    async def begin_job(self) -> None:
        # Applied when the job begins, not when it is built: building a job changes nothing.
        self._apply(self.params)

    def _apply(self, params: Any) -> None:
        cerr, cout = _get(params, "cerr", None), _get(params, "cout", None)
        use_cout = bool(_get(cout, "enable", False)) and not bool(_get(cerr, "enable", True))
        destination = cout if use_cout else cerr
        threshold = str(_get(destination, "threshold", "INFO")).upper()
        level = _LEVELS.get(threshold, logging.INFO)
        if level == logging.DEBUG and not _get(params, "debugModules", []):
            level = logging.INFO  # CMSSW: LogDebug needs debugModules
        if not _get(cerr, "enable", True) and not use_cout:
            level = logging.ERROR
        self._set_level("pysonic", level)
        silenced: set[str] = set()
        for name in list(cerr or {}) + list(cout or {}):
            value = _get(cerr, name, None) if name in (cerr or {}) else _get(cout, name, None)
            if name in _DESTINATION_KEYS or not hasattr(value, "keys"):
                continue
            if _get(value, "limit", None) == 0:
                silenced.add(_CATEGORY_LOGGERS.get(name, name))
        suppressed = {
            logging.INFO: set(_get(params, "suppressInfo", [])) | set(_get(params, "suppressFwkInfo", [])),
            logging.WARNING: set(_get(params, "suppressWarning", [])),
            logging.DEBUG: set(_get(params, "suppressDebug", [])),
        }
        self._filter = _Suppress(silenced, {k: v for k, v in suppressed.items() if v})
        for handler in logging.getLogger().handlers:
            handler.addFilter(self._filter)
        for name in _get(params, "files", {}) or {}:
            spec = _get(params, "files", {})[name]
            filename = name if os.path.splitext(name)[1] else name + ".log"
            handler = logging.FileHandler(filename)
            handler.setLevel(_LEVELS.get(str(_get(spec, "threshold", "INFO")).upper(), logging.INFO))
            handler.addFilter(self._filter)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
            logging.getLogger().addHandler(handler)
            self._handlers.append(handler)

    def _set_level(self, name: str, level: int) -> None:
        logger = logging.getLogger(name)
        self._saved_levels.setdefault(name, logger.level)
        logger.setLevel(level)

    async def end_job(self) -> None:
        for name, level in self._saved_levels.items():
            logging.getLogger(name).setLevel(level)
        root = logging.getLogger()
        for handler in root.handlers:
            if self._filter is not None:
                handler.removeFilter(self._filter)
        for handler in self._handlers:
            root.removeHandler(handler)
            handler.close()
