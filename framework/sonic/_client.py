"""TritonClient: one SONIC module's connection to one model on a Triton server.

CMSSW counterparts: ``TritonClient``, ``TritonData`` (``TritonInputData``,
``TritonOutputData``) of HeterogeneousCore/SonicTriton, over ``tritonclient.grpc``.

One difference from CMSSW matters: in CMSSW every stream has its own module instance and
hence its own client holding the event's inputs; here ONE module instance serves all
streams, so the :class:`TritonClient` holds only what is fixed for the job (model
metadata, server, options, counters) and each event gets a :class:`TritonRequest`
(``client.new_request()``) holding that event's inputs and outputs.

Shapes: a model with ``max_batch_size > 0`` takes inputs of shape ``(batch, *dims)``
(the batch dimension first, Triton's convention); one with ``max_batch_size == 0``
takes exactly ``dims``. ``-1`` in ``dims`` is a variable dimension (any size).

Threads: ``infer_async`` runs on the trio thread and completes through
:class:`~framework.ThreadSafeFuture` (gRPC calls back on its own thread);
``infer_sync`` blocks the calling thread (``Sync`` mode: the trio thread); ``PseudoAsync``
runs each try on a worker thread. The counters are guarded by a lock for that reason.

Faults: every ``infer_*`` runs under the client's retry policy (``Client.retries``, see
:mod:`framework.sonic._retry`): recoverable failures (server gone, timeout, server-side
error) are retried on the same server, another server or the fallback server, each retry
logged with the module label, the event id, the server and the reason. The retry loop runs
in the event's own task, never in a gRPC callback.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any


import framework.config as cms
from framework._errors import ConfigurationError, ExternalFailure

from ._retry import default_retries_pset, parse_retries, retry_description
from ._data import TensorSpec, _spec_from_metadata
from ._request import DEADLINE_STATUS, TritonRequest
from ._server import default_model_repository

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = [
    "ClientStatistics",
    "ServerInfo",
    "SslOptions",
    "TritonClient",
    "client_description",
]

logger = logging.getLogger("pysonic.sonic")

MODES = ("Async", "Sync", "PseudoAsync")
TIMEOUT_UNITS = {"seconds": 1.0, "milliseconds": 1e-3, "microseconds": 1e-6}  # -> seconds

# tritonclient's default channel options (unlimited messages, its keepalive defaults) plus
# a short reconnect backoff: gRPC's default grows to 120 s, so a server back after a
# restart would stay unused for up to two minutes.
CHANNEL_ARGS = [
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
    ("grpc.keepalive_time_ms", 2**31 - 1),
    ("grpc.keepalive_timeout_ms", 20000),
    ("grpc.keepalive_permit_without_calls", False),
    ("grpc.http2.max_pings_without_data", 2),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def client_description() -> cms.ParameterSetDescription:
    """The ``Client`` PSet of a SONIC module (CMSSW ``TritonClient::fillPSetDescription``).

    Only ``modelName`` and ``modelVersion`` are tracked: server and transport settings must
    not change the physics result (CMSSW's rule).
    """
    desc = cms.ParameterSetDescription()
    desc.add("modelName", cms.string, "model name on the Triton server (required)")
    desc.add("modelVersion", cms.string(""), "model version; \"\" = the server's latest")
    desc.add("modelConfigPath", cms.untracked.string(""),
             "config.pbtxt of the model, for the fallback server; \"\" = <default repository>/<modelName>/config.pbtxt")
    desc.add("timeout", cms.untracked.uint32(10), "deadline of each try, in timeoutUnit; 0 = none")
    desc.add("timeoutUnit", cms.untracked.string("seconds"), "seconds | milliseconds | microseconds")
    desc.add("mode", cms.untracked.string("Async"), "Async | Sync | PseudoAsync")
    desc.add("preferredServer", cms.untracked.string(""), "TritonService server name to use if it serves the model")
    desc.add("outputs", cms.untracked.vstring(), "outputs to request; [] = all")
    desc.add("verbose", cms.untracked.bool(False), "log model metadata and each request")
    desc.add_vpset("retries", retry_description(),
                   "retry actions tried in order after a recoverable failure (sameServer | otherServer | "
                   "fallback); [] = no retry", default=default_retries_pset(), tracked=False)
    desc.add("allowedTries", cms.untracked.uint32(0),
             "DEPRECATED (use retries): N > 0 = N tries in all, on the same server only; 0 = use retries")
    return desc


# ----------------------------------------------------------------------------------------
# Where to connect


@dataclasses.dataclass(frozen=True)
class SslOptions:
    """PEM files for a TLS gRPC channel (None: gRPC's defaults / no client certificate).

    Only the paths are kept; tritonclient reads the files when a channel is opened, so no
    key material is held here or shown in messages.
    """

    root_certificates: str | None = None
    private_key: str | None = None
    certificate_chain: str | None = None


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """A Triton server as the TritonService knows it.

    Attributes:
        name: the ``servers`` entry name, or ``"fallback"`` for the local fallback server.
        address: gRPC ``"host:port"``.
        ssl: TLS options; None for a plain channel.
    """

    name: str
    address: str
    ssl: SslOptions | None = None

    def open_client(self, verbose: bool = False) -> grpcclient.InferenceServerClient:
        """A new ``InferenceServerClient`` for this server (the caller closes it)."""
        import tritonclient.grpc as grpcclient

        ssl = self.ssl or SslOptions()
        return grpcclient.InferenceServerClient(
            self.address, verbose=verbose, ssl=self.ssl is not None,
            root_certificates=ssl.root_certificates, private_key=ssl.private_key,
            certificate_chain=ssl.certificate_chain, channel_args=CHANNEL_ARGS,
        )


# ----------------------------------------------------------------------------------------
# Tensors


# ----------------------------------------------------------------------------------------
# Statistics


@dataclasses.dataclass(frozen=True)
class ClientStatistics:
    """Client-side counters of one TritonClient (all streams together).

    Attributes:
        calls: gRPC inference calls answered successfully (a batch split in k parts
            counts k; failed tries count in ``retries`` or ``errors``).
        inferences: batch rows sent (events x rows).
        bytes_sent, bytes_received: tensor payload bytes (not gRPC framing).
        errors: requests that failed for good (after their retries), i.e. events that
            failed in this module.
        retries: tries re-sent after a recoverable failure (see ``Client.retries``).
        failovers: those of the retries that went to a different server.
    """

    calls: int = 0
    inferences: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    errors: int = 0
    retries: int = 0
    failovers: int = 0


# ----------------------------------------------------------------------------------------
# The client


class TritonClient:
    """A SONIC module's client of one model (CMSSW ``TritonClient``), shared by all streams.

    Args:
        params: the module's validated ``Client`` PSet (see :func:`client_description`).
        debug_name: the module label, for messages.

    Attributes (after :meth:`connect`):
        server: the :class:`ServerInfo` the model was assigned to (requests may go elsewhere
            while it is out of service; see ``request.server``).
        router: the TritonService that routes requests and starts the fallback server
            (None for a client connected by hand: it retries on its one server only).
        retries: the retry policy, ``Client.retries`` as :class:`~framework.sonic.RetryAction`.
        max_batch_size: the model's ``max_batch_size`` (0 = no batching).
        inputs, outputs: name -> :class:`TensorSpec`, in model order.
        requested_outputs: the outputs requested from the server (``Client.outputs``).
        timeout: per-request deadline in seconds (None = none).

    Raises:
        ConfigurationError: unknown ``mode``, ``timeoutUnit`` or retry action.
    """

    def __init__(self, params: Any, debug_name: str = "") -> None:
        self.model_name: str = params.modelName
        self.model_version: str = params.modelVersion
        self.debug_name = debug_name
        self.what = f"model '{self.model_name}'" + (f" (module '{debug_name}')" if debug_name else "")
        if params.mode not in MODES:
            raise ConfigurationError(f"{self.what}: Client.mode '{params.mode}' is not one of {', '.join(MODES)}")
        if params.timeoutUnit not in TIMEOUT_UNITS:
            raise ConfigurationError(
                f"{self.what}: Client.timeoutUnit '{params.timeoutUnit}' is not one of {', '.join(TIMEOUT_UNITS)}"
            )
        self.mode: str = params.mode
        self.timeout_text = f"{params.timeout} {params.timeoutUnit}"
        self.timeout: float | None = params.timeout * TIMEOUT_UNITS[params.timeoutUnit] or None
        self.preferred_server: str = params.preferredServer
        self.verbose: bool = params.verbose
        self.retries = parse_retries(params.retries, params.allowedTries, self.what)
        self._wanted_outputs: list[str] = list(params.outputs)
        config_path = params.modelConfigPath
        self.model_config_path = (
            pathlib.Path(config_path) if config_path
            else default_model_repository() / self.model_name / "config.pbtxt"
        )
        self.server: ServerInfo | None = None
        self.max_batch_size = 0
        self.inputs: dict[str, TensorSpec] = {}
        self.outputs: dict[str, TensorSpec] = {}
        self.requested_outputs: tuple[str, ...] = ()
        self._client: grpcclient.InferenceServerClient | None = None
        self._owns_client = False
        self.router: Any = None
        self._lock = threading.Lock()
        self._stats = ClientStatistics()
        self._server_calls: dict[str, int] = {}

    # -- setup -------------------------------------------------------------------------

    def connect(self, server: ServerInfo | str,
                grpc_client: grpcclient.InferenceServerClient | None = None, router: Any = None) -> None:
        """Fetch the model's metadata and config from ``server``; blocking (begin_job).

        Args:
            server: where the model is served (a ``"host:port"`` string = plain channel).
            grpc_client: a shared ``InferenceServerClient`` of that server (TritonService
                passes one per server); None: the client opens its own and closes it in
                :meth:`close`.
            router: the TritonService (a :class:`~framework.sonic._retry.Router`): picks the
                server of each request by health, provides other servers and the fallback.

        Raises:
            ExternalFailure: the server does not answer or does not serve the model
                (version); the model has no inputs or outputs.
            ConfigurationError: ``Client.outputs`` names an output the model lacks.
        """
        from tritonclient.utils import InferenceServerException

        if isinstance(server, str):
            server = ServerInfo(server, server)
        self.close()
        self.server = server
        self.router = router
        if grpc_client is None:
            grpc_client, self._owns_client = server.open_client(), True
        self._client = grpc_client
        try:
            metadata = grpc_client.get_model_metadata(self.model_name, self.model_version, as_json=True,
                                                      client_timeout=self.timeout)
            config = grpc_client.get_model_config(self.model_name, self.model_version, as_json=True,
                                                  client_timeout=self.timeout)["config"]
        except InferenceServerException as exc:
            raise self._failure(exc, during="fetching the model metadata") from None
        self._setup(metadata, config)

    def _setup(self, metadata: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        self.max_batch_size = int(config.get("max_batch_size", 0))
        batched = self.max_batch_size > 0
        self.inputs = {e["name"]: _spec_from_metadata(e, batched) for e in metadata.get("inputs", [])}
        self.outputs = {e["name"]: _spec_from_metadata(e, batched) for e in metadata.get("outputs", [])}
        if not self.inputs or not self.outputs:
            # CMSSW: "Model on server appears malformed"
            raise ExternalFailure(f"{self.what} on {self._where()} appears malformed: "
                                  f"{len(self.inputs)} inputs, {len(self.outputs)} outputs")
        unknown = [name for name in self._wanted_outputs if name not in self.outputs]
        if unknown:
            raise ConfigurationError(f"{self.what}: Client.outputs names {', '.join(unknown)}, "
                                     f"which the model lacks (it has: {', '.join(self.outputs)})")
        self.requested_outputs = tuple(self._wanted_outputs or self.outputs)
        if self.verbose:
            lines = [f"  input  {s.name}: {s.describe()}" for s in self.inputs.values()]
            lines += [f"  output {s.name}: {s.describe()}" for s in self.outputs.values()]
            logger.info("%s on %s, max_batch_size %d, mode %s:\n%s", self.what, self._where(),
                        self.max_batch_size, self.mode, "\n".join(lines))

    def close(self) -> None:
        """Close the gRPC client if this client opened it (not a TritonService's shared one)."""
        if self._client is not None and self._owns_client:
            self._client.close()
        self._client, self._owns_client = None, False

    @property
    def connected(self) -> bool:
        return self._client is not None

    # -- per event ---------------------------------------------------------------------

    def new_request(self, event_id: Any = None) -> TritonRequest:
        """A fresh request for one event (inputs unset); ``event_id`` names it in logs and errors."""
        if self._client is None:
            raise ExternalFailure(f"{self.what}: the client is not connected (TritonService begin_job has not run)")
        return TritonRequest(self, event_id)

    def statistics(self) -> ClientStatistics:
        """A snapshot of the client-side counters."""
        with self._lock:
            return self._stats

    def calls_by_server(self) -> dict[str, int]:
        """gRPC calls that succeeded, per server name (failover shows up here)."""
        with self._lock:
            return dict(self._server_calls)

    # -- internals used by TritonRequest -----------------------------------------------

    def _grpc(self) -> grpcclient.InferenceServerClient:
        if self._client is None:
            raise ExternalFailure(f"{self.what}: the client is not connected")
        return self._client

    def _call_options(self) -> dict[str, Any]:
        outputs = None
        if self._wanted_outputs:
            import tritonclient.grpc as grpcclient

            outputs = [grpcclient.InferRequestedOutput(name) for name in self.requested_outputs]
        return {"model_version": self.model_version, "outputs": outputs, "client_timeout": self.timeout}

    def _count(self, server: ServerInfo, *, calls: int, inferences: int, sent: int, received: int) -> None:
        with self._lock:
            self._server_calls[server.name] = self._server_calls.get(server.name, 0) + calls
            s = self._stats
            self._stats = dataclasses.replace(
                s, calls=s.calls + calls, inferences=s.inferences + inferences,
                bytes_sent=s.bytes_sent + sent, bytes_received=s.bytes_received + received,
            )

    def _count_error(self) -> None:
        with self._lock:
            self._stats = dataclasses.replace(self._stats, errors=self._stats.errors + 1)

    def _count_retry(self, failover: bool) -> None:
        with self._lock:
            s = self._stats
            self._stats = dataclasses.replace(s, retries=s.retries + 1, failovers=s.failovers + failover)

    def _where(self, server: ServerInfo | None = None) -> str:
        server = server or self.server
        if server is None:
            return "no server"
        return f"server '{server.name}' ({server.address})" if server.name != server.address else server.address

    def _failure(self, exc: Exception, during: str = "inference", where: ServerInfo | None = None,
                 what: str = "") -> Exception:
        """An ExternalFailure naming model (module, event), server, status and message for ``exc``."""
        from tritonclient.utils import InferenceServerException

        if isinstance(exc, ExternalFailure):
            return exc
        what = what or self.what
        if isinstance(exc, InferenceServerException):
            if exc.status() == DEADLINE_STATUS:
                return ExternalFailure(f"{what} on {self._where(where)}: deadline exceeded after "
                                       f"{self.timeout_text} (Client.timeout) during {during}")
            detail = f"{exc.status() or 'error'}: {exc.message()}"
        else:
            detail = f"{type(exc).__name__}: {exc}"
        # One line: a Python-backend model's traceback comes with newlines ("At: ...").
        detail = " ".join(detail.split())
        return ExternalFailure(f"{what} on {self._where(where)}: {during} failed: {detail}")

    def __repr__(self) -> str:
        return f"<TritonClient {self.what}, {self.mode}, {self._where()}>"
