"""The fallback server's life: TritonService's local server for models no server serves.

CMSSW counterpart: the fallback server of ``TritonService`` (HeterogeneousCore/SonicTriton),
there a container, here a :class:`~framework.serving._server.LocalTritonServer`. It is
started at begin_job for the models that no configured server serves, or on demand for a
``fallback`` retry (once, however many requests need it at the same time); restarted if
its process died; further models are loaded into the running server
(``--model-control-mode=explicit``); it is stopped at end_job. If it cannot start, the
error (with the end of its log) is kept and given to every later request at once.

Knows servers and the local server, nothing of routing: whoever owns it passes
``on_start``, called when a new process serves (health and channels of the old one are
then stale).

Threads: :meth:`FallbackServer.ensure` blocks (worker thread, or the trio thread in
``Sync`` mode) and holds a lock; what it changes is replaced, not mutated, so readers on
the trio thread never see a set change under them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import pathlib
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import trio

from framework.serving import DEVICES, LocalTritonServer, TritonServerError, default_model_repository
from framework.sonic import FALLBACK_SERVER, Blocking, ServerInfo, Steps, grpc_status
from framework.utilities import ConfigurationError, ExternalFailure

__all__ = ["DEFAULT_WAIT", "STOP_TIMEOUT", "FallbackParameters", "FallbackServer"]

logger = logging.getLogger("pysonic.sonic")

STOP_TIMEOUT = 30.0  # seconds for the fallback server to exit after SIGTERM
DEFAULT_WAIT = 120  # seconds for the fallback server to start, when fallback.wait is -1 (CMSSW's "default")


@dataclasses.dataclass(frozen=True)
class FallbackParameters:
    """TritonService's ``fallback`` PSet as the fallback server uses it.

    Attributes:
        enable, verbose: as given.
        device: ``"cpu"``, ``"gpu"`` or ``"auto"``: ``fallback.device`` (later CMSSW
            releases) if not ``"auto"``, else ``fallback.useGPU`` (``"gpu"`` / ``"cpu"``).
        instances: ``fallback.instances`` (pysonic's extension; 0 = as in the model config).
        wait: startup timeout in seconds (``fallback.wait``; -1 = :data:`DEFAULT_WAIT`).
        modelRepository: ``fallback.modelRepository`` (pysonic's extension).
    """

    enable: bool = True
    verbose: bool = False
    device: str = "auto"
    instances: int = 0
    wait: int = DEFAULT_WAIT
    modelRepository: str = ""  # noqa: N815 - the parameter's name

    @classmethod
    def from_pset(cls, params: Any) -> FallbackParameters:
        """From the validated ``fallback`` PSet.

        Raises:
            ConfigurationError: a container asked for (``useDocker = True``, ``container``
                other than CMSSW's default), an unknown ``device``, ``wait`` below -1.
        """
        if params.useDocker or params.container != "apptainer":
            asked = "useDocker = True" if params.useDocker else f"container = '{params.container}'"
            raise ConfigurationError(
                f"TritonService: fallback.{asked}: the fallback server here is a local tritonserver process, "
                "never a container"
            )
        if params.device not in DEVICES:
            raise ConfigurationError(
                f"TritonService: fallback.device={params.device!r} is not one of {', '.join(DEVICES)}"
            )
        if params.wait < -1:
            raise ConfigurationError(f"TritonService: fallback.wait={params.wait} must be >= 0 seconds (or -1)")
        device = params.device if params.device != "auto" else ("gpu" if params.useGPU else "cpu")
        return cls(
            enable=params.enable,
            verbose=params.verbose,
            device=device,
            instances=params.instances,
            wait=DEFAULT_WAIT if params.wait < 0 else params.wait,
            modelRepository=params.modelRepository,
        )


class FallbackServer:
    """The local fallback server of one job: started, restarted, loaded and stopped here.

    Args:
        params: TritonService's validated ``fallback`` PSet (``enable``, ``verbose``,
            ``device``, ``instances``, ``wait`` in seconds, ``modelRepository``).
        config_paths: model name -> its ``config.pbtxt`` (the modules' ``Client.modelConfigPath``),
            read when the server starts: each model is served from the folder holding its
            config (as CMSSW's TritonService does), so models of several repositories are
            served together by one server.
        on_start: called (under the lock, on the starting thread) once a new process serves,
            before its models are published.

    Attributes:
        server: the running (or died) :class:`LocalTritonServer`; None before the first
            start and after :meth:`stop`.
        models: the models it was made to serve (kept if its process dies).
        error: why it cannot start; non-empty once a start failed (later calls fail at once).
    """

    def __init__(
        self, params: Any, config_paths: Mapping[str, pathlib.Path], on_start: Callable[[], None] = lambda: None
    ) -> None:
        self.params = params
        self.enabled: bool = params.enable
        self.server: LocalTritonServer | None = None
        self.models: frozenset[str] = frozenset()
        self.error = ""
        self._config_paths = config_paths
        self._on_start = on_start
        self._lock = threading.Lock()  # one start at a time, whatever the thread
        self._trio_lock = trio.Lock()  # concurrent requests wait here, not in threads

    def info(self) -> ServerInfo | None:
        """The fallback as a :class:`ServerInfo` (its current address), or None if never started."""
        server = self.server
        if server is None:
            return None
        return ServerInfo(FALLBACK_SERVER, server.grpc_address, http_address=server.http_address)

    def is_running(self) -> bool:
        server = self.server
        return server is not None and server.is_running()

    def serves(self, model: str) -> bool:
        """Whether its process runs and serves ``model``."""
        return self.is_running() and model in self.models

    # -- starting and loading ----------------------------------------------------------

    def ensure(self, models: Iterable[str]) -> None:
        """Blocking: make the fallback server serve ``models`` (start, restart or load).

        Raises:
            ExternalFailure: it cannot start or load a model (with the end of its log);
                remembered, so later calls fail at once.
        """
        models = list(models)
        with self._lock:
            if self.error:
                raise ExternalFailure(self.error, server=FALLBACK_SERVER)
            try:
                self._ensure_locked(models)
            except (TritonServerError, ExternalFailure) as err:  # ConfigurationError passes as it is
                # (ModelRepositoryError, a checksum mismatch or an unsupported platform, is an ExternalFailure)
                message = err.args[0]
                if not message.startswith("TritonService"):
                    message = f"TritonService: fallback server for {', '.join(models)} did not start: {message}"
                self.error = message
                raise ExternalFailure(message, server=FALLBACK_SERVER) from err

    def serve_steps(self, model: str) -> Steps[None]:
        """:meth:`ensure` for one model as a step of ``framework.sonic._waits``: none if it
        serves ``model`` already; in trio concurrent callers wait (in trio) for one start,
        which runs on a worker thread and is not abandoned on cancellation; in Sync mode it
        blocks the calling thread."""
        if not self.serves(model):
            yield Blocking(functools.partial(self.ensure, [model]), self._trio_lock)

    def _ensure_locked(self, models: list[str]) -> None:
        server = self.server
        if server is not None and server.is_running():
            for model in (m for m in models if m not in self.models):
                self._load(server, model)
                self.models = self.models | {model}
            return
        wanted = sorted(set(models) | self.models)
        if server is not None:  # it died: the end of its log tells why
            logger.warning(
                "TritonService: the fallback server (pid %s) is gone, restarting it; last lines of its log:\n%s",
                server.pid,
                server.log_tail(10),
            )
            server.stop(STOP_TIMEOUT)
        params = self.params
        folders = self.model_folders(wanted)
        server = LocalTritonServer(
            folders, instances=params.instances, device=params.device, verbose=params.verbose, models=wanted
        )
        logger.info(
            "TritonService: starting the fallback server for %s (models on %s)",
            ", ".join(f"{m} from {f}" for m, f in folders.items()),
            server.device,
        )
        server.start(float(params.wait))
        # Replace, never mutate: the trio thread may be reading these right now. The
        # models come last: until then no request is routed to the new process.
        self.server = server
        self._on_start()
        self.models = frozenset(wanted)

    def model_folders(self, models: Iterable[str]) -> dict[str, pathlib.Path]:
        """Where the fallback server takes each model from: ``<fallback.modelRepository>/<model>``
        if set, else the folder holding the model's ``Client.modelConfigPath`` (CMSSW's
        TritonService), else ``<default repository>/<model>``.

        Raises:
            ConfigurationError: a ``Client.modelConfigPath`` in a folder not named after the
                model (the config of another model: Triton serves a model under its
                folder's name).
        """
        if self.params.modelRepository:
            return {m: pathlib.Path(self.params.modelRepository) / m for m in models}
        default = default_model_repository()
        folders = {m: self._config_paths[m].parent if m in self._config_paths else default / m for m in models}
        for model, folder in folders.items():
            if model in self._config_paths and folder.name != model:
                # CMSSW's fallback serves the folder under its own name: 'model not found' for this one.
                raise ConfigurationError(
                    f"TritonService: model '{model}' is served by no server, and its Client.modelConfigPath "
                    f"{self._config_paths[model]} is the config of model '{folder.name}', which a fallback "
                    f"server serves as '{folder.name}' (CMSSW's would answer 'model not found' for '{model}')"
                )
        return folders

    def repository(self, models: Iterable[str]) -> pathlib.Path:
        """The one repository holding ``models`` (see :meth:`model_folders`), for
        ``cmsrun --executor dask``, which starts one server per host from a repository folder.

        Raises:
            ConfigurationError: the models come from several repositories.
        """
        repositories = {m: folder.parent for m, folder in self.model_folders(models).items()}
        if len(set(repositories.values())) > 1:
            found = ", ".join(f"{m}: {r}" for m, r in repositories.items())
            raise ConfigurationError(
                "TritonService: cmsrun --executor dask serves one repository per host, but the "
                f"models' Client.modelConfigPath point to several ({found}); set fallback.modelRepository"
            )
        return next(iter(repositories.values()))

    def _load(self, server: LocalTritonServer, model: str) -> None:
        from tritonclient.utils import InferenceServerException

        logger.info("TritonService: loading model '%s' into the fallback server", model)
        server.add_model(model, self.model_folders([model])[model])
        client = ServerInfo(FALLBACK_SERVER, server.grpc_address).open_client()
        try:
            client.load_model(model, client_timeout=float(self.params.wait))
        except InferenceServerException as exc:
            raise ExternalFailure(
                f"TritonService: the fallback server cannot load model '{model}': "
                f"{exc.message()}; last lines of its log:\n{server.log_tail()}",
                model=model,
                server=FALLBACK_SERVER,
                status=grpc_status(exc),
            ) from None
        finally:
            client.close()

    # -- end_job -----------------------------------------------------------------------

    def stop(self) -> None:
        """Blocking: stop the server (SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT` s), if any."""
        server, self.server = self.server, None
        if server is not None:
            server.stop(STOP_TIMEOUT)
