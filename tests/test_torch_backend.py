"""The torch runner (the GPU path) checked on the CPU: same outputs as the ONNX runner.

One real ``tritonserver`` serves every model twice from a copy of ``data/models``: as
``<name>`` with ``runner: onnx`` and as ``<name>_torch`` with ``runner: torch`` (the
TorchScript file, tensors through DLPack, as on a ``KIND_GPU`` instance). Inputs come from
the real PFNano events through the modules' input builders (FACILE's channels are
synthetic by design). Several requests are sent at once so that the dynamic batcher
merges them in both runners. Needs torch (the ``test`` extra installs the CPU build).
"""

from __future__ import annotations

import concurrent.futures
import pathlib
from collections.abc import Callable
from typing import Any

import awkward as ak
import numpy as np
import pytest
import uproot

from framework import ConfigurationError
from framework.io.samples import locate_sample
from framework.serving import LocalTritonServer, read_model_config, resolve_device
from framework.serving.model_spec import parse_model_config, run_batched
from framework.serving.python_backend import choose_runner
from framework.serving.testing import write_edited_repository
from modules.deepmet_inputs import build_deepmet_inputs
from modules.deeptau_inputs import build_deeptau_inputs
from modules.facile_inputs import build_facile_inputs
from modules.particlenet_inputs import build_particlenet_inputs

torch = pytest.importorskip("torch")

REPO = pathlib.Path(__file__).resolve().parent.parent
MODELS = ("particlenet_ak4", "deepmet", "deeptau", "facile")
EVENTS = 4  # real events per model, sent concurrently


def _runner(name: str) -> Callable[[Any], None]:
    def edit(config: Any) -> None:
        config.parameters["runner"].string_value = name

    return edit


@pytest.fixture(scope="module")
def twin_repository(tmp_path_factory) -> pathlib.Path:
    """Every model as ``<name>`` (ONNX runner) and ``<name>_torch`` (torch runner)."""
    folder = tmp_path_factory.mktemp("twins")
    write_edited_repository(folder, MODELS, _runner("onnx"))
    write_edited_repository(folder, {f"{name}_torch": name for name in MODELS}, _runner("torch"))
    return folder


@pytest.fixture(scope="module")
def server(twin_repository):
    with LocalTritonServer(twin_repository) as running:
        yield running


@pytest.fixture(scope="module")
def real_inputs() -> dict[str, list[dict[str, np.ndarray]]]:
    """Per model, ``EVENTS`` requests built from real pfnano.root events."""
    tree = uproot.open(locate_sample("pfnano.root"))["Events"]
    arrays = tree.arrays(
        filter_name=["run", "luminosityBlock", "event", "Jet_*", "JetPFCands_*", "PFCands_*"], entry_stop=EVENTS
    )

    def collection(prefix: str) -> ak.Array:
        return ak.zip({f[len(prefix) + 1 :]: arrays[f] for f in arrays.fields if f.startswith(prefix + "_")})

    jets, jet_pf, pf = collection("Jet"), collection("JetPFCands"), collection("PFCands")
    out: dict[str, list[dict[str, np.ndarray]]] = {name: [] for name in MODELS}
    for i in range(EVENTS):
        event_id = (int(arrays.run[i]), int(arrays.luminosityBlock[i]), int(arrays.event[i]))
        out["particlenet_ak4"].append(build_particlenet_inputs(jets[i], jet_pf[i], pf[i]))
        out["deepmet"].append(build_deepmet_inputs(pf[i])[0])
        out["deeptau"].append(build_deeptau_inputs(None, pf[i], jets[i], min_taus=3, event_id=event_id))
        out["facile"].append({"rechit_inputs": build_facile_inputs(event_id, 2000)})
    return out


def _infer_all(address: str, model: str, requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """All requests in flight at once (the dynamic batcher may merge them)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    client = grpcclient.InferenceServerClient(address)
    try:
        outputs = [o["name"] for o in client.get_model_metadata(model, as_json=True)["outputs"]]

        def one(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            inputs = []
            for name, array in arrays.items():
                tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
                tensor.set_data_from_numpy(np.ascontiguousarray(array))
                inputs.append(tensor)
            result = client.infer(
                model, inputs, outputs=[grpcclient.InferRequestedOutput(n) for n in outputs], client_timeout=120
            )
            return {n: result.as_numpy(n) for n in outputs}

        with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
            return list(pool.map(one, requests))
    finally:
        client.close()


@pytest.mark.parametrize("model", MODELS)
def test_torch_runner_equals_onnx_runner(server, real_inputs, model):
    requests = real_inputs[model]
    onnx = _infer_all(server.grpc_address, model, requests)
    torch_out = _infer_all(server.grpc_address, f"{model}_torch", requests)
    for request, a, b in zip(requests, onnx, torch_out, strict=True):
        rows = len(next(iter(request.values())))
        for name in a:
            assert a[name].shape == b[name].shape and a[name].shape[0] == rows
            assert a[name].dtype == b[name].dtype == np.float32
            assert np.all(np.isfinite(b[name])) and np.any(b[name] != 0)  # values, not only success
            np.testing.assert_allclose(b[name], a[name], rtol=1e-4, atol=1e-5)


def test_run_batched_with_torch_ops():
    """The batching logic on torch tensors: merged call, split rows, bad request alone."""
    from framework.serving.torch_backend import TorchOps

    spec = parse_model_config(
        {
            "name": "m",
            "max_batch_size": 8,
            "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [2]}],
            "output": [{"name": "y", "data_type": "TYPE_FP64", "dims": [2]}],
        }
    )
    calls = []

    def run(inputs):
        calls.append(len(inputs["x"]))
        return {"y": inputs["x"] * 2}

    good = [{"x": torch.ones(1, 2, dtype=torch.float64)}, {"x": torch.full((3, 2), 3.0)}]
    results = run_batched(spec, run, [good[0], {"x": torch.ones(2, 5)}, good[1]], TorchOps())
    assert calls == [4]  # one call for both valid requests, cast to float32 on the way in
    assert results[0]["y"].dtype == torch.float64 and results[0]["y"].shape == (1, 2)
    assert torch.all(results[2]["y"] == 6) and "expected ('batch', 2)" in str(results[1])


def test_runner_choice():
    spec = parse_model_config({"name": "m", "parameters": {"runner": {"string_value": "auto"}}})
    assert choose_runner(spec, "GPU") == "torch" and choose_runner(spec, "CPU") == "onnx"
    bad = parse_model_config({"name": "m", "parameters": {"runner": {"string_value": "tensorrt"}}})
    with pytest.raises(ValueError, match="runner='tensorrt' is not one of auto, onnx, torch"):
        choose_runner(bad, "CPU")


def test_gpu_device_without_gpu_is_one_line(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # hides any GPU, so the test means the same everywhere
    assert resolve_device("auto") == "cpu"
    with pytest.raises(ConfigurationError, match="device='gpu' but no GPU is visible") as info:
        LocalTritonServer(REPO / "data" / "models", device="gpu")
    assert "\n" not in str(info.value)


@pytest.fixture
def tf32_flags_restored():
    """torch's TF32 settings are per process: put back what the test found."""
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
    )
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    torch.set_float32_matmul_precision(saved[2])


@pytest.mark.parametrize("value, allowed", [(None, False), ("false", False), ("True", True), ("1", True)])
def test_allow_tf32_parameter_reaches_torch(tf32_flags_restored, value, allowed):
    """The Python-backend model's initialisation (torch runner) sets torch's TF32 flags from
    ``parameters { key: "allow_tf32" }``: full fp32 unless the config asks (torch's own default
    lets cuDNN convolutions use TF32)."""
    from framework.serving.python_backend import TritonPythonModel

    torch.backends.cuda.matmul.allow_tf32 = not allowed  # the opposite of what the config asks
    torch.backends.cudnn.allow_tf32 = not allowed
    torch.set_float32_matmul_precision("high" if not allowed else "highest")
    from google.protobuf import json_format

    folder = REPO / "data" / "models" / "deepmet"
    config = read_model_config(folder)  # as Triton hands it to initialize: the config as JSON
    config.parameters["runner"].string_value = "torch"
    if value is not None:
        config.parameters["allow_tf32"].string_value = value
    model = TritonPythonModel()
    model.initialize(
        {
            "model_config": json_format.MessageToJson(config, preserving_proto_field_name=True),
            "model_repository": str(folder),
            "model_version": "1",
            "model_instance_kind": "CPU",
        }
    )
    assert torch.backends.cuda.matmul.allow_tf32 is allowed
    assert torch.backends.cudnn.allow_tf32 is allowed
    assert torch.get_float32_matmul_precision() == ("high" if allowed else "highest")
    assert model.runner_name == "torch" and model.runner.allow_tf32 is allowed


def test_bad_allow_tf32_is_one_line():
    from framework.serving.torch_backend import parse_allow_tf32

    spec = parse_model_config({"name": "m", "parameters": {"allow_tf32": {"string_value": "maybe"}}})
    with pytest.raises(ValueError, match=r"^model 'm': parameter allow_tf32='maybe' is not true or false$"):
        parse_allow_tf32(spec)
