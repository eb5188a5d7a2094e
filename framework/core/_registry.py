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

A name that two installed packages provide (two ``pysonic.modules`` entry points, or one
that shadows a built-in type) is an error when it is looked up, naming both providers:
CMSSW's plugin manager refuses duplicate plugin names too, instead of picking one.
:func:`type_catalog` lists every type with its kind and provider (``cmsrun --list-types``).
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from framework.utilities import ConfigurationError

ENTRY_POINT_GROUP = "pysonic.modules"

# name -> "module:attribute", resolved lazily so that importing the registry stays cheap
_BUILTIN = {
    "EmptySource": "framework.core._source_base:EmptySource",
    "FastTimerService": "framework.cmsrun:FastTimerService",
    "MessageLogger": "framework.core._messagelogger:MessageLogger",
    "PoolSource": "framework.io:PoolSource",
    "TFileService": "framework.io:TFileService",
    "TritonService": "framework.service:TritonService",
}


_REGISTERED: dict[str, type] = {}


def register_type(type_name: str, cls: type) -> None:
    """Register ``cls`` under ``type_name`` for this Python process (tests, notebooks).

    Installed packages should use the ``pysonic.modules`` entry points instead.
    """
    _REGISTERED[type_name] = cls


@cache
def _entry_points() -> dict[str, list[EntryPoint]]:
    """Type name -> the ``pysonic.modules`` entry points that provide it (one per package,
    ``importlib.metadata`` lists each installed distribution once)."""
    found: dict[str, list[EntryPoint]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, []).append(ep)
    return found


def available_types() -> list[str]:
    """Every registered type name, sorted."""
    return sorted(set(_BUILTIN) | set(_REGISTERED) | set(_entry_points()))


def _provider(ep: EntryPoint) -> str:
    """``entry point 'Name = module:Class' of package 'dist'``: how errors and listings name it."""
    dist = ep.dist.name if ep.dist is not None else "?"
    return f"entry point '{ep.name} = {ep.value}' of package '{dist}'"


def _providers(type_name: str) -> list[str]:
    """Every provider of ``type_name`` but :func:`register_type` (which deliberately overrides)."""
    found = [f"pysonic's built-in '{_BUILTIN[type_name]}'"] if type_name in _BUILTIN else []
    return found + [_provider(ep) for ep in _entry_points().get(type_name, [])]


def _duplicate(type_name: str, context: str = "") -> ConfigurationError:
    prefix = f"{context}: " if context else ""
    return ConfigurationError(
        f"{prefix}module type '{type_name}' is provided twice: {' and '.join(_providers(type_name))} "
        "(as CMSSW's plugin manager, pysonic refuses duplicate type names: uninstall or rename one)"
    )


@dataclass(frozen=True)
class TypeInfo:
    """One registered type, as ``cmsrun --list-types`` shows it.

    Attributes:
        name: the type name a config uses.
        kind: ``EDProducer``, ``EDFilter``, ``EDAnalyzer``, ``OutputModule``, ``Source`` or
            ``Service`` (the class's ``kind``); ``"?"`` if it cannot be loaded.
        provider: the package that provides it and its ``module:Class``
            (``pysonic (modules.jets:JetHTProducer)``), or ``register_type``; several,
            comma-separated, for a duplicate name.
        problem: why it cannot be used ("" if it can): a load error, or two providers.
    """

    name: str
    kind: str
    provider: str
    problem: str = ""


def type_catalog() -> list[TypeInfo]:
    """Every registered type with its kind and provider, sorted by name. Imports each type's
    module (to read its ``kind``): slower than :func:`available_types`, never raises."""
    catalog = []
    for name in available_types():
        if name in _REGISTERED:
            providers = ["register_type (this process)"]
        else:
            providers = [f"pysonic (built in: {_BUILTIN[name]})"] if name in _BUILTIN else []
            providers += [
                f"{ep.dist.name if ep.dist is not None else '?'} ({ep.value})" for ep in _entry_points().get(name, [])
            ]
        try:
            kind = str(getattr(find_type(name), "kind", "?"))
            problem = ""
        except ConfigurationError as exc:
            kind, problem = "?", str(exc)
        catalog.append(TypeInfo(name, kind, ", ".join(providers), problem))
    return catalog


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
        ConfigurationError: unknown name (the message lists the closest registered names),
            a registration that cannot be imported, or a name two packages provide (naming
            both entry points).
    """
    if type_name in _REGISTERED:
        return _REGISTERED[type_name]
    if len(_providers(type_name)) > 1:
        raise _duplicate(type_name, context)
    if type_name in _BUILTIN:
        return _load(_BUILTIN[type_name], type_name)
    eps = _entry_points().get(type_name)
    if eps:
        try:
            cls: type = eps[0].load()
            return cls
        except Exception as exc:  # noqa: BLE001 - any import failure becomes a config error
            raise ConfigurationError(
                f"module type '{type_name}' (entry point {eps[0].value}) cannot be loaded: {type(exc).__name__}: {exc}"
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
