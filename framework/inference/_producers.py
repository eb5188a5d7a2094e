"""The base classes of every model module: one data conversion, a SONIC producer and a direct twin.

CMSSW runs ML either in the module (``ONNXRuntime``, PhysicsTools/ONNXRuntime) or as a
service (SONIC). To compare the two on the same events, and to switch a config between
them by type name, each model here has both, written once:

* a :class:`ModelConversion` subclass holds everything about the model's data: its
  parameters and products (``fill_descriptions``, ``__init__``), ``fill_inputs(event,
  input)`` with ``input[name].to_server(array)`` and ``read_outputs(event, output)`` with
  ``output[name].from_server()``;
* the SONIC producer is that conversion on :class:`SonicConversionProducer` (Triton, as
  ExternalWork), the direct producer the same conversion on :class:`OnnxDirectProducer`
  (the same ONNX file in-process with onnxruntime, thread-safe)::

      class ParticleNetSonicProducer(_ParticleNetConversion, SonicConversionProducer): ...
      class ParticleNetDirectProducer(_ParticleNetConversion, OnnxDirectProducer): ...

The conversion is listed first; its ``fill_descriptions``/``__init__`` call ``super()``
first, which adds the ``Client`` PSet and sets up the client or the onnxruntime session.
The direct producer hands the conversion the same tensor objects as SONIC
(:class:`TritonInputMap` / :class:`TritonOutputMap`), so its checks and messages are the
same too.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping
from typing import Any

import numpy as np

import framework.config as cms
from framework.core import EDProducer, Event
from framework.serving.model_spec import ModelSpec, cast_outputs, check_inputs, parse_model_config
from framework.serving.onnx_backend import OnnxRunner
from framework.sonic import (
    BatchRows,
    SonicEDProducer,
    TensorSpec,
    TritonInputData,
    TritonInputMap,
    TritonOutputData,
    TritonOutputMap,
    client_description,
    resolve_config_path,
)
from framework.utilities import ConfigurationError
from framework.utilities.triton_config import ModelConfigSyntaxError, parse_config_file

__all__ = ["ModelConversion", "OnnxDirectProducer", "SonicConversionProducer", "read_model_config"]


class ModelConversion(EDProducer):
    """The data conversion of one model, shared by its SONIC producer and its direct twin.

    Subclasses implement :meth:`fill_inputs` and :meth:`read_outputs` and must not set
    ``thread_safe``: the twin base decides (SONIC: no, direct: yes).
    """

    def fill_inputs(self, event: Event, input: Mapping[str, TritonInputData]) -> None:
        """Fill every model input: ``input[name].to_server(array)``. Synchronous."""
        raise NotImplementedError(f"{type(self).__name__} must implement fill_inputs(event, input)")

    def read_outputs(self, event: Event, output: Mapping[str, TritonOutputData]) -> None:
        """Read ``output[name].from_server()`` and ``event.put`` the products. Synchronous."""
        raise NotImplementedError(f"{type(self).__name__} must implement read_outputs(event, output)")


class SonicConversionProducer(ModelConversion, SonicEDProducer):
    """The SONIC twin: ``acquire`` is the conversion's ``fill_inputs``, ``produce`` its ``read_outputs``."""

    def acquire(self, event: Event, input: TritonInputMap) -> None:  # type: ignore[override]  # SONIC: (event, Triton map), as in CMSSW
        self.fill_inputs(event, input)

    def produce(self, event: Event, output: TritonOutputMap) -> None:  # type: ignore[override]  # SONIC: (event, Triton map), as in CMSSW
        self.read_outputs(event, output)


def read_model_config(config_path: pathlib.Path) -> ModelSpec:
    """The :class:`~framework.serving.model_spec.ModelSpec` of a Triton ``config.pbtxt``
    (as the Python backend sees it).

    Raises:
        ConfigurationError: the file is missing or is not a valid model configuration.
    """
    from google.protobuf import json_format

    try:
        config = parse_config_file(config_path)
    except (OSError, ModelConfigSyntaxError) as err:
        raise ConfigurationError(f"{config_path}: cannot read the model configuration: {err}") from None
    return parse_model_config(json_format.MessageToDict(config, preserving_proto_field_name=True))


class OnnxDirectProducer(ModelConversion):
    """The direct twin: the conversion around an in-process onnxruntime call in ``produce``.

    The model is ``<repository>/<Client.modelName>/<version>/<onnx_file>``, where the
    repository holds ``Client.modelConfigPath`` (default: ``data/models``) and the version
    is ``Client.modelVersion`` or the highest numbered folder. Batching models only. An
    event with batch 0 makes no call and gets empty outputs, as with SONIC. With
    ``runInference = False`` (a pysonic extension for benchmarks) every output is zeros of
    shape ``(batch, *dims)`` (variable dims 1) and onnxruntime is never called: the same
    job's CPU without inference (``cmsbench cpu``).

    Raises (construction):
        ConfigurationError: no config or ONNX file; a model without batch dimension; config
            and ONNX graph disagree on tensor names.
    """

    thread_safe = True  # onnxruntime releases the GIL; one session serves all threads

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add(
            "Client",
            client_description(),
            "as the SONIC twin; modelName, modelVersion, modelConfigPath locate the ONNX file",
        )
        desc.add("intraOpThreads", cms.untracked.uint32(1), "onnxruntime intra-op threads (as the server's model)")
        desc.add(
            "runInference",
            cms.untracked.bool(True),
            "pysonic: False = the same conversion with zeros for outputs, no onnxruntime call "
            "(the job's CPU without inference, as cmsbench cpu measures it)",
        )

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        client = params.Client
        config_path = resolve_config_path(client.modelConfigPath)
        self.spec = read_model_config(config_path)
        if not self.spec.batched:
            raise ConfigurationError(
                f"{self.label}: model '{client.modelName}' has max_batch_size 0; "
                "direct producers need a batch dimension"
            )
        versions = sorted((p for p in config_path.parent.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        latest = versions[-1] if versions else None
        version = config_path.parent / client.modelVersion if client.modelVersion else latest
        onnx_path = version / (self.spec.parameters.get("onnx_file") or "model.onnx") if version else None
        if onnx_path is None or not onnx_path.is_file():
            raise ConfigurationError(f"{self.label}: no ONNX file for model '{client.modelName}' ({onnx_path})")
        try:
            self.runner = OnnxRunner(self.spec, str(onnx_path), params.intraOpThreads)
        except ValueError as err:
            raise ConfigurationError(f"{self.label}: {err}") from None
        self.what = f"model '{self.spec.name}' (module '{self.label}', direct)"
        self._inputs = [_tensor_spec(t) for t in self.spec.inputs]
        self._outputs = [_tensor_spec(t) for t in self.spec.outputs]
        self.run_inference = params.runInference

    def produce(self, event: Event) -> None:
        what = f"{self.what}, event {event.id}"
        rows = BatchRows(what)
        inputs = TritonInputMap(what, {s.name: TritonInputData(s, what, rows) for s in self._inputs})
        self.fill_inputs(event, inputs)
        arrays = check_inputs(self.spec, {name: t.data for name, t in inputs.items()})
        batch = len(next(iter(arrays.values())))
        if batch and self.run_inference:
            results = cast_outputs(self.spec, self.runner(arrays))
        else:  # as the SONIC client: no call for an empty batch, empty outputs; or zeros (runInference)
            results = {
                s.name: np.zeros((batch, *(max(d, 1 if batch else 0) for d in s.dims)), s.dtype) for s in self._outputs
            }
        outputs = TritonOutputMap(what, {s.name: TritonOutputData(s, what, True) for s in self._outputs})
        for name, tensor in outputs.items():
            tensor.data = results[name]
        self.read_outputs(event, outputs)


def _tensor_spec(tensor: Any) -> TensorSpec:
    """The SONIC :class:`TensorSpec` (batched) of a :class:`~framework.serving.model_spec.TensorSpec` of the config."""
    from tritonclient.utils import np_to_triton_dtype

    return TensorSpec(tensor.name, np_to_triton_dtype(tensor.dtype), tensor.dtype, tensor.dims, True)
