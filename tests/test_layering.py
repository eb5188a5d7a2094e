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
    for path in (ROOT / "framework").rglob("*.py"):
        if "sonic" in path.relative_to(ROOT / "framework").parts:
            continue
        assert "tritonclient" not in imported_modules(path), f"{path} imports tritonclient"


def test_torch_is_not_a_runtime_dependency():
    for package in ("framework", "modules"):
        for path in (ROOT / package).rglob("*.py"):
            assert "torch" not in imported_modules(path), f"{path} imports torch"
