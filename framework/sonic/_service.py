"""TritonService: which Triton server serves which model, and the local fallback server.

CMSSW counterpart: ``TritonService`` (HeterogeneousCore/SonicTriton). SONIC modules
register their models while the job is constructed (:meth:`TritonService.add_model`);
at ``begin_job`` the service asks every configured server which models it serves
(its repository index), starts ONE local fallback server (:class:`LocalTritonServer`) for
the models that no server serves, and assigns each model a server: the module's
``preferredServer`` if it serves the model, else the first configured server that does,
else the fallback. Modules then connect their clients through :meth:`TritonService.connect`.

A job with SONIC modules but no ``process.TritonService`` gets one with the defaults
(fallback enabled), so a config can run with no server at all.

The end-of-job report holds Triton's own statistics per model (``get_inference_statistics``),
as differences between the begin_job and end_job snapshots, next to the clients' counters.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import trio

import framework.config as cms
from framework._errors import ConfigurationError, ExternalFailure
from framework._services import Service

from ._client import ServerInfo, SslOptions, TritonClient
from ._server import LocalTritonServer, TritonServerError, default_model_repository

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = ["FALLBACK_SERVER", "TritonService"]

logger = logging.getLogger("pysonic.sonic")

FALLBACK_SERVER = "fallback"  # server name of the local fallback server (CMSSW: "fallback")
PROBE_TIMEOUT = 5.0  # seconds per gRPC call when asking a configured server what it serves
STOP_TIMEOUT = 30.0  # seconds for the fallback server to exit after SIGTERM

# Triton's per-model statistics counters (``get_inference_statistics``, JSON form).
_DURATIONS = ("queue", "compute_input", "compute_infer", "compute_output")


class TritonService(Service):
    """The job's Triton servers and model-to-server assignment (CMSSW ``TritonService``).

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
        fallback.add("device", cms.untracked.string("cpu"), "only 'cpu' here")
        fallback.add("instances", cms.untracked.uint32(0), "instances per model; 0 = as in the model config")
        fallback.add("wait", cms.untracked.uint32(120), "startup timeout, seconds")
        fallback.add("modelRepository", cms.untracked.string(""),
                     "model repository; '' = the one holding the modules' Client.modelConfigPath")
        desc.add("verbose", cms.untracked.bool(False), "log the servers' models and the assignment")
        desc.add_vpset("servers", server, "remote Triton servers, in order of preference", default=[], tracked=False)
        desc.add("fallback", fallback, "the local fallback server", tracked=False)

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.verbose: bool = params.verbose
        self.fallback_params = params.fallback
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
        self._grpc_clients: dict[str, grpcclient.InferenceServerClient] = {}
        self._clients: list[TritonClient] = []
        self._stats_begin: dict[str, dict[str, int]] = {}
        self._stats_end: dict[str, dict[str, int]] = {}

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
            if self.verbose:
                logger.info("TritonService: server '%s' (%s) serves %s", server.name, server.address,
                            ", ".join(sorted(served)) or "no model")
        missing = sorted(m for m in self.models if not any(m in s for s in self.served.values()))
        if missing:
            await self._start_fallback(missing)
        for model, users in self.models.items():
            self.assignment[model] = self._choose(model, users[0][1]).name
            logger.info("TritonService: model '%s' (modules %s) -> server '%s' (%s)", model,
                        ", ".join(label for label, _ in users), self.assignment[model],
                        self._server(self.assignment[model]).address)
        self._stats_begin = await trio.to_thread.run_sync(self._snapshot)

    async def _start_fallback(self, missing: list[str]) -> None:
        params = self.fallback_params
        if not params.enable:
            raise ExternalFailure(
                f"TritonService: model(s) {', '.join(missing)} (modules {self._users(missing)}) are served "
                f"by no server ({self._tried()}) and the fallback server is disabled (fallback.enable)"
            )
        repository = self._fallback_repository(missing)
        server = LocalTritonServer(repository, instances=params.instances, device=params.device,
                                   verbose=params.verbose, models=missing)
        logger.info("TritonService: starting the fallback server for %s (repository %s)",
                    ", ".join(missing), repository)
        try:
            await trio.to_thread.run_sync(server.start, float(params.wait))
        except TritonServerError as err:
            raise ExternalFailure(f"TritonService: fallback server for {', '.join(missing)} "
                                  f"did not start: {err.args[0]}") from err
        self.fallback = server
        self.served[FALLBACK_SERVER] = set(missing)

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
        client.connect(server, self.grpc_client(server.name))
        self._clients.append(client)

    def _server(self, name: str) -> ServerInfo:
        if name == FALLBACK_SERVER:
            if self.fallback is None:
                raise ExternalFailure("TritonService: the fallback server is not running")
            return ServerInfo(FALLBACK_SERVER, self.fallback.grpc_address)
        return self.servers[name]

    # -- end_job -----------------------------------------------------------------------

    async def end_job(self) -> None:
        """Take the statistics, close the connections, stop the fallback server. Never raises."""
        try:
            if self.assignment:
                self._stats_end = await trio.to_thread.run_sync(self._snapshot)
        except Exception as exc:  # noqa: BLE001 - statistics are a nicety, the stop is not
            logger.warning("TritonService: no end-of-job statistics: %s", exc)
        for client in self._clients:
            client.close()
        for grpc_client in self._grpc_clients.values():
            try:
                grpc_client.close()
            except Exception:  # noqa: BLE001
                pass
        self._grpc_clients.clear()
        server, self.fallback = self.fallback, None
        if server is not None:
            try:
                await trio.to_thread.run_sync(server.stop, STOP_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - must not mask the job's outcome
                logger.warning("TritonService: stopping the fallback server failed: %s", exc)

    # -- statistics --------------------------------------------------------------------

    def _snapshot(self) -> dict[str, dict[str, int]]:
        """Triton's cumulative counters per assigned model (blocking; worker thread)."""
        snapshot = {}
        for model, server_name in self.assignment.items():
            try:
                stats = self.grpc_client(server_name).get_inference_statistics(
                    model, as_json=True, client_timeout=PROBE_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - the server may be gone
                logger.warning("TritonService: statistics of model '%s' unavailable: %s", model, exc)
                continue
            snapshot[model] = _sum_model_stats(stats.get("model_stats", []))
        return snapshot

    def statistics(self) -> dict[str, Any]:
        """What the job asked of Triton, JSON-ready.

        Returns:
            ``{"models": {model: {...}}, "clients": {module label: {...}}}``. Per model:
            ``server``, ``modules``, and Triton's counters during the job (end - begin
            snapshot; other users of a shared server are counted too): ``requests``
            (successful), ``inferences`` (batch rows), ``executions`` (model runs: fewer
            than requests when the dynamic batcher merged them), ``queue_ms`` and
            ``compute_ms`` (mean per request, milliseconds; compute = input + infer +
            output). Per client: ``model``, ``server``, ``mode`` and the
            :class:`~framework.sonic.ClientStatistics` fields.
        """
        models: dict[str, Any] = {}
        for model, server_name in self.assignment.items():
            entry: dict[str, Any] = {"server": server_name, "modules": [label for label, _ in self.models[model]]}
            begin, end = self._stats_begin.get(model), self._stats_end.get(model)
            if begin is not None and end is not None:
                diff = {key: end[key] - begin.get(key, 0) for key in end}
                requests = diff["requests"]
                entry.update(
                    requests=requests, inferences=diff["inferences"], executions=diff["executions"],
                    queue_ms=diff["queue_ns"] / requests / 1e6 if requests else 0.0,
                    compute_ms=diff["compute_ns"] / requests / 1e6 if requests else 0.0,
                )
            models[model] = entry
        clients = {
            client.debug_name: {"model": client.model_name, "server": client.server.name if client.server else "",
                                "mode": client.mode, **dataclasses.asdict(client.statistics())}
            for client in self._clients
        }
        return {"models": models, "clients": clients}

    def report(self) -> list[Any]:
        """Rich tables of :meth:`statistics` for the end-of-job summary ([] if no model)."""
        from rich.table import Table

        stats = self.statistics()
        if not stats["models"]:
            return []
        models = Table(title="TritonService ---------- Model Summary (server side) ---[ms per request]----",
                       title_justify="left")
        for col in ("Model", "Server", "Requests", "Inferences", "Executions", "queue", "compute"):
            models.add_column(col, justify="left" if col in ("Model", "Server") else "right")
        for model, s in stats["models"].items():
            numbers = ([str(s["requests"]), str(s["inferences"]), str(s["executions"]),
                        f"{s['queue_ms']:.3f}", f"{s['compute_ms']:.3f}"] if "requests" in s else ["-"] * 5)
            models.add_row(model, s["server"], *numbers)
        clients = Table(title="TritonService ---------- Client Summary ---[MB of tensor data]----",
                        title_justify="left")
        for col in ("Module", "Model", "Mode", "Calls", "Inferences", "sent", "received", "Errors"):
            clients.add_column(col, justify="left" if col in ("Module", "Model", "Mode") else "right")
        for label, c in stats["clients"].items():
            clients.add_row(label, c["model"], c["mode"], str(c["calls"]), str(c["inferences"]),
                            f"{c['bytes_sent'] / 1e6:.3f}", f"{c['bytes_received'] / 1e6:.3f}", str(c["errors"]))
        return [models, clients]

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


def _sum_model_stats(model_stats: list[dict[str, Any]]) -> dict[str, int]:
    """Triton's JSON statistics of all versions of a model, summed (int64 come as strings)."""
    total = {"requests": 0, "inferences": 0, "executions": 0, "queue_ns": 0, "compute_ns": 0}
    for version in model_stats:
        infer = version.get("inference_stats", {})
        total["requests"] += int(infer.get("success", {}).get("count", 0))
        total["inferences"] += int(version.get("inference_count", 0))
        total["executions"] += int(version.get("execution_count", 0))
        total["queue_ns"] += int(infer.get("queue", {}).get("ns", 0))
        total["compute_ns"] += sum(int(infer.get(k, {}).get("ns", 0)) for k in _DURATIONS[1:])
    return total
