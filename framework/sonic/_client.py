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
import pathlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import framework.config as cms
from framework._errors import ConfigurationError, ExternalFailure
from framework._paths import default_model_repository

from ._batching import Batcher, batching_description, parse_batching
from ._client_stats import ClientCounters, ClientStatistics
from ._data import TensorSpec, spec_from_metadata
from ._request import TritonRequest
from ._retry import (
    DEADLINE_STATUS,
    RetryPolicy,
    Router,
    SingleServer,
    default_retries_pset,
    is_recoverable,
    parse_retries,
    reason,
    retry_description,
)
from ._server_info import ServerInfo
from ._transport import TensorTransport
from ._waits import grpc_status

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = ["TritonClient", "client_description"]

logger = logging.getLogger("pysonic.sonic")

MODES = ("Async", "Sync", "PseudoAsync")
BATCH_MODES = ("Rectangular", "Ragged")  # CMSSW's TritonBatchMode
COMPRESSIONS = ("none", "deflate", "gzip")  # gRPC's, as tritonclient's compression_algorithm
TIMEOUT_UNITS = {"seconds": 1.0, "milliseconds": 1e-3, "microseconds": 1e-6}  # -> seconds


def client_description() -> cms.ParameterSetDescription:
    """The ``Client`` PSet of a SONIC module (CMSSW ``TritonClient::fillPSetDescription``).

    Only ``modelName`` and ``modelVersion`` are tracked: server and transport settings must
    not change the physics result (CMSSW's rule).
    """
    desc = cms.ParameterSetDescription()
    desc.add("modelName", cms.string, "model name on the Triton server (required)")
    desc.add("modelVersion", cms.string(""), 'model version; "" = the server\'s latest')
    desc.add(
        "modelConfigPath",
        cms.untracked.string(""),
        'config.pbtxt of the model, for the fallback server; "" = <default repository>/<modelName>/config.pbtxt',
    )
    desc.add("timeout", cms.untracked.uint32(10), "deadline of each try, in timeoutUnit; 0 = none")
    desc.add("timeoutUnit", cms.untracked.string("seconds"), "seconds | milliseconds | microseconds")
    desc.add("mode", cms.untracked.string("Async"), "Async | Sync | PseudoAsync")
    desc.add("preferredServer", cms.untracked.string(""), "TritonService server name to use if it serves the model")
    desc.add("outputs", cms.untracked.vstring(), "outputs to request; [] = all")
    desc.add("verbose", cms.untracked.bool(False), "log model metadata and each request")
    desc.add(
        "useSharedMemory",
        cms.untracked.bool(True),
        "tensors through system shared memory when the server is on this host (else gRPC payloads)",
    )
    desc.add(
        "batchMode",
        cms.untracked.string("Rectangular"),
        "Rectangular (one array per input, batch first) | Ragged (a list of entries, each its own shape)",
    )
    desc.add("compression", cms.untracked.string("none"), "gRPC compression of requests: none | deflate | gzip")
    desc.add_vpset(
        "retries",
        retry_description(),
        "retry actions tried in order after a recoverable failure (sameServer | otherServer | fallback); [] = no retry",
        default=default_retries_pset(),
        tracked=False,
    )
    desc.add(
        "batching",
        batching_description(),
        "cross-event batching: merge the requests of events in flight into one call (maxRows > 0)",
        tracked=False,
    )
    desc.add(
        "allowedTries",
        cms.untracked.uint32(0),
        "DEPRECATED (use retries): N > 0 = N tries in all, on the same server only; 0 = use retries",
    )
    return desc


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
        ):
            if (value := getattr(params, key)) not in allowed:
                raise ConfigurationError(f"{self.what}: Client.{key} '{value}' is not one of {', '.join(allowed)}")
        self.mode: str = params.mode
        self.batch_mode: str = params.batchMode
        self.compression: str | None = None if params.compression == "none" else params.compression
        self.timeout_text = f"{params.timeout} {params.timeoutUnit}"
        self.timeout: float | None = params.timeout * TIMEOUT_UNITS[params.timeoutUnit] or None
        self.preferred_server: str = params.preferredServer
        self.verbose: bool = params.verbose
        self.retries = parse_retries(params.retries, params.allowedTries, self.what)
        self.batching = parse_batching(params.batching, self.what)
        self.batcher: Batcher | None = None
        self._call_options: dict[str, Any] = {}
        self._wanted_outputs: list[str] = list(params.outputs)
        config_path = params.modelConfigPath
        self.model_config_path = (
            pathlib.Path(config_path) if config_path else default_model_repository() / self.model_name / "config.pbtxt"
        )
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
        self.transport = TensorTransport(params.useSharedMemory, debug_name or self.model_name, self.timeout)

    # -- setup -------------------------------------------------------------------------

    def connect(
        self,
        server: ServerInfo | str,
        grpc_client: grpcclient.InferenceServerClient | None = None,
        router: Router | None = None,
    ) -> None:
        """Fetch the model's metadata and config from ``server``; blocking (begin_job).

        Args:
            server: where the model is served (a ``"host:port"`` string = plain channel).
            grpc_client: a shared ``InferenceServerClient`` of that server (TritonService
                passes one per server); None: the client opens its own and closes it in
                :meth:`close`.
            router: TritonService's routing (a :class:`~framework.sonic._retry.Router`): routes
                each request by server health, provides other servers and the fallback.

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
        self._retry_policy = RetryPolicy(
            self.retries,
            router or SingleServer(server, grpc_client),
            self.model_name,
            self.preferred_server,
            count_retry=self.counters.add_retry,
            count_error=self.counters.add_error,
            failure=self._failure,
        )
        try:
            metadata = grpc_client.get_model_metadata(
                self.model_name, self.model_version, as_json=True, client_timeout=self.timeout
            )
            config = grpc_client.get_model_config(
                self.model_name, self.model_version, as_json=True, client_timeout=self.timeout
            )["config"]
        except InferenceServerException as exc:
            raise self._failure(exc, during="fetching the model metadata") from None
        self._setup(metadata, config)

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
            lines = [f"  input  {s.name}: {s.describe()}" for s in self.inputs.values()]
            lines += [f"  output {s.name}: {s.describe()}" for s in self.outputs.values()]
            logger.info(
                "%s on %s, max_batch_size %d, mode %s:\n%s",
                self.what,
                self._where(),
                self.max_batch_size,
                self.mode,
                "\n".join(lines),
            )

    def close(self) -> None:
        """Release the shared-memory regions; close the gRPC client if this client opened it
        (not a TritonService's shared one)."""
        self.transport.close()
        if self._client is not None and self._owns_client:
            self._client.close()
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
        """Keyword arguments of every ``infer``/``async_infer`` call: version, outputs, deadline
        (made once, at connect; not to be modified)."""
        return self._call_options

    def _make_call_options(self) -> dict[str, Any]:
        outputs = None
        if self._wanted_outputs:
            import tritonclient.grpc as grpcclient

            outputs = [grpcclient.InferRequestedOutput(name) for name in self.requested_outputs]
        return {
            "model_version": self.model_version,
            "outputs": outputs,
            "client_timeout": self.timeout,
            "compression_algorithm": self.compression,
        }

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
