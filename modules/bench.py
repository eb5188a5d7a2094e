"""Modules for the benchmarks (``python -m framework.bench``): direct inference, CPU work, no-ops.

* :class:`OnnxDirectProducer`: the base of the *direct* producers, which run the same
  ONNX file as the Triton model in-process with onnxruntime (CMSSW's default way to run
  ML: ``ONNXRuntime`` in the module, thread-safe). A direct producer takes the same
  ``Client`` PSet as its SONIC twin, so one config switches between the two by type name.
  :class:`ParticleNetDirectProducer` and :class:`DeepMETDirectProducer` are the direct
  twins of ``modules.particlenet`` / ``modules.deepmet``.
* :class:`BenchCPUProducer`: a fixed amount of CPU work per event (or a sleep standing
  for CPU work done elsewhere).
* :class:`BenchNoOpProducer`, :class:`BenchBranchReader`, :class:`TinySonicProducer`,
  :class:`BenchStartBarrier`: no-ops, source readers, the smallest SONIC request, and a
  start barrier shared by several ``cmsrun`` processes.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import framework.config as cms
from framework import EDAnalyzer, EDProducer, ExternalFailure
from framework._errors import ConfigurationError
from framework.sonic import SonicEDProducer, client_description
from framework.sonic._server import default_model_repository
from framework.sonic.onnx_backend import open_session
from framework.sonic.python_backend import ModelSpec, check_inputs, parse_model_config

from .deepmet_inputs import met_from_weights
from .particlenet import INPUT_NAMES as PARTICLENET_INPUTS
from .particlenet_inputs import PARTICLENET_CLASSES

# ----------------------------------------------------------------------------------------
# Direct (in-process) inference


def read_model_config(config_path: pathlib.Path) -> ModelSpec:
    """The :class:`ModelSpec` of a Triton ``config.pbtxt`` (as the Python backend sees it).

    Raises:
        ConfigurationError: the file is missing or is not a valid model configuration.
    """
    from google.protobuf import json_format, text_format
    from tritonclient.grpc import model_config_pb2

    try:
        config = text_format.Parse(config_path.read_text(), model_config_pb2.ModelConfig())
    except (OSError, text_format.ParseError) as err:
        raise ConfigurationError(f"{config_path}: cannot read the model configuration: {err}") from None
    return parse_model_config(json_format.MessageToDict(config, preserving_proto_field_name=True))


class _DirectTensor:
    """``input[name]`` / ``output[name]`` of a direct producer: the SONIC tensor calls, in-process."""

    def __init__(self, owner: str, name: str, dtype: np.dtype, dims: tuple[int, ...]) -> None:
        self.owner, self.name, self.dtype, self.dims = owner, name, dtype, dims
        self.data: np.ndarray | None = None

    def to_server(self, array: Any) -> None:
        """As ``TritonInputData.to_server``: exact dtype, shape ``(batch, *dims)``.

        Raises:
            ExternalFailure: wrong dtype or shape (names module, input, expected, actual).
        """
        array = np.asarray(array)
        shape = array.shape[1:]
        if array.dtype != self.dtype or len(shape) != len(self.dims) or any(
                d not in (-1, s) for d, s in zip(self.dims, shape)):
            raise ExternalFailure(f"{self.owner}: input '{self.name}' expects (batch, "
                                  f"{', '.join(map(str, self.dims))}) {self.dtype}, got {array.shape} {array.dtype}")
        self.data = np.ascontiguousarray(array)

    def from_server(self) -> np.ndarray:
        """The output array, shape ``(batch, *dims)``."""
        return self.data


class ConversionSonicProducer(SonicEDProducer):
    """A SONIC producer whose data conversion lives in ``fill_inputs(event, input)`` and
    ``read_outputs(event, output)``, so that a direct twin (:class:`OnnxDirectProducer`)
    shares it: the two differ only in where the model runs."""

    def acquire(self, event: Any, input: Any) -> None:
        self.fill_inputs(event, input)  # type: ignore[attr-defined]

    def produce(self, event: Any, output: Any) -> None:
        self.read_outputs(event, output)  # type: ignore[attr-defined]


class OnnxDirectProducer(EDProducer):
    """Base of direct producers: fill inputs, run onnxruntime in ``produce``, read outputs.

    A subclass implements ``fill_inputs(event, input)`` and ``read_outputs(event, output)``
    with the SONIC calls (``input[name].to_server(a)``, ``output[name].from_server()``).
    The model is ``<repository>/<Client.modelName>/<version>/<onnx_file>``, where the
    repository holds ``Client.modelConfigPath`` (default: ``data/models``) and the version
    is ``Client.modelVersion`` or the highest numbered folder. Batching models only.

    Raises (construction):
        ConfigurationError: no config or ONNX file; a model without batch dimension.
    """

    thread_safe = True  # onnxruntime releases the GIL; one session serves all threads

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("Client", client_description(),
                 "as the SONIC twin; modelName, modelVersion, modelConfigPath locate the ONNX file")
        desc.add("intraOpThreads", cms.untracked.uint32(1), "onnxruntime intra-op threads (as the server's model)")

    def __init__(self, params: Any) -> None:
        client = params.Client
        config_path = (pathlib.Path(client.modelConfigPath) if client.modelConfigPath
                       else default_model_repository() / client.modelName / "config.pbtxt")
        self.spec = read_model_config(config_path)
        if not self.spec.batched:
            raise ConfigurationError(f"{self.label}: model '{client.modelName}' has max_batch_size 0; "
                                     "direct producers need a batch dimension")
        versions = sorted((p for p in config_path.parent.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        version = config_path.parent / client.modelVersion if client.modelVersion else (versions or [None])[-1]
        onnx_path = version / (self.spec.parameters.get("onnx_file") or "model.onnx") if version else None
        if onnx_path is None or not onnx_path.is_file():
            raise ConfigurationError(f"{self.label}: no ONNX file for model '{client.modelName}' ({onnx_path})")
        self.session = open_session(str(onnx_path), params.intraOpThreads)
        self.output_names = [t.name for t in self.spec.outputs]

    def produce(self, event: Any) -> None:
        what = f"module '{self.label}' (model '{self.spec.name}', direct)"
        inputs = {t.name: _DirectTensor(what, t.name, t.dtype, t.dims) for t in self.spec.inputs}
        self.fill_inputs(event, inputs)
        arrays = check_inputs(self.spec, {name: t.data for name, t in inputs.items()})
        batch = len(next(iter(arrays.values())))
        if batch:
            results = self.session.run(self.output_names, arrays)
        else:  # as the SONIC client: no call for an empty batch, empty outputs
            results = [np.zeros((0, *(max(d, 0) for d in t.dims)), t.dtype) for t in self.spec.outputs]
        outputs = {}
        for t, array in zip(self.spec.outputs, results):
            outputs[t.name] = _DirectTensor(what, t.name, t.dtype, t.dims)
            outputs[t.name].data = np.asarray(array, dtype=t.dtype)
        self.read_outputs(event, outputs)

    def fill_inputs(self, event: Any, input: dict[str, _DirectTensor]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement fill_inputs(event, input)")

    def read_outputs(self, event: Any, output: dict[str, _DirectTensor]) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement read_outputs(event, output)")


class ParticleNetDirectProducer(OnnxDirectProducer):
    """Direct twin of ``ParticleNetSonicProducer``: same ``src``, same product."""

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)
        desc.add("src", cms.InputTag("particleNetInputs"), "ParticleNetInputProducer label")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.src = self.consumes(params.src)
        self.produces(doc="per-jet class scores, fields prob<class>")

    def fill_inputs(self, event: Any, input: dict[str, _DirectTensor]) -> None:
        arrays = event.get(self.src)
        for name in PARTICLENET_INPUTS:
            input[name].to_server(arrays[name])

    def read_outputs(self, event: Any, output: dict[str, _DirectTensor]) -> None:
        scores = output["softmax"].from_server()
        event.put({f"prob{c}": scores[:, i] for i, c in enumerate(PARTICLENET_CLASSES)})


class DeepMETDirectProducer(OnnxDirectProducer):
    """Direct twin of ``DeepMETSonicProducer``: same ``src``/``pfCands``, same product."""

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)
        desc.add("src", cms.InputTag("deepMETInputs"), "DeepMETInputProducer label")
        desc.add("pfCands", cms.InputTag("PFCands"), "the PF candidates the inputs came from")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.src = self.consumes(params.src)
        self.pfcands = self.consumes(params.pfCands, branches=["pt", "phi"])
        self.produces(doc="MET pt [GeV], phi [rad]")

    def fill_inputs(self, event: Any, input: dict[str, _DirectTensor]) -> None:
        inputs = event.get(self.src)
        input["pf_cont"].to_server(inputs["pf_cont"])
        input["pf_cat"].to_server(inputs["pf_cat"])

    def read_outputs(self, event: Any, output: dict[str, _DirectTensor]) -> None:
        weights = output["weights"].from_server()
        pt, phi = met_from_weights(weights[0], event.get(self.pfcands), event.get(self.src)["n"])
        event.put({"pt": pt, "phi": phi})


# ----------------------------------------------------------------------------------------
# CPU work and no-ops

_CHUNK = 1 << 16  # bytes hashed per call: large enough that hashlib releases the GIL
_calibration: dict[str, float] = {}


def hash_rate() -> float:
    """Bytes per second that ``hashlib.sha256`` digests here (measured once per process)."""
    if "rate" not in _calibration:
        buffer = bytes(_CHUNK)
        best = float("inf")
        for _ in range(5):  # best of 5: the machine may be shared
            t0 = time.perf_counter()
            for _ in range(32):
                hashlib.sha256(buffer).digest()
            best = min(best, time.perf_counter() - t0)
        _calibration["rate"] = 32 * _CHUNK / best
    return _calibration["rate"]


class BenchCPUProducer(EDProducer):
    """A fixed CPU cost per event: ``cpuTime`` milliseconds of SHA-256 hashing.

    The amount of work (bytes hashed) is calibrated once per process at ``begin_job``, so
    every event costs the same CPU; a busy machine stretches it in wall time, as it would
    real reconstruction code. hashlib releases the GIL, so with ``numberOfThreads`` > 1
    two events burn in parallel on two cores. ``mode = "sleep"`` sleeps ``cpuTime``
    instead: CPU work that happens elsewhere (many client jobs on a 2-core machine).
    Product: int, the number of 64 KiB chunks hashed (0 when sleeping).
    """

    thread_safe = True

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("cpuTime", cms.double(5.0), "CPU time per event, milliseconds")
        desc.add("mode", cms.untracked.string("burn"), "burn | sleep")

    def __init__(self, params: Any) -> None:
        if params.mode not in ("burn", "sleep"):
            raise ConfigurationError(f"{self.label}: mode '{params.mode}' is not one of burn, sleep")
        self.cpu_time = params.cpuTime * 1e-3
        self.sleep = params.mode == "sleep"
        self.chunks = 0
        self._buffer = bytes(_CHUNK)
        self.produces(doc="chunks hashed")

    def begin_job(self) -> None:
        self.chunks = 0 if self.sleep else max(1, round(self.cpu_time * hash_rate() / _CHUNK))

    def produce(self, event: Any) -> None:
        if self.sleep:
            time.sleep(self.cpu_time)
        for _ in range(self.chunks):
            hashlib.sha256(self._buffer).digest()
        event.put(self.chunks)


class BenchNoOpProducer(EDProducer):
    """Does nothing and puts nothing: the framework's own cost per module call.

    Not thread-safe on purpose: it runs on the scheduler's thread, so the measured cost is
    the scheduler's, not a thread hand-off's.
    """

    def produce(self, event: Any) -> None:
        pass


class BenchBranchReader(EDAnalyzer):
    """Consumes whole collections so that the source reads them; touches nothing else.

    Parameter ``collections``: names (``Jet``, ``PFCands``...), every field read.
    """

    thread_safe = True

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("collections", cms.vstring(), "source collections to read (all fields)")

    def __init__(self, params: Any) -> None:
        self.tokens = [self.consumes(name) for name in params.collections]

    def analyze(self, event: Any) -> None:
        for token in self.tokens:
            event.get(token)


class TinySonicProducer(SonicEDProducer):
    """The smallest SONIC request: ``width`` float32 values (the event number) to model ``x -> y``.

    For the latency and overhead benchmarks with the ``tiny`` identity model that
    ``framework.bench`` writes. Product: float, the first returned value (checked to equal
    what was sent, so a broken server cannot pass unnoticed).
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)
        desc.add("width", cms.uint32(4), "float32 values per request")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.width = params.width
        self.produces(doc="the value echoed back")

    def acquire(self, event: Any, input: Any) -> None:
        input["x"].to_server(np.full((1, self.width), event.id.event, np.float32))

    def produce(self, event: Any, output: Any) -> None:
        y = output["y"].from_server()
        if y.shape != (1, self.width) or y[0, 0] != np.float32(event.id.event):
            raise ExternalFailure(f"{self.label}: the tiny model returned {y.ravel()[:4]} for event {event.id}")
        event.put(float(y[0, 0]))


class BenchStartBarrier(EDAnalyzer):
    """Holds ``begin_job`` until a file exists, so several jobs start their events together.

    Touches ``<directory>/ready.<pid>`` first (the controller counts them), then waits for
    ``<directory>/go`` (polled every 10 ms, up to ``timeout`` seconds).

    Raises (begin_job):
        ExternalFailure: ``go`` did not appear in time.
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("directory", cms.untracked.string(""), "barrier folder; '' = no barrier")
        desc.add("timeout", cms.untracked.double(300.0), "seconds to wait for the go file")

    def __init__(self, params: Any) -> None:
        self.directory = pathlib.Path(params.directory) if params.directory else None
        self.timeout = params.timeout

    def begin_job(self) -> None:
        if self.directory is None:
            return
        (self.directory / f"ready.{os.getpid()}").touch()
        deadline = time.monotonic() + self.timeout
        while not (self.directory / "go").exists():
            if time.monotonic() > deadline:
                raise ExternalFailure(f"{self.label}: no {self.directory / 'go'} after {self.timeout:g} s")
            time.sleep(0.01)

    def analyze(self, event: Any) -> None:
        pass


# ----------------------------------------------------------------------------------------
# Helpers of framework.bench that need tritonclient directly (outside framework.sonic, no
# file of framework/ may import it: tests/test_layering.py)


def write_edited_repository(folder: pathlib.Path, models: Sequence[str], edit: Callable[[Any], None],
                            source: pathlib.Path | None = None) -> pathlib.Path:
    """A copy of ``models`` of ``source`` (default ``data/models``) with ``edit(config)`` applied.

    Version folders are symlinks; only ``config.pbtxt`` is rewritten. ``edit`` receives the
    parsed ``ModelConfig`` protobuf and changes it in place.
    """
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    source = source or default_model_repository()
    for name in models:
        target = folder / name
        target.mkdir(parents=True, exist_ok=True)
        for entry in (source / name).iterdir():
            if entry.name != "config.pbtxt" and not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry.absolute())
        config = text_format.Parse((source / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        edit(config)
        (target / "config.pbtxt").write_text(text_format.MessageToString(config))
    return folder


def bare_async_loop(address: str, in_flight: int, requests: int, width: int = 4, timeout: float = 300.0) -> dict[str, Any]:
    """``requests`` tritonclient ``async_infer`` calls to ``tiny``, ``in_flight`` at a time.

    Returns ``{"throughput"`` (completions/s after the first ``in_flight``), ``"latency"``,
    ``"errors"}``.

    Raises:
        RuntimeError: not all requests completed within ``timeout`` seconds.
    """
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)
    x = np.zeros((1, width), np.float32)
    slots = threading.Semaphore(in_flight)
    finished = threading.Event()
    stamps: list[float] = []
    latencies: list[float] = []
    errors: list[Any] = []
    lock = threading.Lock()

    def done(start: float, result: Any, error: Any) -> None:
        now = time.perf_counter()
        with lock:
            stamps.append(now)
            latencies.append(now - start)
            if error is not None:
                errors.append(error)
            if len(stamps) == requests:
                finished.set()
        slots.release()

    try:
        for _ in range(requests):
            if not slots.acquire(timeout=timeout):  # a lost callback must not hang the benchmark
                raise RuntimeError(f"bare async loop: no request completed for {timeout:g} s")
            tensor = grpcclient.InferInput("x", [1, width], "FP32")
            tensor.set_data_from_numpy(x)
            start = time.perf_counter()
            client.async_infer("tiny", [tensor], lambda result, error, s=start: done(s, result, error))
        if not finished.wait(timeout):
            raise RuntimeError(f"bare async loop: {len(stamps)} of {requests} requests done after {timeout:g} s")
    finally:
        client.close()
    steady = stamps[in_flight:] if len(stamps) - in_flight >= 2 else stamps
    return {"throughput": (len(steady) - 1) / (steady[-1] - steady[0]), "latency": _percentiles(latencies[in_flight:]),
            "errors": len(errors)}


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    a = np.asarray(values)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(a.max())}


class BenchInputDumper(EDAnalyzer):
    """Saves every event's model inputs (a dict of arrays) to one ``.npz`` at ``end_job``.

    The file holds arrays named ``<i>/<input name>``, ``i`` counting the analyzed events
    from 0: the request format of the GPU benchmarks' load generator
    (``framework/bench/_load.py``), so that bare clients send real events' inputs.
    Entries of the product that are not arrays (counts) are left out.
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("src", cms.InputTag("particlenetInputs"), "the input producer's product (dict of arrays)")
        desc.add("fileName", cms.untracked.string("inputs.npz"), "output .npz")

    def __init__(self, params: Any) -> None:
        self.src = self.consumes(params.src)
        self.path = pathlib.Path(params.fileName)
        self.arrays: dict[str, np.ndarray] = {}
        self.count = 0

    def analyze(self, event: Any) -> None:
        product = event.get(self.src)
        for name, value in product.items():
            if isinstance(value, np.ndarray):
                self.arrays[f"{self.count}/{name}"] = np.array(value)
        self.count += 1

    def end_job(self) -> None:
        np.savez(self.path, **self.arrays)
