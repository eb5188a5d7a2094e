"""A local Triton inference server, run from the ``tritonserver`` binary of nvidia-pytriton.

CMSSW counterparts: the ``cmsTriton`` script and the "fallback server" that
``TritonService`` starts when no remote server serves a model
(HeterogeneousCore/SonicTriton). CMSSW runs the server in a container; here the
binary and its Python backend come from the ``nvidia-pytriton`` wheel, so no
Docker is needed. The launch recipe, verified on CPU-only Linux:

* backend directory: ``<dir>/python/`` holding symlinks to ``libtriton_python.so``,
  ``triton_python_backend_utils.py`` and the stub built for this Python version;
* environment: ``PATH`` starts with this environment's ``bin/`` (the Python backend
  stub takes its site-packages from the ``python`` it finds there) and
  ``LD_LIBRARY_PATH`` holds Python's ``LIBDIR`` and ``nvidia_pytriton.libs``.
  Without them the stub fails in multiprocessing, or silently returns EMPTY output
  tensors: always check output values.

This module is synchronous (subprocess and polling) and knows nothing of trio; the
trio service calls it through ``trio.to_thread.run_sync``. Every server listens on
127.0.0.1 only.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import pathlib
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from framework.utilities import ConfigurationError, check_port, default_model_repository

from ._installation import (
    TritonInstallation,
    TritonServerError,
    default_cache_dir,
    find_tritonserver,
    model_repository_models,
    prepare_backend_directory,
    server_environment,
    visible_gpus,
)
from ._leftovers import owned_prefix, remove_stale_server_files
from ._processes import (
    ServerRemains,
    _spawn,
    end_server_remains,
    new_region_prefix,
    pid_is_tritonserver,
    process_start_time,
    server_remains,
    terminate_server,
)
from ._repository import generate_model, link_model, model_folders

__all__ = [
    "GrpcSsl",
    "LocalTritonServer",
    "ServerRemains",
    "TritonInstallation",
    "TritonServerError",
    "default_cache_dir",
    "default_model_repository",
    "end_server_remains",
    "find_tritonserver",
    "model_repository_models",
    "pid_is_tritonserver",
    "prepare_backend_directory",
    "process_start_time",
    "query_ready_models",
    "server_environment",
    "server_remains",
    "terminate_server",
    "resolve_device",
]

DEVICES = ("cpu", "gpu", "auto")
"""Values of ``device`` (CMSSW's fallback ``device`` and cmsTriton's ``-d``)."""

LOCALHOST = "127.0.0.1"
LOG_TAIL_LINES = 40  # lines of server log quoted in errors
PORT_ATTEMPTS = 3  # launches with fresh automatic ports when one was taken meanwhile
POLL_INTERVAL = 0.1  # seconds between readiness checks
KILL_WAIT = 5.0  # seconds to wait for the process after SIGKILL
_TRITON_ERROR = re.compile(r"E\d{4} \d\d:\d\d:\d\d")  # the start of Triton's error log lines
_ADDRESS_IN_USE = "already in use"  # tritonserver: "Socket '127.0.0.1:P' already in use"


@dataclasses.dataclass(frozen=True)
class GrpcSsl:
    """TLS for the server's gRPC endpoint (tritonserver ``--grpc-use-ssl`` and friends).

    Attributes:
        server_cert: PEM file of the server certificate (its SAN must name the address
            clients use, e.g. ``IP:127.0.0.1``).
        server_key: PEM file of its private key (read by tritonserver only).
        root_cert: PEM file of the CA that signs client certificates (mutual TLS).
        mutual: require a client certificate (``--grpc-use-ssl-mutual``).
    """

    server_cert: str | os.PathLike[str]
    server_key: str | os.PathLike[str]
    root_cert: str | os.PathLike[str] | None = None
    mutual: bool = False

    def args(self) -> list[str]:
        flag = "--grpc-use-ssl-mutual=true" if self.mutual else "--grpc-use-ssl=true"
        args = [flag, f"--grpc-server-cert={self.server_cert}", f"--grpc-server-key={self.server_key}"]
        if self.root_cert is not None:
            args.append(f"--grpc-root-cert={self.root_cert}")
        return args


# ----------------------------------------------------------------------------------------
# Installation: where the binary, the Python backend and its libraries are


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now (another process may take them later;
    a server on another address of this host relaunches if one is taken there)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOCALHOST, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int, host: str = LOCALHOST) -> bool:
    """Whether TCP ``port`` can be bound on ``host`` now (a taken port cannot)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # as the server does, so that TIME_WAIT leftovers do not count as busy
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _read_tail(path: pathlib.Path, lines: int) -> str:
    """The last ``lines`` informative lines of a server log ("" if it does not exist).

    Blank lines, table borders and the ~20-row table of server options are left out:
    they would push the error lines out of a short tail. The model status table stays
    (its rows give each model's load error).
    """
    try:
        with open(path, "rb") as stream:
            stream.seek(0, os.SEEK_END)
            stream.seek(max(0, stream.tell() - 64 * 1024))
            text = stream.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
    kept, in_options = [], False
    for line in text.splitlines():
        if line.startswith("| Option "):
            in_options = True
        elif not line.startswith(("|", "+")):
            in_options = False
        if line.strip() and not line.startswith("+") and not in_options:
            kept.append(line)
    return "\n".join(kept[-lines:])


def query_ready_models(grpc_address: str, timeout: float = 5.0) -> list[str] | None:
    """Names of the READY models of the server at ``grpc_address``; None if it is not ready.

    ``timeout`` (seconds) bounds each gRPC call.
    """
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(grpc_address, channel_args=_FAST_RECONNECT)
    try:
        if not client.is_server_ready(client_timeout=timeout):
            return None
        index = client.get_model_repository_index(client_timeout=timeout)
        return sorted({model.name for model in index.models if model.state == "READY"})
    except InferenceServerException:
        return None
    finally:
        client.close()


# gRPC backs off up to minutes between connection attempts; the server comes up in seconds.
_FAST_RECONNECT = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 500),
]

_owned_servers: set[LocalTritonServer] = set()


@atexit.register
def _stop_owned_servers() -> None:
    stop_owned_servers()


def stop_owned_servers(timeout: float = 30.0) -> None:
    """Stop every server this process started and still owns: SIGTERM, then SIGKILL after
    ``timeout`` seconds (their stubs and ``/dev/shm`` regions removed either way). Also run
    at this process's exit; a shorter ``timeout`` is for an immediate stop (Triton waits up to
    its exit timeout, 30 s, for HTTP connections a stuck job still holds open)."""
    for server in list(_owned_servers):
        server.stop(timeout)


class _PortInUse(Exception):
    pass


def resolve_device(device: str, owner: str = "LocalTritonServer") -> str:
    """``"cpu"`` or ``"gpu"``: where a server's models run; ``auto`` is ``gpu`` when a GPU is visible.

    Raises:
        ConfigurationError: ``device`` is not one of ``DEVICES``, or is ``gpu`` and
            no GPU is visible (``nvidia-smi -L`` lists none); one line naming ``owner``.
    """
    if device not in DEVICES:
        raise ConfigurationError(f"{owner}: device={device!r} is not one of {', '.join(DEVICES)}")
    if device == "cpu":
        return "cpu"
    if visible_gpus():
        return "gpu"
    if device == "gpu":
        raise ConfigurationError(
            f"{owner}: device='gpu' but no GPU is visible (nvidia-smi lists none); use device='cpu' or 'auto'"
        )
    return "cpu"


# ----------------------------------------------------------------------------------------
# The server


class LocalTritonServer:
    """A tritonserver process on 127.0.0.1 serving a model repository on the CPU or a GPU.

    Usage::

        with LocalTritonServer("data/models", instances=2) as server:
            client = tritonclient.grpc.InferenceServerClient(server.grpc_address)

    Args:
        model_repository: a standard Triton model repository (``<name>/config.pbtxt``,
            ``<name>/<version>/``), or a mapping model name -> model folder (models of
            several repositories served together). It is only read: what tritonserver
            loads is generated from it (``framework.serving._repository``: ONNX and
            TorchScript models run in the Python backend, checksums checked) under
            ``<work_dir or ~/.cache/pysonic>/generated-models``, cached by content, and
            served through a folder of symlinks in the work folder.
        instances: if > 0, every model runs this many instances (overrides the
            ``instance_group`` counts in the generated config, as cmsTriton).
        device: ``"cpu"``, ``"gpu"`` or ``"auto"`` (GPU when one is visible). On ``gpu``
            every model instance is ``KIND_GPU`` (as cmsTriton's ``-d gpu``): ONNX models
            run with onnxruntime's CUDA provider, TorchScript models with torch on CUDA.
        grpc_port, http_port, metrics_port: TCP ports; 0 picks free ones. An explicit
            port that is busy is an error naming it; automatic ports taken by someone else
            between choice and bind are re-chosen (up to ``PORT_ATTEMPTS`` launches).
        log_path: server log (stdout and stderr); None: a temporary file, deleted by a
            successful ``stop()`` and kept (and named) when ``start()`` fails.
        verbose: pass ``--log-verbose=1``.
        models: load only these models (``--model-control-mode=explicit``); None: all.
        work_dir: where the served repository (symlinks) and the cache of generated
            models go (default: a temporary folder, and the cache in ``~/.cache/pysonic``).
            ``stop()`` removes the served repository, never the cache.
        die_with_parent: SIGTERM the server when this Python process is gone, however it
            ended and whichever thread started the server (a watchdog on a pipe,
            ``_processes._spawn``). False for a server meant to outlive it (``detach()``).
        host: the IPv4 address it listens on and clients use (default ``127.0.0.1``);
            another address of this host for a server other hosts reach (the Dask
            executor's host server listens on its worker's address).
        grpc_ssl: serve gRPC over TLS (:class:`~framework.serving._server.GrpcSsl`). Readiness is then checked over
            the plain HTTP endpoint (127.0.0.1 only), which needs no client certificate;
            ``ready_models()`` (plain gRPC) sees no model.

    Attributes:
        region_prefix: the names of this server's Python-backend regions in ``/dev/shm``
            start with it (``new_region_prefix``); so do the command lines of its stubs.

    The server runs in a session (and process group) of its own. ``stop()`` ends it with
    everything it started, also when it was killed: its stubs and its /dev/shm regions.

    Raises:
        ConfigurationError: unknown ``device``, ``device="gpu"`` without a visible GPU,
            negative ``instances``, missing repository folder, a model of ``models``
            absent from it, or a bad ``$PYSONIC_SHM_TAG``.

    ``start()`` (and :meth:`add_model`) raise :class:`~framework.serving._repository.ModelRepositoryError`
    for a model that cannot be served here (unsupported platform, a checksum mismatch).
    """

    def __init__(
        self,
        model_repository: str | os.PathLike[str] | Mapping[str, str | os.PathLike[str]],
        *,
        instances: int = 0,
        device: str = "cpu",
        grpc_port: int = 0,
        http_port: int = 0,
        metrics_port: int = 0,
        log_path: str | os.PathLike[str] | None = None,
        verbose: bool = False,
        models: Sequence[str] | None = None,
        work_dir: str | os.PathLike[str] | None = None,
        die_with_parent: bool = True,
        grpc_ssl: GrpcSsl | None = None,
        host: str = LOCALHOST,
    ) -> None:
        self.device = resolve_device(device)
        self.host = host
        if instances < 0:
            raise ConfigurationError(f"LocalTritonServer: instances={instances} must be >= 0")
        if isinstance(model_repository, Mapping):
            self.model_sources = {name: pathlib.Path(f).absolute() for name, f in model_repository.items()}
            parents = sorted({folder.parent for folder in self.model_sources.values()})
            self.repository = parents[0] if len(parents) == 1 else pathlib.Path(os.path.commonpath(parents))
            for name, folder in self.model_sources.items():
                if not folder.is_dir():
                    raise ConfigurationError(f"LocalTritonServer: model {name!r}: folder {folder} does not exist")
        else:
            self.repository = pathlib.Path(model_repository).absolute()
            if not self.repository.is_dir():
                raise ConfigurationError(f"LocalTritonServer: model repository {self.repository} is not a folder")
            self.model_sources = model_folders(self.repository)
        available = list(self.model_sources)
        for name in models or ():
            if name not in available:
                raise ConfigurationError(
                    f"LocalTritonServer: model {name!r} is not in {self.repository} "
                    f"(it has: {', '.join(available) or 'none'})"
                )
        self.models = list(models) if models is not None else None
        self.instances = instances
        self.verbose = verbose
        self.die_with_parent = die_with_parent
        self.grpc_ssl = grpc_ssl
        self.region_prefix = new_region_prefix()
        self._requested_ports = {"grpc": grpc_port, "http": http_port, "metrics": metrics_port}
        self._ports: dict[str, int] | None = None
        self._user_log = pathlib.Path(log_path).absolute() if log_path is not None else None
        self._log_path: pathlib.Path | None = self._user_log
        self._user_work_dir = pathlib.Path(work_dir).absolute() if work_dir is not None else None
        self._temp_work: pathlib.Path | None = None  # our own work_dir when none was given
        self._created: list[pathlib.Path] = []  # temporary paths that stop() removes
        self._process: subprocess.Popen[Any] | None = None
        self._last_tail = ""
        self._lock = threading.RLock()

    # -- properties --------------------------------------------------------------------

    def _port(self, kind: str) -> int:
        if self._ports is None:
            raise TritonServerError(f"LocalTritonServer({self.repository}): not started, no {kind} port yet")
        return self._ports[kind]

    @property
    def grpc_address(self) -> str:
        """``"HOST:PORT"`` for ``tritonclient.grpc`` (``host``, default 127.0.0.1)."""
        return f"{self.host}:{self._port('grpc')}"

    @property
    def http_address(self) -> str:
        """``"HOST:PORT"`` for ``tritonclient.http``."""
        return f"{self.host}:{self._port('http')}"

    @property
    def metrics_url(self) -> str:
        """Prometheus metrics, ``"http://HOST:PORT/metrics"``."""
        return f"http://{self.host}:{self._port('metrics')}/metrics"

    @property
    def ports(self) -> dict[str, int]:
        """``{"grpc": .., "http": .., "metrics": ..}`` of the running server."""
        self._port("grpc")  # raises if not started
        assert self._ports is not None
        return dict(self._ports)

    @property
    def pid(self) -> int | None:
        """Process id of the server, None before ``start()``/after ``stop()``."""
        process = self._process
        return process.pid if process is not None else None

    @property
    def log_path(self) -> pathlib.Path | None:
        """The server log file (None before the first ``start()`` if no ``log_path`` was given)."""
        return self._log_path

    @property
    def served_repository(self) -> pathlib.Path:
        """The folder given to ``--model-repository``: symlinks to the generated models."""
        return self._work_dir() / "repository"

    def _cache_dir(self) -> pathlib.Path:
        return (self._user_work_dir or default_cache_dir()) / "generated-models"

    def add_model(self, name: str, folder: str | os.PathLike[str]) -> None:
        """Generate ``name`` from the user's model ``folder`` and add it to the served repository
        (a started server in explicit mode loads it with ``load_model``).

        Raises:
            ModelRepositoryError: the model cannot be served here (one line).
        """
        with self._lock:
            folder = pathlib.Path(folder).absolute()
            kind = "KIND_GPU" if self.device == "gpu" else None
            generated = generate_model(name, folder, self._cache_dir(), instances=self.instances, kind=kind)
            link_model(self.served_repository, name, generated)
            self.model_sources[name] = folder
            if self.models is not None and name not in self.models:
                self.models.append(name)

    def is_running(self) -> bool:
        """True if the server process exists and has not exited."""
        process = self._process
        return process is not None and process.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the server log (kept in memory once a temp log is deleted)."""
        if self._log_path is not None and self._log_path.exists():
            return _read_tail(self._log_path, lines)
        return "\n".join(self._last_tail.splitlines()[-lines:])

    def ready_models(self, timeout: float = 5.0) -> list[str]:
        """Names of the models the server reports READY (``[]`` if it does not answer)."""
        return query_ready_models(self.grpc_address, timeout) or []

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> LocalTritonServer:
        """Launch the server and wait until it and every model are ready.

        Args:
            timeout: seconds (monotonic clock) for the whole start, all launches included.

        Returns:
            This server; nothing is done if it is already running.

        Raises:
            TritonServerError: no tritonserver, an explicit port is busy, the process
                exited, or not ready within ``timeout``; the message ends with the last
                ``LOG_TAIL_LINES`` lines of the server log.
        """
        with self._lock:
            if self.is_running():
                return self
            deadline = time.monotonic() + timeout
            try:
                self._start(deadline, timeout)
            except BaseException:
                # The error carries the log's last lines; a log of our own (in the temporary
                # folder) is removed with the rest, a user's log file stays.
                self._shutdown(30.0, keep_log=False)
                raise
            _owned_servers.add(self)
            return self

    def _start(self, deadline: float, timeout: float) -> None:
        remove_stale_server_files()  # what killed jobs' servers left in the temporary folder
        installation = find_tritonserver()
        backend_dir = prepare_backend_directory(installation=installation)
        expected = list(self.models) if self.models is not None else list(self.model_sources)
        repository = self.served_repository
        shutil.rmtree(repository, ignore_errors=True)
        self._created.append(repository)
        repository.mkdir(parents=True)
        kind = "KIND_GPU" if self.device == "gpu" else None
        for name in expected:
            generated = generate_model(
                name, self.model_sources[name], self._cache_dir(), instances=self.instances, kind=kind
            )
            link_model(repository, name, generated)
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self._choose_ports()
            self._launch(installation, backend_dir)
            try:
                self._wait_ready(expected, deadline, timeout)
                return
            except _PortInUse:
                self._check_explicit_ports()
                if attempt == PORT_ATTEMPTS:
                    raise self._error(f"automatic ports were taken {PORT_ATTEMPTS} times in a row") from None

    def _choose_ports(self) -> None:
        self._check_explicit_ports()
        free = iter(_free_ports(3))
        self._ports = {kind: port or next(free) for kind, port in self._requested_ports.items()}

    def _check_explicit_ports(self) -> None:
        for kind, port in self._requested_ports.items():
            if port:
                check_port(port, f"LocalTritonServer: {kind}_port")
            if port and not port_is_free(port, self.host):
                raise TritonServerError(
                    f"LocalTritonServer: {kind}_port={port} is already in use on {self.host} "
                    f"(use {kind}_port=0 for a free one)"
                )

    def _launch(self, installation: TritonInstallation, backend_dir: pathlib.Path) -> None:
        args = [
            str(installation.binary),
            f"--model-repository={self.served_repository}",
            f"--backend-directory={backend_dir}",
            f"--backend-config=python,shm-region-prefix-name={self.region_prefix}",
        ]
        assert self._ports is not None  # chosen before the launch
        for kind, port in self._ports.items():
            args += [f"--{kind}-address={self.host}", f"--{kind}-port={port}"]
        if self.models is not None:
            args.append("--model-control-mode=explicit")
            args += [f"--load-model={name}" for name in self.models]
        if self.verbose:
            args.append("--log-verbose=1")
        if self.grpc_ssl is not None:
            args += self.grpc_ssl.args()
        if self._log_path is None:
            fd, name = tempfile.mkstemp(prefix=owned_prefix(), suffix=".log")
            os.close(fd)
            self._log_path = pathlib.Path(name)
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._log_path, "wb") as log:
            self._process = _spawn(
                args,
                die_with_parent=self.die_with_parent,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=server_environment(installation),
            )

    def _wait_ready(self, expected: list[str], deadline: float, timeout: float) -> None:
        ready = self._grpc_ready if self.grpc_ssl is None else self._http_ready
        process = self._process
        assert process is not None  # launched before the wait
        with ready(expected) as check:
            while True:
                code = process.poll()
                if code is not None:
                    if _ADDRESS_IN_USE in self.log_tail():
                        raise _PortInUse()
                    raise self._error(f"tritonserver exited with code {code} before being ready")
                if check() is True:
                    return
                if time.monotonic() >= deadline:
                    missing = [name for name in expected if check(name) is not True]
                    raise self._error(
                        f"tritonserver not ready after {timeout:g} s "
                        f"(models not ready: {', '.join(sorted(missing)) or 'none'})"
                    )
                time.sleep(POLL_INTERVAL)

    @contextlib.contextmanager
    def _grpc_ready(self, expected: list[str]) -> Iterator[Callable[..., bool]]:
        """``check()``: server and all ``expected`` models ready; ``check(name)``: that model."""
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        client = grpcclient.InferenceServerClient(self.grpc_address, channel_args=_FAST_RECONNECT)

        def check(name: str | None = None) -> bool:
            try:
                if name is not None:
                    return bool(client.is_model_ready(name, client_timeout=2.0))
                return bool(client.is_server_ready(client_timeout=2.0)) and all(
                    client.is_model_ready(n, client_timeout=2.0) for n in expected
                )
            except InferenceServerException:
                return False  # not listening yet

        try:
            yield check
        finally:
            client.close()

    @contextlib.contextmanager
    def _http_ready(self, expected: list[str]) -> Iterator[Callable[..., bool]]:
        """As :meth:`_grpc_ready`, over Triton's HTTP health endpoints (KServe v2 protocol)."""
        base = f"http://{self.http_address}/v2"
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy

        def ok(path: str) -> bool:
            try:
                with opener.open(f"{base}/{path}", timeout=2.0) as response:
                    return bool(response.status == 200)
            except (OSError, urllib.error.URLError):
                return False  # not listening yet, or 400 = not ready

        def check(name: str | None = None) -> bool:
            if name is not None:
                return ok(f"models/{name}/ready")
            return ok("health/ready") and all(ok(f"models/{n}/ready") for n in expected)

        yield check

    def _error(self, what: str) -> TritonServerError:
        tail = self.log_tail()
        # Triton's error lines look like 'E1122 03:14:15.926 123 model.cc:42] "message"':
        # the first of them (often a model's load error) goes on the message's first line.
        # CUDA complaints are expected on a CPU-only server and say nothing about the failure.
        errors = [
            line.split("] ", 1)[-1]
            for line in tail.splitlines()
            if _TRITON_ERROR.match(line) and (self.device == "gpu" or "cuda" not in line.lower())
        ]
        cause = f": {_one_line(errors[0])}" if errors else ""
        where = f"log {self._log_path}, last lines" if self._user_log is not None else "the last lines of its log"
        return TritonServerError(f"LocalTritonServer({self.repository}): {what}{cause}; {where}:\n{tail}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the server, SIGKILL it after ``timeout`` seconds; remove temporary folders.

        Whatever the server left (it may have been killed): its Python-backend stubs get
        SIGKILL and its /dev/shm regions are removed (``end_server_remains``).
        Idempotent; a no-op after ``detach()``.
        """
        with self._lock:
            self._shutdown(timeout, keep_log=False)

    def _shutdown(self, timeout: float, *, keep_log: bool) -> None:
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:  # not reaped: its pid is still the server's
                terminate_server(process.pid, timeout, region_prefix=self.region_prefix)
            else:  # reaped (its pid may be another process's now): only what its prefix names
                end_server_remains(self.region_prefix)
            process.wait()
        _owned_servers.discard(self)
        for path in self._created:
            shutil.rmtree(path, ignore_errors=True)
        self._created.clear()
        if self._user_work_dir is None and self._temp_work is not None:
            shutil.rmtree(self._temp_work, ignore_errors=True)
            self._temp_work = None
        if not keep_log and self._user_log is None and self._log_path is not None:
            self._last_tail = self.log_tail(200)
            self._log_path.unlink(missing_ok=True)
            self._log_path = None

    def _work_dir(self) -> pathlib.Path:
        if self._user_work_dir is not None:
            return self._user_work_dir
        if self._temp_work is None:
            self._temp_work = pathlib.Path(tempfile.mkdtemp(prefix=owned_prefix()))
        return self._temp_work

    def detach(self) -> int:
        """Give up the running server: it outlives this object and this Python process.

        Only for ``die_with_parent=False``. Stop it later with
        ``terminate_server(pid, region_prefix=server.region_prefix)``.

        Returns:
            The server's process id.
        """
        with self._lock:
            if self.die_with_parent:
                raise TritonServerError("LocalTritonServer.detach() needs die_with_parent=False")
            if not self.is_running():
                raise TritonServerError(f"LocalTritonServer({self.repository}): not running, cannot detach")
            assert self._process is not None  # is_running()
            pid = self._process.pid
            self._process = None
            self._created.clear()
            _owned_servers.discard(self)
            return pid

    def __enter__(self) -> LocalTritonServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}, gRPC {self.grpc_address}" if self.is_running() else "stopped"
        return f"<LocalTritonServer {self.repository} on {self.device} ({state})>"


def _one_line(message: str) -> str:
    r"""A Triton log message on one line, without the Python traceback Triton appends to
    it (logged with literal escapes: ``...\n\nAt:\n  model.py(1): <module>...``)."""
    message = message.split(r"\n\nAt:")[0].strip().strip('"')
    return " ".join(message.replace(r"\n", " ").split())
