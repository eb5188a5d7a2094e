"""The ONNX runner of the framework's Python-backend model: onnxruntime on the CPU or a GPU.

Used by :class:`framework.serving.python_backend.TritonPythonModel` (``runner`` = ``onnx``,
or ``auto`` on a CPU instance) and by the direct (in-process) producers, which run the
same ONNX file inside the job. Tensors cross the stub boundary as numpy arrays
(``Tensor.as_numpy``), which needs numpy < 2 with the 2.51 stub.

Copies (measured with ``scripts/stub_copies.py``, 1 MB input, 2.51 stub): the stub copies
each CPU input once when it loads the request (``PbTensor``'s constructor builds its numpy
array with pybind11's copying ``py::array(dtype, dims, ptr)``) and each output once into
its shared memory when the response is sent; the model code cannot avoid either.
``as_numpy()`` then returns that array (0.2 us, no copy), ``numpy.from_dlpack(tensor)`` a
view of the stub's shared memory (0.7-1.0 us, no copy: no gain), ``pb_utils.Tensor(name,
array)`` keeps the array (4-5 us, no copy), and ``pb_utils.Tensor.from_dlpack`` with a
numpy array kills the stub (its capsule renamed ``used_dlpack`` is then deleted by numpy).
The runner adds no copy of its own: inputs and outputs of the configured dtype pass
``np.ascontiguousarray`` unchanged and onnxruntime reads contiguous numpy inputs in place;
only a dynamic batch of several requests is concatenated (one copy, needed).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from typing import Any

import numpy as np

from .model_spec import NUMPY_OPS, Arrays, ModelSpec

CUDA_PROVIDER = "CUDAExecutionProvider"


def session_providers(available: list[str], gpu: int | None, model: str = "?") -> list[Any]:
    """onnxruntime execution providers: the CPU, or CUDA device ``gpu`` (then the CPU for
    the operators CUDA lacks).

    Args:
        available: ``onnxruntime.get_available_providers()``.
        gpu: CUDA device index of a ``KIND_GPU`` instance; None for a CPU instance.

    Raises:
        RuntimeError: a GPU instance but no CUDA provider (one line: install onnxruntime-gpu).
    """
    if gpu is None:
        return ["CPUExecutionProvider"]
    if CUDA_PROVIDER not in available:
        raise RuntimeError(
            f"model {model!r}: a KIND_GPU instance needs onnxruntime's CUDA provider, which the server's "
            f"Python lacks (it has {', '.join(available)}): pip install onnxruntime-gpu"
        )
    return [(CUDA_PROVIDER, {"device_id": gpu}), "CPUExecutionProvider"]


_IMPORT_LOCK = threading.Lock()


def import_onnxruntime() -> Any:
    """``import onnxruntime``, without the file it leaves in the temporary folder.

    Importing onnxruntime (1.32) starts its bundled telemetry SDK (Microsoft's 1DS), which
    writes a session file ``.ses`` into ``$TMPDIR`` and never removes it. It is imported
    here with ``TMPDIR`` pointing at a folder of its own, removed right after (the SDK
    writes nothing there later: not at a session's creation, not at exit).

    Returns:
        The ``onnxruntime`` module.
    """
    if "onnxruntime" in sys.modules:
        return sys.modules["onnxruntime"]
    with _IMPORT_LOCK:
        folder = tempfile.mkdtemp(prefix="pysonic-onnxruntime-")
        saved = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = folder
        try:
            import onnxruntime
        finally:
            if saved is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = saved
            shutil.rmtree(folder, ignore_errors=True)
    return onnxruntime


def open_session(path: str, intra_op_threads: int = 1, gpu: int | None = None, model: str = "?") -> Any:
    """An onnxruntime InferenceSession (CPU, or CUDA device ``gpu``); no spinning threads
    (the machine has few cores).

    Raises:
        RuntimeError: ``gpu`` given but onnxruntime has no CUDA provider (see :func:`session_providers`).
    """
    ort = import_onnxruntime()
    providers = session_providers(ort.get_available_providers(), gpu, model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, options, providers=providers)


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


class OnnxRunner:
    """``runner(inputs) -> outputs`` on numpy arrays, one onnxruntime session.

    Args:
        spec: the model's config.
        path: the ONNX file.
        intra_op_threads: onnxruntime intra-op threads.
        gpu: CUDA device of a ``KIND_GPU`` instance (onnxruntime's CUDA provider); None: the CPU.

    Raises:
        ValueError: config and ONNX graph disagree on tensor names.
        RuntimeError: ``gpu`` given but onnxruntime has no CUDA provider.
        Exception: onnxruntime's own error, the file is missing or invalid.
    """

    ops = NUMPY_OPS

    def __init__(self, spec: ModelSpec, path: str, intra_op_threads: int = 1, gpu: int | None = None) -> None:
        self.path = path
        self.session = open_session(path, intra_op_threads, gpu, spec.name)
        check_session(spec, self.session, path)
        self._output_names = [t.name for t in spec.outputs]

    def __call__(self, inputs: Arrays) -> Arrays:
        return dict(zip(self._output_names, self.session.run(self._output_names, inputs), strict=True))

    @staticmethod
    def read(tensor: Any) -> np.ndarray[Any, Any] | None:
        """A request's input tensor as a numpy array (None if the request lacks it)."""
        return None if tensor is None else tensor.as_numpy()

    @staticmethod
    def write(pb_utils: Any, name: str, array: np.ndarray[Any, Any]) -> Any:
        """An output tensor of the response."""
        return pb_utils.Tensor(name, array)
