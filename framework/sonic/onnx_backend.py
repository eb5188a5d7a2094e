"""A generic Triton Python-backend model that runs an ONNX file with onnxruntime.

The server bundled with nvidia-pytriton has no ONNX Runtime backend, so each model of
``data/models`` is a Python-backend model whose ``1/model.py`` re-exports
``TritonPythonModel`` from here. Its ``config.pbtxt`` names the inputs and outputs (the
same names as the ONNX graph) and may set two ``parameters``:

* ``onnx_file``: the file name inside the version folder (default ``model.onnx``);
* ``intra_op_threads``: onnxruntime intra-op threads (default 1: one Triton instance
  should use one core; scale with ``instance_group.count`` instead).

Triton's dynamic batcher hands ``execute`` several requests at once. They are
concatenated along the batch axis (axis 0), run in ONE onnxruntime call, and the outputs
are split back per request. A request whose inputs are missing or malformed gets its own
error response; the others still run. That logic lives in the pure-numpy functions
``parse_model_config``, ``check_inputs``, ``concatenate_requests``, ``split_outputs`` and
``run_batched``, which tests call without a server. ``triton_python_backend_utils`` exists
only inside the server's Python stub and is imported lazily.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TRITON_DTYPES: dict[str, np.dtype] = {
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

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of the config: name, numpy dtype, dims without the batch dim (-1 = any)."""

    name: str
    dtype: np.dtype
    dims: tuple[int, ...]


@dataclass(frozen=True)
class ModelSpec:
    """What ``execute`` needs from a Triton model config."""

    name: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    parameters: dict[str, str] = field(default_factory=dict)

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
    return ModelSpec(
        name=name,
        max_batch_size=int(cfg.get("max_batch_size", 0)),
        inputs=tuple(_tensor_spec(name, e) for e in cfg.get("input", ())),
        outputs=tuple(_tensor_spec(name, e) for e in cfg.get("output", ())),
        parameters=params,
    )


def check_inputs(spec: ModelSpec, arrays: Mapping[str, np.ndarray | None]) -> Arrays:
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
        array = np.ascontiguousarray(array, dtype=t.dtype)
        shape = array.shape[1:] if spec.batched else array.shape
        expected = ("batch", *t.dims) if spec.batched else t.dims
        if len(shape) != len(t.dims) or any(d not in (-1, s) for d, s in zip(t.dims, shape)):
            raise ValueError(f"model {spec.name!r}: input {t.name!r} has shape {array.shape}, expected {expected}")
        if spec.batched:
            if batch is not None and array.shape[0] != batch:
                raise ValueError(f"model {spec.name!r}: input {t.name!r} has batch size {array.shape[0]}, other inputs {batch}")
            batch = array.shape[0]
        out[t.name] = array
    return out


def concatenate_requests(requests: Sequence[Arrays]) -> tuple[Arrays, list[int]]:
    """Concatenate validated requests along axis 0; returns (batch, rows per request)."""
    sizes = [len(next(iter(r.values()))) for r in requests]
    names = list(requests[0])
    if len(requests) == 1:
        return dict(requests[0]), sizes
    return {n: np.concatenate([r[n] for r in requests], axis=0) for n in names}, sizes


def split_outputs(outputs: Arrays, sizes: Sequence[int]) -> list[Arrays]:
    """Undo ``concatenate_requests`` on the outputs: one dict per request (views, no copy)."""
    bounds = np.cumsum([0, *sizes])
    for name, array in outputs.items():
        if len(array) != bounds[-1]:
            raise ValueError(f"output {name!r} has {len(array)} rows for a batch of {bounds[-1]}")
    return [{n: a[lo:hi] for n, a in outputs.items()} for lo, hi in zip(bounds[:-1], bounds[1:])]


def cast_outputs(spec: ModelSpec, outputs: Arrays) -> Arrays:
    """The config's outputs from a model's result, cast to the config's dtypes.

    Raises:
        ValueError: the model did not produce a configured output.
    """
    missing = [t.name for t in spec.outputs if t.name not in outputs]
    if missing:
        raise ValueError(f"model {spec.name!r}: outputs {missing} not produced (got {sorted(outputs)})")
    return {t.name: np.ascontiguousarray(outputs[t.name], dtype=t.dtype) for t in spec.outputs}


def run_batched(
    spec: ModelSpec, run: Callable[[Arrays], Arrays], requests: Sequence[Mapping[str, Any] | Exception]
) -> list[Arrays | Exception]:
    """Evaluate a dynamic batch: one result (outputs or the exception) per request, in order.

    ``requests`` holds each request's input arrays, or an exception already met while
    reading it. Valid requests run in a single ``run`` call on their concatenation; if
    that call fails, each runs alone so that one bad request fails alone.
    """
    results: list[Arrays | Exception] = list(requests)  # exceptions stay in place
    valid: list[int] = []
    checked: list[Arrays] = []
    for i, request in enumerate(requests):
        if isinstance(request, Exception):
            continue
        try:
            checked.append(check_inputs(spec, request))
            valid.append(i)
        except ValueError as err:
            results[i] = err
    if not valid:
        return results
    if spec.batched and len(valid) > 1:
        try:
            batch, sizes = concatenate_requests(checked)
            for i, outputs in zip(valid, split_outputs(cast_outputs(spec, run(batch)), sizes)):
                results[i] = outputs
            return results
        except Exception:  # noqa: BLE001 - fall back to one call per request below
            pass
    for i, inputs in zip(valid, checked):
        try:
            results[i] = cast_outputs(spec, run(inputs))
        except Exception as err:  # noqa: BLE001 - becomes this request's error response
            results[i] = err
    return results


def open_session(path: str, intra_op_threads: int = 1) -> Any:
    """An onnxruntime CPU InferenceSession; no spinning threads (the machine has few cores)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def check_session(spec: ModelSpec, session: Any, path: str) -> None:
    """Config and ONNX graph must agree on input/output names.

    Raises:
        ValueError: a config tensor is not in the graph (names both lists).
    """
    graph_in = [i.name for i in session.get_inputs()]
    graph_out = [o.name for o in session.get_outputs()]
    for kind, config_names, graph_names in (
        ("input", [t.name for t in spec.inputs], graph_in),
        ("output", [t.name for t in spec.outputs], graph_out),
    ):
        if set(config_names) - set(graph_names):
            raise ValueError(f"model {spec.name!r}: config {kind}s {config_names} != {path} {kind}s {graph_names}")


class TritonPythonModel:
    """Triton Python-backend model: ``initialize`` / ``execute`` / ``finalize`` as Triton calls them."""

    def initialize(self, args: dict[str, str]) -> None:
        """Load ``<model_repository>/<model_version>/<onnx_file>`` (args as Triton passes them).

        Raises:
            ValueError: unsupported config, or config and ONNX graph disagree.
            onnxruntime errors: the ONNX file is missing or invalid (Triton then fails the load).
        """
        self.spec = parse_model_config(args["model_config"])
        params = self.spec.parameters
        self.path = os.path.join(args["model_repository"], args["model_version"], params.get("onnx_file") or "model.onnx")
        threads = int(params.get("intra_op_threads") or 1)
        self.session = open_session(self.path, threads)
        check_session(self.spec, self.session, self.path)
        self._output_names = [t.name for t in self.spec.outputs]

    def _run(self, inputs: Arrays) -> Arrays:
        return dict(zip(self._output_names, self.session.run(self._output_names, inputs)))

    def execute(self, requests: list[Any]) -> list[Any]:
        """One InferenceResponse per request, in order; failures become TritonError responses."""
        import triton_python_backend_utils as pb_utils

        arrays: list[Arrays | Exception] = []
        for request in requests:
            try:
                arrays.append({t.name: _as_numpy(pb_utils.get_input_tensor_by_name(request, t.name)) for t in self.spec.inputs})
            except Exception as err:  # noqa: BLE001 - becomes this request's error response
                arrays.append(err)
        responses = []
        for result in run_batched(self.spec, self._run, arrays):
            if isinstance(result, Exception):
                error = pb_utils.TritonError(f"{type(result).__name__}: {result}")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
            else:
                tensors = [pb_utils.Tensor(name, array) for name, array in result.items()]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def finalize(self) -> None:
        self.session = None


def _as_numpy(tensor: Any) -> np.ndarray | None:
    return None if tensor is None else tensor.as_numpy()
