"""The ONNX runner of the framework's Python-backend model: onnxruntime on the CPU.

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

from typing import Any

import numpy as np

from .python_backend import NUMPY_OPS, Arrays, ModelSpec


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


class OnnxRunner:
    """``runner(inputs) -> outputs`` on numpy arrays, one onnxruntime session.

    Args:
        spec: the model's config.
        path: the ONNX file.
        intra_op_threads: onnxruntime intra-op threads.

    Raises:
        ValueError: config and ONNX graph disagree on tensor names.
        onnxruntime errors: the file is missing or invalid.
    """

    ops = NUMPY_OPS

    def __init__(self, spec: ModelSpec, path: str, intra_op_threads: int = 1) -> None:
        self.path = path
        self.session = open_session(path, intra_op_threads)
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
