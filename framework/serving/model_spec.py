"""A Triton model config's tensors, and Triton's dynamic batching done on numpy arrays or torch tensors.

The library of the framework's Python-backend model (:mod:`framework.serving.python_backend`)
and of its runners (:mod:`framework.serving.onnx_backend`,
:mod:`framework.serving.torch_backend`); the direct producers of ``framework.inference`` use
it too. It imports nothing of the framework, so that the model and its runners import it
and never each other (the model picks its runner lazily).

Triton's dynamic batcher hands ``execute`` several requests at once. They are
concatenated along the batch axis (axis 0), run in ONE runner call, and the outputs are
split back per request; inputs with ``allow_ragged_batch`` are flattened and joined into
one 1-D array instead, and ``batch_output`` (``BATCH_SCATTER_WITH_INPUT_SHAPE``) gives
each request its part of the output in the shape of its input (:func:`run_ragged`). A
request whose inputs are missing or malformed gets its own error response; the others
still run. Tests call these functions without a server; they work on numpy arrays
(``NUMPY_OPS``) or, given :class:`~framework.serving.torch_backend.TorchOps`, on torch
tensors.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

TRITON_DTYPES: dict[str, np.dtype[Any]] = {
    "TYPE_BOOL": np.dtype(np.bool_),
    "TYPE_UINT8": np.dtype(np.uint8),
    "TYPE_INT8": np.dtype(np.int8),
    "TYPE_INT16": np.dtype(np.int16),
    "TYPE_INT32": np.dtype(np.int32),
    "TYPE_INT64": np.dtype(np.int64),
    "TYPE_FP16": np.dtype(np.float16),
    "TYPE_FP32": np.dtype(np.float32),
    "TYPE_FP64": np.dtype(np.float64),
}
"""Triton config data types -> numpy dtypes (the ones an ONNX model can take)."""

Arrays = dict[str, Any]  # tensor name -> numpy array or torch tensor


class ArrayOps(Protocol):
    """The two array operations batching needs, for numpy arrays or torch tensors."""

    def convert(self, array: Any, dtype: np.dtype[Any]) -> Any:
        """``array`` as a C-contiguous array of ``dtype`` (no copy if it already is one)."""

    def concatenate(self, arrays: Sequence[Any]) -> Any:
        """The arrays joined along axis 0."""


class _NumpyOps:
    def convert(self, array: Any, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
        return np.ascontiguousarray(array, dtype=dtype)

    def concatenate(self, arrays: Sequence[Any]) -> np.ndarray[Any, Any]:
        return np.concatenate(arrays, axis=0)


NUMPY_OPS: ArrayOps = _NumpyOps()


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of the config: name, numpy dtype, dims without the batch dim (-1 = any)."""

    name: str
    dtype: np.dtype[Any]
    dims: tuple[int, ...]


@dataclass(frozen=True)
class ModelSpec:
    """What ``execute`` needs from a Triton model config."""

    name: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    parameters: dict[str, str] = field(default_factory=dict)
    ragged: frozenset[str] = frozenset()
    """Inputs with ``allow_ragged_batch``: each request's array is flattened and the
    requests' arrays are concatenated into one 1-D array (Triton's ragged batching)."""
    scatter: dict[str, str] = field(default_factory=dict)
    """``batch_output`` of kind ``BATCH_SCATTER_WITH_INPUT_SHAPE``: output -> source input; the
    output's elements are given back to each request in the shape of its source input."""

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0


def _tensor_spec(model: str, entry: Mapping[str, Any]) -> TensorSpec:
    dtype = entry.get("data_type", "")
    if dtype not in TRITON_DTYPES:
        raise ValueError(f"model {model!r}: tensor {entry.get('name')!r} has unsupported data_type {dtype!r}")
    return TensorSpec(entry["name"], TRITON_DTYPES[dtype], tuple(int(d) for d in entry.get("dims", ())))


def parse_model_config(config: str | Mapping[str, Any]) -> ModelSpec:
    """The parts of a Triton model config (the JSON Triton passes as ``args["model_config"]``) used here.

    Raises:
        ValueError: a tensor has a data type with no numpy equivalent (e.g. TYPE_STRING).
    """
    cfg = json.loads(config) if isinstance(config, str) else config
    name = cfg.get("name", "?")
    params = {k: v.get("string_value", "") for k, v in (cfg.get("parameters") or {}).items()}
    scatter = {}
    for entry in cfg.get("batch_output", ()):
        kind = entry.get("kind", "BATCH_SCATTER_WITH_INPUT_SHAPE")
        sources = list(entry.get("source_input", ()))
        if kind != "BATCH_SCATTER_WITH_INPUT_SHAPE" or len(sources) != 1:
            raise ValueError(
                f"model {name!r}: batch_output kind {kind} with source_input {sources} is not supported "
                "(BATCH_SCATTER_WITH_INPUT_SHAPE with one source_input is)"
            )
        scatter.update({target: sources[0] for target in entry.get("target_name", ())})
    if cfg.get("batch_input"):
        raise ValueError(f"model {name!r}: batch_input is not supported by the framework's Python-backend model")
    return ModelSpec(
        name=name,
        max_batch_size=int(cfg.get("max_batch_size", 0)),
        inputs=tuple(_tensor_spec(name, e) for e in cfg.get("input", ())),
        outputs=tuple(_tensor_spec(name, e) for e in cfg.get("output", ())),
        parameters=params,
        ragged=frozenset(e["name"] for e in cfg.get("input", ()) if e.get("allow_ragged_batch")),
        scatter=scatter,
    )


def check_inputs(spec: ModelSpec, arrays: Mapping[str, Any], ops: ArrayOps = NUMPY_OPS) -> Arrays:
    """One request's inputs, validated against the config and cast to its dtypes.

    Returns C-contiguous arrays keyed by input name, in config order.

    Raises:
        ValueError: an input is missing, has the wrong rank or dims, or requests of one
            call disagree on the batch size (one line naming model and input).
    """
    out: Arrays = {}
    batch = None
    for t in spec.inputs:
        array = arrays.get(t.name)
        if array is None:
            raise ValueError(f"model {spec.name!r}: input {t.name!r} missing")
        array = ops.convert(array, t.dtype)
        full = tuple(array.shape)
        shape = full[1:] if spec.batched else full
        expected = ("batch", *t.dims) if spec.batched else t.dims
        if len(shape) != len(t.dims) or any(d not in (-1, s) for d, s in zip(t.dims, shape, strict=True)):
            raise ValueError(f"model {spec.name!r}: input {t.name!r} has shape {full}, expected {expected}")
        if spec.batched:
            if batch is not None and full[0] != batch:
                raise ValueError(
                    f"model {spec.name!r}: input {t.name!r} has batch size {full[0]}, other inputs {batch}"
                )
            batch = full[0]
        out[t.name] = array
    return out


def concatenate_requests(requests: Sequence[Arrays], ops: ArrayOps = NUMPY_OPS) -> tuple[Arrays, list[int]]:
    """Concatenate validated requests along axis 0; returns (batch, rows per request)."""
    sizes = [len(next(iter(r.values()))) for r in requests]
    names = list(requests[0])
    if len(requests) == 1:
        return dict(requests[0]), sizes
    return {n: ops.concatenate([r[n] for r in requests]) for n in names}, sizes


def split_outputs(outputs: Arrays, sizes: Sequence[int]) -> list[Arrays]:
    """Undo ``concatenate_requests`` on the outputs: one dict per request (views, no copy)."""
    bounds = np.cumsum([0, *sizes]).tolist()
    for name, array in outputs.items():
        if len(array) != bounds[-1]:
            raise ValueError(f"output {name!r} has {len(array)} rows for a batch of {bounds[-1]}")
    return [{n: a[lo:hi] for n, a in outputs.items()} for lo, hi in zip(bounds[:-1], bounds[1:], strict=False)]


def cast_outputs(spec: ModelSpec, outputs: Arrays, ops: ArrayOps = NUMPY_OPS) -> Arrays:
    """The config's outputs from a model's result, cast to the config's dtypes.

    Raises:
        ValueError: the model did not produce a configured output.
    """
    missing = [t.name for t in spec.outputs if t.name not in outputs]
    if missing:
        raise ValueError(f"model {spec.name!r}: outputs {missing} not produced (got {sorted(outputs)})")
    return {t.name: ops.convert(outputs[t.name], t.dtype) for t in spec.outputs}


def run_batched(
    spec: ModelSpec,
    run: Callable[[Arrays], Arrays],
    requests: Sequence[Mapping[str, Any] | Exception],
    ops: ArrayOps = NUMPY_OPS,
) -> list[Arrays | Exception]:
    """Evaluate a dynamic batch: one result (outputs or the exception) per request, in order.

    ``requests`` holds each request's input arrays, or an exception already met while
    reading it. Valid requests run in a single ``run`` call on their concatenation; if
    that call fails, each runs alone so that one bad request fails alone.
    """
    results: list[Arrays | Exception] = list(requests)  # type: ignore[arg-type]  # exceptions stay in place
    valid: list[int] = []
    checked: list[Arrays] = []
    for i, request in enumerate(requests):
        if isinstance(request, Exception):
            continue
        try:
            checked.append(check_inputs(spec, request, ops))
            valid.append(i)
        except ValueError as err:
            results[i] = err
    if not valid:
        return results
    if spec.ragged:
        try:
            for i, outputs in zip(valid, run_ragged(spec, run, checked, ops), strict=True):
                results[i] = outputs
        except Exception as err:  # noqa: BLE001 - every request of the call gets the error
            for i in valid:
                results[i] = err
        return results
    if spec.batched and len(valid) > 1:
        try:
            batch, sizes = concatenate_requests(checked, ops)
            for i, outputs in zip(valid, split_outputs(cast_outputs(spec, run(batch), ops), sizes), strict=True):
                results[i] = outputs
            return results
        except Exception:  # noqa: BLE001 - fall back to one call per request below
            pass
    for i, inputs in zip(valid, checked, strict=True):
        try:
            results[i] = cast_outputs(spec, run(inputs), ops)
        except Exception as err:  # noqa: BLE001 - becomes this request's error response
            results[i] = err
    return results


def run_ragged(
    spec: ModelSpec, run: Callable[[Arrays], Arrays], requests: Sequence[Arrays], ops: ArrayOps = NUMPY_OPS
) -> list[Arrays]:
    """One call for requests of a model with ragged inputs, as Triton's ragged batching does it.

    Each ragged input (``allow_ragged_batch``) reaches the model as ONE 1-D array: the
    requests' arrays flattened and concatenated (lengths may differ between requests);
    other inputs are concatenated along axis 0. An output with a ``batch_output`` of kind
    ``BATCH_SCATTER_WITH_INPUT_SHAPE`` is cut back into pieces of each request's element
    count of its source input, in that input's shape; other outputs are split by rows.
    Source: Triton's ``docs/user_guide/ragged_batching.md``.

    Raises:
        ValueError: an output has fewer elements or rows than the requests need.
    """
    batch: Arrays = {}
    for t in spec.inputs:
        arrays = [r[t.name] for r in requests]
        if t.name in spec.ragged:
            arrays = [a.reshape(-1) for a in arrays]
        batch[t.name] = arrays[0] if len(arrays) == 1 else ops.concatenate(arrays)
    outputs = cast_outputs(spec, run(batch), ops)
    results: list[Arrays] = [{} for _ in requests]
    for name, array in outputs.items():
        source = spec.scatter.get(name)
        if source is not None:
            shapes = [tuple(r[source].shape) for r in requests]
            flat = array.reshape(-1)
            bounds = np.cumsum([0, *(int(np.prod(shape)) for shape in shapes)]).tolist()
            if len(flat) != bounds[-1]:
                raise ValueError(f"output {name!r} has {len(flat)} elements for inputs of {bounds[-1]}")
            for result, lo, hi, shape in zip(results, bounds[:-1], bounds[1:], shapes, strict=True):
                result[name] = flat[lo:hi].reshape(shape)
        else:
            rows = [len(next(iter(r.values()))) for r in requests]
            for result, part in zip(results, split_outputs({name: array}, rows), strict=True):
                result.update(part)
    return results
