# Triton Python-backend entry point: the framework's model (ONNX runner on CPU instances,
# torch runner on GPU instances; see framework/serving/python_backend.py).
from framework.serving.python_backend import TritonPythonModel  # noqa: F401
