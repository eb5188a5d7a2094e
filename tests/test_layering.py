"""The layering written down in framework/__init__.py, checked on the import statements.

Imports are compared by full dotted name, relative imports resolved (``from ._client
import X`` in framework/service/_service.py is ``framework.sonic._client``), and those inside
functions or under ``if TYPE_CHECKING:`` count too: a lazy or type-only import is still
knowledge of the other module.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORK = ROOT / "framework"
ROOT_IO = {"uproot", "awkward"}
TRITON = {"tritonclient", "grpc"}


def qualified_imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module ``path`` imports, fully qualified (relative imports resolved from the
    file's package; ``from .. import config`` in framework/io gives ``framework.config``)."""
    package = list(path.relative_to(root).with_suffix("").parts[:-1])
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
    """The framework modules ``path`` imports, below ``framework`` (``io``, ``utilities``,
    ``io._writer``, ``sonic``); ``framework`` itself for its public names."""
    found = set()
    for name in qualified_imports(path):
        if name == "framework" or name.startswith("framework."):
            found.add(name.partition(".")[2] or "framework")
    return found


def test_qualified_imports_resolves_relative_lazy_and_type_only_imports(tmp_path):
    # The reader itself: a layering test that reads imports wrongly passes on anything.
    package = tmp_path / "framework" / "sonic"
    package.mkdir(parents=True)
    source = package / "_x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nfrom . import _a\nfrom ._b import c\n"
        "from .. import _core\nimport framework.bench\n"
        "if TYPE_CHECKING:\n    from ._d import E\n"
        "def f():\n    from ._e import g\n"
    )
    assert qualified_imports(source, tmp_path) == {
        "typing",
        "framework.sonic._a",
        "framework.sonic._b",
        "framework._core",
        "framework.bench",
        "framework.sonic._d",
        "framework.sonic._e",
    }


# The core's and the bottom layer's files (framework/core, framework/utilities): no file of
# either lies flat in framework/ (only the package's own __init__ does).
CORE = sorted((FRAMEWORK / "core").glob("*.py"))
UTILITIES = sorted((FRAMEWORK / "utilities").glob("*.py"))


def test_framework_holds_packages_only():
    """framework/ holds its public __init__ and packages (folders) only: the core, the
    bottom layer and the command layer each in a folder of their own."""
    flat = sorted(p.name for p in FRAMEWORK.glob("*.py"))
    assert flat == ["__init__.py"], flat
    assert len(CORE) >= 10 and len(UTILITIES) >= 4


def test_utilities_are_the_bottom_layer():
    """framework.utilities imports no other part of the framework (nor trio, ROOT, Dask);
    of Triton only triton_config, tritonclient's model-config schema, which its __init__ does
    not import (the core must not load it)."""
    for path in UTILITIES:
        assert not [m for m in framework_imports(path) if not m.startswith("utilities")], path
        bad = imported_modules(path) & ({"trio", "modules", "dask", "distributed"} | ROOT_IO)
        assert not bad, f"{path.name} imports {bad}"
        if path.name != "triton_config.py":
            assert not imported_modules(path) & TRITON, f"{path.name} imports Triton"
    assert "utilities.triton_config" not in framework_imports(FRAMEWORK / "utilities" / "__init__.py")


def test_cmssw_names_are_thin_aliases_of_framework_config():
    """cmssw/ (FWCore, HeterogeneousCore, Configuration, ...) re-exports framework.config: its
    files import the configuration language and each other, and of the rest of the framework
    only a public package's own names (TritonService_cff asks framework.serving whether a GPU
    is visible, as CMSSW's asks its CUDA service)."""
    files = list((ROOT / "cmssw").rglob("*.py"))
    assert files
    for path in files:
        inner = {n for n in qualified_imports(path) if n == "framework" or n.startswith("framework.")}
        assert all(n.startswith("framework.config") or n == "framework.serving" for n in inner), (
            f"{path} imports {inner}"
        )


def test_config_language_is_pure_python():
    for path in (FRAMEWORK / "config").glob("*.py"):
        bad = imported_modules(path) & {"trio", "uproot", "awkward", "tritonclient", "numpy"}
        assert not bad, f"{path.name} imports {bad}"


def test_core_knows_neither_root_nor_triton():
    for path in CORE:
        name = path.name
        bad = imported_modules(path) & (ROOT_IO | TRITON | {"modules"})
        bad |= {m for m in framework_imports(path) if m.split(".")[0] in ("io", *SONIC_SIDES, "bench", "cmsrun")}
        assert not bad, f"framework/core/{name} imports {bad}"


def test_framework_never_imports_modules():
    """Only the benchmarks (framework.bench) may use modules/: they build real inputs with
    the modules' own code for their bare load generators; nothing of the framework they
    measure does."""
    bench = FRAMEWORK / "bench"
    for path in FRAMEWORK.rglob("*.py"):
        if bench in path.parents:
            continue
        assert "modules" not in imported_modules(path), f"{path.relative_to(ROOT)} imports modules/"


def test_io_is_built_on_the_core_only():
    """framework.io: no Triton, no scheduler/builder/cmsrun, no sonic, no modules; of the
    core only the source protocol, the events and what a service is (TFileService)."""
    allowed = {"utilities", "core", "config", "io"}
    core_names = {"Event", "EventID", "Source", "SourceEvent", "NO_METADATA", "Service", "constructing_module"}
    files = list((FRAMEWORK / "io").glob("*.py"))
    assert len(files) >= 5
    for path in files:
        assert not imported_modules(path) & (TRITON | {"modules"}), f"{path} imports Triton or modules"
        outside = {m for m in framework_imports(path) if m != "io" and not m.startswith("io.")} - allowed
        assert not outside, f"{path.relative_to(ROOT)} imports framework modules {outside}"
        from_core = {
            alias.name
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and node.module == "framework.core"
            for alias in node.names
        }
        assert from_core <= core_names, f"{path.relative_to(ROOT)} imports {from_core - core_names} of the core"


def test_only_io_and_the_benchmarks_read_or_write_root_files():
    """uproot is imported in framework/io (and by the benchmarks' bare-uproot baselines)."""
    for package in ("framework", "modules"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).parts
            if parts[:2] in (("framework", "io"), ("framework", "bench")):
                continue
            assert "uproot" not in imported_modules(path), f"{path.relative_to(ROOT)} imports uproot"


# the client, the servers, the layer joining them, the model modules' base classes
SONIC_SIDES = ("sonic", "serving", "service", "inference")


TRITON_CONFIG = FRAMEWORK / "utilities" / "triton_config.py"


def test_only_the_sonic_packages_talk_to_triton():
    """framework.bench may too: its baselines are bare tritonclient loops and Triton's own
    statistics; framework.utilities.triton_config reads tritonclient's model-config schema only."""
    for path in FRAMEWORK.rglob("*.py"):
        if {*SONIC_SIDES, "bench"} & set(path.relative_to(FRAMEWORK).parts) or path == TRITON_CONFIG:
            continue
        assert "tritonclient" not in imported_modules(path), f"{path} imports tritonclient"


def test_both_sides_share_one_neutral_model_config_reader():
    """framework.utilities.triton_config, which both SONIC sides import (what they read of a
    config.pbtxt), is neutral: no framework module, of Triton only
    the model-config schema, and the core does not import it."""
    assert qualified_imports(TRITON_CONFIG) - {"__future__", "pathlib", "collections.abc", "typing"} == {
        "google.protobuf",
        "tritonclient.grpc",
    }
    for path in CORE:
        assert "utilities.triton_config" not in framework_imports(path), path
    readers = {
        path.relative_to(FRAMEWORK).parts[0]
        for path in FRAMEWORK.rglob("*.py")
        if "utilities.triton_config" in framework_imports(path)
    }
    assert {"sonic", "serving"} <= readers, readers


def test_sonic_knows_nothing_of_root_files():
    for side in SONIC_SIDES:
        for path in (FRAMEWORK / side).glob("*.py"):
            assert not imported_modules(path) & {"uproot"}, f"{path} imports uproot"
            assert not {m for m in framework_imports(path) if m.split(".")[0] == "io"}, f"{path} imports framework.io"


# The torch runner and the extension operators it registers (imported by the runner only).
TORCH_RUNNER = {FRAMEWORK / "serving" / "torch_backend.py", FRAMEWORK / "serving" / "torch_ops.py"}


def test_torch_is_not_a_runtime_dependency():
    """Only the torch runner imports torch, and only the Python-backend model imports the
    runner, inside the function that picks it (tests/test_models.py checks at run time)."""
    for package in ("framework", "modules"):
        for path in (ROOT / package).rglob("*.py"):
            if path not in TORCH_RUNNER:
                assert "torch" not in imported_modules(path), f"{path} imports torch"
    for path in (ROOT / "framework").rglob("*.py"):
        tree = ast.parse(path.read_text())
        top_level = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
        for runner in ("torch_backend", "torch_ops"):
            assert f".{runner}" not in {f".{m}" for m in top_level if m} and runner not in top_level, (
                f"{path} imports the torch runner at module level"
            )
    for path in (ROOT / "framework").rglob("*.py"):
        if path.name != "torch_backend.py":
            assert not {m for m in framework_imports(path) if m.endswith("torch_ops")}, f"{path} imports torch_ops"


# ----------------------------------------------------------------------------------------
# SONIC's packages: the client (framework.sonic), the servers (framework.serving), the thin
# layer joining them (framework.service) and the model modules' base classes
# (framework.inference); inside each, one direction written down in its __init__.


def test_client_and_server_sides_never_import_each_other():
    """The client never imports the server side nor the service layer; the server side
    imports neither the client nor the service layer (lazy and type-only imports count)."""
    forbidden = {"sonic": ("serving", "service", "inference"), "serving": ("sonic", "service", "inference")}
    for side, others in forbidden.items():
        for path in (FRAMEWORK / side).glob("*.py"):
            bad = {m for m in framework_imports(path) if m.split(".")[0] in others}
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_only_the_service_layer_and_the_model_base_classes_import_both_sides():
    """framework.service and framework.inference (a model's SONIC producer and its direct
    twin) are the packages that need both sides; the rest of the framework (core, executor)
    reaches them by what each is for; nothing below imports the service layer (the registry
    finds TritonService by name) and nothing of the framework imports the model base classes
    (modules/ does)."""
    both = []
    for path in FRAMEWORK.rglob("*.py"):
        sides = {m.split(".")[0] for m in framework_imports(path)} & {"sonic", "serving"}
        if sides == {"sonic", "serving"}:
            both.append(path.relative_to(FRAMEWORK).parts[0])
    assert set(both) <= {"service", "inference", "bench", "cmsrun"}, both
    for side in ("sonic", "serving", "config", "io"):
        for path in (FRAMEWORK / side).glob("*.py"):
            assert "service" not in {m.split(".")[0] for m in framework_imports(path)}, path
    for path in FRAMEWORK.rglob("*.py"):
        if path.relative_to(FRAMEWORK).parts[0] != "inference":
            assert "inference" not in {m.split(".")[0] for m in framework_imports(path)}, path
    for path in CORE:
        assert "service" not in {m.split(".")[0] for m in framework_imports(path)}, path


def import_graph(side: str) -> dict[str, set[str]]:
    """framework.<side>'s modules -> the modules of the same package each imports."""
    files = {}
    for path in (FRAMEWORK / side).glob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in files.items():
        targets = set()
        for imported in qualified_imports(path):
            inside = [m for m in files if imported == m or imported.startswith(m + ".")]
            if inside:
                targets.add(max(inside, key=len))  # framework.sonic._client, not framework.sonic
        graph[name] = targets - {name}
    return graph


@pytest.mark.parametrize("side", SONIC_SIDES)
def test_sonic_modules_import_each_other_in_one_direction(side):
    graph = import_graph(side)
    assert len(graph) >= 2
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = "open"
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                pytest.fail(f"import cycle in framework.{side}: " + " -> ".join(path[path.index(target) :] + [target]))
            if target not in state:
                visit(target, [*path, target])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])


def test_sonic_layers():
    """The direction inside framework.sonic (see its __init__): descriptions and tensors at
    the bottom, the requests below the router, nothing back up."""
    graph = import_graph("sonic")
    sonic = "framework.sonic."
    for bottom in ("_server_info", "_waits", "_data", "_client_stats"):
        assert not graph[sonic + bottom], f"{bottom} imports {graph[sonic + bottom]}"
    assert graph[sonic + "_retry"] <= {sonic + "_server_info", sonic + "_waits"}
    for client_side in ("_client", "_request", "_retry", "_data", "_producer", "_shm", "_transport"):
        bad = graph[sonic + client_side] & {sonic + "_routing"}
        assert not bad, f"{client_side} imports {bad}"
    for name, targets in graph.items():
        assert "framework.sonic" not in targets or name == "framework.sonic", f"{name} imports the package"


@pytest.mark.parametrize("side", SONIC_SIDES)
def test_sonic_file_maps_are_complete_and_in_import_order(side):
    """Each package's __init__ lists its files in the direction of their imports: each
    imports only files listed before it. Keeps the written file maps true."""
    doc = ast.get_docstring(ast.parse((FRAMEWORK / side / "__init__.py").read_text())) or ""
    bullets: list[str] = []
    for line in doc.splitlines():
        if line.startswith("* "):
            bullets.append(line)
        elif line.startswith("  ") and bullets:
            bullets[-1] += line
    order = [
        f"framework.{side}.{name}"
        for line in bullets
        for name in re.findall(r"``(_?[a-z_]+)``", line)
        if (FRAMEWORK / side / f"{name}.py").is_file()
    ]
    order = list(dict.fromkeys(order))  # a file named again later keeps its first place
    graph = import_graph(side)
    files = set(graph) - {f"framework.{side}"}
    assert set(order) == files, f"not in the file map of framework/{side}/__init__.py: {files - set(order)}"
    for index, name in enumerate(order):
        later = graph[name] & set(order[index:])
        assert not later, f"{name} imports {later}, listed after it in the file map"


DASK = {"dask", "distributed", "filelock"}


def test_only_the_executor_knows_dask():
    """framework.cmsrun.executor is the one place that imports Dask (and the host lock);
    nothing of the data path (config, core, io, modules, sonic) imports the command layer;
    of the command layer only its command line reaches the executor, lazily, for
    ``--executor dask`` only."""
    executor = FRAMEWORK / "cmsrun" / "executor"
    for package in ("framework", "modules"):
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).parts
            if executor in path.parents:
                continue
            assert not imported_modules(path) & DASK, f"{path.relative_to(ROOT)} imports Dask"
            if parts[:2] in (("framework", "bench"), ("framework", "cmsrun")):
                continue
            assert not {m for m in framework_imports(path) if m.split(".")[0] == "cmsrun"}, (
                f"{path.relative_to(ROOT)} imports the command layer (framework.cmsrun)"
            )
    for path in (FRAMEWORK / "cmsrun").glob("*.py"):
        if path.name != "_main.py":
            assert not {m for m in framework_imports(path) if m.startswith("cmsrun.executor")}, path
    tree = ast.parse((FRAMEWORK / "cmsrun" / "_main.py").read_text())
    top_level = {node.module for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert not {m for m in top_level if m and "executor" in m}, "cmsrun imports the executor at module level"
    executor_files = list(executor.glob("*.py"))
    assert len(executor_files) >= 4
    for path in executor_files:
        assert not imported_modules(path) & (TRITON | {"modules"}), f"{path} imports Triton or modules"
        assert "cmsrun._main" not in framework_imports(path), f"{path} imports the command line"


def test_packages_import_each_other_by_public_names():
    """A private module (``_name``) of a package is imported from inside that package only;
    other packages use the names its ``__init__`` exports (``from framework.sonic import
    Routing``, not ``framework.sonic._routing``); the core too (``from framework.core import
    build_job``). A package's sub-package may import its parent's private modules
    (``framework.cmsrun.executor`` uses ``framework.cmsrun._summary``)."""
    bad = []
    for package in ("framework", "modules", "cmssw", "configs"):
        for path in (ROOT / package).rglob("*.py"):
            own = ".".join(path.relative_to(ROOT).parts[:-1])
            for name in qualified_imports(path):
                parts = name.split(".")
                private = [i for i, part in enumerate(parts) if i >= 2 and part.startswith("_")]
                if parts[0] not in ("framework", "modules") or not private:
                    continue
                owner = ".".join(parts[: private[0]])
                if own != owner and not own.startswith(owner + "."):
                    bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert not bad, "\n".join(bad)


def test_tests_use_public_names_where_there_are_some():
    """A test imports a package's underscored module only for what the package does not
    export (the module under test's own helpers); what the package exports is imported from
    the package (``from framework.serving import LocalTritonServer``), also in the scripts
    that tests run in a subprocess."""
    import importlib

    statement = re.compile(r"from (framework(?:\.[a-z_]+)*)\.(_[a-z_]+) import ([A-Za-z_, ]+)")
    bad = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        for match in statement.finditer(path.read_text()):
            package = importlib.import_module(match.group(1))
            names = [n.strip().split(" as ")[0] for n in match.group(3).split(",")]
            exported = [n for n in names if n and not n.startswith("_") and hasattr(package, n)]
            if exported:
                bad.append(f"{path.name}: {', '.join(exported)} from {match.group(1)}.{match.group(2)}")
    assert not bad, "\n".join(bad)
