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

import logging
import os
import pathlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import framework.config as cms
from framework.utilities import ConfigurationError, ExternalFailure

from ._batching import Batcher, batching_description, parse_batching
from ._client_stats import ClientCounters, ClientStatistics
from ._data import TensorSpec, spec_from_metadata
from ._http import close_idle_connections, http_endpoint
from ._model_config import check_io, check_versioning, read_local_config
from ._oip import config_without_server_config, served_model_config
from ._request import TritonRequest
from ._retry import (
    DEADLINE_STATUS,
    RetryPolicy,
    Router,
    SingleServer,
    cmssw_retry_description,
    is_recoverable,
    parse_retries,
    reason,
    retry_description,
)
from ._server_info import ServerInfo
from ._transport import PROTOCOLS, TensorTransport
from ._waits import grpc_status

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = ["TritonClient", "client_description", "resolve_config_path"]

logger = logging.getLogger("pysonic.sonic")

MODES = ("Async", "Sync", "PseudoAsync")
BATCH_MODES = ("Rectangular", "Ragged")  # CMSSW's TritonBatchMode
COMPRESSIONS = ("", "none", "deflate", "gzip")  # gRPC's, as tritonclient's compression_algorithm; "" = none
_STAT_PARTS = ("success", "queue", "compute_input", "compute_infer", "compute_output")  # Triton's InferStatistics
TIMEOUT_UNITS = {"seconds": 1.0, "milliseconds": 1e-3, "microseconds": 1e-6}  # -> seconds


def client_description() -> cms.ParameterSetDescription:
    """The ``Client`` PSet of a SONIC module, as CMSSW's ``TritonClient::fillPSetDescription``.

    CMSSW's keys, with its names, trackedness, types and defaults (HeterogeneousCore/
    SonicTriton/src/TritonClient.cc and SonicCore/src/SonicClientBase.cc
    ``fillBasePSetDescription``, the release whose ``tritonTest_cfg.py`` uses VarParsing):
    ``mode`` (tracked, ``PseudoAsync``), ``modelName`` (required), ``modelVersion``,
    ``modelConfigPath`` (tracked, required), and untracked ``preferredServer``, ``timeout``
    (required) with ``timeoutUnit``, ``verbose``, ``allowedTries`` (0), ``useSharedMemory``,
    ``compression`` (``""`` = none) and ``outputs``. Only the tracked ones may change the
    physics result (CMSSW's rule). Later releases' ``Retry`` VPSet (``retryType``,
    ``allowedTries``) is accepted too and read as ``retries``.

    ``modelConfigPath`` is a ``cms.FileInPath``, found on ``$CMSSW_SEARCH_PATH`` and then in
    the project's ``data/`` folder (see ``resolve_config_path``).

    pysonic's extensions (marked in ``cmsrun --describe``): ``batchMode``, ``retries``
    (the retry policy, of which ``allowedTries`` is the simplest case), ``batching`` and
    ``transport`` (HTTP or gRPC: ``framework.sonic._transport``).
    """
    desc = cms.ParameterSetDescription()
    desc.add(
        "mode",
        cms.string("PseudoAsync"),
        "Sync | Async | PseudoAsync; kept as given when the server is the local CPU fallback "
        "(CMSSW switches such a client to Sync: here Async with cross-event batching is the point)",
    )
    desc.add("modelName", cms.string, "model name on the Triton server")
    desc.add("modelVersion", cms.string(""), 'model version; "" = the server\'s latest')
    desc.add(
        "modelConfigPath",
        cms.FileInPath,
        "the model's config.pbtxt, a FileInPath as in CMSSW (found on $CMSSW_SEARCH_PATH, then in the "
        "project's data/ folder); its repository, two folders up, is what the fallback server serves",
    )
    desc.add("preferredServer", cms.untracked.string(""), "TritonService server name to use if it serves the model")
    desc.add("timeout", cms.untracked.uint32, "deadline of each try, in timeoutUnit; 0 = none")
    desc.add("timeoutUnit", cms.untracked.string("seconds"), "seconds | milliseconds | microseconds")
    desc.add(
        "verbose",
        cms.untracked.bool(False),
        "log the model's inputs and outputs at the start, and per call the server-side statistics",
    )
    desc.add(
        "allowedTries",
        cms.untracked.uint32(0),
        "tries of a call in all, on the same server (CMSSW's retry); 0 or 1 = no retry; see also retries",
    )
    desc.add_vpset(
        "Retry",
        cmssw_retry_description(),
        "later CMSSW releases' spelling of the retry policy (retryType, allowedTries); read as retries",
        default=[{"retryType": "RetrySameServerAction", "allowedTries": 0}],
    )
    desc.add(
        "useSharedMemory",
        cms.untracked.bool(True),
        "tensors through system shared memory when the server is on this host (else gRPC payloads)",
    )
    desc.add(
        "compression", cms.untracked.string(""), 'gRPC compression of requests: "" (= none) | none | deflate | gzip'
    )
    desc.add("outputs", cms.untracked.vstring(), "outputs to request; [] = all")
    desc.add(
        "transport",
        cms.untracked.string("auto"),
        "auto (HTTP where the server has an HTTP endpoint, else gRPC) | http | grpc: the protocol of "
        "inference calls (HTTP: trio's own sockets, no gRPC thread)",
        extension=True,
    )
    desc.add(
        "batchMode",
        cms.untracked.string("Rectangular"),
        "Rectangular (one array per input, batch first) | Ragged (a list of entries, each its own shape); "
        "CMSSW sets it in code (setBatchMode), or Ragged when a module adds entries",
        extension=True,
    )
    desc.add_vpset(
        "retries",
        retry_description(),
        "retry actions tried in order after a recoverable failure (sameServer | otherServer | fallback); "
        "[] = allowedTries decides (CMSSW's default: no retry)",
        default=[],
        tracked=False,
        extension=True,
    )
    desc.add(
        "batching",
        batching_description(),
        "cross-event batching: merge the requests of events in flight into one call (maxRows > 0)",
        tracked=False,
        extension=True,
    )
    return desc


def resolve_config_path(value: Any) -> pathlib.Path:
    """``Client.modelConfigPath`` as a file.

    A ``cms.FileInPath`` resolves itself (its ``fullPath()``); a plain string (a path given
    to ``TritonService.add_model``, say) is looked up as a FileInPath is: an absolute
    path as it is, a relative one on ``$CMSSW_SEARCH_PATH`` and then in the project's
    ``data/`` folder.

    Raises:
        ConfigurationError: a relative path found in none of those folders (one line naming
            the path and the folders searched).
    """
    if not isinstance(value, os.PathLike):
        value = cms.FileInPath(str(value))
    return pathlib.Path(os.fspath(value))


# ----------------------------------------------------------------------------------------
# The client


class TritonClient:
    """A SONIC module's client of one model (CMSSW ``TritonClient``), shared by all streams.

    Args:
        params: the module's validated ``Client`` PSet (see :func:`client_description`).
        debug_name: the module label, for messages.

    The attributes are set by :meth:`connect`.

    Attributes:
        server: the :class:`~framework.sonic.ServerInfo` the model was assigned to (requests may go elsewhere
            while it is out of service; see ``request.server``).
        router: TritonService's routing, which routes requests and starts the fallback
            server (None for a client connected by hand: it retries on its one server only).
        retries: ``Client.retries`` as :class:`~framework.sonic.RetryAction`; applied by
            :attr:`retry_policy`.
        counters: the :class:`~framework.sonic._client_stats.ClientCounters` behind
            :meth:`statistics`.
        max_batch_size: the model's ``max_batch_size`` (0 = no batching).
        inputs, outputs: name -> :class:`TensorSpec`, in model order.
        requested_outputs: the outputs requested from the server (``Client.outputs``).
        timeout: per-request deadline in seconds (None = none).
        batching: ``Client.batching`` (:class:`~framework.sonic._batching.BatchingOptions`).
        batcher: the :class:`~framework.sonic._batching.Batcher` merging the requests of
            events in flight (Async mode, batching models, ``batching.maxRows`` > 1), else None.

    Raises:
        ConfigurationError: unknown ``mode``, ``timeoutUnit`` or retry action.
    """

    def __init__(self, params: Any, debug_name: str = "") -> None:
        self.model_name: str = params.modelName
        self.model_version: str = params.modelVersion
        self.debug_name = debug_name
        self.what = f"model '{self.model_name}'" + (f" (module '{debug_name}')" if debug_name else "")
        for key, allowed in (
            ("mode", MODES),
            ("timeoutUnit", tuple(TIMEOUT_UNITS)),
            ("batchMode", BATCH_MODES),
            ("compression", COMPRESSIONS),
            ("transport", PROTOCOLS),
        ):
            if (value := getattr(params, key)) not in allowed:
                raise ConfigurationError(f"{self.what}: Client.{key} '{value}' is not one of {', '.join(allowed)}")
        self.mode: str = params.mode
        self.batch_mode: str = params.batchMode
        self.compression: str | None = None if params.compression in ("", "none") else params.compression
        self.timeout_text = f"{params.timeout} {params.timeoutUnit}"
        self.timeout: float | None = params.timeout * TIMEOUT_UNITS[params.timeoutUnit] or None
        self.preferred_server: str = params.preferredServer
        self.verbose: bool = params.verbose
        self.retries = parse_retries(params.retries, params.allowedTries, self.what, params.Retry)
        self.batching = parse_batching(params.batching, self.what)
        self.batcher: Batcher | None = None
        self._call_options: dict[str, Any] = {}
        self._wanted_outputs: list[str] = list(params.outputs)
        self.model_config_path = resolve_config_path(params.modelConfigPath)
        self.server: ServerInfo | None = None
        self.max_batch_size = 0
        self.inputs: dict[str, TensorSpec] = {}
        self.outputs: dict[str, TensorSpec] = {}
        self.requested_outputs: tuple[str, ...] = ()
        self._client: grpcclient.InferenceServerClient | None = None
        self._owns_client = False
        self.router: Router | None = None
        self._retry_policy: RetryPolicy | None = None
        self.counters = ClientCounters()
        self.transport = TensorTransport(
            params.useSharedMemory,
            debug_name or self.model_name,
            self.timeout,
            self.model_name,
            self.model_version,
            params.transport,
        )

    # -- setup -------------------------------------------------------------------------

    def connect(
        self,
        server: ServerInfo | str,
        grpc_client: grpcclient.InferenceServerClient | None = None,
        router: Router | None = None,
    ) -> None:
        """Fetch the model's metadata and config from ``server``; blocking (begin_job). A server
        without ``ModelConfig`` (MLServer, KServe) is used with the local config's
        ``max_batch_size`` (see ``framework.sonic._oip``).

        Args:
            server: where the model is served (a ``"host:port"`` string = plain channel).
            grpc_client: a shared ``InferenceServerClient`` of that server (TritonService
                passes one per server); None: the client opens its own and closes it in
                :meth:`close`.
            router: TritonService's routing (a :class:`~framework.sonic._retry.Router`): routes
                each request by server health, provides other servers and the fallback.

        Raises:
            ExternalFailure: the server does not answer or does not serve the model
                (version); the model has no inputs or outputs; its inputs or outputs differ
                from those of the local config (``Client.modelConfigPath``); category
                ``ModelVersioning``: its files' checksums differ from the local config's.
            ConfigurationError: ``Client.outputs`` names an output the model lacks;
                ``Client.transport`` is ``http`` and the server has no HTTP endpoint.
        """
        from tritonclient.utils import InferenceServerException

        if isinstance(server, str):
            server = ServerInfo(server, server)
        if self.transport.protocol == "http" and not server.http_address:
            raise ConfigurationError(
                f"{self.what}: Client.transport is 'http' but {server.describe()} has no HTTP endpoint "
                "(httpPort of its TritonService.servers entry)"
            )
        self.close()
        self.server = server
        self.router = router
        if grpc_client is None:
            grpc_client, self._owns_client = server.open_client(), True
        self._client = grpc_client
        self._retry_policy = RetryPolicy(
            self.retries,
            router or SingleServer(server, grpc_client),
            self.model_name,
            self.preferred_server,
            count_retry=self.counters.add_retry,
            count_error=self.counters.add_error,
            failure=self._failure,
        )
        if self.transport.protocol != "grpc" and server.http_address:  # MLServer: no binary tensors
            http_endpoint(server).check_binary(self.timeout)
        try:
            metadata = grpc_client.get_model_metadata(
                self.model_name, self.model_version, as_json=True, client_timeout=self.timeout
            )
            config = served_model_config(grpc_client, self.model_name, self.model_version, self.timeout)
        except InferenceServerException as exc:
            raise self._failure(exc, during="fetching the model metadata") from None
        if config is None:  # an Open Inference Protocol server other than Triton (framework.sonic._oip)
            local = read_local_config(self.model_config_path, self.what)
            config = config_without_server_config(local, metadata, self.what, self._where())
        else:
            self._check_model(metadata, config)
        self._setup(metadata, config)

    def _check_model(self, metadata: Mapping[str, Any], config: dict[str, Any]) -> None:
        """CMSSW's checks against the local config (``Client.modelConfigPath``), if it exists:
        its ``max_batch_size`` is used (``config`` is updated), the server's inputs and outputs
        must be its own, and its checksums those of the served model (ModelVersioning).
        See :mod:`framework.sonic._model_config`."""
        local = read_local_config(self.model_config_path, self.what)
        if local is None:
            return
        check_io(local, metadata, int(config.get("max_batch_size", 0)), self.what)
        versions = [v for v in metadata.get("versions", ()) if str(v).isdigit()]
        version = self.model_version or (max(versions, key=int) if versions else "")
        check_versioning(local, config, str(version), self.what, self._where())
        config["max_batch_size"] = local.max_batch_size

    def _setup(self, metadata: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        self.max_batch_size = int(config.get("max_batch_size", 0))
        batched = self.max_batch_size > 0
        self.inputs = {e["name"]: spec_from_metadata(e, batched) for e in metadata.get("inputs", [])}
        self.outputs = {e["name"]: spec_from_metadata(e, batched) for e in metadata.get("outputs", [])}
        if not self.inputs or not self.outputs:
            # CMSSW: "Model on server appears malformed"
            raise ExternalFailure(
                f"{self.what} on {self._where()} appears malformed: "
                f"{len(self.inputs)} inputs, {len(self.outputs)} outputs"
            )
        unknown = [name for name in self._wanted_outputs if name not in self.outputs]
        if unknown:
            raise ConfigurationError(
                f"{self.what}: Client.outputs names {', '.join(unknown)}, "
                f"which the model lacks (it has: {', '.join(self.outputs)})"
            )
        self.requested_outputs = tuple(self._wanted_outputs or self.outputs)
        self._call_options = self._make_call_options()
        self.batcher = None
        if self.batching.max_rows > 1:
            if self.max_batch_size > 0 and self.mode == "Async":
                self.batcher = Batcher(self.batching, self, self.max_batch_size)
            else:
                why = "the model does not batch (max_batch_size 0)" if self.mode == "Async" else f"mode {self.mode}"
                logger.warning(
                    "%s: Client.batching is ignored (Async mode and batching models only): %s", self.what, why
                )
        if self.verbose:
            # CMSSW's verbose start message: model name, version, max outer dim, then the
            # inputs and outputs (name, dtype, shape); here also the server and the mode.
            lines = [
                f"Model name: {self.model_name}",
                f"Model version: {self.model_version}",
                f"Model max outer dim: {self.max_batch_size}",
                f"Server: {self._where()}, mode {self.mode}",
                "Model inputs:",
                *(f"  {s.name}: {s.describe()}" for s in self.inputs.values()),
                "Model outputs:",
                *(f"  {s.name}: {s.describe()}" for s in self.outputs.values() if s.name in self.requested_outputs),
            ]
            logger.info("%s:\n%s", self.what, "\n".join(lines))

    def close(self) -> None:
        """Release the shared-memory regions; close the gRPC client if this client opened it
        (not a TritonService's shared one)."""
        self.transport.close()
        if self._client is not None and self._owns_client:
            self._client.close()
            close_idle_connections()
        self._client, self._owns_client, self._retry_policy = None, False, None

    @property
    def connected(self) -> bool:
        return self._client is not None

    # -- per event ---------------------------------------------------------------------

    def new_request(self, event_id: Any = None) -> TritonRequest:
        """A fresh request for one event (inputs unset); ``event_id`` names it in logs and errors."""
        if self._client is None:
            raise ExternalFailure(
                f"{self.what}: the client is not connected (TritonService begin_job has not run)", model=self.model_name
            )
        return TritonRequest(self, event_id)

    @property
    def retry_policy(self) -> RetryPolicy:
        """How this client's requests are tried and retried (set by :meth:`connect`)."""
        if self._retry_policy is None:
            raise ExternalFailure(f"{self.what}: the client is not connected", model=self.model_name)
        return self._retry_policy

    def call_options(self) -> dict[str, Any]:
        """Keyword arguments of every ``infer``/``async_infer`` call: version, deadline,
        compression (made once, at connect; not to be modified). The requested outputs are
        each call's own (``framework.sonic._transport``)."""
        return self._call_options

    def _make_call_options(self) -> dict[str, Any]:
        return {
            "model_version": self.model_version,
            "client_timeout": self.timeout,
            "compression_algorithm": self.compression,
        }

    def server_side_status(self) -> dict[str, Any]:
        """Blocking: the model's inference statistics on its assigned server (Triton's
        ``ModelStatistics`` as JSON; CMSSW's ``getServerSideStatus``), {} if unavailable."""
        from tritonclient.utils import InferenceServerException

        if self._client is None:
            return {}
        try:
            response = self._client.get_inference_statistics(
                self.model_name, self.model_version, as_json=True, client_timeout=self.timeout
            )
        except InferenceServerException as exc:
            logger.info("%s: no server-side statistics: %s", self.what, " ".join(str(exc).split()))
            return {}
        stats = response.get("model_stats", [])
        return dict(stats[0]) if stats else {}

    def report_server_side_stats(self, start: Mapping[str, Any], end: Mapping[str, Any], event_id: Any = None) -> None:
        """Log what the server did between two :meth:`server_side_status` (CMSSW's
        ``reportServerSideStats``): counts, then the average request latency split into
        overhead, queue, compute input, compute infer and compute output, in microseconds."""
        if not start or not end:
            return

        def diff(*keys: str) -> int:
            def get(stats: Mapping[str, Any]) -> int:
                value: Any = stats
                for key in keys:
                    value = value.get(key, {}) if isinstance(value, Mapping) else {}
                return int(value or 0)

            return get(end) - get(start)

        count = diff("inference_stats", "success", "count")
        lines = [
            f"  Inference count: {diff('inference_count')}",
            f"  Execution count: {diff('execution_count')}",
            f"  Successful request count: {count}",
        ]
        if count > 0:
            avg = {k: diff("inference_stats", k, "ns") // 1000 // count for k in _STAT_PARTS}
            compute = avg["compute_input"] + avg["compute_infer"] + avg["compute_output"]
            overhead = max(avg["success"] - avg["queue"] - compute, 0)
            lines += [
                f"  Avg request latency: {avg['success']} usec",
                f"  (overhead {overhead} usec + queue {avg['queue']} usec + compute input {avg['compute_input']} usec"
                f" + compute infer {avg['compute_infer']} usec + compute output {avg['compute_output']} usec)",
            ]
        event = f", event {event_id}" if event_id is not None else ""
        logger.info("%s%s: server-side statistics of the call:\n%s", self.what, event, "\n".join(lines))

    def statistics(self) -> ClientStatistics:
        """A snapshot of the client-side counters."""
        return self.counters.snapshot()

    def calls_by_server(self) -> dict[str, int]:
        """gRPC calls that succeeded, per server name (failover shows up here)."""
        return self.counters.calls_by_server()

    # -- messages ----------------------------------------------------------------------

    def _where(self, server: ServerInfo | None = None) -> str:
        server = server or self.server
        return "no server" if server is None else server.describe()

    def _failure(
        self, exc: BaseException, where: ServerInfo | None = None, what: str = "", during: str = "inference"
    ) -> ExternalFailure:
        """An ExternalFailure naming model (module, event), server, status and message for
        ``exc``, with its fields (``model``, ``server``, ``status``, ``retryable``) set.

        Also the retry policy's ``failure(exc, server, what)``.
        """
        from tritonclient.utils import InferenceServerException

        server = where or self.server
        server_name = None if server is None else server.name
        status = grpc_status(exc)
        if isinstance(exc, ExternalFailure) and status is None:  # it names the request already
            exc.model = exc.model or self.model_name
            exc.server = exc.server or server_name
            return exc
        what = what or self.what
        if status == DEADLINE_STATUS:
            message = (
                f"{what} on {self._where(where)}: deadline exceeded after "
                f"{self.timeout_text} (Client.timeout) during {during}"
            )
        else:
            known = isinstance(exc, (InferenceServerException, ExternalFailure))
            detail = reason(exc) if known else f"{type(exc).__name__}: {exc}"
            # One line: a Python-backend model's traceback comes with newlines ("At: ...").
            message = f"{what} on {self._where(where)}: {during} failed: {' '.join(detail.split())}"
        return ExternalFailure(
            message, model=self.model_name, server=server_name, status=status, retryable=is_recoverable(exc)
        )

    def __repr__(self) -> str:
        return f"<TritonClient {self.what}, {self.mode}, {self._where()}>"
