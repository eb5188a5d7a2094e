"""Finding module, source and service types by name (CMSSW's plugin factory).

A config says ``cms.EDProducer("ParticleNetSonicProducer", ...)``; the type name is
looked up, in order:

0. types registered at run time with :func:`register_type` (tests, notebooks);
1. the types built into the framework (``PoolSource``, ``EmptySource``,
   ``FastTimerService``, ``MessageLogger``, ``TFileService``, ``TritonService``);
2. the Python entry points of group ``pysonic.modules`` of every installed package, so a
   user's own package provides types by declaring, in its ``pyproject.toml``::

       [project.entry-points."pysonic.modules"]
       MyProducer = "mypackage.producers:MyProducer"

3. a dotted ``"package.module:Class"`` name, for a module type in a plain Python file on
   ``sys.path`` (the config's own folder is on it while the config runs).
"""

from __future__ import annotations

import difflib
import importlib
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from ._errors import ConfigurationError

ENTRY_POINT_GROUP = "pysonic.modules"

# name -> "module:attribute", resolved lazily so that importing the registry stays cheap
_BUILTIN = {
    "EmptySource": "framework._source_base:EmptySource",
    "FastTimerService": "framework._timing:FastTimerService",
    "MessageLogger": "framework._messagelogger:MessageLogger",
    "PoolSource": "framework.io:PoolSource",
    "TFileService": "framework.io:TFileService",
    "TritonService": "framework.service._service:TritonService",
}


_REGISTERED: dict[str, type] = {}


def register_type(type_name: str, cls: type) -> None:
    """Register ``cls`` under ``type_name`` for this Python process (tests, notebooks).

    Installed packages should use the ``pysonic.modules`` entry points instead.
    """
    _REGISTERED[type_name] = cls


@cache
def _entry_points() -> dict[str, EntryPoint]:
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    return found


def available_types() -> list[str]:
    """Every registered type name, sorted."""
    return sorted(set(_BUILTIN) | set(_REGISTERED) | set(_entry_points()))


def _load(target: str, type_name: str) -> type:
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
        cls: type = getattr(module, attr)
        return cls
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(
            f"module type '{type_name}' is registered as '{target}', which cannot be loaded: {exc}"
        ) from exc


def find_type(type_name: str, context: str = "") -> type[Any]:  # Any: modules, sources, services
    """The class registered under ``type_name``.

    Args:
        type_name: as written in the config, e.g. ``"JetMultiplicityFilter"``, or
            ``"package.module:Class"``.
        context: what asked, for the error message (e.g. ``"module 'jetFilter'"``).

    Raises:
        ConfigurationError: unknown name (the message lists the closest registered names)
            or a registration that cannot be imported.
    """
    if type_name in _REGISTERED:
        return _REGISTERED[type_name]
    if type_name in _BUILTIN:
        return _load(_BUILTIN[type_name], type_name)
    eps = _entry_points()
    if type_name in eps:
        try:
            cls: type = eps[type_name].load()
            return cls
        except Exception as exc:  # noqa: BLE001 - any import failure becomes a config error
            raise ConfigurationError(
                f"module type '{type_name}' (entry point {eps[type_name].value}) cannot be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    if ":" in type_name:
        return _load(type_name, type_name)
    close = difflib.get_close_matches(type_name, available_types(), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    prefix = f"{context}: " if context else ""
    raise ConfigurationError(
        f"{prefix}unknown module type '{type_name}'{hint} "
        f"(registered: {len(available_types())} types, see 'cmsrun --list-types')"
    )
