"""A KServe model server for one ONNX file, with onnxruntime (KServe's Python ``ModelServer``).

Run by ``tests/test_oip.py`` with the Python of KServe's own virtualenv (``.venv-kserve``,
see ``.ci/run``; its pins clash with MLServer's and with tritonclient's)::

    python kserve_onnx.py --model_name facile --model_path model.onnx --http_port P --grpc_port Q

It imports nothing of pysonic (not installed there). The model's metadata comes from the
ONNX graph (a symbolic dim, the batch dimension, is -1, as Triton reports it). KServe
listens on every interface (its servers take no host); the test's ports are random.
"""

from __future__ import annotations

import argparse
from typing import Any

import kserve
import onnxruntime as ort
from kserve import InferOutput, InferRequest, InferResponse
from kserve.model_server import parser as kserve_parser

# ONNX element types -> the Open Inference Protocol's datatypes
DATATYPES = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(float16)": "FP16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(bool)": "BOOL",
}


class OnnxModel(kserve.Model):
    """One ``onnxruntime.InferenceSession`` on the CPU (one intra-op thread, as our Triton models)."""

    def __init__(self, name: str, path: str) -> None:
        super().__init__(name)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        tensors = [*self.session.get_inputs(), *self.session.get_outputs()]
        self.types = {tensor.name: DATATYPES[tensor.type] for tensor in tensors}
        self.ready = True

    def _metadata(self, args: list[Any]) -> list[dict[str, Any]]:
        shapes = {a.name: [dim if isinstance(dim, int) else -1 for dim in a.shape] for a in args}
        return [{"name": a.name, "datatype": self.types[a.name], "shape": shapes[a.name]} for a in args]

    def get_input_types(self) -> list[dict[str, Any]]:
        return self._metadata(self.session.get_inputs())

    def get_output_types(self) -> list[dict[str, Any]]:
        return self._metadata(self.session.get_outputs())

    async def predict(self, payload: InferRequest, headers: Any = None, response_headers: Any = None) -> InferResponse:
        feeds = {request_input.name: request_input.as_numpy() for request_input in payload.inputs}
        names = [output.name for output in self.session.get_outputs()]
        outputs = []
        for name, array in zip(names, self.session.run(names, feeds), strict=True):
            output = InferOutput(name, list(array.shape), self.types[name])
            output.set_data_from_numpy(array)
            outputs.append(output)
        return InferResponse(response_id=payload.id or "", model_name=self.name, infer_outputs=outputs)


if __name__ == "__main__":
    arguments = argparse.ArgumentParser(parents=[kserve_parser])
    arguments.add_argument("--model_path", required=True)
    args, _ = arguments.parse_known_args()
    model = OnnxModel(args.model_name, args.model_path)
    kserve.ModelServer(http_port=args.http_port, grpc_port=args.grpc_port, workers=1).start([model])
