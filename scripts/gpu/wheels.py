"""The wheels the GPU machine lacks, computed, and the check that they cover the runtime.

    python scripts/gpu/wheels.py           # name==version per line: what pack.sh downloads
    python scripts/gpu/wheels.py --check   # on the GPU machine: import every third-party
                                           # module of the runtime; exit 1 naming the missing

The list is the closure of the installed ``pysonic`` distribution's requirements
(``importlib.metadata``: each distribution's ``Requires-Dist``, markers evaluated for the
GPU machine's interpreter, CPython 3.12 on Linux x86_64, extras followed only where a
requirement names them, e.g. ``tritonclient[grpc]``), minus

* what the machine's image has: the distributions listed in ``image.txt`` beside this file
  and their own requirements (pip installed them with their dependencies), and
* ``nvidia-pytriton``, whose server binary travels as ``tritonserver.tar.xz`` (pack.sh) and
  whose Python side the framework does not import there (``$PYSONIC_TRITONSERVER_HOME``).

Versions are the ones installed here, the environment the tests ran in. Run it with the
Python of the environment that packs (pack.sh does). ``runtime_distributions`` walks the
imports of ``framework/`` and ``modules/`` (every ``import``, also those inside functions)
and maps their top-level names to distributions (``packages_distributions``); the CI test
(``tests/test_gpu_pack.py``) checks that each is in the list or the image.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.metadata as metadata
import pathlib
import sys
from collections.abc import Iterable, Mapping

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
IMAGE_LIST = HERE / "image.txt"
ROOT = "pysonic"
REPLACED = {"nvidia-pytriton": "its tritonserver travels as tritonserver.tar.xz (pack.sh)"}
"""Requirements not packed (nor followed), and why."""
RUNTIME_PACKAGES = ("framework", "modules")
FIRST_PARTY = {"framework", "modules", "FWCore", "HeterogeneousCore", "Configuration", "RecoMET", "configs"}
STUB_ONLY = {"triton_python_backend_utils"}
"""Imported by the Python-backend model, provided by tritonserver's stub, not a distribution."""


def target_environment(python: str = "3.12.3") -> dict[str, str]:
    """Marker variables of the GPU machine's interpreter (CPython ``python`` on Linux x86_64)."""
    env: dict[str, str] = {k: str(v) for k, v in default_environment().items()}
    env.update(
        python_version=".".join(python.split(".")[:2]),
        python_full_version=python,
        implementation_name="cpython",
        platform_python_implementation="CPython",
        sys_platform="linux",
        platform_system="Linux",
        os_name="posix",
        platform_machine="x86_64",
    )
    return env


def _applies(requirement: Requirement, extras: Iterable[str], env: Mapping[str, str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({**env, "extra": extra}) for extra in ("", *extras))


def closure(
    roots: Iterable[str], env: Mapping[str, str], stop: Iterable[str] = ()
) -> tuple[dict[str, str | None], set[str]]:
    """The distributions ``roots`` need, transitively, as installed here.

    Returns ``({canonical name: installed version, or None if not installed here},
    names in ``stop`` that were reached)``. The roots themselves are included; a
    distribution not installed here is listed but its requirements are unknown (and not
    followed); ``stop`` names are neither listed nor followed.
    """
    stop = {canonicalize_name(s) for s in stop}
    found: dict[str, str | None] = {}
    extras_seen: dict[str, set[str]] = {}
    reached: set[str] = set()
    queue: list[tuple[str, set[str]]] = [(canonicalize_name(r), set()) for r in roots]
    while queue:
        name, extras = queue.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            found[name] = None
            continue
        found[name] = dist.version
        for line in dist.requires or ():
            requirement = Requirement(line)
            if not _applies(requirement, extras, env):
                continue
            dep = canonicalize_name(requirement.name)
            if dep in stop:
                reached.add(dep)
                continue
            new = set(requirement.extras) - extras_seen.get(dep, set())
            if dep not in extras_seen or new:
                extras_seen.setdefault(dep, set()).update(requirement.extras)
                queue.append((dep, extras_seen[dep]))
    return found, reached


def image_distributions(path: pathlib.Path = IMAGE_LIST) -> list[str]:
    """The distribution names of ``image.txt`` (one per line; ``#`` starts a comment)."""
    names = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [canonicalize_name(n) for n in names if n]


def covered_by_image(env: Mapping[str, str], path: pathlib.Path = IMAGE_LIST) -> set[str]:
    """The image's distributions with their requirements (as installed here)."""
    return set(closure(image_distributions(path), env)[0])


def pack_wheels(env: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """``{name: version}`` of the wheels to pack: pysonic's closure minus the image and ``REPLACED``."""
    env = env or target_environment()
    needed, _ = closure([ROOT], env, stop=REPLACED)
    image = covered_by_image(env)
    return {n: v for n, v in sorted(needed.items()) if n != ROOT and n not in image}


def _optional(handler: ast.ExceptHandler) -> bool:
    """An ``except`` clause that catches a failed import (the import in its ``try`` is optional)."""
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names)


class _Imports(ast.NodeVisitor):
    """Top-level names of the absolute imports of a module, but those in a ``try`` whose
    ``except ImportError`` makes them optional (``skhep_testdata`` where installed, say)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def visit_Try(self, node: ast.Try) -> None:  # noqa: N802 - ast.NodeVisitor's spelling
        if not any(_optional(h) for h in node.handlers):
            self.generic_visit(node)
            return
        for child in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:  # noqa: N802
        self.names += [alias.name.split(".")[0] for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:  # noqa: N802
        if node.level == 0 and node.module:
            self.names.append(node.module.split(".")[0])


def imported_modules(packages: Iterable[str] = RUNTIME_PACKAGES, repo: pathlib.Path = REPO) -> dict[str, str]:
    """Third-party top-level modules imported anywhere in ``packages`` (also inside functions,
    not where an ``except ImportError`` makes the import optional) -> the first file importing it."""
    out: dict[str, str] = {}
    for package in packages:
        for path in sorted((repo / package).rglob("*.py")):
            visitor = _Imports()
            visitor.visit(ast.parse(path.read_text(), str(path)))
            for top in visitor.names:
                if top in sys.stdlib_module_names or top in FIRST_PARTY or top in STUB_ONLY:
                    continue
                out.setdefault(top, str(path.relative_to(repo)))
    return out


def runtime_distributions() -> tuple[dict[str, str], dict[str, str]]:
    """``({distribution: a file that imports it}, {module without a distribution here: file})``."""
    owners = metadata.packages_distributions()
    dists: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for module, where in imported_modules().items():
        if module not in owners:
            unknown[module] = where
        for dist in owners.get(module, ()):
            dists.setdefault(canonicalize_name(dist), f"{module} in {where}")
    return dists, unknown


def uncovered(runtime: Mapping[str, str], wheels: Iterable[str], image: Iterable[str]) -> dict[str, str]:
    """The runtime's distributions in neither the wheels nor the image (name -> where imported)."""
    have = {canonicalize_name(w) for w in wheels} | set(image)
    return {d: where for d, where in runtime.items() if d not in have and d != ROOT}


def check_imports() -> list[str]:
    """Import every third-party module the runtime imports; the ones that fail, as one line each."""
    failed = []
    for module, where in sorted(imported_modules().items()):
        try:
            importlib.import_module(module)
        except Exception as err:  # noqa: BLE001 - every failure is reported, not only the first
            failed.append(f"{module} (imported in {where}): {type(err).__name__}: {err}")
    return failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="import the runtime's third-party modules here")
    parser.add_argument("--python", default="3.12.3", help="the GPU machine's Python version (markers)")
    ns = parser.parse_args(argv)
    if ns.check:
        failed = check_imports()
        for line in failed:
            print(f"wheels.py --check: cannot import {line}", file=sys.stderr)
        return 1 if failed else 0
    wheels = pack_wheels(target_environment(ns.python))
    missing = [n for n, v in wheels.items() if v is None]
    if missing:
        print(f"wheels.py: needed for Python {ns.python} but not installed here: {', '.join(missing)} "
              "(their own requirements are not followed)", file=sys.stderr)  # fmt: skip
    for name, version in wheels.items():
        print(name if version is None else f"{name}=={version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
