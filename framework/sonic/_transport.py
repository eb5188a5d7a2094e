"""How a call's tensors travel: Triton system shared memory, or gRPC payloads.

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
"""

from __future__ import annotations

import atexit
import logging
import math
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from framework._errors import ExternalFailure

from ._data import TensorSpec
from ._server_info import ServerInfo
from ._shm import ALIGN, SERVER_GONE, ShmPool, remove_stale_regions_once, shares_dev_shm
from ._waits import grpc_status

__all__ = ["SHM_MIN_BYTES", "PayloadCall", "RequestMessages", "ShmCall", "TensorTransport"]

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


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


class PayloadCall:
    """One gRPC call whose tensors travel in the request and response messages.

    Sent by :meth:`send`: as a message built by the client's :class:`RequestMessages`
    when ``grpc_client`` is tritonclient's own ``InferenceServerClient`` and the tensors'
    raw contents are their bytes, else by its ``async_infer`` (``inputs``, built on demand).
    """

    def __init__(
        self,
        specs: Mapping[str, TensorSpec],
        arrays: Mapping[str, np.ndarray[Any, Any]],
        outputs: Sequence[str] | None,
        messages: RequestMessages | None = None,
    ) -> None:
        self.specs = specs
        self.arrays = arrays
        self.output_names = outputs
        self._messages = messages

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
        if self._messages is not None and self._messages.usable(grpc_client, self):
            return self._messages.send(grpc_client, model_name, self, options, callback)
        return _async_infer(grpc_client, model_name, self, options, callback)

    def as_numpy(self, result: Any, name: str) -> np.ndarray[Any, Any] | None:
        """The output array (a view of the response), None if missing; ValueError if malformed."""
        array: np.ndarray[Any, Any] | None = result.as_numpy(name)
        return array

    def done(self, ok: bool) -> None:
        pass


class RequestMessages:
    """Each payload call's ``ModelInferRequest``, built directly from what a model keeps.

    tritonclient's ``async_infer`` builds an ``InferInput`` per tensor and then the message
    from them on every call (a quarter of its Python time). The parts that do not change
    within a job (input names and datatypes, the requested outputs' messages) are kept
    here, per model and inputs; each call gets a **new** message with its shapes and raw
    contents. A message is never reused: protobuf's upb runtime frees a message's memory
    only with the message, so one refilled message kept the bytes of every call it carried
    (the four-model job's peak memory grew by 2.4 MB per event, 3.9 GB after 1,600 events;
    measured 2026-11-27). What is sent is what ``async_infer`` sends, byte for byte
    (``tests/test_sonic_client.py``). Tensors whose raw contents need tritonclient's own
    serialization (``BYTES``, ``BF16``) go through ``async_infer`` (see :meth:`usable`).
    """

    RAW_DATATYPES = frozenset(
        {"BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64", "FP16", "FP32", "FP64"}
    )
    """Datatypes whose raw contents are the array's bytes (``ndarray.tobytes``), as
    ``InferInput.set_data_from_numpy`` sends them."""

    def __init__(self) -> None:
        self._layouts: dict[tuple[Any, ...], tuple[list[tuple[str, str]], list[Any]]] = {}
        self._client_type: type | None = None

    def usable(self, grpc_client: Any, call: PayloadCall) -> bool:
        """Whether ``grpc_client`` is tritonclient's own client (not a stand-in or wrapper)
        and every input of ``call`` travels as its array's bytes."""
        if self._client_type is None:
            import tritonclient.grpc as grpcclient

            self._client_type = grpcclient.InferenceServerClient
        return type(grpc_client) is self._client_type and all(
            call.specs[name].datatype in self.RAW_DATATYPES for name in call.arrays
        )

    def send(self, grpc_client: Any, model_name: str, call: PayloadCall, options: dict[str, Any], callback: Any) -> Any:
        """``grpc_client.async_infer(model_name, call's tensors, callback, **options)``."""
        import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs
        from tritonclient.grpc import InferResult, service_pb2
        from tritonclient.grpc._client import CallContext
        from tritonclient.grpc._utils import (
            _grpc_compression_type,
            get_cancelled_error,
            get_error_grpc,
            raise_error_grpc,
        )

        arrays = call.arrays
        version = options.get("model_version", "")
        key = (model_name, version, *arrays, None if call.output_names is None else tuple(call.output_names))
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = self._layout(call)
        inputs, outputs = layout
        message = service_pb2.ModelInferRequest(model_name=model_name, model_version=version)
        for (name, datatype), array in zip(inputs, arrays.values(), strict=True):
            message.inputs.add(name=name, datatype=datatype, shape=array.shape)
        message.outputs.extend(outputs)
        message.raw_input_contents.extend([array.tobytes() for array in arrays.values()])

        def wrapped_callback(call_future: Any) -> None:  # as tritonclient's async_infer
            error = result = None
            try:
                result = InferResult(call_future.result())
            except grpc.RpcError as rpc_error:
                error = get_error_grpc(rpc_error)
            except grpc.FutureCancelledError:
                error = get_cancelled_error()
            callback(result=result, error=error)

        try:
            future = grpc_client._client_stub.ModelInfer.future(  # noqa: SLF001 - tritonclient's stub
                request=message,
                metadata=grpc_client._get_metadata(None),  # noqa: SLF001 - its channel's headers
                timeout=options.get("client_timeout"),
                compression=_grpc_compression_type(options.get("compression_algorithm")),
            )
        except grpc.RpcError as rpc_error:
            raise_error_grpc(rpc_error)
        future.add_done_callback(wrapped_callback)
        return CallContext(future)

    @staticmethod
    def _layout(call: PayloadCall) -> tuple[list[tuple[str, str]], list[Any]]:
        """The call's (input name, datatype) pairs and requested outputs' messages."""
        import tritonclient.grpc as grpcclient

        inputs = [(name, call.specs[name].datatype) for name in call.arrays]
        outputs = [grpcclient.InferRequestedOutput(name)._get_tensor() for name in call.output_names or ()]  # noqa: SLF001
        return inputs, outputs


class ShmCall:
    """One gRPC call whose inputs (and fixed-size outputs) are in a shared-memory region.

    Args:
        pool: where the region comes from.
        in_specs, out_specs: the model's inputs and the requested outputs.
        arrays: input name -> C-contiguous array of this call.
        rows: the call's batch size (None: the model does not batch).
        outputs_in_shm: whether the outputs go to the region too (all have fixed sizes).
    """

    def __init__(
        self,
        pool: ShmPool,
        in_specs: Mapping[str, TensorSpec],
        out_specs: Sequence[TensorSpec],
        arrays: Mapping[str, np.ndarray[Any, Any]],
        rows: int | None,
        outputs_in_shm: bool,
    ) -> None:
        import tritonclient.grpc as grpcclient
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
        self.inputs, self.outputs = [], []
        for name, data, at in placed:
            shm.set_shared_memory_region(region.handle, [data], offset=at)
            grpc_input = grpcclient.InferInput(name, list(data.shape), in_specs[name].datatype)
            grpc_input.set_shared_memory(region.name, data.nbytes, offset=at)
            self.inputs.append(grpc_input)
        for spec in out_specs:
            output = grpcclient.InferRequestedOutput(spec.name)
            if outputs_in_shm:
                at, nbytes = out_places[spec.name]
                output.set_shared_memory(region.name, nbytes, offset=at)
            self.outputs.append(output)
        self._out_places = out_places

    def send(self, grpc_client: Any, model_name: str, options: dict[str, Any], callback: Any) -> Any:
        """Start the call (``async_infer``); its ``CallContext``."""
        return _async_infer(grpc_client, model_name, self, options, callback)

    def as_numpy(self, result: Any, name: str) -> np.ndarray[Any, Any] | None:
        """A COPY of the output (the region is reused), None if missing; ValueError if malformed."""
        place = self._out_places.get(name)
        if place is None:
            array: np.ndarray[Any, Any] | None = result.as_numpy(name)
            return array
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


class TensorTransport:
    """A client's choice between shared memory and payloads, and its pools (one per server).

    Args:
        use_shared_memory: ``Client.useSharedMemory``.
        label: the module label, for region names.
        timeout: seconds for each register call (``Client.timeout``); None = none.
    """

    def __init__(self, use_shared_memory: bool, label: str, timeout: float | None) -> None:
        self.use_shared_memory = use_shared_memory
        self.label = label
        self.timeout = timeout
        self._pools: dict[str, ShmPool] = {}
        self._retired: list[ShmPool] = []  # left by a failover; closed at the end with the others
        self._refused: set[str] = set()  # servers that cannot map our regions: payloads
        self._lock = threading.Lock()
        self.messages = RequestMessages()  # builds the payload calls' request messages
        self.shm_calls = 0  # calls whose inputs went through shared memory
        self.payload_calls = 0  # calls with gRPC payloads
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
        arrays: Mapping[str, np.ndarray[Any, Any]],
        rows: int | None,
        all_outputs: bool,
    ) -> PayloadCall | ShmCall:
        """The inputs and requested outputs of one call to ``server``.

        Args:
            all_outputs: the client requests every output (``Client.outputs`` empty): a
                payload call then names none (the server returns all).
        """
        pool = self.pool(server, grpc_client)
        if (
            pool is not None
            and sum(a.nbytes for a in arrays.values()) >= SHM_MIN_BYTES
            and all(a.dtype != np.object_ for a in arrays.values())
        ):
            in_shm = all(not s.variable_dims and s.dtype != np.object_ for s in out_specs)
            try:
                call = ShmCall(pool, in_specs, out_specs, arrays, rows, in_shm)
            except Exception as exc:
                if not self._use_payloads_after(server, exc):
                    raise
            else:
                with self._lock:
                    self.shm_calls += 1
                return call
        with self._lock:
            self.payload_calls += 1
        return PayloadCall(in_specs, arrays, None if all_outputs else [s.name for s in out_specs], self.messages)

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
        self, server: ServerInfo, exc: BaseException, calls: Sequence[PayloadCall | ShmCall]
    ) -> ExternalFailure | None:
        """If the server answered ``exc`` to ``calls`` but no longer knows their shared-memory
        region (it restarted on the same address): forget the pool's registrations and return
        a retryable error to raise instead; else None. Asks the server, never reads its
        message; call it before the calls end (their region is still registered)."""
        from tritonclient.utils import InferenceServerException

        if not isinstance(exc, InferenceServerException) or grpc_status(exc) in SERVER_GONE:
            return None
        call = next((c for c in calls if isinstance(c, ShmCall)), None)
        if call is None or not call.pool.lost(call.region):
            return None
        call.pool.forget_registrations()
        return ExternalFailure(
            f"the server lost the shared-memory registrations ({exc.message()}); registering again",
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
