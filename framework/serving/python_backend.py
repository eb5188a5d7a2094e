"""The framework's Triton Python-backend model: one entry point, an ONNX or a torch runner.

The server bundled with nvidia-pytriton has no ONNX Runtime or PyTorch backend, so every
ONNX (``onnxruntime_onnx``) or TorchScript (``pytorch_libtorch``) model a server of the
project serves becomes a Python-backend model whose generated ``<version>/model.py``
re-exports :class:`TritonPythonModel` from here (``framework/serving/_repository.py``
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

Triton's dynamic batcher hands ``execute`` several requests at once; they run in one
runner call and each request gets its own response or error
(:func:`framework.serving.model_spec.run_batched`, with the config read by
:func:`~framework.serving.model_spec.parse_model_config`).

Tensors cross the stub boundary as numpy arrays for the ONNX runner and through **DLPack**
for the torch runner (``Tensor.to_dlpack``/``Tensor.from_dlpack``): the 2.51 stub's numpy
path needs numpy < 2, DLPack works with any numpy (verified on the GPU machine, numpy 2.5).
``triton_python_backend_utils`` exists only inside the server's Python stub and is
imported lazily.
"""

from __future__ import annotations

import os
from typing import Any

from .model_spec import Arrays, ModelSpec, parse_model_config, run_batched

RUNNERS = ("auto", "onnx", "torch")
"""Values of the ``runner`` parameter."""


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
            Exception: onnxruntime's or torch's own error: the model file is missing or invalid (Triton then
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
