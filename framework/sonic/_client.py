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
``infer_sync`` blocks the calling thread (``Sync`` mode: the trio thread; ``PseudoAsync``:
a worker thread). The counters are guarded by a lock for that reason.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import pathlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import trio

import framework.config as cms
from framework._bridge import ThreadSafeFuture
from framework._errors import ConfigurationError, ExternalFailure

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
    desc.add("timeout", cms.untracked.uint32(10), "per-request deadline, in timeoutUnit; 0 = none")
    desc.add("timeoutUnit", cms.untracked.string("seconds"), "seconds | milliseconds | microseconds")
    desc.add("mode", cms.untracked.string("Async"), "Async | Sync | PseudoAsync")
    desc.add("preferredServer", cms.untracked.string(""), "TritonService server name to use if it serves the model")
    desc.add("outputs", cms.untracked.vstring(), "outputs to request; [] = all")
    desc.add("verbose", cms.untracked.bool(False), "log model metadata and each request")
    desc.add("allowedTries", cms.untracked.uint32(1), "attempts per request (retries: not implemented yet)")
    return desc


# ----------------------------------------------------------------------------------------
# Where to connect


@dataclasses.dataclass(frozen=True)
class SslOptions:
    """PEM files for a TLS gRPC channel (None: gRPC's defaults / no client certificate)."""

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
            certificate_chain=ssl.certificate_chain,
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
        calls: gRPC inference requests sent (a batch split in k parts counts k).
        inferences: batch rows sent (events x rows).
        bytes_sent, bytes_received: tensor payload bytes (not gRPC framing).
        errors: failed requests (server errors, timeouts, malformed outputs).
    """

    calls: int = 0
    inferences: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    errors: int = 0


# ----------------------------------------------------------------------------------------
# The request of one event


class TritonRequest:
    """One event's inference: inputs to fill, then one of the ``infer_*`` calls, then outputs.

    Made by :meth:`TritonClient.new_request`. Not shared between events or tasks.

    Attributes:
        input: name -> :class:`TritonInputData` (every model input).
        output: name -> :class:`TritonOutputData` (every model output; only the requested
            ones get data).
    """

    def __init__(self, client: TritonClient) -> None:
        self.client = client
        self.what = client.what
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

    def _finish(self, results: list[Any], chunks: list[slice]) -> TritonRequest:
        client = self.client
        received = 0
        for name in client.requested_outputs:
            tensor = self.output[name]
            parts = [self._check_output(result, tensor.spec, chunk) for result, chunk in zip(results, chunks)]
            try:
                tensor.data = parts[0] if len(parts) == 1 else np.concatenate(parts)
            except ValueError as err:
                client._count_error()
                raise ExternalFailure(
                    f"{self.what}: output '{name}' of the {len(parts)} split requests cannot be joined: {err}"
                ) from None
            received += tensor.data.nbytes
        client._count(calls=len(chunks), inferences=self.batch_size,
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
            self.client._count_error()
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

        The gRPC callback re-enters trio through :class:`~framework.ThreadSafeFuture`. If
        this task is cancelled while waiting, every pending call is cancelled
        (``CallContext.cancel``) and ``trio.Cancelled`` propagates.

        Returns:
            self, with the outputs filled.

        Raises:
            ExternalFailure: server error, deadline exceeded, or malformed outputs.
        """
        chunks = self._chunks()
        if self.batch_size == 0:
            return self._finish_empty()
        client = self.client
        grpc_client = client._grpc()
        futures: list[ThreadSafeFuture] = []
        contexts: list[Any] = []

        def cancel_all() -> None:
            for context in contexts:
                context.cancel()

        try:
            for chunk in chunks:
                future = ThreadSafeFuture()
                contexts.append(grpc_client.async_infer(
                    client.model_name, self._grpc_inputs(chunk),
                    callback=functools.partial(_deliver, future), **client._call_options(),
                ))
                futures.append(future)
            results = [await future.wait(on_cancel=cancel_all) for future in futures]
        except trio.Cancelled:
            cancel_all()
            raise
        except Exception as exc:
            cancel_all()  # the other chunks are of no use any more
            raise client._failure(exc) from None
        return self._finish(results, chunks)

    def infer_sync(self) -> TritonRequest:
        """Blocking inference (``Sync``): one ``infer`` call per chunk, in turn.

        Returns:
            self, with the outputs filled.

        Raises:
            ExternalFailure: server error, deadline exceeded, or malformed outputs.
        """
        chunks = self._chunks()
        if self.batch_size == 0:
            return self._finish_empty()
        client = self.client
        grpc_client = client._grpc()
        results = []
        try:
            for chunk in chunks:
                results.append(grpc_client.infer(client.model_name, self._grpc_inputs(chunk),
                                                 **client._call_options()))
        except Exception as exc:
            raise client._failure(exc) from None
        return self._finish(results, chunks)

    async def infer_pseudo_async(self) -> TritonRequest:
        """``PseudoAsync``: the blocking call on a worker thread (CMSSW's SonicClientPseudoAsync).

        Not abandoned on cancellation: the thread finishes its call (bounded by the
        timeout) before ``trio.Cancelled`` propagates.
        """
        return await trio.to_thread.run_sync(self.infer_sync, abandon_on_cancel=False)


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
        server: the :class:`ServerInfo` in use.
        max_batch_size: the model's ``max_batch_size`` (0 = no batching).
        inputs, outputs: name -> :class:`TensorSpec`, in model order.
        requested_outputs: the outputs requested from the server (``Client.outputs``).
        timeout: per-request deadline in seconds (None = none).

    Raises:
        ConfigurationError: unknown ``mode`` or ``timeoutUnit``.
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
        self.allowed_tries: int = params.allowedTries
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
        self._lock = threading.Lock()
        self._stats = ClientStatistics()

    # -- setup -------------------------------------------------------------------------

    def connect(self, server: ServerInfo | str,
                grpc_client: grpcclient.InferenceServerClient | None = None) -> None:
        """Fetch the model's metadata and config from ``server``; blocking (begin_job).

        Args:
            server: where the model is served (a ``"host:port"`` string = plain channel).
            grpc_client: a shared ``InferenceServerClient`` of that server (TritonService
                passes one per server); None: the client opens its own and closes it in
                :meth:`close`.

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

    def new_request(self) -> TritonRequest:
        """A fresh request for one event (inputs unset)."""
        if self._client is None:
            raise ExternalFailure(f"{self.what}: the client is not connected (TritonService begin_job has not run)")
        return TritonRequest(self)

    def statistics(self) -> ClientStatistics:
        """A snapshot of the client-side counters."""
        with self._lock:
            return self._stats

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

    def _count(self, *, calls: int, inferences: int, sent: int, received: int) -> None:
        with self._lock:
            s = self._stats
            self._stats = dataclasses.replace(
                s, calls=s.calls + calls, inferences=s.inferences + inferences,
                bytes_sent=s.bytes_sent + sent, bytes_received=s.bytes_received + received,
            )

    def _count_error(self) -> None:
        with self._lock:
            self._stats = dataclasses.replace(self._stats, errors=self._stats.errors + 1)

    def _where(self) -> str:
        server = self.server
        if server is None:
            return "no server"
        return f"server '{server.name}' ({server.address})" if server.name != server.address else server.address

    def _failure(self, exc: Exception, during: str = "inference") -> Exception:
        """An ExternalFailure naming model, server, status and message for ``exc``."""
        from tritonclient.utils import InferenceServerException

        if isinstance(exc, ExternalFailure):
            return exc
        self._count_error()
        if isinstance(exc, InferenceServerException):
            if exc.status() == DEADLINE_STATUS:
                return ExternalFailure(f"{self.what} on {self._where()}: deadline exceeded after "
                                       f"{self.timeout_text} (Client.timeout) during {during}")
            detail = f"{exc.status() or 'error'}: {exc.message()}"
        else:
            detail = f"{type(exc).__name__}: {exc}"
        return ExternalFailure(f"{self.what} on {self._where()}: {during} failed: {detail}")

    def __repr__(self) -> str:
        return f"<TritonClient {self.what}, {self.mode}, {self._where()}>"
