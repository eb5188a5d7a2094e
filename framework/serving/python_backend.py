"""The framework's Triton Python-backend model: one entry point, an ONNX or a torch runner.

The server bundled with nvidia-pytriton has no ONNX Runtime or PyTorch backend, so every
ONNX (``onnxruntime_onnx``) or TorchScript (``pytorch_libtorch``) model a server of the
project serves becomes a Python-backend model whose generated ``<version>/model.py``
re-exports :class:`TritonPythonModel` from here (:mod:`framework.serving._repository`
writes it, with these parameters set). Its ``config.pbtxt`` names the inputs and outputs
(the same names as the ONNX graph; ``NAME__i`` positions for TorchScript) and may set
these ``parameters``:

* ``runner``: ``onnx`` (onnxruntime, :mod:`framework.serving.onnx_backend`; its CUDA
  provider on a ``KIND_GPU`` instance),
  ``torch`` (a TorchScript file run by torch, :mod:`framework.serving.torch_backend`) or
  ``auto`` (the default: ``torch`` on a ``KIND_GPU`` instance, ``onnx`` otherwise);
* ``onnx_file``: the ONNX file inside the version folder (default ``model.onnx``);
* ``torchscript_file``: the TorchScript file (default ``model.pt``), same weights;
* ``intra_op_threads``: threads of one instance on the CPU (default 1: one Triton instance
  should use one core; scale with ``instance_group.count`` instead);
* ``allow_tf32``: ``true`` lets the torch runner use TF32 (10-bit mantissa) in CUDA
  matmuls and cuDNN convolutions; ``false``, the default, keeps them in full fp32
  (:func:`~framework.serving.torch_backend.set_tf32`). Triton's PyTorch backend has no such
  parameter and leaves TF32 on in cuDNN convolutions (libtorch's default).

Triton's dynamic batcher hands ``execute`` several requests at once. They are
concatenated along the batch axis (axis 0), run in ONE runner call, and the outputs are
split back per request; inputs with ``allow_ragged_batch`` are flattened and joined into
one 1-D array instead, and ``batch_output`` (``BATCH_SCATTER_WITH_INPUT_SHAPE``) gives
each request its part of the output in the shape of its input (``run_ragged``). A
request whose inputs are missing or malformed gets its own
error response; the others still run. That logic lives in the functions
``parse_model_config``, ``check_inputs``, ``concatenate_requests``, ``split_outputs`` and
``run_batched``, which tests call without a server; they work on numpy arrays or, given
:data:`~framework.serving.torch_backend.TORCH_OPS`, on torch tensors.

Tensors cross the stub boundary as numpy arrays for the ONNX runner and through **DLPack**
for the torch runner (``Tensor.to_dlpack``/``Tensor.from_dlpack``): the 2.51 stub's numpy
path needs numpy < 2, DLPack works with any numpy (verified on the GPU machine, numpy 2.5).
``triton_python_backend_utils`` exists only inside the server's Python stub and is
imported lazily.
"""

from __future__ import annotations

import json
import os
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

RUNNERS = ("auto", "onnx", "torch")
"""Values of the ``runner`` parameter."""

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


def choose_runner(spec: ModelSpec, instance_kind: str) -> str:
    """``"onnx"`` or ``"torch"``: the ``runner`` parameter, ``auto`` resolved by instance kind.

    Args:
        instance_kind: Triton's ``args["model_instance_kind"]`` (``"CPU"``, ``"GPU"``, ...).

    Raises:
        ValueError: an unknown ``runner`` value (names the valid ones).
    """
    runner = spec.parameters.get("runner") or "auto"
    if runner not in RUNNERS:
        raise ValueError(f"model {spec.name!r}: parameter runner={runner!r} is not one of {', '.join(RUNNERS)}")
    if runner == "auto":
        return "torch" if instance_kind.upper() == "GPU" else "onnx"
    return runner


class TritonPythonModel:
    """Triton Python-backend model: ``initialize`` / ``execute`` / ``finalize`` as Triton calls them."""

    def initialize(self, args: dict[str, str]) -> None:
        """Load the model file of the chosen runner (args as Triton passes them).

        The ONNX runner loads ``<model_repository>/<model_version>/<onnx_file>`` into
        onnxruntime (its CUDA provider on a GPU instance); the torch runner loads ``<torchscript_file>`` onto
        ``cuda:<model_instance_device_id>`` for a GPU instance, else the CPU.

        Raises:
            ValueError: unsupported config, unknown runner, an ``allow_tf32`` that is not
                true or false, or config and model file disagree.
            RuntimeError: a GPU instance, but torch sees no CUDA device, or onnxruntime
                has no CUDA provider (one line naming the package to install).
            onnxruntime / torch errors: the model file is missing or invalid (Triton then
                fails the load and logs the message).
        """
        self.spec = parse_model_config(args["model_config"])
        params = self.spec.parameters
        folder = os.path.join(args["model_repository"], args["model_version"])
        threads = int(params.get("intra_op_threads") or 1)
        kind = args.get("model_instance_kind", "CPU")
        self.runner_name = choose_runner(self.spec, kind)
        if self.runner_name == "torch":
            from .torch_backend import TorchRunner, parse_allow_tf32

            device = f"cuda:{args.get('model_instance_device_id', '0')}" if kind.upper() == "GPU" else "cpu"
            path = os.path.join(folder, params.get("torchscript_file") or "model.pt")
            self.runner: Any = TorchRunner(self.spec, path, device, threads, allow_tf32=parse_allow_tf32(self.spec))
        else:
            from .onnx_backend import OnnxRunner

            path = os.path.join(folder, params.get("onnx_file") or "model.onnx")
            gpu = args.get("model_instance_device_id", "0") if kind.upper() == "GPU" else None
            self.runner = OnnxRunner(self.spec, path, threads, gpu=None if gpu is None else int(gpu))

    def execute(self, requests: list[Any]) -> list[Any]:
        """One InferenceResponse per request, in order; failures become TritonError responses."""
        import triton_python_backend_utils as pb_utils

        runner = self.runner
        arrays: list[Arrays | Exception] = []
        for request in requests:
            try:
                arrays.append(
                    {t.name: runner.read(pb_utils.get_input_tensor_by_name(request, t.name)) for t in self.spec.inputs}
                )
            except Exception as err:  # noqa: BLE001 - becomes this request's error response
                arrays.append(err)
        responses = []
        for result in run_batched(self.spec, runner, arrays, runner.ops):
            if isinstance(result, Exception):
                error = pb_utils.TritonError(f"{type(result).__name__}: {result}")
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
            else:
                tensors = [runner.write(pb_utils, name, array) for name, array in result.items()]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
        return responses

    def finalize(self) -> None:
        self.runner = None
