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
import functools
import logging
import math
import pathlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import trio

import framework.config as cms
from framework._bridge import ThreadSafeFuture
from framework._errors import ConfigurationError, ExternalFailure

from ._retry import default_retries_pset, parse_retries, retry_description
from ._retry import run_async as _run_async
from ._retry import run_blocking as _run_blocking
from ._server import default_model_repository

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = [
    "ClientStatistics",
    "ServerInfo",
    "SslOptions",
    "TensorSpec",
    "TritonClient",
    "TritonInputData",
    "TritonOutputData",
    "TritonRequest",
    "client_description",
]

logger = logging.getLogger("pysonic.sonic")

MODES = ("Async", "Sync", "PseudoAsync")
TIMEOUT_UNITS = {"seconds": 1.0, "milliseconds": 1e-3, "microseconds": 1e-6}  # -> seconds
DEADLINE_STATUS = "StatusCode.DEADLINE_EXCEEDED"  # tritonclient's status for a client timeout
# Async mode: seconds past Client.timeout after which the client cancels a call itself, in
# case gRPC's own deadline never calls back.
TIMEOUT_GRACE = 1.0

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


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output of the model, from the server's model metadata.

    Attributes:
        name: tensor name.
        datatype: Triton datatype (``"FP32"``, ``"INT64"``, ``"BYTES"``...).
        dtype: the numpy dtype (``object`` for ``BYTES``).
        dims: shape WITHOUT the batch dimension; -1 = variable.
        batched: True if the model batches (``max_batch_size > 0``): arrays have a
            leading batch dimension.
    """

    name: str
    datatype: str
    dtype: np.dtype
    dims: tuple[int, ...]
    batched: bool

    @property
    def variable_dims(self) -> bool:
        return any(d < 0 for d in self.dims)

    def describe(self) -> str:
        """``"(batch, -1, 3) float32"``."""
        dims = (("batch",) if self.batched else ()) + self.dims
        return f"({', '.join(map(str, dims))}{',' if len(dims) == 1 else ''}) {self.dtype}"

    def matches(self, shape: Sequence[int]) -> bool:
        """Whether ``shape`` (with the batch dimension, if batched) fits ``dims``."""
        inner = tuple(shape[1:]) if self.batched else tuple(shape)
        if len(shape) != len(self.dims) + self.batched:
            return False
        return all(d < 0 or d == s for d, s in zip(self.dims, inner))


def _spec_from_metadata(entry: Mapping[str, Any], batched: bool) -> TensorSpec:
    from tritonclient.utils import triton_to_np_dtype

    shape = tuple(int(s) for s in entry["shape"])
    if batched:
        shape = shape[1:]  # the metadata shape starts with the batch dimension (-1)
    return TensorSpec(entry["name"], entry["datatype"], np.dtype(triton_to_np_dtype(entry["datatype"])),
                      shape, batched)


class _TensorMap(Mapping):
    """``request.input`` / ``request.output``: name -> tensor; unknown names name the known ones."""

    def __init__(self, what: str, kind: str, tensors: dict[str, Any]) -> None:
        self._what, self._kind, self._tensors = what, kind, tensors

    def __getitem__(self, name: str) -> Any:
        try:
            return self._tensors[name]
        except KeyError:
            raise _UnknownTensor(
                f"{self._what}: no {self._kind} named '{name}' (the model has: {', '.join(self._tensors)})"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)

    def __contains__(self, name: object) -> bool:
        return name in self._tensors


class _UnknownTensor(ExternalFailure, KeyError):
    # A KeyError too, so that Mapping.get() and friends keep working.
    def __str__(self) -> str:
        return f"[{self.category}] {self.args[0]}"  # not KeyError's repr() of the message


class TritonInputData:
    """One input of one request (CMSSW ``TritonInputData``): fill it with :meth:`to_server`."""

    def __init__(self, request: TritonRequest, spec: TensorSpec) -> None:
        self._request = request
        self.spec = spec
        self.data: np.ndarray | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def to_server(self, array: Any) -> None:
        """Set this input's data for the request.

        Args:
            array: array-like of exactly the input's dtype (no silent conversion: a wrong
                dtype is usually a bug upstream), shape ``(batch, *dims)`` for a batching
                model (every input the same ``batch``) or ``dims`` otherwise; any size for
                ``-1`` dims. Stored C-contiguous; not copied if already so.

        Raises:
            ExternalFailure: dtype or shape do not match the model metadata, or the batch
                size differs from another input's; names model, input, expected and actual.
        """
        array = np.asarray(array)
        spec = self.spec
        if array.dtype != spec.dtype or not spec.matches(array.shape):
            raise ExternalFailure(
                f"{self._request.what}: input '{spec.name}' expects {spec.describe()}, "
                f"got {tuple(array.shape)} {array.dtype}"
            )
        if spec.batched:
            self._request._agree_batch(spec.name, array.shape[0])
        self.data = np.ascontiguousarray(array)


class TritonOutputData:
    """One output of one request (CMSSW ``TritonOutputData``): read it with :meth:`from_server`."""

    def __init__(self, request: TritonRequest, spec: TensorSpec) -> None:
        self._request = request
        self.spec = spec
        self.data: np.ndarray | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    def from_server(self) -> np.ndarray:
        """The output array: ``(batch, *dims)`` for a batching model, else ``dims``.

        Read-only when it is a view of the response buffer. A request of batch 0 gives
        ``(0, *dims)`` with variable dims 0.

        Raises:
            ExternalFailure: the inference has not run (or was not requested); names the
                model and the output.
        """
        if self.data is None:
            requested = self._request.client.requested_outputs
            why = "it was not requested (Client.outputs)" if self.name not in requested else "no inference ran yet"
            raise ExternalFailure(f"{self._request.what}: output '{self.name}' has no data: {why}")
        return self.data


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
# The request of one event


class TritonRequest:
    """One event's inference: inputs to fill, then one of the ``infer_*`` calls, then outputs.

    Made by :meth:`TritonClient.new_request`. Not shared between events or tasks.

    Attributes:
        input: name -> :class:`TritonInputData` (every model input).
        output: name -> :class:`TritonOutputData` (every model output; only the requested
            ones get data).
        event_id: the event this request belongs to (for logs and errors), or None.
        server: the :class:`ServerInfo` that answered (after a successful inference).
        tries: tries it took (1 = no retry).
    """

    def __init__(self, client: TritonClient, event_id: Any = None) -> None:
        self.client = client
        self.event_id = event_id
        self.what = client.what + (f", event {event_id}" if event_id is not None else "")
        self.server: ServerInfo | None = None
        self.tries = 0
        self._batch: int | None = None
        self._batch_from = ""
        self.input = _TensorMap(self.what, "input", {n: TritonInputData(self, s) for n, s in client.inputs.items()})
        self.output = _TensorMap(self.what, "output", {n: TritonOutputData(self, s) for n, s in client.outputs.items()})

    @property
    def batch_size(self) -> int:
        """Rows of this request: the inputs' leading dimension (batching models; 0 before
        any input is set), or 1 (models without batching)."""
        if self.client.max_batch_size == 0:
            return 1
        return self._batch or 0

    def _agree_batch(self, name: str, rows: int) -> None:
        if self._batch is None:
            self._batch, self._batch_from = rows, name
        elif rows != self._batch:
            raise ExternalFailure(
                f"{self.what}: input '{name}' has batch size {rows}, but input "
                f"'{self._batch_from}' has {self._batch} (all inputs must agree)"
            )

    # -- preparing the calls -----------------------------------------------------------

    def _chunks(self) -> list[slice]:
        """Row ranges of the gRPC calls: batches above max_batch_size are split (as CMSSW
        does for its "many" batch mode) and the outputs joined again."""
        missing = [name for name, tensor in self.input.items() if tensor.data is None]
        if missing:
            raise ExternalFailure(f"{self.what}: input(s) {', '.join(missing)} not set (call to_server)")
        limit = self.client.max_batch_size
        if limit == 0:
            return [slice(None)]
        rows = self.batch_size
        return [slice(start, min(start + limit, rows)) for start in range(0, rows, limit)]

    def _grpc_inputs(self, rows: slice) -> list[Any]:
        import tritonclient.grpc as grpcclient

        inputs = []
        for tensor in self.input.values():
            data = tensor.data[rows]
            grpc_input = grpcclient.InferInput(tensor.name, list(data.shape), tensor.spec.datatype)
            grpc_input.set_data_from_numpy(data)
            inputs.append(grpc_input)
        return inputs

    def _finish_empty(self) -> TritonRequest:
        # Batch 0: nothing to send (CMSSW's TritonClient skips the call too).
        for tensor in self.output.values():
            if tensor.name in self.client.requested_outputs:
                shape = (0,) + tuple(max(d, 0) for d in tensor.spec.dims)
                tensor.data = np.zeros(shape, tensor.spec.dtype)
        return self

    def _finish(self, results: list[Any], chunks: list[slice], server: ServerInfo) -> TritonRequest:
        client = self.client
        received = 0
        for name in client.requested_outputs:
            tensor = self.output[name]
            parts = [self._check_output(result, tensor.spec, chunk) for result, chunk in zip(results, chunks)]
            try:
                tensor.data = parts[0] if len(parts) == 1 else np.concatenate(parts)
            except ValueError as err:
                raise ExternalFailure(
                    f"{self.what}: output '{name}' of the {len(parts)} split requests cannot be joined: {err}"
                ) from None
            received += tensor.data.nbytes
        client._count(server, calls=len(chunks), inferences=self.batch_size,
                      sent=sum(t.data.nbytes for t in self.input.values()), received=received)
        return self

    def _check_output(self, result: Any, spec: TensorSpec, chunk: slice) -> np.ndarray:
        # tritonclient does not check outputs against the metadata, and a misconfigured
        # Python backend returns EMPTY tensors without an error: check everything here.
        expected_rows = len(range(*chunk.indices(self.batch_size))) if spec.batched else None
        try:
            array = result.as_numpy(spec.name)
        except ValueError as err:  # raw content does not fill the announced shape
            array, problem = None, f"malformed tensor ({err})"
        else:
            problem = "missing from the response" if array is None else ""
        if array is not None:
            shape = array.shape
            if array.dtype != spec.dtype:
                problem = f"dtype {array.dtype}"
            elif not spec.matches(shape) or (spec.batched and shape[0] != expected_rows):
                problem = f"shape {tuple(shape)}"
            elif array.size == 0 and self._inputs_non_empty():
                # Legitimate only with a variable dim of size 0, which non-empty inputs
                # make unlikely; a Python-backend stub without its libraries does this.
                problem = f"EMPTY tensor of shape {tuple(shape)} for non-empty inputs (server misconfigured?)"
        if problem:
            rows = f" for {expected_rows} rows" if spec.batched else ""
            raise ExternalFailure(
                f"{self.what}: output '{spec.name}' is {problem}, expected {spec.describe()}{rows}"
            )
        return array

    def _inputs_non_empty(self) -> bool:
        return all(t.data is not None and t.data.size > 0 for t in self.input.values())

    # -- the three modes ---------------------------------------------------------------

    async def infer(self) -> TritonRequest:
        """Run the inference in the client's ``mode`` (Async, Sync or PseudoAsync)."""
        mode = self.client.mode
        if mode == "Async":
            return await self.infer_async()
        if mode == "PseudoAsync":
            return await self.infer_pseudo_async()
        return self.infer_sync()

    async def infer_async(self) -> TritonRequest:
        """Non-blocking inference (``Async``): ``async_infer`` calls, one per chunk, all in flight.

        The gRPC callback re-enters trio through :class:`~framework.ThreadSafeFuture`. A try
        that outlives ``Client.timeout`` (+ ``TIMEOUT_GRACE``) or whose task is cancelled
        cancels its pending calls (``CallContext.cancel``); failed tries are retried by
        ``Client.retries`` with ``trio.sleep`` between them.

        Returns:
            self, with the outputs filled.

        Raises:
            ExternalFailure: non-recoverable server error, malformed outputs, or tries
                exhausted (names model, module, event, servers and the last error).
            trio.Cancelled: propagated unchanged.
        """
        chunks = self._chunks()
        if self.batch_size == 0:
            return self._finish_empty()
        return await _run_async(self, lambda server, grpc_client: self._try_async(server, grpc_client, chunks))

    async def _try_async(self, server: ServerInfo, grpc_client: Any, chunks: list[slice]) -> TritonRequest:
        from tritonclient.utils import InferenceServerException

        client = self.client
        futures: list[ThreadSafeFuture] = []
        contexts: list[Any] = []

        def cancel_all() -> None:
            for context in contexts:
                context.cancel()

        limit = client.timeout + TIMEOUT_GRACE if client.timeout else math.inf
        try:
            with trio.move_on_after(limit) as scope:
                for chunk in chunks:
                    future = ThreadSafeFuture()
                    contexts.append(grpc_client.async_infer(
                        client.model_name, self._grpc_inputs(chunk),
                        callback=functools.partial(_deliver, future), **client._call_options(),
                    ))
                    futures.append(future)
                results = [await future.wait(on_cancel=cancel_all) for future in futures]
        except BaseException:
            cancel_all()  # cancelled, or one chunk failed: the other chunks are of no use
            raise
        if scope.cancelled_caught:  # wait() has cancelled the calls already
            raise InferenceServerException(f"no answer within {client.timeout_text} + {TIMEOUT_GRACE:g} s; "
                                           "the call was cancelled by the client", status=DEADLINE_STATUS)
        return self._finish(results, chunks, server)

    def infer_sync(self) -> TritonRequest:
        """Blocking inference (``Sync``): one ``infer`` call per chunk, in turn.

        Retries (``Client.retries``) block too, backoff included (``time.sleep``), as
        CMSSW's SonicClientSync blocks its thread.

        Returns:
            self, with the outputs filled.

        Raises:
            ExternalFailure: as :meth:`infer_async`.
        """
        chunks = self._chunks()
        if self.batch_size == 0:
            return self._finish_empty()
        return _run_blocking(self, lambda server, grpc_client: self._try_sync(server, grpc_client, chunks))

    def _try_sync(self, server: ServerInfo, grpc_client: Any, chunks: list[slice]) -> TritonRequest:
        client = self.client
        results = [grpc_client.infer(client.model_name, self._grpc_inputs(chunk), **client._call_options())
                   for chunk in chunks]
        return self._finish(results, chunks, server)

    async def infer_pseudo_async(self) -> TritonRequest:
        """``PseudoAsync``: each blocking try on a worker thread (CMSSW's SonicClientPseudoAsync).

        The retry loop itself runs in trio (backoff with ``trio.sleep``). A try is not
        abandoned on cancellation: its thread finishes the call (bounded by the timeout)
        before ``trio.Cancelled`` propagates.
        """
        chunks = self._chunks()
        if self.batch_size == 0:
            return self._finish_empty()

        async def attempt(server: ServerInfo, grpc_client: Any) -> TritonRequest:
            return await trio.to_thread.run_sync(self._try_sync, server, grpc_client, chunks,
                                                 abandon_on_cancel=False)

        return await _run_async(self, attempt)


def _deliver(future: ThreadSafeFuture, result: Any = None, error: Any = None) -> None:
    # gRPC callback thread: only hand the outcome over; must never raise.
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


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
        return ExternalFailure(f"{what} on {self._where(where)}: {during} failed: {detail}")

    def __repr__(self) -> str:
        return f"<TritonClient {self.what}, {self.mode}, {self._where()}>"
