"""The tensors of one request: what the model expects, and the event's inputs and outputs.

CMSSW counterparts: ``TritonData`` (``TritonInputData``, ``TritonOutputData``) of
HeterogeneousCore/SonicTriton. A :class:`TensorSpec` is fixed for the job (from the
model metadata); :class:`TritonInputData` / :class:`TritonOutputData` hold one event's
arrays and check them against it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from framework._errors import ExternalFailure


if TYPE_CHECKING:
    from ._request import TritonRequest

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


class _TensorData:
    """One tensor of one request: its :class:`TensorSpec` and this event's array (or None)."""

    def __init__(self, request: TritonRequest, spec: TensorSpec) -> None:
        self._request = request
        self.spec = spec
        self.data: np.ndarray | None = None

    @property
    def name(self) -> str:
        return self.spec.name


class TritonInputData(_TensorData):
    """One input of one request (CMSSW ``TritonInputData``): fill it with :meth:`to_server`."""

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


class TritonOutputData(_TensorData):
    """One output of one request (CMSSW ``TritonOutputData``): read it with :meth:`from_server`."""

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
