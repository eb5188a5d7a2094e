"""Triton's ``ModelInfer`` messages as bytes: requests written from numpy buffers, responses read as views.

The gRPC inference call of KServe's Open Inference Protocol as Triton defines it
(``grpc_service.proto`` of triton-inference-server/common, package ``inference``):

=========================================  =====  ===========================================
message / field                            no.    written / read here
=========================================  =====  ===========================================
``ModelInferRequest.model_name``           1      once per :class:`RequestPlan`
``ModelInferRequest.model_version``        2      once per plan ("" = not written)
``ModelInferRequest.inputs``               5      name (1) and datatype (2) once per plan;
                                                  ``shape`` (3, packed int64) per call;
                                                  ``parameters`` (4) of a shared-memory
                                                  call: region, offset, byte size
``ModelInferRequest.outputs``              6      the requested outputs' names, once per plan
                                                  (with their region, offset and byte size
                                                  (``parameters``, 2) when in a region)
``ModelInferRequest.raw_input_contents``   7      each input array's bytes, per call
``ModelInferResponse.outputs``             5      name (1), datatype (2), shape (3)
``ModelInferResponse.raw_output_contents`` 6      each output's bytes: a numpy view, no copy
=========================================  =====  ===========================================

Why by hand: tritonclient's ``async_infer`` builds an ``InferInput`` per tensor, copies
each array with ``tobytes``, builds a protobuf message and serializes it (one more copy);
its response is parsed into a message whose ``raw_output_contents`` are copied again by
``as_numpy``. Here what is fixed per model is encoded once, and per call the shapes are
written and every tensor is copied once, straight into the request's bytes
(``bytes.join`` over the arrays' buffers); the response's outputs are numpy arrays over
the response's own bytes (read-only, as tritonclient's are). The protobuf encoding used is
the standard wire format (https://protobuf.dev/programming-guides/encoding/): varints,
length-delimited fields, packed repeated scalars. ``tests/test_wire.py`` checks that the
bytes parse as tritonclient's ``ModelInferRequest`` with the content ``async_infer``
sends, and that responses decode as tritonclient's ``InferResult.as_numpy`` does.

Only datatypes whose raw contents are the array's bytes are written here
(:data:`RAW_DATATYPES`); ``BYTES`` (length-prefixed strings) and ``BF16`` go through
tritonclient (``_transport``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["RAW_DATATYPES", "RequestPlan", "StackedRows", "decode_response", "joined", "response_outputs"]

RAW_DATATYPES: dict[str, np.dtype[Any]] = {
    "BOOL": np.dtype(np.bool_),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
}
"""Triton datatypes whose raw contents are the array's own bytes (little-endian, C order),
with their numpy dtypes (tritonclient's ``triton_to_np_dtype``)."""


def check_raw_datatypes(inputs: Sequence[tuple[str, str]]) -> None:
    """Refuse ``(name, datatype)`` inputs that a request plan cannot write as raw bytes.

    Raises:
        ValueError: a datatype not in :data:`RAW_DATATYPES` (all of them named).
    """
    unknown = [f"{name} ({datatype})" for name, datatype in inputs if datatype not in RAW_DATATYPES]
    if unknown:
        raise ValueError(f"inputs not written as raw bytes: {', '.join(unknown)}")


class StackedRows:
    """Arrays joined along the first (batch) dimension, without a copy: one input of a
    merged call (cross-event batching, ``framework.sonic._batching``).

    :meth:`RequestPlan.encode` writes the parts one after the other into the request (so
    the merged tensor is copied once, into the message), a shared-memory call writes them
    one after the other into its region; :meth:`join` makes the one array where a path
    needs it (tritonclient's own ``InferInput``).

    Args:
        parts: C-contiguous arrays of one dtype whose shapes differ in the first dimension
            only (not checked: the batcher merges only requests of the same inner shape).

    Attributes:
        shape, dtype, nbytes, size: those of the joined array.
    """

    __slots__ = ("parts", "shape", "dtype", "nbytes", "size")

    def __init__(self, parts: Sequence[np.ndarray[Any, Any]]) -> None:
        first = parts[0]
        self.parts = tuple(parts)
        self.shape = (sum(len(p) for p in parts), *first.shape[1:])
        self.dtype = first.dtype
        self.nbytes = sum(p.nbytes for p in parts)
        self.size = sum(p.size for p in parts)

    def join(self) -> np.ndarray[Any, Any]:
        """The joined array (a copy)."""
        return np.concatenate(self.parts)


def joined(array: np.ndarray[Any, Any] | StackedRows) -> np.ndarray[Any, Any]:
    """``array`` itself, or the join of a :class:`StackedRows`."""
    return array.join() if isinstance(array, StackedRows) else array


# Field keys (field number << 3 | wire type 2 = length-delimited), one byte each.
_MODEL_NAME, _MODEL_VERSION, _INPUTS, _OUTPUTS, _RAW_INPUT = b"\x0a", b"\x12", b"\x2a", b"\x32", b"\x3a"
_NAME, _DATATYPE, _SHAPE = b"\x0a", b"\x12", b"\x1a"


def _varint(value: int) -> bytes:
    """``value`` (>= 0) as a protobuf varint."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [_varint(i) for i in range(0x80)]  # most shapes' dims and lengths: no call


def _length_delimited(key: bytes, payload: bytes) -> bytes:
    return key + _varint(len(payload)) + payload


class RequestPlan:
    """What is fixed for one model's requests, encoded once; :meth:`encode` writes a call.

    Args:
        model_name, model_version: as in the request ("" = the server's choice).
        inputs: (name, datatype) of each input, in the order :meth:`encode` receives the
            arrays; every datatype one of :data:`RAW_DATATYPES`.
        outputs: the requested outputs' names; empty = all (the server returns every one).

    Raises:
        ValueError: a datatype not in :data:`RAW_DATATYPES`.
    """

    def __init__(
        self, model_name: str, model_version: str, inputs: Sequence[tuple[str, str]], outputs: Sequence[str]
    ) -> None:
        check_raw_datatypes(inputs)
        head = _length_delimited(_MODEL_NAME, model_name.encode())
        if model_version:
            head += _length_delimited(_MODEL_VERSION, model_version.encode())
        self._head = head
        self._tensor_heads = [
            _length_delimited(_NAME, name.encode()) + _length_delimited(_DATATYPE, datatype.encode())
            for name, datatype in inputs
        ]
        self._outputs = b"".join(_length_delimited(_OUTPUTS, _length_delimited(_NAME, n.encode())) for n in outputs)
        self.names = tuple(name for name, _ in inputs)

    def _input_tensor(self, index: int, shape: Sequence[int], parameters: bytes = b"") -> Sequence[bytes]:
        """The key, length and body of input ``index``'s ``InferInputTensor`` field."""
        small = _SMALL
        dims = b"".join([small[d] if d < 0x80 else _varint(d) for d in shape])
        tensor = (
            self._tensor_heads[index]
            + _SHAPE
            + (small[len(dims)] if len(dims) < 0x80 else _varint(len(dims)))
            + dims
            + parameters
        )
        return (_INPUTS, small[len(tensor)] if len(tensor) < 0x80 else _varint(len(tensor)), tensor)

    def encode(self, arrays: Sequence[np.ndarray[Any, Any] | StackedRows]) -> bytes:
        """The serialized ``ModelInferRequest`` of one call.

        Args:
            arrays: one C-contiguous array (or :class:`StackedRows` of them) per input, in
                the plan's order, of the input's dtype (not checked here: the request's
                ``to_server`` made them so).

        Returns:
            The message's bytes; each array copied once into them.
        """
        parts: list[Any] = [self._head]
        for index, array in enumerate(arrays):
            parts += self._input_tensor(index, array.shape)
        parts.append(self._outputs)
        for array in arrays:
            parts += (_RAW_INPUT, _varint(array.nbytes))
            if isinstance(array, StackedRows):
                parts += array.parts
            else:
                parts.append(array)
        return b"".join(parts)

    def encode_shared_memory(
        self,
        region: str,
        inputs: Sequence[tuple[Sequence[int], int, int]],
        outputs: Sequence[tuple[str, int, int]] | None,
    ) -> bytes:
        """The serialized ``ModelInferRequest`` of a call whose tensors are in the Triton
        system shared-memory ``region`` (registered with the server; the inputs written).

        Each tensor carries Triton's parameters ``shared_memory_region``,
        ``shared_memory_byte_size`` and, if not 0, ``shared_memory_offset`` (as
        tritonclient's ``set_shared_memory`` writes them).

        Args:
            region: the region's name as registered.
            inputs: (shape, offset, byte size) of each input, in the plan's order.
            outputs: (name, offset, byte size) of each requested output placed in the
                region; None: the outputs come back in the response (the plan's own
                requested outputs).
        """
        where = _parameter(b"shared_memory_region", _STRING_PARAM, region.encode())
        parts: list[Any] = [self._head]
        for index, (shape, offset, nbytes) in enumerate(inputs):
            parts += self._input_tensor(index, shape, _shm_parameters(_INPUT_PARAMETERS, where, offset, nbytes))
        if outputs is None:
            parts.append(self._outputs)
        else:
            for name, offset, nbytes in outputs:
                body = _length_delimited(_NAME, name.encode()) + _shm_parameters(
                    _OUTPUT_PARAMETERS, where, offset, nbytes
                )
                parts.append(_length_delimited(_OUTPUTS, body))
        return b"".join(parts)


# InferParameter (grpc_service.proto): its oneof's fields used here; the parameters maps
# of InferInputTensor (field 4) and InferRequestedOutputTensor (field 2).
_INT64_PARAM, _STRING_PARAM = b"\x10", b"\x1a"
_INPUT_PARAMETERS, _OUTPUT_PARAMETERS = b"\x22", b"\x12"


def _parameter(key: bytes, kind: bytes, value: bytes) -> bytes:
    """One map entry (key = 1, value = 2) of ``key`` -> an InferParameter of ``kind``."""
    parameter = kind + value if kind == _INT64_PARAM else _length_delimited(kind, value)
    return _length_delimited(_NAME, key) + _length_delimited(b"\x12", parameter)


def _shm_parameters(field: bytes, where: bytes, offset: int, nbytes: int) -> bytes:
    entries = [where]
    if offset:
        entries.append(_parameter(b"shared_memory_offset", _INT64_PARAM, _varint(offset)))
    entries.append(_parameter(b"shared_memory_byte_size", _INT64_PARAM, _varint(nbytes)))
    return b"".join(_length_delimited(field, entry) for entry in entries)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the position after it."""
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift = 0, 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes, start: int, end: int) -> Any:
    """(field number, wire type, value start, value end or varint value) of a message's fields."""
    pos = start
    while pos < end:
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = _read_varint(buf, pos)
            yield field, wire, pos, pos + length
            pos += length
        elif wire == 0:
            value, pos = _read_varint(buf, pos)
            yield field, wire, pos, value
        elif wire == 1:
            yield field, wire, pos, pos + 8
            pos += 8
        elif wire == 5:
            yield field, wire, pos, pos + 4
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} (field {field})")
    if pos != end:
        raise ValueError("a field runs past the end of its message")


def _output_tensor(buf: bytes, start: int, end: int) -> tuple[str, str, tuple[int, ...]]:
    name = datatype = ""
    shape: list[int] = []
    for field, wire, at, stop in _fields(buf, start, end):
        if field == 1 and wire == 2:
            name = buf[at:stop].decode()
        elif field == 2 and wire == 2:
            datatype = buf[at:stop].decode()
        elif field == 3 and wire == 2:  # packed int64
            while at < stop:
                dim, at = _read_varint(buf, at)
                shape.append(dim - (1 << 64) if dim >= 1 << 63 else dim)
        elif field == 3 and wire == 0:  # unpacked, one dim per field
            shape.append(stop - (1 << 64) if stop >= 1 << 63 else stop)
    return name, datatype, tuple(shape)


def _parse_response(buf: bytes) -> tuple[list[tuple[str, str, tuple[int, ...]]], list[tuple[int, int]]]:
    """The (name, datatype, shape) of each output and the (start, end) of each raw content."""
    outputs: list[tuple[str, str, tuple[int, ...]]] = []
    contents: list[tuple[int, int]] = []
    try:
        for field, wire, at, stop in _fields(buf, 0, len(buf)):
            if field == 5 and wire == 2:
                outputs.append(_output_tensor(buf, at, stop))
            elif field == 6 and wire == 2:
                contents.append((at, stop))
    except IndexError:
        raise ValueError("truncated ModelInferResponse") from None
    return outputs, contents


def response_outputs(buf: bytes) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (datatype, shape) of each output of a serialized ``ModelInferResponse``
    (the outputs of a shared-memory call, whose contents are in the region).

    Raises:
        ValueError: a malformed message.
    """
    outputs, _ = _parse_response(buf)
    return {name: (datatype, shape) for name, datatype, shape in outputs}


def decode_response(buf: bytes) -> dict[str, np.ndarray[Any, Any] | None]:
    """The outputs of a serialized ``ModelInferResponse``: name -> numpy view over ``buf``.

    Each array is read-only and shares memory with ``buf`` (no copy; ``buf`` lives as long
    as any of them). An output whose datatype is not in :data:`RAW_DATATYPES` (``BYTES``,
    ``BF16``) maps to None: the caller decodes those with tritonclient.

    Raises:
        ValueError: a malformed message, fewer raw contents than outputs, or contents whose
            size does not match the output's shape and datatype.
    """
    outputs, contents = _parse_response(buf)
    if len(contents) != len(outputs):
        raise ValueError(f"the response has {len(outputs)} outputs and {len(contents)} raw contents")
    arrays: dict[str, np.ndarray[Any, Any] | None] = {}
    for (name, datatype, shape), (at, stop) in zip(outputs, contents, strict=True):
        dtype = RAW_DATATYPES.get(datatype)
        if dtype is None:
            arrays[name] = None
            continue
        count = (stop - at) // dtype.itemsize
        if count * dtype.itemsize != stop - at or count != _product(shape):
            raise ValueError(f"output '{name}': {stop - at} bytes of contents for shape {list(shape)} of {datatype}")
        arrays[name] = np.frombuffer(buf, dtype, count, at).reshape(shape)
    return arrays


def _product(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
