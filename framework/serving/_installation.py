"""Where the ``tritonserver`` of nvidia-pytriton lives and how it must be launched.

The recipe (verified on CPU-only Linux; see ``_server``): a backend directory of symlinks
to the Python backend and the stub built for this Python version, ``PATH`` starting with
this environment's ``bin/``, ``LD_LIBRARY_PATH`` holding Python's ``LIBDIR`` and
``nvidia_pytriton.libs``. Also: listing the models of a repository (their translation for
this server is ``_repository``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig
import threading
from importlib.util import find_spec

from framework.utilities import ExternalFailure


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


TRITONSERVER_HOME = "PYSONIC_TRITONSERVER_HOME"
"""Environment variable naming a tritonserver installed elsewhere (see :func:`find_tritonserver`)."""


def _installation_at(home: pathlib.Path) -> TritonInstallation:
    """The tritonserver under ``home``: ``bin/tritonserver``, ``backends/python/``, the stub
    in ``stubs/`` or ``backends/python/``, libraries in ``libs/`` or ``lib/``. That is the
    layout of ``scripts/gpu/pack.sh``'s archive and of NVIDIA's ``/opt/tritonserver``.

    Raises:
        TritonServerError: a part is missing (names the variable, the folder and the part).
    """
    binary = home / "bin" / "tritonserver"
    python_backend = home / "backends" / "python"
    stubs = [home / "stubs" / "triton_python_backend_stub", python_backend / "triton_python_backend_stub"]
    stub = next((p for p in stubs if p.is_file()), None)
    libs = next((p for p in (home / "libs", home / "lib") if p.is_dir()), home / "lib")
    for what, path in (
        ("binary", binary),
        ("Python backend", python_backend / "libtriton_python.so"),
        ("Python backend stub", stub),
    ):
        if path is None or not path.exists():
            raise TritonServerError(
                f"${TRITONSERVER_HOME}={home}: no tritonserver {what} ({path or ' or '.join(map(str, stubs))})"
            )
    assert stub is not None  # checked in the loop
    return TritonInstallation(
        binary=binary,
        python_backend=python_backend,
        stub=stub,
        libs=libs,
        libdir=sysconfig.get_config_var("LIBDIR") or "",
    )


def find_tritonserver() -> TritonInstallation:
    """Locate the tritonserver: ``$PYSONIC_TRITONSERVER_HOME`` if set, else the one of the
    installed nvidia-pytriton wheel.

    ``$PYSONIC_TRITONSERVER_HOME`` serves a machine without the wheel (the GPU machine,
    which gets a packed server: ``scripts/gpu/pack.sh``); its stub must be built for this
    Python version (the packed one is for Python 3.12).

    Raises:
        TritonServerError: nvidia-pytriton is not installed, or ships no Python backend
            stub for this Python version (the message lists the versions it has), or
            ``$PYSONIC_TRITONSERVER_HOME`` lacks a part.
    """
    home = os.environ.get(TRITONSERVER_HOME)
    if home:
        return _installation_at(pathlib.Path(home))
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


def visible_gpus(timeout: float = 10.0) -> list[str]:
    """The NVIDIA GPUs this process can use, as ``nvidia-smi -L`` lists them ([] if none).

    Empty when ``nvidia-smi`` is missing or fails, or ``CUDA_VISIBLE_DEVICES`` hides every
    device (set to ``""`` or ``-1``). ``timeout`` (seconds) bounds the ``nvidia-smi`` call.
    """
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return []
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.startswith("GPU ")]


def default_cache_dir() -> pathlib.Path:
    """``$XDG_CACHE_HOME/pysonic`` (default ``~/.cache/pysonic``): backend folders, cmstriton state."""
    base = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(base) / "pysonic"


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
