# Triton Python-backend entry point: the generic ONNX runner of the framework.
from framework.sonic.onnx_backend import TritonPythonModel  # noqa: F401
