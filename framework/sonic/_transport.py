"""How a call's tensors travel: Triton system shared memory, or payloads; over HTTP or gRPC.

CMSSW counterpart: the ``TritonMemResource`` choice of HeterogeneousCore/SonicTriton
(``TritonCpuShmResource`` or ``TritonHeapResource``), made by the Client PSet's untracked
``useSharedMemory`` (default true) when the server is on the same host (CMSSW: by its
address; here: when it can map our ``/dev/shm``, :func:`~framework.sonic._shm.shares_dev_shm`).
A :class:`TensorTransport` (one per :class:`~framework.sonic.TritonClient`) gives each gRPC
call its inputs and requested outputs: a :class:`ShmCall` (inputs first, then the outputs,
each at a 64-byte aligned offset of one region of the client's
:class:`~framework.sonic._shm.ShmPool` for that server) or a :class:`PayloadCall`.

* Servers that cannot map our ``/dev/shm`` (another host, container or mount namespace),
  calls with less than :data:`SHM_MIN_BYTES` of inputs, and tensors shared memory cannot
  carry (``BYTES``; outputs whose size the metadata leaves open, i.e. with a ``-1`` dim)
  use gRPC payloads.
* A server restarted on the same address has forgotten the regions: the call fails; asked
  (``get_system_shared_memory_status``), the server does not know the call's region; the
  pool then registers its regions again and the failure is reported as a retryable
  :class:`~framework.ExternalFailure`, so that the retry policy tries again.
* A local server that refuses to register a region (one in a container, say) gets
  payloads from then on; a full ``/dev/shm`` gives the call payloads.

The protocol (``Client.transport``, a pysonic extension): ``auto`` (default) sends a call
over HTTP (:class:`HttpCall`, :mod:`framework.sonic._http`: trio's own sockets, no
foreign thread) when the server has an HTTP endpoint, else over gRPC; ``http`` and
``grpc`` force one. Shared memory goes either way (the region is registered once with
the server, whichever frontend then reads it). ``BYTES`` and ``BF16`` tensors go through
tritonclient's gRPC client whatever the choice.
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np
import trio

from framework.utilities import ExternalFailure

from ._data import TensorSpec
from ._http import HttpEndpoint, HttpPlan, HttpResponse, http_endpoint
from ._server_info import ServerInfo
from ._shm import ALIGN, SERVER_GONE, ShmPool, remove_stale_regions_once, shares_dev_shm
from ._waits import grpc_status
from ._wire import RAW_DATATYPES, RequestPlan, StackedRows, decode_response, joined, response_outputs

_Plan = TypeVar("_Plan", RequestPlan, HttpPlan)  # a request plan of either transport

__all__ = ["PROTOCOLS", "SHM_MIN_BYTES", "Call", "HttpCall", "PayloadCall", "ShmCall", "TensorTransport", "WireCall"]

PROTOCOLS = ("auto", "http", "grpc")
"""Values of ``Client.transport``: ``auto`` = HTTP where the server has an HTTP endpoint
(``ServerInfo.http_address``), else gRPC."""

logger = logging.getLogger("pysonic.sonic")

SHM_MIN_BYTES = 64 * 1024
"""Calls with fewer input bytes use payloads even with a local server: the bookkeeping of
a shared-memory call costs more than copying a small message. The value is a judgement,
not a measured crossing point: ``cmsbench shm`` measures both transports from 16 kB to
2 MB (``docs/performance.md``)."""


def _async_infer(
    grpc_client: Any, model_name: str, call: PayloadCall | ShmCall, options: dict[str, Any], callback: Any
) -> Any:
    return grpc_client.async_infer(model_name, call.inputs, callback=callback, **options, outputs=call.outputs)


def _is_tritonclient(grpc_client: Any) -> bool:
    """Whether ``grpc_client`` is tritonclient's own gRPC client (not a stand-in or wrapper)."""
    import tritonclient.grpc as grpcclient

    return type(grpc_client) is grpcclient.InferenceServerClient


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class PayloadCall:
    """One gRPC call whose tensors travel in the messages, through tritonclient.

    The path for what :class:`WireCall` does not write: ``BYTES`` and ``BF16`` tensors
    (tritonclient's own serialization), and a ``grpc_client`` that is not tritonclient's
    own ``InferenceServerClient`` (a test's stand-in, say).
    """

    http = None  # a gRPC call

    def __init__(
        self,
        specs: Mapping[str, TensorSpec],
        arrays: Mapping[str, np.ndarray[Any, Any]],
        outputs: Sequence[str] | None,
    ) -> None:
        self.specs = specs
        self.arrays = arrays
        self.output_names = outputs

    @property
    def inputs(self) -> list[Any]:
        """tritonclient's ``InferInput`` of each input (for ``infer``/``async_infer``)."""
        import tritonclient.grpc as grpcclient

        inputs = []
        for name, data in self.arrays.items():
            grpc_input = grpcclient.InferInput(name, list(data.shape), self.specs[name].datatype)
            grpc_input.set_data_from_numpy(data)
            inputs.append(grpc_input)
        return inputs

    @property
    def outputs(self) -> list[Any] | None:
        """tritonclient's ``InferRequestedOutput`` of each requested output (None: all)."""
        import tritonclient.grpc as grpcclient

        return None if self.output_names is None else [grpcclient.InferRequestedOutput(n) for n in self.output_names]

    def send(self, grpc_client: Any, model_name: str, options: dict[str, Any], callback: Any) -> Any:
        """Start the call (``async_infer``'s meaning and callback); its ``CallContext``."""
        return _async_infer(grpc_client, model_name, self, options, callback)

    def infer(self, grpc_client: Any, model_name: str, options: dict[str, Any]) -> Any:
        """The blocking call (``infer``): its ``InferResult``."""
        return grpc_client.infer(model_name, self.inputs, **options, outputs=self.outputs)

    def as_numpy(self, result: Any, name: str) -> np.ndarray[Any, Any] | None:
        """The output array (a view of the response), None if missing; ValueError if malformed."""
        array: np.ndarray[Any, Any] | None = result.as_numpy(name)
        return array

    def done(self, ok: bool) -> None:
        pass


class WireCall:
    """One gRPC call whose request is written from the input arrays (:mod:`framework.sonic._wire`).

    Sent as bytes through grpcio's multi-callable for ``ModelInfer`` on tritonclient's own
    channel (:class:`_WireStub`: the same connection, channel options and headers); the
    response's outputs are numpy views over its bytes. The callback and the errors are
    those of tritonclient's ``async_infer`` (``callback(result=..., error=...)``, errors as
    ``InferenceServerException`` with the gRPC status), so that the retry policy and the
    batcher see no difference; ``result`` is the response's bytes, read by :meth:`as_numpy`.
    """

    __slots__ = ("request", "_outputs")
    http = None  # a gRPC call

    def __init__(self, plan: RequestPlan, arrays: Sequence[np.ndarray[Any, Any] | StackedRows]) -> None:
        self.request = plan.encode(arrays)
        self._outputs: dict[str, np.ndarray[Any, Any] | None] | None = None

    def send(self, grpc_client: Any, model_name: str, options: dict[str, Any], callback: Any) -> Any:
        """Start the call; the gRPC future (``cancel()`` cancels it), whose completion calls
        ``callback(result=bytes, error=None)`` or ``callback(result=None, error=exc)`` on
        gRPC's thread."""
        return _wire_send(grpc_client, self.request, options, callback)

    def infer(self, grpc_client: Any, model_name: str, options: dict[str, Any]) -> bytes:
        """The blocking call: the response's bytes.

        Raises:
            InferenceServerException: the call failed (its gRPC status set).
        """
        return _wire_infer(grpc_client, self.request, options)

    def as_numpy(self, result: bytes, name: str) -> np.ndarray[Any, Any] | None:
        """Output ``name``, a read-only view of the response (None if missing).

        Raises:
            ValueError: the response is malformed (``_wire.decode_response``).
        """
        if self._outputs is None:
            self._outputs = decode_response(result)
        return self._outputs.get(name)

    def done(self, ok: bool) -> None:
        pass


_MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"  # grpc_service.proto


class _WireStub:
    """``ModelInfer`` as bytes on one tritonclient client's channel.

    grpcio's multi-callable without serializers passes bytes through; registered once per
    channel (``_registered_method``: the C core interns the method once, not per call).
    The metadata are tritonclient's for that client (``_get_metadata``: its headers and
    plugin), taken once unless a plugin may change them per call.
    """

    def __init__(self, grpc_client: Any) -> None:
        import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs

        channel = grpc_client._channel  # noqa: SLF001 - tritonclient's channel: one connection, its options
        self.infer = channel.unary_unary(_MODEL_INFER, _registered_method=True)
        self._client = weakref.ref(grpc_client)
        self._fixed = None if grpc_client._plugin is not None else tuple(grpc_client._get_metadata(None))  # noqa: SLF001
        self._compressions: dict[str | None, Any] = {None: grpc.Compression.NoCompression}

    def call_arguments(self, options: dict[str, Any]) -> dict[str, Any]:
        """grpcio's keyword arguments of one call with the client's ``options``
        (``call_options``): deadline, metadata, compression."""
        return {
            "timeout": options.get("client_timeout"),
            "metadata": self.metadata(),
            "compression": self.compression(options.get("compression_algorithm")),
        }

    def metadata(self) -> Any:
        if self._fixed is not None:
            return self._fixed or None
        client = self._client()
        return None if client is None else client._get_metadata(None)  # noqa: SLF001

    def compression(self, algorithm: str | None) -> Any:
        found = self._compressions.get(algorithm)
        if found is None:
            from tritonclient.grpc._utils import _grpc_compression_type

            found = self._compressions[algorithm] = _grpc_compression_type(algorithm)
        return found


_stubs: weakref.WeakKeyDictionary[Any, _WireStub] = weakref.WeakKeyDictionary()
_stubs_lock = threading.Lock()


def _wire_stub(grpc_client: Any) -> _WireStub:
    stub = _stubs.get(grpc_client)
    if stub is None:
        with _stubs_lock:
            stub = _stubs.get(grpc_client)
            if stub is None:
                stub = _stubs[grpc_client] = _WireStub(grpc_client)
    return stub


def _wire_send(grpc_client: Any, request: bytes, options: dict[str, Any], callback: Any) -> Any:
    """Start a ``ModelInfer`` call of ``request`` (bytes) on ``grpc_client``'s channel; its
    gRPC future. The completion calls ``callback`` as tritonclient's ``async_infer`` does."""
    stub = _wire_stub(grpc_client)
    future = stub.infer.future(request, **stub.call_arguments(options))
    future.add_done_callback(functools.partial(_wire_done, callback))
    return future


def _wire_infer(grpc_client: Any, request: bytes, options: dict[str, Any]) -> bytes:
    """The blocking ``ModelInfer`` call of ``request``: the response's bytes.

    Raises:
        InferenceServerException: the call failed (its gRPC status set).
    """
    import grpc
    from tritonclient.grpc._utils import get_error_grpc

    stub = _wire_stub(grpc_client)
    try:
        response: bytes = stub.infer(request, **stub.call_arguments(options))
    except grpc.RpcError as rpc_error:
        raise get_error_grpc(rpc_error) from None
    return response


def _wire_done(callback: Any, future: Any) -> None:
    # gRPC's thread: tritonclient's errors for tritonclient's callback; never raises.
    import grpc
    from tritonclient.grpc._utils import get_cancelled_error, get_error_grpc

    try:
        result = future.result()
    except grpc.RpcError as rpc_error:
        callback(result=None, error=get_error_grpc(rpc_error))
    except grpc.FutureCancelledError:
        callback(result=None, error=get_cancelled_error())
    else:
        callback(result=result, error=None)


class HttpCall:
    """One call over HTTP (:mod:`framework.sonic._http`): the request's head, its JSON
    header and its arrays (sent one after the other, not joined), and the model it is for.

    :meth:`exchange` awaits the answer in the calling task (``Async``); :meth:`infer`
    blocks (``Sync``, ``PseudoAsync``); :meth:`send` runs :meth:`exchange` in a trio
    system task and calls back as gRPC's :meth:`WireCall.send` does (the batcher). The
    result is an :class:`~framework.sonic._http.HttpResponse`; errors are
    :class:`~framework.ExternalFailure` (model, server, gRPC status name, retryable).
    """

    __slots__ = ("endpoint", "buffers", "model_name")

    def __init__(self, endpoint: HttpEndpoint, plan: HttpPlan, header: bytes, parts: list[Any], model: str) -> None:
        body = len(header) + sum(memoryview(part).nbytes for part in parts)
        self.endpoint = endpoint
        self.buffers = [endpoint.request_head(plan, header, body), header, *parts]
        self.model_name = model

    @classmethod
    def of_arrays(
        cls, endpoint: HttpEndpoint, plan: HttpPlan, arrays: Sequence[np.ndarray[Any, Any] | StackedRows], model: str
    ) -> HttpCall:
        """A call whose inputs travel in its body (binary data)."""
        if not endpoint.binary:  # no binary tensor extension (MLServer): all JSON
            body = plan.json_body(arrays)
            call = cls(endpoint, plan, body, [], model)
            call.buffers[0] = endpoint.json_head(plan, len(body))
            return call
        parts: list[Any] = []
        for array in arrays:
            parts += array.parts if isinstance(array, StackedRows) else (array,)
        return cls(endpoint, plan, plan.header(arrays), parts, model)

    @property
    def http(self) -> HttpCall:
        """Itself: a call over HTTP (``ShmCall.http`` is its HTTP call, or None)."""
        return self

    async def exchange(self, options: dict[str, Any]) -> HttpResponse:
        """Send the call and wait for its answer in this task; ``Client.timeout``
        (``options["client_timeout"]``) is its deadline (a trio cancel scope).

        Raises:
            ExternalFailure: the server's error (4xx/5xx), the connection failed, the
                deadline passed (``DEADLINE_EXCEEDED``), a malformed response.
            trio.Cancelled: the connection is closed.
        """
        timeout = options.get("client_timeout")
        endpoint = self.endpoint
        try:
            with trio.fail_after(timeout if timeout else math.inf):
                status, headers, body = await endpoint.exchange(self.buffers)
        except trio.TooSlowError:
            raise endpoint.failure(TimeoutError(), self.model_name) from None
        except Exception as exc:  # noqa: BLE001 - the connection's failures, as ExternalFailure
            raise endpoint.failure(exc, self.model_name) from None
        return endpoint.response(status, body, headers, self.model_name)

    def infer(self, grpc_client: Any, model_name: str, options: dict[str, Any]) -> HttpResponse:
        """:meth:`exchange` on the calling thread (blocking sockets)."""
        timeout = options.get("client_timeout")
        endpoint = self.endpoint
        deadline = time.monotonic() + timeout if timeout else math.inf
        try:
            status, headers, body = endpoint.exchange_blocking(self.buffers, deadline)
        except Exception as exc:  # noqa: BLE001 - the connection's failures, as ExternalFailure
            raise endpoint.failure(exc, self.model_name) from None
        return endpoint.response(status, body, headers, self.model_name)

    def send(self, grpc_client: Any, model_name: str, options: dict[str, Any], callback: Any) -> trio.CancelScope:
        """Start :meth:`exchange` in a trio system task (trio thread); it calls
        ``callback(result=response, error=None)`` or ``callback(result=None, error=exc)``
        on the trio thread. Returns the cancel scope that cancels it (``cancel()``)."""
        scope = trio.CancelScope()
        trio.lowlevel.spawn_system_task(_send_http, self, options, callback, scope, name="HTTP call")
        return scope

    def as_numpy(self, result: HttpResponse, name: str) -> np.ndarray[Any, Any] | None:
        """Output ``name``, a read-only view of the response (None if missing).

        Raises:
            ValueError: the response is malformed.
        """
        return result.as_numpy(name)

    def done(self, ok: bool) -> None:
        pass


async def _send_http(call: HttpCall, options: dict[str, Any], callback: Any, scope: trio.CancelScope) -> None:
    # A system task: never raises (that would crash the run). Cancelled by its scope (the
    # batcher's events all left) or at the run's end.
    with scope:
        try:
            response = await call.exchange(options)
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            callback(result=None, error=exc)
        else:
            callback(result=response, error=None)
        return
    callback(
        result=None,
        error=ExternalFailure(
            "the call was cancelled by the client",
            model=call.model_name,
            server=call.endpoint.server.name,
            status="CANCELLED",
        ),
    )


class ShmCall:
    """One gRPC call whose inputs (and fixed-size outputs) are in a shared-memory region.

    With a ``plan`` (raw datatypes, tritonclient's own client) the request is written by
    :meth:`~framework.sonic._wire.RequestPlan.encode_shared_memory` and sent as bytes as a
    :class:`WireCall` is (no ``InferInput`` or protobuf message per call); with ``http``
    (an endpoint and its plan) it goes over HTTP as an :class:`HttpCall` whose JSON header
    names the region (:meth:`~framework.sonic._http.HttpPlan.header_shared_memory`);
    without either, through tritonclient's ``async_infer``. The inputs are written into
    the region either way.

    Args:
        pool: where the region comes from.
        in_specs, out_specs: the model's inputs and the requested outputs.
        arrays: input name -> C-contiguous array of this call (or the
            :class:`~framework.sonic._wire.StackedRows` of a merged call: its parts are
            written one after the other into the region, not joined first).
        rows: the call's batch size (None: the model does not batch).
        outputs_in_shm: whether the outputs go to the region too (all have fixed sizes).
        plan: the model's request plan, or None (tritonclient writes the request).
        http: (endpoint, plan, model name) of a call over HTTP, or None (gRPC).
    """

    def __init__(
        self,
        pool: ShmPool,
        in_specs: Mapping[str, TensorSpec],
        out_specs: Sequence[TensorSpec],
        arrays: Mapping[str, np.ndarray[Any, Any] | StackedRows],
        rows: int | None,
        outputs_in_shm: bool,
        plan: RequestPlan | None = None,
        http: tuple[HttpEndpoint, HttpPlan, str] | None = None,
    ) -> None:
        import tritonclient.utils.shared_memory as shm

        offset, placed = 0, []
        for name, data in arrays.items():
            placed.append((name, data, offset))
            offset = _align(offset + data.nbytes)
        out_places: dict[str, tuple[int, int]] = {}
        if outputs_in_shm:
            for spec in out_specs:
                nbytes = math.prod(spec.dims) * spec.dtype.itemsize * (rows if rows is not None else 1)
                out_places[spec.name] = (offset, nbytes)
                offset = _align(offset + nbytes)
        self.pool = pool
        self.region = region = pool.acquire(max(offset, 1))
        for _name, data, at in placed:
            shm.set_shared_memory_region(
                region.handle, list(data.parts) if isinstance(data, StackedRows) else [data], offset=at
            )
        self._out_places = out_places
        # The wire response, read once: its outputs as views (outputs in the response) or
        # their datatypes and shapes (outputs in the region).
        self._views: dict[str, np.ndarray[Any, Any] | None] | None = None
        self._shapes: dict[str, tuple[str, tuple[int, ...]]] | None = None
        self.request: bytes | None = None
        self.http: HttpCall | None = None
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []
        if http is not None:
            endpoint, http_plan, model = http
            header = http_plan.header_shared_memory(
                region.name,
                [(data.shape, at, data.nbytes) for _name, data, at in placed],
                [(name, at, nbytes) for name, (at, nbytes) in out_places.items()] if outputs_in_shm else None,
            )
            self.http = HttpCall(endpoint, http_plan, header, [], model)
            return
        if plan is not None:
            self.request = plan.encode_shared_memory(
                region.name,
                [(data.shape, at, data.nbytes) for _name, data, at in placed],
                [(name, at, nbytes) for name, (at, nbytes) in out_places.items()] if outputs_in_shm else None,
            )
            return
        import tritonclient.grpc as grpcclient

        for name, data, at in placed:
            grpc_input = grpcclient.InferInput(name, list(data.shape), in_specs[name].datatype)
            grpc_input.set_shared_memory(region.name, data.nbytes, offset=at)
            self.inputs.append(grpc_input)
        for spec in out_specs:
            output = grpcclient.InferRequestedOutput(spec.name)
            if outputs_in_shm:
                at, nbytes = out_places[spec.name]
                output.set_shared_memory(region.name, nbytes, offset=at)
            self.outputs.append(output)

    def send(self, grpc_client: Any, model_name: str, options: dict[str, Any], callback: Any) -> Any:
        """Start the call (``async_infer``'s meaning and callback); what cancels it."""
        if self.http is not None:
            return self.http.send(grpc_client, model_name, options, callback)
        if self.request is not None:
            return _wire_send(grpc_client, self.request, options, callback)
        return _async_infer(grpc_client, model_name, self, options, callback)

    def infer(self, grpc_client: Any, model_name: str, options: dict[str, Any]) -> Any:
        """The blocking call: the response's bytes (wire), its ``InferResult`` or its
        :class:`~framework.sonic._http.HttpResponse`."""
        if self.http is not None:
            return self.http.infer(grpc_client, model_name, options)
        if self.request is not None:
            return _wire_infer(grpc_client, self.request, options)
        return grpc_client.infer(model_name, self.inputs, **options, outputs=self.outputs)

    def as_numpy(self, result: Any, name: str) -> np.ndarray[Any, Any] | None:
        """A COPY of the output (the region is reused), None if missing; ValueError if malformed."""
        place = self._out_places.get(name)
        if place is None:  # in the response: a view of it
            if self.request is None:
                array: np.ndarray[Any, Any] | None = result.as_numpy(name)
                return array
            if self._views is None:
                self._views = decode_response(result)
            return self._views.get(name)
        if self.request is not None or self.http is not None:
            if self._shapes is None:
                self._shapes = result.outputs() if self.http is not None else response_outputs(result)
            meta = self._shapes.get(name)
            if meta is None:
                return None
            datatype, shape = meta
            if datatype not in RAW_DATATYPES:
                raise ValueError(f"datatype {datatype} cannot be read from a shared-memory region")
            dtype = RAW_DATATYPES[datatype]
        else:
            output = result.get_output(name)
            if output is None:
                return None
            from tritonclient.utils import triton_to_np_dtype

            dtype = np.dtype(triton_to_np_dtype(output.datatype))
            shape = tuple(output.shape)
        at, nbytes = place
        if math.prod(shape) * dtype.itemsize > nbytes:
            raise ValueError(f"shape {shape} {dtype} exceeds the {nbytes} bytes reserved in the region")
        view: np.ndarray[Any, Any] = np.ndarray[Any, Any](shape, dtype, buffer=self.region.buffer(), offset=at)
        array = view.copy()
        del view  # no exported pointer may outlive the call: the region is unmapped later
        return array

    def done(self, ok: bool) -> None:
        """Return the region (reused only if the call succeeded)."""
        self.pool.release(self.region, reusable=ok)


Call = PayloadCall | WireCall | ShmCall | HttpCall
"""One call's tensors and how they travel (what :meth:`TensorTransport.call` gives)."""


class TensorTransport:
    """A client's choice between shared memory and payloads, and its pools (one per server).

    Args:
        use_shared_memory: ``Client.useSharedMemory``.
        label: the module label, for region names.
        timeout: seconds for each register call (``Client.timeout``); None = none.
        model_name, model_version: the client's model (``Client.modelName``,
            ``modelVersion``), written into each payload call's request.
        protocol: ``Client.transport``, one of :data:`PROTOCOLS`.
    """

    def __init__(
        self,
        use_shared_memory: bool,
        label: str,
        timeout: float | None,
        model_name: str = "",
        model_version: str = "",
        protocol: str = "auto",
    ) -> None:
        self.use_shared_memory = use_shared_memory
        self.label = label
        self.timeout = timeout
        self.model_name = model_name
        self.model_version = model_version
        self.protocol = protocol
        self._plans: dict[tuple[Any, ...], RequestPlan | None] = {}  # (inputs, outputs) -> plan; None: tritonclient
        self._http_plans: dict[tuple[Any, ...], HttpPlan | None] = {}  # the same for HTTP; None: gRPC
        self._pools: dict[str, ShmPool] = {}
        self._retired: list[ShmPool] = []  # left by a failover; closed at the end with the others
        self._refused: set[str] = set()  # servers that cannot map our regions: payloads
        self._lock = threading.Lock()
        self.shm_calls = 0  # calls whose inputs went through shared memory
        self.payload_calls = 0  # calls with payloads (gRPC or HTTP)
        self.http_calls = 0  # calls over HTTP (payloads or shared memory)
        if use_shared_memory:
            remove_stale_regions_once()
            _live.add(self)

    def pool(self, server: ServerInfo, grpc_client: Any) -> ShmPool | None:
        """The shared-memory pool for ``server``; None: use payloads (off, or the server cannot
        map our ``/dev/shm``: :func:`~framework.sonic._shm.shares_dev_shm`, asked once)."""
        if not self.use_shared_memory or server.name in self._refused or not shares_dev_shm(server, grpc_client):
            return None
        with self._lock:
            pool = self._pools.get(server.name)
            if pool is None or pool.grpc_client is not grpc_client or pool.server != server:
                if pool is not None:  # the server moved (fallback restarted elsewhere): start afresh
                    pool.retire()
                    self._retired.append(pool)
                pool = self._pools[server.name] = ShmPool(self.label, server, grpc_client, self.timeout)
            return pool

    def pools(self) -> dict[str, ShmPool]:
        with self._lock:
            return dict(self._pools)

    def call(
        self,
        server: ServerInfo,
        grpc_client: Any,
        in_specs: Mapping[str, TensorSpec],
        out_specs: Sequence[TensorSpec],
        arrays: Mapping[str, np.ndarray[Any, Any] | StackedRows],
        rows: int | None,
        all_outputs: bool,
    ) -> Call:
        """The inputs and requested outputs of one call to ``server``.

        Args:
            arrays: input name -> the call's array, or the
                :class:`~framework.sonic._wire.StackedRows` of a merged call (joined only
                where tritonclient sends the call).
            all_outputs: the client requests every output (``Client.outputs`` empty): a
                payload call then names none (the server returns all).
        """
        pool = self.pool(server, grpc_client)
        outputs = None if all_outputs else [s.name for s in out_specs]
        http = self._http(server, in_specs, out_specs, arrays, outputs)
        if (
            pool is not None
            and sum(a.nbytes for a in arrays.values()) >= SHM_MIN_BYTES
            and all(a.dtype != np.object_ for a in arrays.values())
        ):
            in_shm = all(not s.variable_dims and s.dtype != np.object_ for s in out_specs)
            plan = None if http else self._plan(grpc_client, in_specs, out_specs, arrays, outputs)
            try:
                over_http = None if http is None else (*http, self.model_name)
                call = ShmCall(pool, in_specs, out_specs, arrays, rows, in_shm, plan, over_http)
            except Exception as exc:
                if not self._use_payloads_after(server, exc):
                    raise
            else:
                with self._lock:
                    self.shm_calls += 1
                    self.http_calls += http is not None
                return call
        with self._lock:
            self.payload_calls += 1
            self.http_calls += http is not None
        if http is not None:
            return HttpCall.of_arrays(*http, list(arrays.values()), self.model_name)
        plan = self._plan(grpc_client, in_specs, out_specs, arrays, outputs)
        if plan is not None:
            return WireCall(plan, list(arrays.values()))
        return PayloadCall(in_specs, {name: joined(array) for name, array in arrays.items()}, outputs)

    def _http(
        self,
        server: ServerInfo,
        in_specs: Mapping[str, TensorSpec],
        out_specs: Sequence[TensorSpec],
        arrays: Mapping[str, np.ndarray[Any, Any] | StackedRows],
        outputs: Sequence[str] | None,
    ) -> tuple[HttpEndpoint, HttpPlan] | None:
        """The HTTP endpoint and plan of a call to ``server``, or None: gRPC (``Client.transport``
        ``grpc``, ``auto`` and a server without an HTTP endpoint, or ``BYTES``/``BF16`` tensors).

        Raises:
            ExternalFailure: ``Client.transport = "http"`` and ``server`` has no HTTP endpoint.
        """
        if self.protocol == "grpc" or not server.http_address:
            if self.protocol == "http":
                raise ExternalFailure(
                    f"Client.transport is 'http' but {server.describe()} has no HTTP endpoint "
                    "(httpPort of its TritonService.servers entry)",
                    model=self.model_name,
                    server=server.name,
                )
            return None
        key = (*arrays, None if outputs is None else tuple(outputs))
        plan = self._cached_plan(self._http_plans, key, HttpPlan, True, in_specs, out_specs, arrays, outputs)
        return None if plan is None else (http_endpoint(server), plan)

    def _plan(
        self,
        grpc_client: Any,
        in_specs: Mapping[str, TensorSpec],
        out_specs: Sequence[TensorSpec],
        arrays: Mapping[str, np.ndarray[Any, Any] | StackedRows],
        outputs: Sequence[str] | None,
    ) -> RequestPlan | None:
        """The :class:`~framework.sonic._wire.RequestPlan` of a call (payloads or shared memory), made once per
        (inputs, requested outputs); None where tritonclient must send it (BYTES or BF16
        tensors, or a ``grpc_client`` that is not tritonclient's own)."""
        key = (type(grpc_client), *arrays, None if outputs is None else tuple(outputs))
        return self._cached_plan(
            self._plans, key, RequestPlan, _is_tritonclient(grpc_client), in_specs, out_specs, arrays, outputs
        )

    def _cached_plan(
        self,
        cache: dict[tuple[Any, ...], _Plan | None],
        key: tuple[Any, ...],
        kind: Callable[[str, str, list[tuple[str, str]], Sequence[str]], _Plan],
        usable: bool,
        in_specs: Mapping[str, TensorSpec],
        out_specs: Sequence[TensorSpec],
        arrays: Mapping[str, np.ndarray[Any, Any] | StackedRows],
        outputs: Sequence[str] | None,
    ) -> _Plan | None:
        """The plan of ``kind`` (:class:`RequestPlan` or :class:`HttpPlan`) in ``cache`` under
        ``key``, made on first use; None (cached too) where it cannot write the call: not
        ``usable`` or a tensor whose datatype is not in ``RAW_DATATYPES`` (BYTES, BF16)."""
        try:
            return cache[key]
        except KeyError:
            pass
        plan = None
        if usable and all(s.datatype in RAW_DATATYPES for s in (*(in_specs[n] for n in arrays), *out_specs)):
            plan = kind(self.model_name, self.model_version, [(n, in_specs[n].datatype) for n in arrays], outputs or ())
        cache[key] = plan
        return plan

    def _use_payloads_after(self, server: ServerInfo, exc: Exception) -> bool:
        """Whether a failure to set up shared memory leaves the call to gRPC payloads.

        A server that refuses to register a region (e.g. one in a container on a port of
        this host, which cannot open our ``/dev/shm``) gets payloads from now on; a full
        ``/dev/shm`` gives this call payloads. An unreachable server is the retry policy's.
        """
        from tritonclient.utils import InferenceServerException
        from tritonclient.utils.shared_memory import SharedMemoryException

        if isinstance(exc, InferenceServerException):
            if grpc_status(exc) in SERVER_GONE:
                return False
            with self._lock:
                self._refused.add(server.name)
            logger.warning(
                "%s: %s cannot use our shared memory (%s); gRPC payloads from now on",
                self.label,
                server.describe(),
                " ".join((exc.message() or str(exc)).split()),
            )
            return True
        if isinstance(exc, (SharedMemoryException, OSError)):
            logger.warning(
                "%s: no shared-memory region for a call to %s (%s: %s); gRPC payloads for it",
                self.label,
                server.describe(),
                type(exc).__name__,
                exc,
            )
            return True
        return False

    def lost_registration(
        self, server: ServerInfo, exc: BaseException, calls: Sequence[Call]
    ) -> ExternalFailure | None:
        """If the server answered ``exc`` to ``calls`` but no longer knows their shared-memory
        region (it restarted on the same address): forget the pool's registrations and return
        a retryable error to raise instead; else None. Asks the server, never reads its
        message; call it before the calls end (their region is still registered)."""
        from tritonclient.utils import InferenceServerException

        if not isinstance(exc, (InferenceServerException, ExternalFailure)) or grpc_status(exc) in SERVER_GONE:
            return None
        call = next((c for c in calls if isinstance(c, ShmCall)), None)
        if call is None or not call.pool.lost(call.region):
            return None
        call.pool.forget_registrations()
        message = exc.message() if isinstance(exc, InferenceServerException) else exc.args[0]
        return ExternalFailure(
            f"the server lost the shared-memory registrations ({message}); registering again",
            server=server.name,
            status=grpc_status(exc),
            retryable=True,
        )

    def failed_over(self, server_name: str) -> None:
        """A request left ``server_name`` for another server: release that server's regions."""
        with self._lock:
            pool = self._pools.pop(server_name, None)
            if pool is not None:
                self._retired.append(pool)
        if pool is not None:
            logger.info(
                "%s: releasing the shared-memory regions on %s after a failover", self.label, pool.server.describe()
            )
            pool.retire()

    def close(self) -> None:
        """Unregister and unlink every region (end of job, Ctrl-C, exit). Never raises."""
        with self._lock:
            pools, self._pools, self._retired = [*self._pools.values(), *self._retired], {}, []
        for pool in pools:
            pool.close()


_live: weakref.WeakSet[TensorTransport] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # A job that never reached end_job (an exception before it, an embedding script): no
    # region outlives the process. SIGKILL is left to remove_stale_regions.
    for transport in list(_live):
        transport.close()
