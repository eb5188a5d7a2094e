"""The layering written down in framework/__init__.py, checked on the import statements."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level > 0 and node.module:
            names.add("." + node.module.split(".")[0])
    return names


def test_config_language_is_pure_python():
    for path in (ROOT / "framework" / "config").glob("*.py"):
        bad = imported_modules(path) & {"trio", "uproot", "awkward", "tritonclient", "numpy"}
        assert not bad, f"{path.name} imports {bad}"


CORE = ["_module.py", "_event.py", "_bridge.py", "_worker.py", "_builder.py", "_scheduler.py",
        "_services.py", "_registry.py", "_source_base.py", "_errors.py"]


def test_core_knows_neither_root_nor_triton():
    for name in CORE:
        mods = imported_modules(ROOT / "framework" / name)
        bad = mods & {"uproot", "awkward", "tritonclient", "grpc", ".sonic", "sonic"}
        assert not bad, f"framework/{name} imports {bad}"


def test_only_sonic_talks_to_triton():
    """framework.bench may too: its baselines are bare tritonclient loops and Triton's own statistics."""
    for path in (ROOT / "framework").rglob("*.py"):
        if {"sonic", "bench"} & set(path.relative_to(ROOT / "framework").parts):
            continue
        assert "tritonclient" not in imported_modules(path), f"{path} imports tritonclient"


TORCH_RUNNER = ROOT / "framework" / "sonic" / "torch_backend.py"


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
