"""The layering written down in framework/__init__.py, checked on the import statements.

Imports are compared by full dotted name, relative imports resolved (``from ._client
import X`` in framework/sonic/_service.py is ``framework.sonic._client``), and those under
``if TYPE_CHECKING:`` count too: a type-only import is still knowledge of the other module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path, root: Path = ROOT) -> str:
    """``framework/sonic/_client.py`` -> ``framework.sonic._client`` (a package: its folder's name)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Full dotted names that ``path`` imports.

    ``from m import n`` gives ``m`` and ``m.n`` (``n`` may be a submodule), so a test can
    ask whether a file reaches ``framework.sonic`` however it spells the import.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def reaches(names: set[str], prefixes: set[str]) -> set[str]:
    """The names that are one of ``prefixes`` or inside one (``a.b`` is inside ``a``)."""
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in prefixes)}


def python_files(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def test_imported_modules_resolves_relative_and_type_only_imports(tmp_path):
    # The helper itself: a test that reads imports wrongly passes on anything.
    package = tmp_path / "framework" / "sonic"
    package.mkdir(parents=True)
    source = package / "_x.py"
    source.write_text("from typing import TYPE_CHECKING\nfrom . import _a\nfrom ._b import c\n"
                      "from .. import _core\nimport framework.bench\n"
                      "if TYPE_CHECKING:\n    from ._d import E\n")
    names = imported_modules(source, tmp_path)
    assert {"framework.sonic._a", "framework.sonic._b", "framework.sonic._b.c", "framework._core",
            "framework.bench", "framework.sonic._d"} <= names
    assert reaches(names, {"framework.sonic._b"}) == {"framework.sonic._b", "framework.sonic._b.c"}
    assert not reaches(names, {"framework.sonic._"})  # a prefix of a name is not its package


def test_config_language_is_pure_python():
    for path in python_files("framework/config"):
        bad = reaches(imported_modules(path), {"trio", "uproot", "awkward", "tritonclient", "numpy"})
        assert not bad, f"{path.name} imports {bad}"


CORE = ["_module.py", "_event.py", "_bridge.py", "_worker.py", "_builder.py", "_scheduler.py",
        "_services.py", "_registry.py", "_source_base.py", "_errors.py"]


@pytest.mark.parametrize("name", CORE)
def test_core_knows_neither_root_nor_triton(name):
    mods = imported_modules(ROOT / "framework" / name)
    bad = reaches(mods, {"uproot", "awkward", "tritonclient", "grpc", "framework.sonic", "framework.bench",
                         "framework._pool_source", "modules"})
    assert not bad, f"framework/{name} imports {bad}"


# framework.bench measures SONIC against bare tritonclient clients and edits model configs:
# these files may talk to Triton without framework.sonic.
TRITON_OUTSIDE_SONIC = {
    "framework/bench/_triton.py",  # the bare async_infer loop, edited model repositories
    "framework/bench/_load.py",  # the GPU benchmarks' bare load generator (a process per client core)
    "framework/bench/_exp_gpu.py",  # renamed/edited model variants, Triton's own counters
}


def test_only_sonic_talks_to_triton():
    for path in python_files("framework"):
        relative = path.relative_to(ROOT).as_posix()
        if relative.startswith("framework/sonic/") or relative in TRITON_OUTSIDE_SONIC:
            continue
        assert not reaches(imported_modules(path), {"tritonclient"}), f"{relative} imports tritonclient"


def test_framework_never_imports_modules():
    for path in python_files("framework"):
        bad = reaches(imported_modules(path), {"modules"})
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}: framework must not depend on modules/"


# The Python-backend model loads the runner a model instance needs by name, inside a
# function (torch only for a GPU instance); the runners use its tensor specs. Known and
# lazy, so left out of the direction checks (test_torch_runner_is_loaded_lazily keeps it lazy).
LAZY_RUNNER_IMPORTS = {
    ("framework.sonic.python_backend", "framework.sonic.onnx_backend"),
    ("framework.sonic.python_backend", "framework.sonic.torch_backend"),
}


def sonic_import_graph() -> dict[str, set[str]]:
    """framework.sonic's modules -> the modules of framework.sonic each imports (the lazy
    runner imports left out)."""
    files = {module_name(path): path for path in python_files("framework/sonic")}
    graph = {}
    for name, path in files.items():
        targets = set()
        for imported in imported_modules(path):
            inside = [m for m in files if imported == m or imported.startswith(m + ".")]
            if inside:
                targets.add(max(inside, key=len))  # framework.sonic._client, not framework.sonic
        graph[name] = {t for t in targets - {name} if (name, t) not in LAZY_RUNNER_IMPORTS}
    return graph


def test_sonic_modules_import_each_other_in_one_direction():
    graph = sonic_import_graph()
    assert {"framework.sonic._client", "framework.sonic._retry", "framework.sonic._service"} <= set(graph)
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycle = path[path.index(target):] + [target] if target in path else [node, target]
                pytest.fail("import cycle in framework.sonic: " + " -> ".join(cycle))
            if target not in state:
                visit(target, [*path, target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_sonic_layers():
    """The direction inside framework.sonic (see its __init__): descriptions and tensors at
    the bottom, the client side below TritonService's parts, nothing back up."""
    graph = sonic_import_graph()
    sonic = "framework.sonic."
    for bottom in ("_server_info", "_data", "_client_stats"):
        assert not graph[sonic + bottom], f"{bottom} imports {graph[sonic + bottom]}"
    assert graph[sonic + "_retry"] <= {sonic + "_server_info"}
    service_side = {sonic + name for name in ("_service", "_routing", "_fallback", "_service_stats")}
    for client_side in ("_client", "_request", "_retry", "_data", "_producer", "_twins"):
        bad = graph[sonic + client_side] & service_side
        assert not bad, f"{client_side} imports {bad}"
    assert not graph[sonic + "_fallback"] & {sonic + "_routing", sonic + "_service"}
    for name, targets in graph.items():
        assert "framework.sonic" not in targets or name == "framework.sonic", f"{name} imports the package"


# The GPU runner inside the server's Python: the one file that may import torch.
TORCH_RUNNER = "framework/sonic/torch_backend.py"


def test_torch_is_not_a_runtime_dependency():
    for path in python_files("framework", "modules"):
        if path.relative_to(ROOT).as_posix() != TORCH_RUNNER:
            assert not reaches(imported_modules(path), {"torch"}), f"{path} imports torch"


def test_torch_runner_is_loaded_lazily():
    """Nothing imports the torch runner when it is imported itself (only inside a function),
    so the CPU path never loads torch."""
    runner = "framework.sonic.torch_backend"
    for path in python_files("framework", "modules"):
        tree = ast.parse(path.read_text(), filename=str(path))
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        lazy = {id(n) for f in functions for n in ast.walk(f)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in lazy:
                names = {a.name for a in node.names} | {getattr(node, "module", None) or ""}
                text = ast.unparse(node)
                assert "torch_backend" not in text and not reaches(names, {runner}), f"{path}: {text}"


def test_sonic_file_map_is_complete_and_in_import_order():
    """framework/sonic/__init__.py lists its files in the direction of their imports: each
    imports only files listed before it. Keeps the written file map true."""
    import re

    doc = ast.get_docstring(ast.parse((ROOT / "framework" / "sonic" / "__init__.py").read_text())) or ""
    bullets: list[str] = []
    for line in doc.splitlines():
        if line.startswith("* "):
            bullets.append(line)
        elif line.startswith("  ") and bullets:
            bullets[-1] += line
    order = [f"framework.sonic.{name}" for line in bullets for name in re.findall(r"``(_?[a-z_]+)``:?", line)
             if (ROOT / "framework" / "sonic" / f"{name}.py").is_file()]
    graph = sonic_import_graph()
    files = set(graph) - {"framework.sonic"}
    assert set(order) == files, f"not in the file map of framework/sonic/__init__.py: {files - set(order)}"
    for index, name in enumerate(order):
        later = graph[name] & set(order[index:])
        assert not later, f"{name} imports {later}, listed after it in the file map"
