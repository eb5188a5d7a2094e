"""The tensors of one request: what the model expects, and the event's inputs and outputs.

CMSSW counterparts: ``TritonData`` (``TritonInputData``, ``TritonOutputData``) and the
``TritonInputMap`` / ``TritonOutputMap`` of HeterogeneousCore/SonicTriton. A
:class:`TensorSpec` is fixed for the job (from the model metadata);
:class:`TritonInputData` / :class:`TritonOutputData` hold one event's arrays and check
them against it. Imports no other file of framework.sonic: a tensor knows its spec and
the text naming its request, not the request.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import numpy as np

from framework.utilities import ExternalFailure

__all__ = [
    "BatchRows",
    "TensorSpec",
    "TritonInputData",
    "TritonInputMap",
    "TritonOutputData",
    "TritonOutputMap",
    "output_array",
    "spec_from_metadata",
]


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
    dtype: np.dtype[Any]
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
        return all(d < 0 or d == s for d, s in zip(self.dims, inner, strict=True))


def spec_from_metadata(entry: Mapping[str, Any], batched: bool) -> TensorSpec:
    """The :class:`TensorSpec` of one ``inputs``/``outputs`` entry of Triton's model metadata (JSON)."""
    from tritonclient.utils import triton_to_np_dtype

    shape = tuple(int(s) for s in entry["shape"])
    if batched:
        shape = shape[1:]  # the metadata shape starts with the batch dimension (-1)
    return TensorSpec(entry["name"], entry["datatype"], np.dtype(triton_to_np_dtype(entry["datatype"])), shape, batched)


def output_array(
    result: Any,
    spec: TensorSpec,
    rows: int | None,
    what: str,
    inputs_non_empty: bool,
    read: Callable[[Any, str], Any] | None = None,
) -> np.ndarray[Any, Any]:
    """Output ``spec.name`` of a tritonclient ``InferResult``, checked against the metadata.

    tritonclient does not check outputs against the metadata, and a misconfigured Python
    backend returns EMPTY tensors without an error: everything is checked here.

    Args:
        rows: the batch rows expected (batching models), or None.
        what: names the request(s) in messages; inputs_non_empty: no input was empty.
        read: ``read(result, name)`` gives the output array (the call's transport: a view of
            its shared-memory region, or the gRPC payload); default ``result.as_numpy(name)``.

    Raises:
        ExternalFailure: missing, malformed, wrong dtype or shape, or empty for non-empty
            inputs; names the output, what was expected and what came.
    """
    array: np.ndarray[Any, Any] | None
    try:
        array = result.as_numpy(spec.name) if read is None else read(result, spec.name)
    except ValueError as err:  # raw content does not fill the announced shape
        array, problem = None, f"malformed tensor ({err})"
    else:
        problem = "missing from the response" if array is None else ""
    if array is not None:
        shape = array.shape
        if array.dtype != spec.dtype:
            problem = f"dtype {array.dtype}"
        elif not spec.matches(shape) or (spec.batched and shape[0] != rows):
            problem = f"shape {tuple(shape)}"
        elif array.size == 0 and inputs_non_empty:
            # Legitimate only with a variable dim of size 0, which non-empty inputs
            # make unlikely; a Python-backend stub without its libraries does this.
            problem = f"EMPTY tensor of shape {tuple(shape)} for non-empty inputs (server misconfigured?)"
    if problem:
        expected = f" for {rows} rows" if spec.batched else ""
        raise ExternalFailure(f"{what}: output '{spec.name}' is {problem}, expected {spec.describe()}{expected}")
    assert array is not None  # else a problem was set
    return array


T = TypeVar("T", bound="_TensorData")


class _TensorMap(Mapping[str, T], Generic[T]):
    """name -> tensor, in model order; an unknown name is an error that lists the known ones."""

    _kind: ClassVar[str]

    def __init__(self, what: str, tensors: dict[str, T]) -> None:
        self._what, self._tensors = what, tensors

    def __getitem__(self, name: str) -> T:
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


class _TensorData:
    """One tensor of one request: its :class:`TensorSpec` and this event's array (or None).

    ``what`` names the request (model, module, event) in messages.
    """

    def __init__(self, spec: TensorSpec, what: str) -> None:
        self.spec = spec
        self.what = what
        self.data: Any = None  # np.ndarray; a list of them for outputs in the Ragged batch mode

    @property
    def name(self) -> str:
        return self.spec.name


class BatchRows:
    """The batch size the inputs of one request agree on: the first input set fixes it."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.rows: int | None = None
        self._from = ""

    def agree(self, name: str, rows: int) -> None:
        """Record that input ``name`` has ``rows`` rows.

        Raises:
            ExternalFailure: another input has a different number of rows (names both).
        """
        if self.rows is None:
            self.rows, self._from = rows, name
        elif rows != self.rows:
            raise ExternalFailure(
                f"{self.what}: input '{name}' has batch size {rows}, but input "
                f"'{self._from}' has {self.rows} (all inputs must agree)"
            )


class TritonInputData(_TensorData):
    """One input of one request (CMSSW ``TritonInputData``): fill it with :meth:`to_server`."""

    def __init__(self, spec: TensorSpec, what: str, rows: BatchRows, ragged: bool = False) -> None:
        super().__init__(spec, what)
        self._rows = rows
        self.ragged = ragged
        self.entries: list[np.ndarray[Any, Any]] | None = None  # Ragged batch mode: one array per entry

    def to_server(self, array: Any) -> None:
        """Set this input's data for the request.

        Args:
            array: array-like of exactly the input's dtype (no silent conversion: a wrong
                dtype is usually a bug upstream), shape ``(batch, *dims)`` for a batching
                model (every input the same ``batch``) or ``dims`` otherwise; any size for
                ``-1`` dims. Stored C-contiguous; not copied if already so. In the
                ``Ragged`` batch mode (``Client.batchMode``): a sequence of entries, each
                an array of shape ``dims`` with its own sizes for the ``-1`` dims (CMSSW's
                ``TritonBatchMode::Ragged``); every input the same number of entries.

        Raises:
            ExternalFailure: dtype or shape do not match the model metadata, or the batch
                size differs from another input's; names model, input, expected and actual.
        """
        if self.ragged:
            entries = [np.ascontiguousarray(e) for e in array]
            for index, entry in enumerate(entries):
                shape = (1, *entry.shape) if self.spec.batched else entry.shape  # sent as a batch of 1
                if entry.dtype != self.spec.dtype or not self.spec.matches(shape):
                    raise ExternalFailure(
                        f"{self.what}: input '{self.spec.name}' entry {index} expects {self.spec.dims} "
                        f"{self.spec.dtype} (Ragged batch mode), got {tuple(entry.shape)} {entry.dtype}"
                    )
            self._rows.agree(self.spec.name, len(entries))
            self.entries = entries
            return
        array = np.asarray(array)
        spec = self.spec
        if array.dtype != spec.dtype or not spec.matches(array.shape):
            raise ExternalFailure(
                f"{self.what}: input '{spec.name}' expects {spec.describe()}, got {tuple(array.shape)} {array.dtype}"
            )
        if spec.batched:
            self._rows.agree(spec.name, array.shape[0])
        self.data = np.ascontiguousarray(array)


class TritonOutputData(_TensorData):
    """One output of one request (CMSSW ``TritonOutputData``): read it with :meth:`from_server`.

    ``requested``: whether the client asks the server for it (``Client.outputs``).
    """

    def __init__(self, spec: TensorSpec, what: str, requested: bool) -> None:
        super().__init__(spec, what)
        self.requested = requested

    def from_server(self) -> Any:
        """The output array: ``(batch, *dims)`` for a batching model, else ``dims``.

        Read-only when it is a view of the response buffer. A request of batch 0 gives
        ``(0, *dims)`` with variable dims 0. In the ``Ragged`` batch mode: a list of one
        array per entry, each of shape ``dims`` (no batch dimension).

        Raises:
            ExternalFailure: the inference has not run (or was not requested); names the
                model and the output.
        """
        if self.data is None:
            why = "no inference ran yet" if self.requested else "it was not requested (Client.outputs)"
            raise ExternalFailure(f"{self.what}: output '{self.name}' has no data: {why}")
        return self.data


class TritonInputMap(_TensorMap[TritonInputData]):
    """``request.input`` (CMSSW ``TritonInputMap``): input name -> :class:`TritonInputData`, in model order.

    What a SONIC module's ``acquire(event, input)`` receives. An unknown name raises
    :class:`~framework.ExternalFailure` (also a ``KeyError``) listing the model's inputs.
    """

    _kind = "input"


class TritonOutputMap(_TensorMap[TritonOutputData]):
    """``request.output`` (CMSSW ``TritonOutputMap``): output name -> :class:`TritonOutputData`, in model order.

    What a SONIC module's ``produce(event, output)`` receives. An unknown name raises
    :class:`~framework.ExternalFailure` (also a ``KeyError``) listing the model's outputs.
    """

    _kind = "output"
