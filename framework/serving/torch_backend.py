"""The torch runner of the framework's Python-backend model: TorchScript on a GPU or the CPU.

Used by :class:`framework.serving.python_backend.TritonPythonModel` when ``runner`` is
``torch``, or ``auto`` on a ``KIND_GPU`` instance (the fallback server's and
``cmstriton``'s ``device = gpu``), and for every ``pytorch_libtorch`` model (CMS's
``particlenet_PT``, say). The model file is a TorchScript file: CMS's, or the one that
``scripts/build_models.py`` writes beside each stand-in's ``model.onnx`` (``model.pt``, the
same weights, traced with a dynamic batch axis). Operators of compiled PyTorch extensions
that such a file calls (``torch_scatter``, ``torch_sparse``: CMS's ``gat_test``) are
registered first in pure torch (:mod:`framework.serving.torch_ops`).

Tensors cross the stub boundary through DLPack, never numpy (the recipe verified on the
GPU machine, ``shared/gpu/README.md``): a request's input arrives in CPU memory
(``torch.from_dlpack(tensor.to_dlpack())``, no copy); the concatenated batch is moved to
the device once; the outputs come back to the CPU once per batch and each request's rows
go out with ``Tensor.from_dlpack``. torch is imported only when this runner is used: it
is not a run-time dependency of the CPU path.

**fp32 unless the config asks for TF32.** torch's defaults let cuDNN run fp32 convolutions
in TF32 (10-bit mantissa) on Ampere and later GPUs (``torch.backends.cudnn.allow_tf32`` is
True; matmul's is False). CMS's ParticleNet AK8 on an H200 then differed from the ONNX model
on the CPU by up to 8.1e-3 in a score. The runner sets both matmul and cuDNN to full fp32
(``allow_tf32``, below) unless the model's ``config.pbtxt`` has the parameter
``allow_tf32: "true"``. The setting is per process, and each Triton model instance is its
own stub process, so all instances of a model follow its config. Triton's own PyTorch
backend (``pytorch_libtorch``) has no such parameter: it keeps libtorch's defaults (TF32 in
cuDNN convolutions, not in matmul) unless ``NVIDIA_TF32_OVERRIDE=0`` is in the server's
environment (``docs/performance-gpu.md``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from .model_spec import Arrays, ModelSpec


def _torch_dtypes() -> dict[np.dtype[Any], Any]:
    import torch

    return {
        np.dtype(np.bool_): torch.bool,
        np.dtype(np.uint8): torch.uint8,
        np.dtype(np.int8): torch.int8,
        np.dtype(np.int16): torch.int16,
        np.dtype(np.int32): torch.int32,
        np.dtype(np.int64): torch.int64,
        np.dtype(np.float16): torch.float16,
        np.dtype(np.float32): torch.float32,
        np.dtype(np.float64): torch.float64,
    }


def ordered_by_index(names: Iterable[str]) -> list[str]:
    """Names in positional order by Triton's PyTorch-backend convention ``NAME__i`` (i = the
    position in ``forward``'s arguments or in its returned tuple) when every name has
    such a suffix, else as given (config order)."""
    names = list(names)
    matches = [re.fullmatch(r".*__(\d+)", name) for name in names]
    if names and all(matches):
        indices = [int(m.group(1)) for m in matches if m is not None]
        return [name for _, name in sorted(zip(indices, names, strict=True))]
    return names


class TorchOps:
    """:class:`~framework.serving.model_spec.ArrayOps` for torch tensors (on any one device)."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._dtypes = _torch_dtypes()

    def convert(self, array: Any, dtype: np.dtype[Any]) -> Any:
        return array.to(dtype=self._dtypes[np.dtype(dtype)]).contiguous()

    def concatenate(self, arrays: Sequence[Any]) -> Any:
        return self._torch.cat(list(arrays), dim=0)


TF32_PARAMETER = "allow_tf32"
"""The config parameter that lets a torch-runner model use TF32 (``"true"``/``"false"``, default false)."""


def parse_allow_tf32(spec: ModelSpec) -> bool:
    """The model's ``allow_tf32`` parameter: ``true``/``false`` (any case, or 1/0); unset = False.

    Raises:
        ValueError: another value (one line naming the model and the parameter).
    """
    value = (spec.parameters.get(TF32_PARAMETER) or "false").strip().lower()
    if value not in ("true", "false", "1", "0"):
        raise ValueError(f"model {spec.name!r}: parameter {TF32_PARAMETER}={value!r} is not true or false")
    return value in ("true", "1")


def set_tf32(torch: Any, allow: bool) -> None:
    """TF32 on or off for CUDA matmuls and cuDNN (convolutions and RNNs), in this process.

    Through the ``allow_tf32`` flags and ``set_float32_matmul_precision`` ("highest" = fp32,
    "high" = TF32 allowed). torch >= 2.9 also has per-operation ``fp32_precision`` settings;
    mixing those with the flags makes torch raise when a flag is read (checked with torch
    2.13), so only the flags are used here (they set the new settings consistently).
    """
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow
    torch.set_float32_matmul_precision("high" if allow else "highest")


def load_torchscript(model: str, path: str, device: Any) -> Any:
    """The TorchScript module in ``path``, loaded with ``map_location=device``, in eval mode.

    First registers the compiled extension operators that :mod:`~framework.serving.torch_ops`
    provides in pure torch (``torch_scatter``, ``torch_sparse``: PyTorch Geometric's models,
    CMS's ``gat_test``), which ``torch.jit.load`` resolves while it loads the file.

    Raises:
        RuntimeError: the file calls an operator that neither torch, a loaded library nor
            those operators provide (one line naming the model and the operator).
        Exception: torch's own error, the file is missing or is not TorchScript.
    """
    import torch

    from .torch_ops import OPERATORS, register_extension_ops, unknown_operator

    register_extension_ops()
    try:
        module = torch.jit.load(path, map_location=device)  # type: ignore[no-untyped-call]  # torch.jit.load is unannotated
    except RuntimeError as exc:
        operator = unknown_operator(exc)
        if operator is None:
            raise
        provided = " and ".join(OPERATORS)
        raise RuntimeError(
            f"model {model!r}: its TorchScript calls the operator {operator}, which nothing here provides "
            f"(torch, the libraries loaded in the server's Python, pysonic's pure-torch operators of {provided}); "
            f"install the library that defines it where the server runs"
        ) from None
    return module.eval()


class TorchRunner:
    """``runner(inputs) -> outputs`` on CPU torch tensors; the model runs on ``device``.

    Args:
        spec: the model's config; the TorchScript module takes its inputs positionally
            and returns one tensor (or a tuple): in ``NAME__i`` order when every name has
            that suffix (Triton's PyTorch backend), else in config order.
        path: the TorchScript file, loaded with ``map_location=device`` (CMS's files were
            saved on CUDA).
        device: ``"cpu"`` or ``"cuda:N"``.
        intra_op_threads: torch intra-op threads on the CPU (ignored on a GPU).
        allow_tf32: TF32 in CUDA matmuls and cuDNN convolutions (:func:`set_tf32`, set for
            the whole process); False (the default) keeps full fp32 arithmetic.

    Raises:
        RuntimeError: ``device`` is a CUDA device but torch sees none (torch built
            without CUDA, or no GPU visible to the server); or the file calls an operator
            nobody provides (:func:`load_torchscript`).
        Exception: torch's own error, the file is missing or is not TorchScript.
    """

    def __init__(
        self, spec: ModelSpec, path: str, device: str = "cpu", intra_op_threads: int = 1, allow_tf32: bool = False
    ) -> None:
        import torch

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError(
                f"model {spec.name!r}: a GPU instance needs torch with CUDA in the server's "
                f"Python (torch {torch.__version__}: torch.cuda.is_available() is False)"
            )
        if device == "cpu":
            torch.set_num_threads(intra_op_threads)
        set_tf32(torch, allow_tf32)  # before the first CUDA kernel (the warm-up below)
        self.allow_tf32 = allow_tf32
        self._torch = torch
        self.device = torch.device(device)
        self.path = path
        self.module = load_torchscript(spec.name, path, self.device)
        self.ops = TorchOps()
        self._input_names = ordered_by_index(t.name for t in spec.inputs)
        self._output_names = ordered_by_index(t.name for t in spec.outputs)
        if self.device.type == "cuda":
            self._warm_up(spec)

    def _warm_up(self, spec: ModelSpec) -> None:
        """One call on zeros (variable dims = 1) while the model loads: the first call on a
        GPU pays CUDA's lazy start-up (context, cuBLAS/cuDNN handles, kernel loading), about
        a second, which would otherwise fall on the first request."""
        dtypes = _torch_dtypes()
        batch = (1,) if spec.batched else ()
        zeros = {
            t.name: self._torch.zeros(batch + tuple(d if d > 0 else 1 for d in t.dims), dtype=dtypes[t.dtype])
            for t in spec.inputs
        }
        try:
            self(zeros)
        except Exception:  # noqa: BLE001, S110 - a model may reject length-1 dims; the warm-up is optional
            pass

    def __call__(self, inputs: Arrays) -> Arrays:
        torch = self._torch
        # Plain TorchScript interpretation: the profiling executor re-specialises (and
        # re-fuses) the graph for every new batch shape, and dynamic batching makes a new
        # shape at almost every call (measured on the H100: 40 ms per ParticleNet request
        # instead of a few).
        with torch.jit.optimized_execution(False), torch.no_grad():
            args = [inputs[name].to(self.device, non_blocking=True) for name in self._input_names]
            result = self.module(*args)
            outputs = result if isinstance(result, (tuple, list)) else (result,)
            # one copy back per batch (synchronises with the GPU); requests take views of it
            return {name: out.cpu() for name, out in zip(self._output_names, outputs, strict=True)}

    def read(self, tensor: Any) -> Any:
        """A request's input tensor as a CPU torch tensor, through DLPack (None if missing)."""
        return None if tensor is None else self._torch.from_dlpack(tensor.to_dlpack())

    def write(self, pb_utils: Any, name: str, array: Any) -> Any:
        """An output tensor of the response, through DLPack."""
        return pb_utils.Tensor.from_dlpack(name, self._torch.utils.dlpack.to_dlpack(array.contiguous()))
