"""The layering written down in framework/__init__.py, checked on the import statements."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORK = ROOT / "framework"
ROOT_IO = {"uproot", "awkward"}
TRITON = {"tritonclient", "grpc"}


def qualified_imports(path: Path) -> set[str]:
    """Every module ``path`` imports, fully qualified (relative imports resolved from the
    file's package; ``from .. import config`` in framework/io gives ``framework.config``)."""
    package = list(path.relative_to(ROOT).with_suffix("").parts[:-1])
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if node.module:
                names.add(module)
            else:  # from . import x: x is a module of the package
                names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def imported_modules(path: Path) -> set[str]:
    """Top-level packages ``path`` imports (``uproot``, ``trio``, ``framework``)."""
    return {name.split(".")[0] for name in qualified_imports(path)}


def framework_imports(path: Path) -> set[str]:
    """The framework modules ``path`` imports, below ``framework`` (``io``, ``_errors``,
    ``io._writer``, ``sonic``); ``framework`` itself for its public names."""
    found = set()
    for name in qualified_imports(path):
        if name == "framework" or name.startswith("framework."):
            found.add(name.partition(".")[2] or "framework")
    return found


CORE = ["_module.py", "_event.py", "_bridge.py", "_worker.py", "_builder.py", "_scheduler.py",
        "_services.py", "_registry.py", "_source_base.py", "_errors.py"]


def test_config_language_is_pure_python():
    for path in (FRAMEWORK / "config").glob("*.py"):
        bad = imported_modules(path) & {"trio", "uproot", "awkward", "tritonclient", "numpy"}
        assert not bad, f"{path.name} imports {bad}"


def test_core_knows_neither_root_nor_triton():
    for name in CORE:
        path = FRAMEWORK / name
        bad = imported_modules(path) & (ROOT_IO | TRITON)
        bad |= {m for m in framework_imports(path) if m.split(".")[0] in ("io", "sonic")}
        assert not bad, f"framework/{name} imports {bad}"


def test_io_is_built_on_the_core_only():
    """framework.io: no Triton, no scheduler/builder/cmsrun, no sonic, no modules."""
    allowed = {"_errors", "_event", "_source_base", "config", "io"}
    files = list((FRAMEWORK / "io").glob("*.py"))
    assert len(files) >= 5
    for path in files:
        assert not imported_modules(path) & (TRITON | {"modules"}), f"{path} imports Triton or modules"
        outside = {m for m in framework_imports(path) if m != "io" and not m.startswith("io.")} - allowed
        assert not outside, f"{path.relative_to(ROOT)} imports framework modules {outside}"


def test_only_io_and_the_benchmarks_read_or_write_root_files():
    """uproot is imported in framework/io (and by the benchmarks' bare-uproot baselines)."""
    for package in ("framework", "modules"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).parts
            if parts[:2] in (("framework", "io"), ("framework", "bench")):
                continue
            assert "uproot" not in imported_modules(path), f"{path.relative_to(ROOT)} imports uproot"


def test_only_sonic_talks_to_triton():
    """framework.bench may too: its baselines are bare tritonclient loops and Triton's own statistics."""
    for path in FRAMEWORK.rglob("*.py"):
        if {"sonic", "bench"} & set(path.relative_to(FRAMEWORK).parts):
            continue
        assert "tritonclient" not in imported_modules(path), f"{path} imports tritonclient"


def test_sonic_knows_nothing_of_root_files():
    for path in (FRAMEWORK / "sonic").glob("*.py"):
        assert not imported_modules(path) & {"uproot"}, f"{path} imports uproot"
        assert not {m for m in framework_imports(path) if m.split(".")[0] == "io"}, f"{path} imports framework.io"


TORCH_RUNNER = FRAMEWORK / "sonic" / "torch_backend.py"


def test_torch_is_not_a_runtime_dependency():
    """Only the torch runner imports torch, and only the Python-backend model imports the
    runner, inside the function that picks it (tests/test_models.py checks at run time)."""
    for package in ("framework", "modules"):
        for path in (ROOT / package).rglob("*.py"):
            if path != TORCH_RUNNER:
                assert "torch" not in imported_modules(path), f"{path} imports torch"
    for path in (ROOT / "framework").rglob("*.py"):
        tree = ast.parse(path.read_text())
        top_level = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
        assert ".torch_backend" not in {f".{m}" for m in top_level if m} and "torch_backend" not in top_level, \
            f"{path} imports the torch runner at module level"
