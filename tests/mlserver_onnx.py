"""An MLServer custom runtime that serves an ONNX file with onnxruntime (MLServer has none).

Loaded by MLServer itself, in its own virtualenv (``.venv-mlserver``, see ``.ci/run``), as
``implementation: "mlserver_onnx.OnnxRuntime"`` of a ``model-settings.json`` whose
``parameters.uri`` is the ``.onnx`` file; ``tests/test_oip.py`` copies this file into the
MLServer model repository. It imports nothing of pysonic (not installed there).

The model's metadata (what an Open Inference Protocol client reads for shapes) comes from
the ONNX graph unless the settings give ``inputs``/``outputs``: a symbolic dim (the batch
dimension) is -1, as Triton reports it.
"""

from __future__ import annotations

from typing import Any

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse, MetadataTensor
from mlserver.utils import get_model_uri

# ONNX element types -> the Open Inference Protocol's datatypes (those our models use and a few more)
DATATYPES = {
    "tensor(float)": "FP32",
    "tensor(double)": "FP64",
    "tensor(float16)": "FP16",
    "tensor(int32)": "INT32",
    "tensor(int64)": "INT64",
    "tensor(bool)": "BOOL",
}


def _metadata(args: list[Any]) -> list[MetadataTensor]:
    return [
        MetadataTensor(
            name=arg.name,
            datatype=DATATYPES[arg.type],
            shape=[dim if isinstance(dim, int) else -1 for dim in arg.shape],
        )
        for arg in args
    ]


class OnnxRuntime(MLModel):
    """One ``onnxruntime.InferenceSession`` on the CPU (one intra-op thread, as our Triton models)."""

    async def load(self) -> bool:
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        path = await get_model_uri(self._settings)
        self._session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self._output_names = [output.name for output in self._session.get_outputs()]
        if not self._settings.inputs:
            self._settings.inputs = _metadata(self._session.get_inputs())
        if not self._settings.outputs:
            self._settings.outputs = _metadata(self._session.get_outputs())
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {request_input.name: NumpyCodec.decode_input(request_input) for request_input in payload.inputs}
        wanted = [o.name for o in payload.outputs or ()] or self._output_names
        arrays = self._session.run(wanted, feeds)
        outputs = [NumpyCodec.encode_output(name, array) for name, array in zip(wanted, arrays, strict=True)]
        return InferenceResponse(model_name=self.name, outputs=outputs)
