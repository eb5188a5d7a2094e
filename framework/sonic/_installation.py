"""Where the ``tritonserver`` of nvidia-pytriton lives and how it must be launched.

The recipe (verified on CPU-only Linux; see ``_server``): a backend directory of symlinks
to the Python backend and the stub built for this Python version, ``PATH`` starting with
this environment's ``bin/``, ``LD_LIBRARY_PATH`` holding Python's ``LIBDIR`` and
``nvidia_pytriton.libs``. Also: the default model repository, and model-repository
helpers (listing models, overriding instance counts as ``cmsTriton -i`` does).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import sys
import sysconfig
import threading
from collections.abc import Iterable
from importlib.util import find_spec

from framework._errors import ExternalFailure


class TritonServerError(ExternalFailure):
    """The local tritonserver cannot be found, started, or did not become ready."""


@dataclasses.dataclass(frozen=True)
class TritonInstallation:
    """Paths of the tritonserver shipped in nvidia-pytriton, for this Python version.

    Attributes:
        binary: the ``tritonserver`` executable.
        python_backend: folder with ``libtriton_python.so`` and ``triton_python_backend_utils.py``.
        stub: ``triton_python_backend_stub`` built for this interpreter's ``major.minor``.
        libs: ``nvidia_pytriton.libs``, the shared libraries the binary links against.
        libdir: this interpreter's ``sysconfig`` ``LIBDIR`` (holds ``libpython3.X.so``).
    """

    binary: pathlib.Path
    python_backend: pathlib.Path
    stub: pathlib.Path
    libs: pathlib.Path
    libdir: str


def find_tritonserver() -> TritonInstallation:
    """Locate the tritonserver of the installed nvidia-pytriton wheel.

    Raises:
        TritonServerError: nvidia-pytriton is not installed, or ships no Python backend
            stub for this Python version (the message lists the versions it has).
    """
    spec = find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        raise TritonServerError(
            f"nvidia-pytriton is not installed in {sys.prefix}: it provides the tritonserver "
            "binary (pip install nvidia-pytriton)"
        )
    package = pathlib.Path(next(iter(spec.submodule_search_locations)))
    root = package / "tritonserver"
    binary = root / "bin" / "tritonserver"
    if not binary.is_file():
        raise TritonServerError(f"nvidia-pytriton at {package} has no tritonserver binary ({binary})")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stubs = root / "python_backend_stubs"
    stub = stubs / version / "triton_python_backend_stub"
    if not stub.is_file():
        available = sorted(p.name for p in stubs.iterdir() if p.is_dir()) if stubs.is_dir() else []
        raise TritonServerError(
            f"nvidia-pytriton at {package} has no Python backend stub for Python {version} "
            f"(it has: {', '.join(available) or 'none'})"
        )
    return TritonInstallation(
        binary=binary,
        python_backend=root / "backends" / "python",
        stub=stub,
        libs=package.parent / "nvidia_pytriton.libs",
        libdir=sysconfig.get_config_var("LIBDIR") or "",
    )


def default_cache_dir() -> pathlib.Path:
    """``$XDG_CACHE_HOME/pysonic`` (default ``~/.cache/pysonic``): backend folders, cmstriton state."""
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "pysonic"


def default_model_repository() -> pathlib.Path:
    """The project's model repository, ``<repo root>/data/models``, or ``$PYSONIC_MODEL_REPOSITORY``."""
    override = os.environ.get("PYSONIC_MODEL_REPOSITORY")
    if override:
        return pathlib.Path(override)
    return pathlib.Path(__file__).resolve().parents[2] / "data" / "models"


def prepare_backend_directory(
    cache_dir: str | os.PathLike[str] | None = None,
    installation: TritonInstallation | None = None,
) -> pathlib.Path:
    """Make (idempotently) the ``--backend-directory`` for this Python and installation.

    The folder ``<cache_dir>/backends-py<X.Y>-<hash>/python/`` holds symlinks to the
    Python backend library, its utilities and the stub for this Python version; the
    hash of the installation path keeps two virtualenvs sharing a cache apart.
    Links are replaced atomically, so concurrent callers (threads or processes) are safe.

    Returns:
        The backend directory (the parent of ``python/``).
    """
    inst = installation or find_tritonserver()
    tag = hashlib.sha1(str(inst.binary).encode()).hexdigest()[:8]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    backend_dir = pathlib.Path(cache_dir or default_cache_dir()) / f"backends-py{version}-{tag}"
    python_dir = backend_dir / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    targets = (
        inst.python_backend / "libtriton_python.so",
        inst.python_backend / "triton_python_backend_utils.py",
        inst.stub,
    )
    for target in targets:
        link = python_dir / target.name
        if link.is_symlink() and os.readlink(link) == str(target):
            continue
        scratch = python_dir / f".{target.name}.{os.getpid()}.{threading.get_ident()}"
        scratch.unlink(missing_ok=True)
        os.symlink(target, scratch)
        os.replace(scratch, link)
    return backend_dir


def server_environment(installation: TritonInstallation | None = None) -> dict[str, str]:
    """``os.environ`` plus the ``PATH`` and ``LD_LIBRARY_PATH`` the server and its stubs need."""
    inst = installation or find_tritonserver()
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join(filter(None, [str(pathlib.Path(sys.prefix) / "bin"), env.get("PATH")]))
    libraries = [inst.libdir, str(inst.libs), env.get("LD_LIBRARY_PATH")]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, libraries))
    return env


# ----------------------------------------------------------------------------------------
# Model repositories


def model_repository_models(repository: str | os.PathLike[str]) -> list[str]:
    """Sorted names of the models in a repository folder (subfolders holding ``config.pbtxt``)."""
    root = pathlib.Path(repository)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "config.pbtxt").is_file())


def _override_instances(
    source: pathlib.Path, target: pathlib.Path, models: Iterable[str], count: int
) -> None:
    """Write in ``target`` a copy of ``source`` whose models run ``count`` instances each.

    As cmsTriton does: version folders and other files are symlinks, only
    ``config.pbtxt`` is rewritten (every ``instance_group`` gets ``count``; a model
    without one gets a CPU group).
    """
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    for name in models:
        source_model, target_model = source / name, target / name
        target_model.mkdir(parents=True)
        for entry in source_model.iterdir():
            if entry.name != "config.pbtxt":
                (target_model / entry.name).symlink_to(entry.absolute())
        config_path = source_model / "config.pbtxt"
        config = model_config_pb2.ModelConfig()
        try:
            text_format.Parse(config_path.read_text(), config)
        except text_format.ParseError as err:
            raise TritonServerError(f"{config_path}: invalid model configuration: {err}") from None
        if not config.instance_group:
            config.instance_group.add(kind=model_config_pb2.ModelInstanceGroup.KIND_CPU)
        for group in config.instance_group:
            group.count = count
        (target_model / "config.pbtxt").write_text(text_format.MessageToString(config))


# ----------------------------------------------------------------------------------------
# Processes
