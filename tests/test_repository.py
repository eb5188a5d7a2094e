"""Standard Triton model repositories served unchanged (framework/serving/_repository.py), and the
client's model checks (framework/sonic/_model_config.py), with CMS's own models.

CMS's repositories come from ``$CMSSW_SEARCH_PATH`` (default ``../shared/models`` beside the checkout, CMSSW's
data layout; see its README); the tests that need them are skipped where they are absent.
Real-server tests share one server per kind of repository (module-scoped fixtures).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import os
import pathlib
import shutil
import types

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from framework.io.samples import shared_folder
from framework.serving import LocalTritonServer, ModelChecksumError, ModelRepositoryError, read_model_config
from framework.serving._repository import generate_model, translate_config
from framework.serving.model_spec import parse_model_config, run_ragged
from framework.serving.onnx_backend import session_providers
from framework.serving.torch_backend import ordered_by_index
from framework.sonic import TritonClient, client_description
from framework.utilities import ExternalFailure

# ../shared/models beside the checkout (framework.io.samples.shared_folder; PYSONIC_SHARED= hides it)
SHARED_MODELS = (shared_folder() or pathlib.Path("/nonexistent")) / "models"
SEARCH_PATH = [pathlib.Path(p) for p in os.environ.get("CMSSW_SEARCH_PATH", str(SHARED_MODELS)).split(":") if p]


def find_in_path(relative: str) -> pathlib.Path:
    """``relative`` resolved on ``$CMSSW_SEARCH_PATH`` as a FileInPath; skips the test if absent."""
    for folder in SEARCH_PATH:
        if (folder / relative).exists():
            return folder / relative
    pytest.skip(f"{relative} not found on CMSSW_SEARCH_PATH ({':'.join(map(str, SEARCH_PATH))})")


def btag_repository() -> pathlib.Path:
    return find_in_path("RecoBTag/Combined/data/models")


def sonic_repository() -> pathlib.Path:
    return find_in_path("HeterogeneousCore/SonicTriton/data/models")


def tree_digest(folder: pathlib.Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file below ``folder`` (and the folder's listing)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(folder.rglob("*"))
    }


def client_params(model: str, **params):
    # Required as in CMSSW: timeout (and modelConfigPath, given by each test).
    return client_description().validate({"modelName": model, "timeout": 10, **params}, f"test client of '{model}'")


def write_onnx_model(path: pathlib.Path, batch: bool, factor: float = 2.0) -> None:
    """A tiny ONNX model: y = factor x, x float32 of shape (batch, 3) or (3,)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    shape: list[str | int] = ["batch", 3] if batch else [3]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["y"])],
        "double",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [helper.make_tensor("two", TensorProto.FLOAT, [], [factor])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)


# ----------------------------------------------------------------------------------------
# Translation, without a server


def test_onnx_config_translated_for_the_python_backend(caplog):
    folder = btag_repository() / "particlenet"
    with caplog.at_level(logging.INFO, logger="pysonic.serving"):
        config, runner = translate_config("particlenet", read_model_config(folder))
    assert runner == "onnx" and config.backend == "python" and not config.platform
    assert config.parameters["runner"].string_value == "onnx"
    assert config.parameters["onnx_file"].string_value == "model.onnx"
    # the agent block goes, its sum stays where ModelVersioning reads it
    assert not config.HasField("model_repository_agents")
    assert config.parameters["checksum:MD5:1/model.onnx"].string_value == "3bff150e279b1c942ea38e946135069c"
    assert not config.HasField("optimization") and "optimization block" in caplog.text
    # the rest is Triton's to honour, unchanged
    assert config.max_batch_size == 160 and list(config.dynamic_batching.preferred_batch_size) == [80]
    assert list(config.input[0].dims) == [2, -1] and config.output[0].label_filename == "particlenet_labels.txt"


def test_torchscript_config_translated():
    config, runner = translate_config("particlenet_PT", read_model_config(btag_repository() / "particlenet_PT"))
    assert runner == "torch" and config.parameters["torchscript_file"].string_value == "model.pt"
    assert config.parameters["checksum:MD5:1/model.pt"].string_value == "a5b29f593329a6ecc67991b711ad7d07"


def test_instances_and_device_kind_override_every_group():
    config = read_model_config(btag_repository() / "particlenet")
    config, _ = translate_config("particlenet", config, instances=3, kind="KIND_GPU")
    assert [(g.count, g.kind) for g in config.instance_group] == [(3, model_config_pb2.ModelInstanceGroup.KIND_GPU)]


@pytest.mark.parametrize(
    ("platform", "needs"), [("tensorflow_savedmodel", "TensorFlow"), ("tensorrt_plan", "TensorRT"), ("ensemble", "")]
)
def test_unsupported_platform_is_one_line(tmp_path, platform, needs):
    (tmp_path / "tagger" / "1").mkdir(parents=True)
    (tmp_path / "tagger" / "config.pbtxt").write_text(f'name: "tagger"\nplatform: "{platform}"\nmax_batch_size: 1\n')
    server = LocalTritonServer(tmp_path, work_dir=tmp_path / "work")
    with pytest.raises(ModelRepositoryError) as info:
        server.start()  # refused before any process is launched
    message = str(info.value)
    assert "\n" not in message and "'tagger'" in message and platform in message and needs in message
    assert server.pid is None


def test_checksum_mismatch_refuses_the_model(tmp_path):
    copy = tmp_path / "ragged_io"
    shutil.copytree(sonic_repository() / "ragged_io", copy)
    onnx_file = copy / "1" / "model.onnx"
    data = bytearray(onnx_file.read_bytes())
    data[len(data) // 2] ^= 0x01  # one byte changed
    onnx_file.write_bytes(bytes(data))
    found = hashlib.md5(bytes(data)).hexdigest()
    server = LocalTritonServer(tmp_path, work_dir=tmp_path / "work")
    with pytest.raises(ModelChecksumError) as info:
        server.start()
    message = str(info.value)
    assert "\n" not in message and str(onnx_file) in message
    assert "2b69fedb92d0a1440e0068dfc31cd10c" in message and found in message


def test_generated_models_are_cached_by_content(tmp_path):
    source = tmp_path / "repo" / "double"
    write_onnx_model(source / "1" / "model.onnx", batch=True)
    first = generate_model("double", source, tmp_path / "cache")
    assert generate_model("double", source, tmp_path / "cache") == first  # reused
    write_onnx_model(source / "2" / "model.onnx", batch=True)  # a new version: new content
    assert generate_model("double", source, tmp_path / "cache") != first
    assert sorted(p.name for p in source.rglob("*")) == ["1", "2", "model.onnx", "model.onnx"]  # nothing written there


def test_ordered_by_index_follows_triton_pytorch_naming():
    assert ordered_by_index(["b__1", "a__0", "c__2"]) == ["a__0", "b__1", "c__2"]
    assert ordered_by_index(["pf_points", "pf_mask"]) == ["pf_points", "pf_mask"]  # config order


def test_gpu_instances_choose_the_cuda_provider():
    assert session_providers(["CPUExecutionProvider"], None) == ["CPUExecutionProvider"]
    assert session_providers(["CUDAExecutionProvider", "CPUExecutionProvider"], 1)[0] == (
        "CUDAExecutionProvider",
        {"device_id": 1},
    )
    with pytest.raises(RuntimeError, match="pip install onnxruntime-gpu"):
        session_providers(["CPUExecutionProvider"], 0, "m")


def test_runner_choice_on_gpu_instances():
    from framework.serving.python_backend import choose_runner
    from framework.utilities import default_model_repository

    def spec(folder):
        config, _ = translate_config(folder.name, read_model_config(folder), kind="KIND_GPU")
        return parse_model_config(json_format.MessageToDict(config, preserving_proto_field_name=True))

    # CMS's ONNX model: onnxruntime (its CUDA provider); its TorchScript twin: torch
    assert choose_runner(spec(btag_repository() / "particlenet"), "GPU") == "onnx"
    assert choose_runner(spec(btag_repository() / "particlenet_PT"), "GPU") == "torch"
    # the stand-ins ask for runner auto: their TorchScript file on a GPU, the ONNX file on a CPU
    standin = spec(default_model_repository() / "particlenet_ak4")
    assert choose_runner(standin, "GPU") == "torch" and choose_runner(standin, "CPU") == "onnx"


def test_ragged_inputs_concatenated_and_outputs_scattered():
    config = read_model_config(sonic_repository() / "ragged_io")
    spec = parse_model_config(json_format.MessageToDict(config, preserving_proto_field_name=True))
    assert spec.ragged == {"INPUT0"} and spec.scatter == {"OUTPUT0": "INPUT0"}
    seen = []

    def identity(batch):
        seen.append(batch["INPUT0"].shape)
        return {"OUTPUT0": batch["INPUT0"] * 1}

    requests = [{"INPUT0": np.arange(n, dtype=np.float32)[None, :] + 10 * n} for n in (2, 4, 1, 3)]
    results = run_ragged(spec, identity, requests)
    assert seen == [(10,)]  # one call, one flat array
    for request, result in zip(requests, results, strict=True):
        np.testing.assert_array_equal(result["OUTPUT0"], request["INPUT0"])


# ----------------------------------------------------------------------------------------
# CMS's repositories on a real server


@pytest.fixture(scope="module")
def btag_digest():
    """The digest of RecoBTag's repository before the module; compared after its servers stop."""
    repository = btag_repository()
    before = tree_digest(repository)
    yield before
    assert tree_digest(repository) == before


@pytest.fixture(scope="module")
def btag_server(start_server, btag_digest):
    return start_server(btag_repository(), ["particlenet", "particlenet_PT"], timeout=120)


def particlenet_inputs(rng, jets=3, particles=40, svs=4):
    def block(channels, length, mask):
        values = rng.normal(size=(jets, channels, length)).astype(np.float32)
        return values * mask if channels > 1 else mask

    pf_mask = np.ones((jets, 1, particles), np.float32)
    pf_mask[0, :, 30:] = 0  # a shorter jet, zero-padded
    sv_mask = np.ones((jets, 1, svs), np.float32)
    return {
        "pf_points": block(2, particles, pf_mask),
        "pf_features": block(25, particles, pf_mask),
        "pf_mask": pf_mask,
        "sv_points": block(2, svs, sv_mask),
        "sv_features": block(11, svs, sv_mask),
        "sv_mask": sv_mask,
    }


def infer(server, model, inputs, outputs, version=""):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        tensors = []
        for name, array in inputs.items():
            tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        requested = [grpcclient.InferRequestedOutput(n) for n in outputs]
        result = client.infer(model, tensors, model_version=version, outputs=requested)
        return {n: result.as_numpy(n) for n in outputs}
    finally:
        client.close()


def test_cms_onnx_and_torchscript_models_agree(btag_server):
    inputs = particlenet_inputs(np.random.default_rng(16))
    onnx_scores = infer(btag_server, "particlenet", inputs, ["softmax"])["softmax"]
    names = ordered_by_index(read_model_config(btag_repository() / "particlenet_PT").input[i].name for i in range(6))
    torch_inputs = {name: inputs[name.split("__")[0]] for name in names}
    torch_scores = infer(btag_server, "particlenet_PT", torch_inputs, ["softmax__0"])["softmax__0"]
    assert onnx_scores.shape == (3, 20) and np.all(onnx_scores > 0)
    np.testing.assert_allclose(onnx_scores.sum(axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(torch_scores, onnx_scores, atol=1e-5)


def test_model_versioning_accepts_the_served_model(btag_server):
    config_path = btag_repository() / "particlenet" / "config.pbtxt"
    client = TritonClient(client_params("particlenet", modelConfigPath=str(config_path)), debug_name="pnTagger")
    try:
        client.connect(btag_server.grpc_address)
        assert client.max_batch_size == 160 and list(client.inputs)[0] == "pf_points"
    finally:
        client.close()


def test_model_versioning_mismatch_stops_the_job(btag_server, tmp_path):
    local = tmp_path / "particlenet" / "config.pbtxt"
    local.parent.mkdir()
    text = (btag_repository() / "particlenet" / "config.pbtxt").read_text()
    local.write_text(text.replace("3bff150e279b1c942ea38e946135069c", "0" * 32))
    client = TritonClient(client_params("particlenet", modelConfigPath=str(local)), debug_name="pnTagger")
    try:
        with pytest.raises(ExternalFailure) as info:
            client.connect(btag_server.grpc_address)
    finally:
        client.close()
    message = str(info.value)
    assert info.value.category == "ModelVersioning" and "\n" not in message
    assert "particlenet" in message and btag_server.grpc_address in message and "1/model.onnx" in message
    # the server as ServerInfo.describe() names it, once ("the server server 'remote'" before)
    assert f": {btag_server.grpc_address} serves files whose checksums differ" in message
    assert "0" * 32 in message and "3bff150e279b1c942ea38e946135069c" in message


def test_local_config_disagreeing_with_the_server_is_one_line(btag_server, tmp_path):
    local = tmp_path / "particlenet" / "config.pbtxt"
    local.parent.mkdir()
    config = read_model_config(btag_repository() / "particlenet")
    config.input[1].dims[0] = 24
    local.write_text(text_format.MessageToString(config))
    client = TritonClient(client_params("particlenet", modelConfigPath=str(local)))
    try:
        with pytest.raises(ExternalFailure, match=r"input 'pf_features' is FP32 \[25, -1\] on the server"):
            client.connect(btag_server.grpc_address)
    finally:
        client.close()


def test_outputs_subset_and_unknown_name(btag_server):
    from framework.utilities import ConfigurationError

    config = str(btag_repository() / "particlenet" / "config.pbtxt")
    client = TritonClient(client_params("particlenet", modelConfigPath=config, outputs=["softmax"]))
    try:
        client.connect(btag_server.grpc_address)
        assert client.requested_outputs == ("softmax",)
        bad = TritonClient(client_params("particlenet", modelConfigPath=config, outputs=["probabilities"]))
        with pytest.raises(ConfigurationError, match="probabilities"):
            bad.connect(btag_server.grpc_address)
        bad.close()
    finally:
        client.close()


@pytest.fixture(scope="module")
def sonic_server(start_server):
    repository = sonic_repository()
    before = tree_digest(repository)
    server = start_server(repository, ["ragged_io"], timeout=120)
    yield server
    assert tree_digest(repository) == before


def test_ragged_batching_reaches_the_model_in_one_execution(sonic_server):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(sonic_server.grpc_address)
    lengths = (2, 4, 1, 3)
    entries = [np.arange(n, dtype=np.float32)[None, :] + 0.5 * n for n in lengths]

    def send(entry):
        tensor = grpcclient.InferInput("INPUT0", list(entry.shape), "FP32")
        tensor.set_data_from_numpy(entry)
        return client.infer("ragged_io", [tensor]).as_numpy("OUTPUT0")

    try:
        before = client.get_inference_statistics("ragged_io", as_json=True)["model_stats"][0]
        with concurrent.futures.ThreadPoolExecutor(len(entries)) as pool:
            results = list(pool.map(send, entries))
        after = client.get_inference_statistics("ragged_io", as_json=True)["model_stats"][0]
    finally:
        client.close()
    for entry, result in zip(entries, results, strict=True):
        assert result.shape == entry.shape
        np.testing.assert_array_equal(result, entry)
    assert int(after.get("inference_count", 0)) - int(before.get("inference_count", 0)) == 4
    assert int(after.get("execution_count", 0)) - int(before.get("execution_count", 0)) == 1


@pytest.fixture(scope="module")
def own_repository(tmp_path_factory):
    """A user's repository: a max_batch_size 0 model, and a version folder with model.onnx only."""
    root = tmp_path_factory.mktemp("own") / "models"
    write_onnx_model(root / "fixed" / "1" / "model.onnx", batch=False)
    (root / "fixed" / "config.pbtxt").write_text(
        'name: "fixed"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [3] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [3] }]\n'
    )
    write_onnx_model(root / "autocompleted" / "1" / "model.onnx", batch=True)
    # two versions, both served (version_policy all), each with its checksum
    sums = []
    for version, factor in ((1, 2.0), (2, 3.0)):
        path = root / "versioned" / str(version) / "model.onnx"
        write_onnx_model(path, batch=True, factor=factor)
        sums.append(
            f'parameters {{ key: "MD5:{version}/model.onnx" value: "{hashlib.md5(path.read_bytes()).hexdigest()}" }}'
        )
    (root / "versioned" / "config.pbtxt").write_text(
        'name: "versioned"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\nversion_policy { all {} }\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [3] }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [3] }]\n'
        f'model_repository_agents {{ agents [{{ name: "checksum" {" ".join(sums)} }}] }}\n'
    )
    return root


@pytest.fixture(scope="module")
def own_server(start_server, own_repository):
    before = tree_digest(own_repository)
    yield start_server(own_repository)
    assert tree_digest(own_repository) == before


def test_model_without_batch_dimension(own_server):
    x = np.array([1.0, -2.0, 3.5], np.float32)
    np.testing.assert_array_equal(infer(own_server, "fixed", {"x": x}, ["y"])["y"], 2 * x)


def test_config_completed_from_the_onnx_file(own_server):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(own_server.grpc_address)
    try:
        config = client.get_model_config("autocompleted", as_json=True)["config"]
    finally:
        client.close()
    assert int(config["max_batch_size"]) == 4
    assert [(t["name"], [int(d) for d in t["dims"]]) for t in config["input"]] == [("x", [3])]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(infer(own_server, "autocompleted", {"x": x}, ["y"])["y"], 2 * x)


def test_version_folders_and_policy(own_server):
    x = np.ones((1, 3), np.float32)
    np.testing.assert_array_equal(infer(own_server, "versioned", {"x": x}, ["y"], version="1")["y"], 2 * x)
    np.testing.assert_array_equal(infer(own_server, "versioned", {"x": x}, ["y"], version="2")["y"], 3 * x)
    np.testing.assert_array_equal(infer(own_server, "versioned", {"x": x}, ["y"])["y"], 3 * x)  # latest


def test_model_versioning_checks_the_pinned_version_only(own_server, own_repository, tmp_path):
    local = tmp_path / "versioned" / "config.pbtxt"
    local.parent.mkdir()
    config = read_model_config(own_repository / "versioned")
    config.model_repository_agents.agents[0].parameters["MD5:2/model.onnx"] = "f" * 32  # version 2 differs
    local.write_text(text_format.MessageToString(config))
    pinned = TritonClient(client_params("versioned", modelVersion="1", modelConfigPath=str(local)))
    try:
        pinned.connect(own_server.grpc_address)  # version 1's sums agree
    finally:
        pinned.close()
    latest = TritonClient(client_params("versioned", modelConfigPath=str(local)))
    try:
        with pytest.raises(ExternalFailure, match="2/model.onnx") as info:
            latest.connect(own_server.grpc_address)  # the server's latest: version 2
    finally:
        latest.close()
    assert info.value.category == "ModelVersioning" and "1/model.onnx" not in str(info.value)


def test_one_fallback_serves_models_of_two_repositories(tmp_path):
    from framework.service._fallback import FallbackServer

    paths = {
        "ragged_io": sonic_repository() / "ragged_io" / "config.pbtxt",
        "particlenet_AK8_MD-2prong": btag_repository() / "particlenet_AK8_MD-2prong" / "config.pbtxt",
    }
    params = types.SimpleNamespace(enable=True, verbose=False, device="cpu", instances=0, wait=120, modelRepository="")
    fallback = FallbackServer(params, paths)
    try:
        fallback.ensure(["ragged_io"])
        fallback.ensure(["particlenet_AK8_MD-2prong"])  # loaded into the running server
        assert fallback.server is not None
        assert fallback.server.ready_models() == ["particlenet_AK8_MD-2prong", "ragged_io"]
        assert fallback.server.model_sources["ragged_io"] == paths["ragged_io"].parent
    finally:
        fallback.stop()
