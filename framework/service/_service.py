"""TritonService: the job's Triton servers, which one serves which model, and the fallback server.

CMSSW counterpart: ``TritonService`` (HeterogeneousCore/SonicTriton). SONIC modules
register their models while the job is constructed (:meth:`TritonService.add_model`);
at ``begin_job`` the service asks every configured server which models it serves
(its repository index), starts ONE local fallback server for the models that no server
serves, and assigns each model a server: the module's ``preferredServer`` if it serves
the model, else the first configured server that does, else the fallback. Modules then
connect their clients through :meth:`TritonService.connect`.

This class is the service's face to the job (parameters, begin_job, connect, end_job,
statistics). During the job the clients talk to its parts:

* :mod:`framework.sonic._routing` (``service.routing``): the clients' router: which
  server each request goes to, server health and probes, the shared gRPC clients;
* :mod:`framework.service._fallback` (``service.routing.fallback``): the fallback server's
  life: started at begin_job or on demand, restarted, loaded, stopped;
* :mod:`framework.service._service_stats`: the end-of-job numbers.

A job with SONIC modules but no ``process.TritonService`` gets one with the fallback
enabled (:meth:`TritonService.implicit_parameters`), so a config can run with no server at
all; a configured one has CMSSW's defaults (fallback disabled unless ``fallback.enable``, as
``HeterogeneousCore.SonicTriton.TritonService_cff`` sets under ``enableSonicTriton``).
"""

from __future__ import annotations

import functools
import logging
import os
import pathlib
from collections.abc import Callable, Iterable
from typing import Any

import trio

import framework.config as cms
from framework.core import Service
from framework.serving import LocalTritonServer, resolve_device
from framework.sonic import (
    FALLBACK_SERVER,
    DiscoveryParameters,
    Routing,
    ServerHealth,
    ServerInfo,
    SslOptions,
    TritonClient,
    close_idle_connections,
    request_metadata,
)
from framework.utilities import ConfigurationError, ExternalFailure, check_port

from ._fallback import FallbackParameters, FallbackServer
from ._service_stats import Snapshot, report_tables, settled_snapshot, snapshot, statistics

__all__ = ["ServerHealth", "TritonService"]

logger = logging.getLogger("pysonic.sonic")

# CMSSW's server of the site (its SITECONF stand-in): SONIC_LOCAL_BALANCER_HOST and _PORT.
LOCAL_BALANCER = "SONIC_LOCAL_BALANCER"


def _ssl_options(item: Any) -> SslOptions | None:
    """A ``servers`` entry's TLS files, checked now: tritonclient reads them only when the
    channel is opened, and a missing one made the server look unreachable (and the job go
    to the fallback server without a word). Files given with ``useSsl = False`` are unused,
    as in CMSSW (whose TritonService reads them only with ``useSsl``): one warning says so.

    Raises:
        ConfigurationError: ``useSsl`` and a given file does not exist or cannot be read.
    """
    files = {
        n: str(getattr(item, n)) for n in ("rootCertificates", "privateKey", "certificateChain") if getattr(item, n)
    }
    where = f"TritonService: servers '{item.name}'"
    if not item.useSsl:
        if files:
            logger.warning(
                "%s: %s given but useSsl is False: not used (the channel is plain gRPC)", where, ", ".join(files)
            )
        return None
    for name, path in files.items():
        if not os.path.isfile(path):
            problem = "is a folder" if os.path.isdir(path) else "does not exist"
            raise ConfigurationError(f"{where}: {name} '{path}' {problem}")
        if not os.access(path, os.R_OK):
            raise ConfigurationError(f"{where}: {name} '{path}' is not readable")
    return SslOptions(files.get("rootCertificates"), files.get("privateKey"), files.get("certificateChain"))


def _local_balancer() -> ServerInfo | None:
    """The server named by ``$SONIC_LOCAL_BALANCER_HOST`` and ``_PORT`` (both set), first of the
    job's servers as in CMSSW; a warning if only one is set."""
    host = os.environ.get(f"{LOCAL_BALANCER}_HOST", "")
    port = os.environ.get(f"{LOCAL_BALANCER}_PORT", "")
    if host and port:
        logger.info("TritonService: server from the site: %s:%s (%s_HOST, _PORT)", host, port, LOCAL_BALANCER)
        return ServerInfo(LOCAL_BALANCER, f"{host}:{port}")
    if host or port:
        logger.warning(
            "TritonService: incomplete server information from the site: %s_HOST = %r, %s_PORT = %r (ignored)",
            LOCAL_BALANCER,
            host,
            LOCAL_BALANCER,
            port,
        )
    return None


class TritonService(Service):
    """The job's Triton servers, their health and the model-to-server routing (CMSSW ``TritonService``).

    Attributes:
        routing: the :class:`~framework.sonic._routing.Routing` of the job: the clients'
            router (``routing.route(model)`` chooses a request's server), server health,
            and the fallback server (``routing.fallback``).
        models: model name -> [(module label, preferred server)], as registered.

    Raises (``begin_job``):
        ExternalFailure: a model is served by no server and the fallback is disabled
            (names the models and the servers tried), or the fallback server does not start
            (with the end of its log).
    """

    begins_after_source = True  # its fallback server takes seconds to start: the input is checked first

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        """CMSSW's ``TritonService::fillDescriptions`` (the release whose ``tritonTest_cfg.py``
        uses VarParsing), with the later releases' ``fallback.container`` and ``fallback.device``
        and pysonic's extensions (``fallback.instances``, ``fallback.modelRepository``, ``health``,
        ``discovery``: :class:`~framework.sonic.DiscoveryParameters`; and per server ``headers``,
        ``bearerTokenFile``, ``bearerTokenVariable``: gRPC metadata of every call, for a server
        behind an authenticating proxy such as SuperSONIC's; ``httpPort``: its HTTP endpoint,
        for the HTTP transport, ``Client.transport``).

        The fallback server here is a local ``tritonserver`` process, never a container:
        ``useDocker = True`` or a ``container`` other than CMSSW's default is an error, and
        ``imageName``, ``sandboxName``, ``instanceBaseName``, ``instanceName``, ``tempDir``,
        ``retries`` and ``debug`` are accepted and have no effect (see docs/cmssw.md).
        """
        server = cms.ParameterSetDescription()
        server.add("name", cms.untracked.string, "server name (for Client.preferredServer)")
        server.add("address", cms.untracked.string, "host name or IP address")
        server.add("port", cms.untracked.uint32, "gRPC port")
        server.add(
            "httpPort",
            cms.untracked.uint32(0),
            "port of its HTTP endpoint (Open Inference Protocol REST, for Client.transport 'auto' or 'http'); 0 = none",
            extension=True,
        )
        server.add("useSsl", cms.untracked.bool(False), "TLS channel")
        server.add("rootCertificates", cms.untracked.string(""), "PEM file ('' = gRPC's default)")
        server.add("privateKey", cms.untracked.string(""), "PEM file ('' = none)")
        server.add("certificateChain", cms.untracked.string(""), "PEM file ('' = none)")
        server.add(
            "headers",
            cms.untracked.vstring(),
            "gRPC metadata sent with every call, 'key: value' (no secrets: the config is printed; use a token)",
            extension=True,
        )
        server.add(
            "bearerTokenFile",
            cms.untracked.string(""),
            "file holding a token sent as 'authorization: Bearer <token>' with every call (read once)",
            extension=True,
        )
        server.add(
            "bearerTokenVariable",
            cms.untracked.string(""),
            "environment variable holding that token (instead of bearerTokenFile)",
            extension=True,
        )
        fallback = cms.ParameterSetDescription()
        unused = "accepted, no effect here (CMSSW's container script)"
        fallback.add("enable", cms.untracked.bool(False), "start a local server for models no server serves")
        fallback.add("debug", cms.untracked.bool(False), f"keep the server's files; {unused}")
        fallback.add("verbose", cms.untracked.bool(False), "tritonserver --log-verbose=1")
        fallback.add("useDocker", cms.untracked.bool(False), "must be False: no container here")
        fallback.add(
            "useGPU", cms.untracked.bool(False), "models on the GPU (device 'auto' only: True = 'gpu', False = 'cpu')"
        )
        fallback.add("retries", cms.untracked.int32(-1), f"tries to start the server; {unused}")
        fallback.add("wait", cms.untracked.int32(-1), "startup timeout in seconds; -1 = 120 s")
        fallback.add("instanceBaseName", cms.untracked.string("triton_server_instance"), unused)
        fallback.add("instanceName", cms.untracked.string(""), unused)
        fallback.add("tempDir", cms.untracked.string(""), unused)
        fallback.add("imageName", cms.untracked.string(""), f"container image; {unused}")
        fallback.add("sandboxName", cms.untracked.string(""), f"container sandbox; {unused}")
        fallback.add("container", cms.untracked.string("apptainer"), "later CMSSW releases: apptainer (ignored) only")
        fallback.add(
            "device",
            cms.untracked.string("auto"),
            "later CMSSW releases: 'cpu', 'gpu' (instances KIND_GPU, torch on CUDA) or 'auto' (= useGPU)",
        )
        fallback.add(
            "instances",
            cms.untracked.uint32(0),
            "instances per model; 0 = as in the model config",
            extension=True,
        )
        fallback.add(
            "modelRepository",
            cms.untracked.string(""),
            "model repository; '' = the one holding the modules' Client.modelConfigPath",
            extension=True,
        )
        health = cms.ParameterSetDescription()
        health.add(
            "unhealthyAfter",
            cms.untracked.uint32(3),
            "consecutive recoverable failures that take a server out of service",
        )
        health.add(
            "probeInterval",
            cms.untracked.double(2.0),
            "seconds between probes of an out-of-service server (made when a request would use it)",
        )
        health.add("probeTimeout", cms.untracked.double(1.0), "seconds per probe call")
        discovery = cms.ParameterSetDescription()
        discovery.add(
            "wait",
            cms.untracked.double(0.0),
            "seconds begin_job waits for a server of every model (a pool scaling from zero); 0 = no wait",
        )
        discovery.add(
            "interval",
            cms.untracked.double(0.0),
            "seconds between surveys of the servers during the job (servers join, leave, saturate); 0 = never",
        )
        discovery.add(
            "saturatedAbove",
            cms.untracked.double(0.0),
            "us of Triton queue time per execution above which a server is saturated: skipped at "
            "begin_job, last choice while routing (SuperSONIC refuses above 100); 0 = off",
        )
        desc.add("verbose", cms.untracked.bool(False), "log the servers' models and the assignment")
        desc.add_vpset("servers", server, "remote Triton servers, in order of preference", default=[], tracked=False)
        desc.add("fallback", fallback, "the local fallback server")
        desc.add("health", health, "server health tracking", tracked=False, extension=True)
        desc.add("discovery", discovery, "a server pool that changes during the job", tracked=False, extension=True)

    @classmethod
    def implicit_parameters(cls) -> dict[str, Any]:
        """The parameters of the TritonService a job gets when its config has none: the fallback
        enabled, as CMSSW's ``TritonService_cff`` under the ``enableSonicTriton`` modifier (CMSSW
        itself stops: its SONIC modules need the service configured)."""
        gpu = resolve_device("auto", "TritonService") == "gpu"  # CMSSW's _switch_cuda()
        return {"fallback": cms.PSet(enable=cms.untracked.bool(True), useGPU=cms.untracked.bool(gpu))}

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.verbose: bool = params.verbose
        fallback_params = FallbackParameters.from_pset(params.fallback)
        servers: dict[str, ServerInfo] = {}
        balancer = _local_balancer()
        if balancer is not None:
            servers[balancer.name] = balancer
        for item in params.servers:
            if item.name in servers or item.name == FALLBACK_SERVER:
                raise ConfigurationError(
                    f"TritonService: servers: the name '{item.name}' is used twice "
                    f"(or is the reserved '{FALLBACK_SERVER}' or '{LOCAL_BALANCER}')"
                )
            ssl = _ssl_options(item)
            port = check_port(int(item.port), f"TritonService: servers '{item.name}': port")
            metadata = request_metadata(
                f"TritonService: servers '{item.name}'", item.headers, item.bearerTokenFile, item.bearerTokenVariable
            )
            http_address = ""
            if item.httpPort:
                http_port = check_port(int(item.httpPort), f"TritonService: servers '{item.name}': httpPort")
                http_address = f"{item.address}:{http_port}"
            servers[item.name] = ServerInfo(item.name, f"{item.address}:{port}", ssl, metadata, http_address)
        self.models: dict[str, list[tuple[str, str]]] = {}
        self._config_paths: dict[str, pathlib.Path] = {}  # model name -> config.pbtxt
        # The fallback is made by the router (it passes its on_start) and kept here too: the
        # router sees it through the client side's Fallback interface, the service as what it is.
        self.fallback_server: FallbackServer | None = None

        def make_fallback(on_start: Callable[[], None]) -> FallbackServer:
            self.fallback_server = FallbackServer(fallback_params, self._config_paths, on_start=on_start)
            return self.fallback_server

        self.routing = Routing(
            servers, params.health, make_fallback, discovery=DiscoveryParameters.from_pset(params.discovery)
        )
        self._clients: list[TritonClient] = []
        self._stats_begin: Snapshot = {}
        self._stats_end: Snapshot = {}
        self._no_statistics: set[tuple[str, str]] = set()  # (model, server) pairs: a server without statistics

    @property
    def _fallback(self) -> FallbackServer:
        assert self.fallback_server is not None  # made by Routing's constructor
        return self.fallback_server

    @property
    def assignment(self) -> dict[str, str]:
        """Model name -> the name of the server assigned at begin_job."""
        return self.routing.assignment

    @property
    def fallback(self) -> LocalTritonServer | None:
        """The fallback server's process (None if it never started, or after end_job)."""
        return self._fallback.server

    # -- construction time -------------------------------------------------------------

    def add_model(
        self,
        model_name: str,
        module_label: str,
        preferred_server: str = "",
        config_path: str | pathlib.Path | None = None,
    ) -> None:
        """Register that module ``module_label`` uses ``model_name`` (called from its ``__init__``).

        Args:
            preferred_server: a ``servers`` name or ``"fallback"``; "" = no preference.
            config_path: the model's ``config.pbtxt``; its repository (two folders up) is
                served by the fallback server unless ``fallback.modelRepository`` is set.

        Raises:
            ConfigurationError: ``preferred_server`` is not a configured server name.
        """
        servers = self.routing.book.servers
        if preferred_server and preferred_server not in servers and preferred_server != FALLBACK_SERVER:
            known = ", ".join([*servers, FALLBACK_SERVER])
            raise ConfigurationError(
                f"module '{module_label}': Client.preferredServer '{preferred_server}' "
                f"is not a TritonService server (known: {known})"
            )
        self.models.setdefault(model_name, []).append((module_label, preferred_server))
        if config_path is not None:
            self._config_paths.setdefault(model_name, pathlib.Path(config_path))

    # -- begin_job ---------------------------------------------------------------------

    async def begin_job(self) -> None:
        """Find which server serves each model; start the fallback server if needed."""
        if not self.models:
            return  # no SONIC module in this job: nothing to find or start
        routing = self.routing
        await routing.discover(self.models)  # a saturated or unreachable server is skipped
        if self.verbose:
            for name, served in routing.book.served.items():
                logger.info(
                    "TritonService: server '%s' (%s) serves %s",
                    name,
                    routing.book.servers[name].address,
                    ", ".join(sorted(served)) or "no model",
                )
        missing = sorted(m for m in self.models if not any(m in s for s in routing.book.served.values()))
        if missing:
            if not routing.fallback.enabled:
                raise ExternalFailure(
                    f"TritonService: model(s) {', '.join(missing)} (modules {self._users(missing)}) are served "
                    f"by no server ({routing.book.tried()}) and the fallback server is disabled (fallback.enable)"
                )
            await trio.to_thread.run_sync(self._fallback.ensure, missing)
        for model, users in self.models.items():
            name = routing.assign(model, users[0][1])
            logger.info(
                "TritonService: model '%s' (modules %s) -> server '%s' (%s)",
                model,
                ", ".join(label for label, _ in users),
                name,
                routing.address(name),
            )
        self._stats_begin = await trio.to_thread.run_sync(
            snapshot, routing.grpc_client, self._stats_pairs(), self._no_statistics
        )

    def connect(self, client: TritonClient) -> None:
        """Connect a module's client to its model's server (blocking: metadata fetch)."""
        server = self.routing.route_blocking(client.model_name, client.preferred_server)
        client.connect(server, self.routing.grpc_client(server.name), router=self.routing)
        self._clients.append(client)

    # -- end_job -----------------------------------------------------------------------

    async def end_job(self) -> None:
        """Take the statistics, close the connections, stop the fallback server. Never raises."""
        try:
            if self.assignment:
                answered: dict[tuple[str, str], int] = {}
                for client in self._clients:
                    for server_name, calls in client.calls_by_server().items():
                        pair = (client.model_name, server_name)
                        answered[pair] = answered.get(pair, 0) + calls
                self._stats_end = await trio.to_thread.run_sync(
                    functools.partial(settled_snapshot, no_statistics=self._no_statistics),
                    self.routing.grpc_client,
                    self._stats_pairs(end=True),
                    self._stats_begin,
                    answered,
                )
        except Exception as exc:  # noqa: BLE001 - statistics are a nicety, the stop is not
            logger.warning("TritonService: no end-of-job statistics: %s", exc)
        for client in self._clients:
            client.close()
        self.routing.close()
        close_idle_connections()  # the HTTP transport's blocking connections (trio's close with the run)
        try:
            await trio.to_thread.run_sync(self._fallback.stop)
        except Exception as exc:  # noqa: BLE001 - must not mask the job's outcome
            logger.warning("TritonService: stopping the fallback server failed: %s", exc)

    # -- statistics --------------------------------------------------------------------

    def _stats_pairs(self, end: bool = False) -> list[tuple[str, str]]:
        """(model, server) pairs to ask for Triton's counters; at the end, only servers in
        service whose last call did not fail (a hung server would cost a timeout per model:
        a frozen server's deadline ended the job, its statistics call waited as long again)."""
        pairs = []
        for model in self.assignment:
            for name in self.routing.candidates(model):
                health = self.routing.book.health.get(name)
                if end and (not self.routing.book.healthy(name) or (health is not None and health.failures)):
                    logger.info(
                        "TritonService: no end-of-job statistics of model '%s' from server '%s' (%s)",
                        model,
                        name,
                        "out of service" if not self.routing.book.healthy(name) else "its last call failed",
                    )
                    continue
                pairs.append((model, name))
        return pairs

    def statistics(self) -> dict[str, Any]:
        """What the job asked of Triton, JSON-ready; see ``framework.service._service_stats.statistics``."""
        return statistics(
            assignment=self.assignment,
            users={m: [label for label, _ in u] for m, u in self.models.items()},
            begin=self._stats_begin,
            end=self._stats_end,
            clients=self._clients,
            servers=self.routing.book.health_report(),
            no_statistics=self._no_statistics,
        )

    def report(self) -> list[Any]:
        """Rich tables of :meth:`statistics` for the end-of-job summary ([] if no model)."""
        return report_tables(self.statistics())

    def _users(self, models: Iterable[str]) -> str:
        return ", ".join(label for m in models for label, _ in self.models.get(m, []))
