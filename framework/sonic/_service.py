"""TritonService: which Triton server serves which model, their health, and the fallback server.

CMSSW counterpart: ``TritonService`` (HeterogeneousCore/SonicTriton). SONIC modules
register their models while the job is constructed (:meth:`TritonService.add_model`);
at ``begin_job`` the service asks every configured server which models it serves
(its repository index), starts ONE local fallback server (:class:`LocalTritonServer`) for
the models that no server serves, and assigns each model a server: the module's
``preferredServer`` if it serves the model, else the first configured server that does,
else the fallback. Modules then connect their clients through :meth:`TritonService.connect`.

During the job the service is the clients' router (:class:`~framework.sonic._retry.Router`):

* health: each server counts its consecutive recoverable failures; at
  ``health.unhealthyAfter`` it is out of service and new requests go to another healthy
  server that serves the model, or to the fallback server once it runs;
* probes, lazily (no background task): when a request would go to an out-of-service
  server, at most every ``health.probeInterval`` seconds one request first asks it
  ``is_server_ready``/``is_model_ready`` through the shared client; a success (or any
  successful call) puts it back in service. gRPC reconnects the shared channel by itself
  after a restart on the same address (short reconnect backoff: ``CHANNEL_ARGS``);
* the fallback server is started on demand for a ``fallback`` retry (once, however many
  requests need it at the same time), restarted if its process died, and loads further
  models into the running server (``--model-control-mode=explicit``). If it cannot start,
  the error (with the end of its log) is kept and given to every later request at once.

A job with SONIC modules but no ``process.TritonService`` gets one with the defaults
(fallback enabled), so a config can run with no server at all.

Threads: everything runs on the trio thread except the blocking parts (probes, fallback
start, statistics), which run on worker threads; the fallback start holds a lock, and
state it changes is replaced, not mutated, so readers on the trio thread never see a dict
change under them.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import trio

import framework.config as cms
from framework._errors import ConfigurationError, ExternalFailure
from framework._services import Service

from ._client import TritonClient
from ._server import DEVICES, LocalTritonServer, TritonServerError, default_model_repository
from ._server_info import FALLBACK_SERVER, ServerInfo, SslOptions
from ._service_stats import report_tables, snapshot, statistics

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = ["FALLBACK_SERVER", "ServerHealth", "TritonService"]

logger = logging.getLogger("pysonic.sonic")

PROBE_TIMEOUT = 5.0  # seconds per gRPC call when asking a configured server what it serves
STOP_TIMEOUT = 30.0  # seconds for the fallback server to exit after SIGTERM


@dataclasses.dataclass
class ServerHealth:
    """What TritonService knows of one server's health (trio thread only).

    Attributes:
        healthy: in service (requests are sent to it).
        failures: consecutive recoverable failures (reset by any success).
        outages: times it was taken out of service during the job.
        last_error: the reason of the last failure.
        last_probe: ``time.monotonic()`` of the last probe (or of the outage start).
        probing: a probe is under way (others do not start one).
    """

    healthy: bool = True
    failures: int = 0
    outages: int = 0
    last_error: str = ""
    last_probe: float = 0.0
    probing: bool = False


class TritonService(Service):
    """The job's Triton servers, their health and the model-to-server routing (CMSSW ``TritonService``).

    Raises (``begin_job``):
        ExternalFailure: a model is served by no server and the fallback is disabled
            (names the models and the servers tried), or the fallback server does not start
            (with the end of its log).
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        server = cms.ParameterSetDescription()
        server.add("name", cms.untracked.string, "server name (for Client.preferredServer)")
        server.add("address", cms.untracked.string, "host name or IP address")
        server.add("port", cms.untracked.uint32(8001), "gRPC port")
        server.add("useSsl", cms.untracked.bool(False), "TLS channel")
        server.add("rootCertificates", cms.untracked.string(""), "PEM file ('' = gRPC's default)")
        server.add("privateKey", cms.untracked.string(""), "PEM file ('' = none)")
        server.add("certificateChain", cms.untracked.string(""), "PEM file ('' = none)")
        fallback = cms.ParameterSetDescription()
        fallback.add("enable", cms.untracked.bool(True), "start a local server for models no server serves")
        fallback.add("verbose", cms.untracked.bool(False), "tritonserver --log-verbose=1")
        fallback.add("device", cms.untracked.string("auto"),
                     "'cpu', 'gpu' (model instances KIND_GPU, torch on CUDA) or 'auto' (GPU when one is visible)")
        fallback.add("instances", cms.untracked.uint32(0), "instances per model; 0 = as in the model config")
        fallback.add("wait", cms.untracked.uint32(120), "startup timeout, seconds")
        fallback.add("modelRepository", cms.untracked.string(""),
                     "model repository; '' = the one holding the modules' Client.modelConfigPath")
        health = cms.ParameterSetDescription()
        health.add("unhealthyAfter", cms.untracked.uint32(3),
                   "consecutive recoverable failures that take a server out of service")
        health.add("probeInterval", cms.untracked.double(2.0),
                   "seconds between probes of an out-of-service server (made when a request would use it)")
        health.add("probeTimeout", cms.untracked.double(1.0), "seconds per probe call")
        desc.add("verbose", cms.untracked.bool(False), "log the servers' models and the assignment")
        desc.add_vpset("servers", server, "remote Triton servers, in order of preference", default=[], tracked=False)
        desc.add("fallback", fallback, "the local fallback server", tracked=False)
        desc.add("health", health, "server health tracking", tracked=False)

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.verbose: bool = params.verbose
        self.fallback_params = params.fallback
        if params.fallback.device not in DEVICES:
            raise ConfigurationError(f"TritonService: fallback.device={params.fallback.device!r} is not one of "
                                     f"{', '.join(DEVICES)}")
        self.unhealthy_after = max(1, params.health.unhealthyAfter)
        self.probe_interval: float = params.health.probeInterval
        self.probe_timeout: float = params.health.probeTimeout
        self.servers: dict[str, ServerInfo] = {}
        for item in params.servers:
            if item.name in self.servers or item.name == FALLBACK_SERVER:
                raise ConfigurationError(f"TritonService: servers: the name '{item.name}' is used twice "
                                         f"(or is the reserved '{FALLBACK_SERVER}')")
            ssl = None
            if item.useSsl:
                ssl = SslOptions(item.rootCertificates or None, item.privateKey or None,
                                 item.certificateChain or None)
            self.servers[item.name] = ServerInfo(item.name, f"{item.address}:{item.port}", ssl)
        # model name -> [(module label, preferred server)], and model name -> config.pbtxt
        self.models: dict[str, list[tuple[str, str]]] = {}
        self._config_paths: dict[str, pathlib.Path] = {}
        self.served: dict[str, set[str]] = {}  # server name -> READY models (after begin_job)
        self.assignment: dict[str, str] = {}  # model name -> server name
        self.fallback: LocalTritonServer | None = None
        self.health: dict[str, ServerHealth] = {}
        self._fallback_error = ""  # why the fallback cannot start: later requests fail at once
        self._fallback_lock = threading.Lock()  # one start at a time, whatever the thread
        self._fallback_trio_lock = trio.Lock()  # concurrent requests wait here, not in threads
        self._grpc_clients: dict[str, grpcclient.InferenceServerClient] = {}
        self._clients: list[TritonClient] = []
        self._stats_begin: dict[tuple[str, str], dict[str, int]] = {}
        self._stats_end: dict[tuple[str, str], dict[str, int]] = {}

    # -- construction time -------------------------------------------------------------

    def add_model(self, model_name: str, module_label: str, preferred_server: str = "",
                  config_path: str | pathlib.Path | None = None) -> None:
        """Register that module ``module_label`` uses ``model_name`` (called from its ``__init__``).

        Args:
            preferred_server: a ``servers`` name or ``"fallback"``; "" = no preference.
            config_path: the model's ``config.pbtxt``; its repository (two folders up) is
                served by the fallback server unless ``fallback.modelRepository`` is set.

        Raises:
            ConfigurationError: ``preferred_server`` is not a configured server name.
        """
        if preferred_server and preferred_server not in self.servers and preferred_server != FALLBACK_SERVER:
            known = ", ".join([*self.servers, FALLBACK_SERVER])
            raise ConfigurationError(f"module '{module_label}': Client.preferredServer '{preferred_server}' "
                                     f"is not a TritonService server (known: {known})")
        self.models.setdefault(model_name, []).append((module_label, preferred_server))
        if config_path is not None:
            self._config_paths.setdefault(model_name, pathlib.Path(config_path))

    # -- begin_job ---------------------------------------------------------------------

    async def begin_job(self) -> None:
        """Find which server serves each model; start the fallback server if needed."""
        if not self.models:
            return  # no SONIC module in this job: nothing to find or start
        for server in self.servers.values():
            served = await trio.to_thread.run_sync(_ready_models, server)
            if isinstance(served, str):
                logger.warning("TritonService: server '%s' (%s) cannot be reached, skipped: %s",
                               server.name, server.address, served)
                continue
            self.served[server.name] = served
            self.health[server.name] = ServerHealth()
            if self.verbose:
                logger.info("TritonService: server '%s' (%s) serves %s", server.name, server.address,
                            ", ".join(sorted(served)) or "no model")
        missing = sorted(m for m in self.models if not any(m in s for s in self.served.values()))
        if missing:
            if not self.fallback_params.enable:
                raise ExternalFailure(
                    f"TritonService: model(s) {', '.join(missing)} (modules {self._users(missing)}) are served "
                    f"by no server ({self._tried()}) and the fallback server is disabled (fallback.enable)"
                )
            await trio.to_thread.run_sync(self._ensure_fallback, missing)
        for model, users in self.models.items():
            self.assignment[model] = self._choose(model, users[0][1]).name
            logger.info("TritonService: model '%s' (modules %s) -> server '%s' (%s)", model,
                        ", ".join(label for label, _ in users), self.assignment[model],
                        self._server(self.assignment[model]).address)
        self._stats_begin = await trio.to_thread.run_sync(snapshot, self, self._stats_pairs())

    def _fallback_repository(self, models: Iterable[str]) -> pathlib.Path:
        if self.fallback_params.modelRepository:
            return pathlib.Path(self.fallback_params.modelRepository)
        default = default_model_repository()
        repositories = {m: self._config_paths[m].parent.parent if m in self._config_paths else default
                        for m in models}
        if len(set(repositories.values())) > 1:
            found = ", ".join(f"{m}: {r}" for m, r in repositories.items())
            raise ConfigurationError("TritonService: the fallback server serves one repository, but the "
                                     f"models' Client.modelConfigPath point to several ({found}); "
                                     "set fallback.modelRepository")
        return next(iter(repositories.values()))

    def _choose(self, model: str, preferred: str) -> ServerInfo:
        if preferred and model in self.served.get(preferred, ()):
            return self._server(preferred)
        for name, served in self.served.items():  # configured servers first, fallback last
            if model in served:
                return self._server(name)
        raise ExternalFailure(f"TritonService: model '{model}' is served by no server ({self._tried()})")

    # -- the fallback server, at begin_job or on demand --------------------------------

    def _ensure_fallback(self, models: list[str]) -> None:
        """Blocking: make the fallback server serve ``models`` (start, restart or load).

        Raises:
            ExternalFailure: it cannot start or load a model (with the end of its log);
                remembered, so later calls fail at once.
        """
        with self._fallback_lock:
            if self._fallback_error:
                raise ExternalFailure(self._fallback_error)
            try:
                self._ensure_fallback_locked(models)
            except (TritonServerError, ExternalFailure) as err:  # ConfigurationError passes as it is
                message = err.args[0]
                if not message.startswith("TritonService"):
                    message = f"TritonService: fallback server for {', '.join(models)} did not start: {message}"
                self._fallback_error = message
                raise ExternalFailure(message) from err

    def _ensure_fallback_locked(self, models: list[str]) -> None:
        served = self.served.get(FALLBACK_SERVER, set())
        server = self.fallback
        if server is not None and server.is_running():
            for model in (m for m in models if m not in served):
                self._load_into_fallback(server, model)
                served = served | {model}
                self.served = {**self.served, FALLBACK_SERVER: served}
            return
        wanted = sorted(set(models) | served)
        if server is not None:  # it died: the end of its log tells why
            logger.warning("TritonService: the fallback server (pid %s) is gone, restarting it; last lines "
                           "of its log:\n%s", server.pid, server.log_tail(10))
            server.stop(STOP_TIMEOUT)
        params = self.fallback_params
        repository = self._fallback_repository(wanted)
        server = LocalTritonServer(repository, instances=params.instances, device=params.device,
                                   verbose=params.verbose, models=wanted)
        logger.info("TritonService: starting the fallback server for %s (repository %s, models on %s)",
                    ", ".join(wanted), repository, server.device)
        server.start(float(params.wait))
        # Replace, never mutate: the trio thread may be reading these right now.
        self.fallback = server
        self._grpc_clients = {k: v for k, v in self._grpc_clients.items() if k != FALLBACK_SERVER}
        self.health = {**self.health, FALLBACK_SERVER: ServerHealth()}
        self.served = {**self.served, FALLBACK_SERVER: set(wanted)}

    def _load_into_fallback(self, server: LocalTritonServer, model: str) -> None:
        from tritonclient.utils import InferenceServerException

        logger.info("TritonService: loading model '%s' into the fallback server", model)
        client = ServerInfo(FALLBACK_SERVER, server.grpc_address).open_client()
        try:
            client.load_model(model, client_timeout=float(self.fallback_params.wait))
        except InferenceServerException as exc:
            raise ExternalFailure(f"TritonService: the fallback server cannot load model '{model}': "
                                  f"{exc.message()}; last lines of its log:\n{server.log_tail()}") from None
        finally:
            client.close()

    async def fallback_server(self, model: str) -> ServerInfo | None:
        """The fallback server, made to serve ``model`` (started or loaded on demand).

        Concurrent callers wait for one start. Returns None if the fallback is disabled or
        running but out of service (hung).

        Raises:
            ExternalFailure: it cannot start (with its log tail); the same at every call.
        """
        if not self.fallback_params.enable:
            return None
        if not self._fallback_serves(model):
            async with self._fallback_trio_lock:
                if not self._fallback_serves(model):
                    await trio.to_thread.run_sync(self._ensure_fallback, [model], abandon_on_cancel=False)
        return self._fallback_if_healthy()

    def fallback_server_blocking(self, model: str) -> ServerInfo | None:
        """:meth:`fallback_server` for Sync mode (blocks the calling thread while the server starts)."""
        if not self.fallback_params.enable:
            return None
        if not self._fallback_serves(model):
            self._ensure_fallback([model])
        return self._fallback_if_healthy()

    def fallback_possible(self) -> bool:
        """Whether a ``fallback`` retry may be tried: enabled, not failed to start, not hung."""
        if not self.fallback_params.enable or self._fallback_error:
            return False
        server = self.fallback
        return server is None or not server.is_running() or self._healthy(FALLBACK_SERVER)

    def _fallback_serves(self, model: str) -> bool:
        server = self.fallback
        return server is not None and server.is_running() and model in self.served.get(FALLBACK_SERVER, ())

    def _fallback_if_healthy(self) -> ServerInfo | None:
        return self._server(FALLBACK_SERVER) if self._healthy(FALLBACK_SERVER) else None

    # -- routing and health (the Router of framework.sonic._retry) ---------------------

    async def route(self, model: str, preferred: str = "") -> ServerInfo:
        """The server for a new request of ``model``: its own if in service, else another.

        May first probe an out-of-service server (on a worker thread), see the module doc.
        """
        probe = self._probe_due(model, preferred)
        if probe is not None:
            ok = False
            try:
                ok = await trio.to_thread.run_sync(_probe, self.grpc_client(probe), model, self.probe_timeout)
            finally:
                self._probed(probe, ok)
        return self._pick(model, preferred)

    def route_blocking(self, model: str, preferred: str = "") -> ServerInfo:
        """:meth:`route` for Sync mode (a probe blocks the calling thread)."""
        probe = self._probe_due(model, preferred)
        if probe is not None:
            ok = False
            try:
                ok = _probe(self.grpc_client(probe), model, self.probe_timeout)
            finally:
                self._probed(probe, ok)
        return self._pick(model, preferred)

    def _primary(self, model: str, preferred: str) -> str:
        if preferred and model in self.served.get(preferred, ()):
            return preferred
        return self.assignment.get(model) or self._choose(model, "").name

    def _candidates(self, model: str) -> list[str]:
        """Servers that serve ``model``: configured ones in order, then a running fallback."""
        names = [name for name in self.servers if model in self.served.get(name, ())]
        if self._fallback_serves(model):
            names.append(FALLBACK_SERVER)
        return names

    def _pick(self, model: str, preferred: str) -> ServerInfo:
        primary = self._primary(model, preferred)
        if self._healthy(primary):
            return self._server(primary)
        for name in self._candidates(model):
            if name != primary and self._healthy(name):
                return self._server(name)
        return self._server(primary)  # nothing in service: the retries will decide

    def _probe_due(self, model: str, preferred: str) -> str | None:
        """An out-of-service server of ``model`` whose probe is due (marked as probing), or None."""
        now = time.monotonic()
        primary = self._primary(model, preferred)
        for name in [primary, *self._candidates(model)]:
            health = self.health.get(name)
            if health is None or health.healthy or health.probing or now - health.last_probe < self.probe_interval:
                continue
            if name == FALLBACK_SERVER and not self._fallback_serves(model):
                continue  # a dead fallback is restarted by the fallback action, not probed
            health.probing, health.last_probe = True, now
            return name
        return None

    def _probed(self, name: str, ok: bool) -> None:
        health = self.health[name]
        health.probing = False
        if ok:
            self.record(name, True)
        else:
            logger.debug("TritonService: server '%s' still out of service (probe failed)", name)

    def _healthy(self, name: str) -> bool:
        health = self.health.get(name)
        return health is None or health.healthy

    def may_retry(self, server_name: str, model: str) -> bool:
        """Whether a ``sameServer`` retry may go to ``server_name``: in service, or nothing else."""
        if self._healthy(server_name):
            return True
        others = [n for n in self._candidates(model) if n != server_name and self._healthy(n)]
        fallback_possible = (server_name != FALLBACK_SERVER and self.fallback_params.enable
                             and not self._fallback_error)
        return not others and not fallback_possible

    def other_server(self, model: str, exclude: set[str]) -> ServerInfo | None:
        """A configured server in service that serves ``model`` and is not in ``exclude``."""
        for name in self.servers:
            if name not in exclude and model in self.served.get(name, ()) and self._healthy(name):
                return self._server(name)
        return None

    def record(self, server_name: str, ok: bool, why: str = "") -> None:
        """Record the outcome of a call or probe on ``server_name`` (trio thread)."""
        health = self.health.setdefault(server_name, ServerHealth())
        if ok:
            if not health.healthy:
                logger.warning("TritonService: server '%s' (%s) is back in service", server_name,
                               self._address(server_name))
            health.healthy, health.failures = True, 0
            return
        health.failures += 1
        health.last_error = why
        if health.healthy and health.failures >= self.unhealthy_after:
            health.healthy, health.outages, health.last_probe = False, health.outages + 1, time.monotonic()
            logger.warning("TritonService: server '%s' (%s) is out of service after %d consecutive failures "
                           "(last: %s); its requests go elsewhere, probe every %g s", server_name,
                           self._address(server_name), health.failures, why, self.probe_interval)

    # -- for the clients ---------------------------------------------------------------

    def server_for(self, model_name: str, preferred: str = "") -> ServerInfo:
        """The server that serves ``model_name`` (after begin_job).

        Raises:
            ExternalFailure: no server serves it (or begin_job has not run).
        """
        if preferred:
            return self._choose(model_name, preferred)
        if model_name in self.assignment:
            return self._server(self.assignment[model_name])
        return self._choose(model_name, "")

    def grpc_client(self, server_name: str) -> grpcclient.InferenceServerClient:
        """The shared ``InferenceServerClient`` of a server (its methods are thread-safe)."""
        client = self._grpc_clients.get(server_name)
        if client is None:
            client = self._grpc_clients[server_name] = self._server(server_name).open_client()
        return client

    def connect(self, client: TritonClient) -> None:
        """Connect a module's client to its model's server (blocking: metadata fetch)."""
        server = self.server_for(client.model_name, client.preferred_server)
        client.connect(server, self.grpc_client(server.name), router=self)
        self._clients.append(client)

    def _server(self, name: str) -> ServerInfo:
        if name == FALLBACK_SERVER:
            if self.fallback is None:
                raise ExternalFailure("TritonService: the fallback server is not running")
            return ServerInfo(FALLBACK_SERVER, self.fallback.grpc_address)
        return self.servers[name]

    def _address(self, name: str) -> str:
        try:
            return self._server(name).address
        except ExternalFailure:
            return "not running"

    # -- end_job -----------------------------------------------------------------------

    async def end_job(self) -> None:
        """Take the statistics, close the connections, stop the fallback server. Never raises."""
        try:
            if self.assignment:
                self._stats_end = await trio.to_thread.run_sync(snapshot, self, self._stats_pairs(end=True))
        except Exception as exc:  # noqa: BLE001 - statistics are a nicety, the stop is not
            logger.warning("TritonService: no end-of-job statistics: %s", exc)
        for client in self._clients:
            client.close()
        for grpc_client in self._grpc_clients.values():
            try:
                grpc_client.close()
            except Exception:  # noqa: BLE001
                pass
        self._grpc_clients = {}
        server, self.fallback = self.fallback, None
        if server is not None:
            try:
                await trio.to_thread.run_sync(server.stop, STOP_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - must not mask the job's outcome
                logger.warning("TritonService: stopping the fallback server failed: %s", exc)

    # -- statistics --------------------------------------------------------------------

    def _stats_pairs(self, end: bool = False) -> list[tuple[str, str]]:
        """(model, server) pairs to ask for Triton's counters; at the end, only servers in
        service (a hung server would cost a timeout per model)."""
        pairs = []
        for model in self.assignment:
            for name in self._candidates(model):
                if end and not self._healthy(name):
                    logger.info("TritonService: no end-of-job statistics of model '%s' from server '%s' "
                                "(out of service)", model, name)
                    continue
                pairs.append((model, name))
        return pairs

    def statistics(self) -> dict[str, Any]:
        """What the job asked of Triton, JSON-ready; see :func:`~framework.sonic._service_stats.statistics`."""
        return statistics(self)

    def report(self) -> list[Any]:  # type: ignore[override]
        """Rich tables of :meth:`statistics` for the end-of-job summary ([] if no model)."""
        return report_tables(self.statistics())

    # -- messages ----------------------------------------------------------------------

    def _users(self, models: Iterable[str]) -> str:
        return ", ".join(label for m in models for label, _ in self.models.get(m, []))

    def _tried(self) -> str:
        if not self.servers:
            return "no server configured"
        parts = []
        for name, server in self.servers.items():
            served = self.served.get(name)
            what = "unreachable" if served is None else f"serves {', '.join(sorted(served)) or 'nothing'}"
            parts.append(f"'{name}' at {server.address}: {what}")
        return "tried " + "; ".join(parts)


def _ready_models(server: ServerInfo) -> set[str] | str:
    """The READY models of ``server`` (blocking), or the reason it cannot be asked."""
    from tritonclient.utils import InferenceServerException

    try:
        client = server.open_client()
    except Exception as exc:  # noqa: BLE001 - e.g. unreadable certificate files
        return f"{type(exc).__name__}: {exc}"
    try:
        index = client.get_model_repository_index(as_json=True, client_timeout=PROBE_TIMEOUT)
    except InferenceServerException as exc:
        return f"{exc.status()}: {exc.message()}"
    finally:
        client.close()
    return {m["name"] for m in index.get("models", []) if m.get("state") == "READY"}


def _probe(client: grpcclient.InferenceServerClient, model: str, timeout: float) -> bool:
    """Blocking: is the server ready and ``model`` on it ready? (False if it does not answer)."""
    from tritonclient.utils import InferenceServerException

    try:
        return bool(client.is_server_ready(client_timeout=timeout)
                    and client.is_model_ready(model, client_timeout=timeout))
    except InferenceServerException:
        return False
