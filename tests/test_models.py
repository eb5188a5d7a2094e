"""The ML model stand-ins: input builders, ONNX files, Triton configs and the ONNX backend.

Uses the real PFNano sample (10 events) and onnxruntime directly; no server is started
here (the backend's ``execute`` runs against a stand-in for ``triton_python_backend_utils``).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import awkward as ak
import numpy as np
import onnxruntime as ort
import pytest
import uproot
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from framework.serving import model_spec, python_backend
from modules.deepmet_inputs import (
    DEEPMET_CATEGORY_SIZES,
    DEEPMET_CONTINUOUS,
    build_deepmet_inputs,
    met_from_weights,
)
from modules.particlenet_inputs import PARTICLENET_CLASSES, PARTICLENET_FEATURES, build_particlenet_inputs

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "data" / "models"
MODEL_NAMES = ("particlenet_ak4", "deepmet")
N_FEAT = len(PARTICLENET_FEATURES)


def pfnano_path() -> Path:
    """The real PFNano sample, found as the main job finds it (framework.io.samples)."""
    from framework.io.samples import locate_sample

    return Path(locate_sample("pfnano.root"))


@pytest.fixture(scope="module")
def events():
    """Per-event collections as the framework hands them over: awkward records of one event."""
    tree = uproot.open(pfnano_path())["Events"]
    arrays = tree.arrays(
        filter_name=["Jet_pt", "Jet_eta", "Jet_phi", "Jet_mass", "JetPFCands_*", "PFCands_*", "RawMET_*"]
    )

    def collection(prefix):
        return ak.zip({f[len(prefix) + 1 :]: arrays[f] for f in arrays.fields if f.startswith(prefix + "_")})

    jets, jpf, pf = collection("Jet"), collection("JetPFCands"), collection("PFCands")
    return [
        dict(
            jet=jets[i],
            jet_pfcands=jpf[i],
            pfcands=pf[i],
            raw_met=(float(arrays.RawMET_pt[i]), float(arrays.RawMET_phi[i])),
        )
        for i in range(len(arrays))
    ]


@pytest.fixture(scope="module")
def sessions():
    return {
        name: ort.InferenceSession(str(MODELS / name / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
        for name in MODEL_NAMES
    }


def as_dict(collection) -> dict[str, np.ndarray]:
    return {f: np.asarray(collection[f]) for f in collection.fields}


# --------------------------------------------------------------------------- ParticleNet inputs


def test_particlenet_inputs_real_events(events):
    for ev in events:
        x = build_particlenet_inputs(ev["jet"], ev["jet_pfcands"], ev["pfcands"])
        n_jets = len(ev["jet"])
        assert x["pf_points"].shape == (n_jets, 2, 50)
        assert x["pf_features"].shape == (n_jets, N_FEAT, 50)
        assert x["pf_mask"].shape == (n_jets, 1, 50)
        assert all(a.dtype == np.float32 and np.all(np.isfinite(a)) for a in x.values())
        jet_idx = np.asarray(ev["jet_pfcands"].jetIdx)
        counts = np.minimum(np.bincount(jet_idx, minlength=n_jets), 50)
        mask = x["pf_mask"][:, 0, :]
        np.testing.assert_array_equal(mask.sum(axis=1), counts)
        np.testing.assert_array_equal(mask, np.arange(50) < counts[:, None])  # real slots come first
        assert np.all(x["pf_features"][np.broadcast_to(mask[:, None, :] == 0, x["pf_features"].shape)] == 0)
        rows = [PARTICLENET_FEATURES.index("deta"), PARTICLENET_FEATURES.index("dphi")]
        np.testing.assert_array_equal(x["pf_points"], x["pf_features"][:, rows, :])
        assert np.all(np.abs(x["pf_points"][:, 1]) <= np.pi)
        # Slot order is pT descending, and slot 0 is the jet's hardest constituent.
        pt_log = x["pf_features"][:, PARTICLENET_FEATURES.index("pt_log"), :]
        pf_pt = np.asarray(ev["pfcands"].pt)[np.asarray(ev["jet_pfcands"].pFCandsIdx)]
        for j in range(n_jets):
            assert np.all(np.diff(pt_log[j, : counts[j]]) <= 0)
            if counts[j]:
                assert pt_log[j, 0] == pytest.approx(np.log(pf_pt[jet_idx == j].max()), rel=1e-6)


def test_particlenet_inputs_accept_dicts(events):
    ev = events[0]
    from_awkward = build_particlenet_inputs(ev["jet"], ev["jet_pfcands"], ev["pfcands"])
    from_dicts = build_particlenet_inputs(as_dict(ev["jet"]), as_dict(ev["jet_pfcands"]), as_dict(ev["pfcands"]))
    for name in from_awkward:
        np.testing.assert_array_equal(from_awkward[name], from_dicts[name])


def synthetic_event(n_constituents: list[int], seed: int = 0):
    """Jets with the given constituent counts, each constituent its own PF candidate."""
    rng = np.random.default_rng(seed)
    n_pf = sum(n_constituents)
    pf = {
        "pt": rng.uniform(0.5, 50, n_pf), "eta": rng.uniform(-2, 2, n_pf), "phi": rng.uniform(-3, 3, n_pf),
        "mass": np.zeros(n_pf), "charge": rng.integers(-1, 2, n_pf), "pdgId": np.full(n_pf, 211),
        "pvAssocQuality": np.full(n_pf, 7), "lostInnerHits": np.zeros(n_pf), "d0": rng.normal(0, 0.1, n_pf),
        "d0Err": np.full(n_pf, 0.01), "dz": rng.normal(0, 0.1, n_pf), "dzErr": np.full(n_pf, 0.01),
        "puppiWeight": np.ones(n_pf),
    }  # fmt: skip
    jet_pf = {"jetIdx": np.repeat(np.arange(len(n_constituents)), n_constituents), "pFCandsIdx": rng.permutation(n_pf)}
    for name in ("btagEtaRel", "btagPtRatio", "btagPParRatio", "btagSip3dVal", "btagSip3dSig", "btagJetDistVal"):
        jet_pf[name] = np.zeros(n_pf)
    jets = {"pt": np.full(len(n_constituents), 100.0), "eta": np.zeros(len(n_constituents)),
            "phi": np.zeros(len(n_constituents)), "mass": np.full(len(n_constituents), 10.0)}  # fmt: skip
    return jets, jet_pf, pf


def test_particlenet_truncation_and_bad_indices():
    jets, jet_pf, pf = synthetic_event([60, 3])
    # An entry pointing at a jet that does not exist must be ignored.
    jet_pf = {k: np.append(v, 5 if k == "jetIdx" else 0) for k, v in jet_pf.items()}
    x = build_particlenet_inputs(jets, jet_pf, pf)
    np.testing.assert_array_equal(x["pf_mask"][:, 0].sum(axis=1), [50, 3])
    jet0_pt = np.sort(pf["pt"][jet_pf["pFCandsIdx"][jet_pf["jetIdx"] == 0]])[::-1]
    got = np.exp(x["pf_features"][0, PARTICLENET_FEATURES.index("pt_log")])
    np.testing.assert_allclose(got, jet0_pt[:50], rtol=1e-5)
    small = build_particlenet_inputs(jets, jet_pf, pf, n_constituents=2)
    assert small["pf_features"].shape == (2, N_FEAT, 2) and small["pf_mask"].sum() == 4


def test_particlenet_no_jets():
    jets, jet_pf, pf = synthetic_event([])
    x = build_particlenet_inputs(jets, jet_pf, pf)
    assert (
        x["pf_points"].shape == (0, 2, 50)
        and x["pf_features"].shape == (0, N_FEAT, 50)
        and x["pf_mask"].shape == (0, 1, 50)
    )


def test_particlenet_missing_field_is_named():
    jets, jet_pf, pf = synthetic_event([3])
    del pf["dzErr"]
    with pytest.raises(KeyError, match="dzErr"):
        build_particlenet_inputs(jets, jet_pf, pf)


# --------------------------------------------------------------------------- DeepMET inputs


def test_deepmet_inputs_real_events(events):
    for ev in events:
        x, n = build_deepmet_inputs(ev["pfcands"])
        assert n == len(ev["pfcands"]) <= 4500
        assert x["pf_cont"].shape == (1, 4500, len(DEEPMET_CONTINUOUS)) and x["pf_cont"].dtype == np.float32
        assert x["pf_cat"].shape == (1, 4500, 3) and x["pf_cat"].dtype == np.int32
        assert np.all(np.isfinite(x["pf_cont"]))
        assert not x["pf_cont"][0, n:].any() and not x["pf_cat"][0, n:].any()
        cat = x["pf_cat"][0, :n]
        assert np.all(cat >= 1) and np.all(cat < np.array(DEEPMET_CATEGORY_SIZES))
        np.testing.assert_allclose(np.exp(x["pf_cont"][0, :n, 0]), np.asarray(ev["pfcands"].pt), rtol=1e-5)


def test_deepmet_truncation_keeps_hardest():
    pf = {"pt": np.array([5.0, 1.0, 9.0, 3.0, 7.0, 2.0]), "phi": np.linspace(-3, 3, 6), "eta": np.zeros(6),
          "mass": np.zeros(6), "d0": np.zeros(6), "dz": np.zeros(6), "puppiWeight": np.ones(6),
          "charge": np.zeros(6, int), "pdgId": np.full(6, 22), "pvAssocQuality": np.full(6, 7)}  # fmt: skip
    x, n = build_deepmet_inputs(pf, max_candidates=4)
    assert n == 4 and x["pf_cont"].shape == (1, 4, len(DEEPMET_CONTINUOUS))
    kept = [0, 2, 3, 4]  # pT 5, 9, 3, 7, in file order
    np.testing.assert_allclose(np.exp(x["pf_cont"][0, :, 0]), pf["pt"][kept], rtol=1e-6)
    px, py = -np.sum(pf["pt"][kept] * np.cos(pf["phi"][kept])), -np.sum(pf["pt"][kept] * np.sin(pf["phi"][kept]))
    assert met_from_weights(np.ones(4), pf, n) == pytest.approx((np.hypot(px, py), np.arctan2(py, px)))


def test_met_from_weights_simple():
    pf = {"pt": np.array([10.0, 5.0]), "phi": np.array([0.0, np.pi / 2])}
    pt, phi = met_from_weights(np.array([[1.0, 0.0, 0.7]]), pf, 2)  # the padding weight 0.7 is ignored
    assert pt == pytest.approx(10.0) and abs(phi) == pytest.approx(np.pi)
    with pytest.raises(ValueError, match="1 weights for 2"):
        met_from_weights(np.ones(1), pf, 2)


def test_met_closure_vs_raw_met(events):
    """All weights 1 reproduce CMSSW's RawMET to better than 1 % (a fact of this sample)."""
    for ev in events:
        _, n = build_deepmet_inputs(ev["pfcands"])
        pt, phi = met_from_weights(np.ones(4500), ev["pfcands"], n)
        raw_pt, raw_phi = ev["raw_met"]
        assert pt == pytest.approx(raw_pt, rel=0.01)
        assert abs(np.angle(np.exp(1j * (phi - raw_phi)))) < 0.05


# --------------------------------------------------------------------------- ONNX models


def test_models_on_real_inputs(events, sessions):
    for ev in events:
        x = build_particlenet_inputs(ev["jet"], ev["jet_pfcands"], ev["pfcands"])
        (softmax,) = sessions["particlenet_ak4"].run(None, x)
        assert softmax.shape == (len(ev["jet"]), len(PARTICLENET_CLASSES)) and np.all(np.isfinite(softmax))
        np.testing.assert_allclose(softmax.sum(axis=1), 1.0, rtol=1e-5)
        inputs, n = build_deepmet_inputs(ev["pfcands"])
        (weights,) = sessions["deepmet"].run(None, inputs)
        assert weights.shape == (1, 4500) and np.all(np.isfinite(weights))
        assert np.all((weights >= 0) & (weights <= 1)) and not weights[0, n:].any()


def test_particlenet_ignores_padding_and_order(events, sessions):
    """Garbage in padding slots, or shuffled real constituents, must not change the scores."""
    ev = events[7]
    x = build_particlenet_inputs(ev["jet"], ev["jet_pfcands"], ev["pfcands"])
    (ref,) = sessions["particlenet_ak4"].run(None, x)
    rng = np.random.default_rng(3)
    pad = x["pf_mask"] == 0
    garbage = {k: v.copy() for k, v in x.items()}
    garbage["pf_features"] += rng.normal(0, 5, x["pf_features"].shape).astype(np.float32) * pad
    garbage["pf_points"] += rng.normal(0, 5, x["pf_points"].shape).astype(np.float32) * pad
    np.testing.assert_allclose(sessions["particlenet_ak4"].run(None, garbage)[0], ref, atol=1e-6)
    shuffled = {k: a.copy() for k, a in x.items()}
    for j, count in enumerate(x["pf_mask"][:, 0].sum(axis=1).astype(int)):
        perm = rng.permutation(count)
        for name in ("pf_points", "pf_features"):
            shuffled[name][j, :, :count] = x[name][j, :, perm].T
    np.testing.assert_allclose(sessions["particlenet_ak4"].run(None, shuffled)[0], ref, atol=1e-5)


# --------------------------------------------------------------------------- configs


def load_config(name: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse((MODELS / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_config_matches_onnx(name, sessions):
    config = load_config(name)
    session = sessions[name]
    assert config.name == name and config.platform == "onnxruntime_onnx" and config.max_batch_size > 0
    assert (
        config.HasField("dynamic_batching")
        and config.instance_group[0].kind == model_config_pb2.ModelInstanceGroup.KIND_CPU
    )
    onnx_types = {"tensor(float)": "TYPE_FP32", "tensor(int32)": "TYPE_INT32"}
    for tensors, values in ((config.input, session.get_inputs()), (config.output, session.get_outputs())):
        assert all(v.shape[0] == "batch" for v in values)  # dynamic batch axis
        graph_tensors = {v.name: (onnx_types[v.type], v.shape[1:]) for v in values}
        assert {t.name: (model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in tensors} == graph_tensors
    onnx_file = MODELS / name / "1" / "model.onnx"
    assert onnx_file.stat().st_size < 2 * 1024 * 1024
    # an ordinary Triton model: no per-model Python code; the checksum agent names the ONNX file's MD5
    assert not (MODELS / name / "1" / "model.py").exists()
    (agent,) = config.model_repository_agents.agents
    assert agent.name == "checksum"
    assert dict(agent.parameters) == {"MD5:1/model.onnx": hashlib.md5(onnx_file.read_bytes()).hexdigest()}


def config_json(name: str) -> str:
    """The config as Triton hands it to a Python model (JSON with proto field names)."""
    return json_format.MessageToJson(load_config(name), preserving_proto_field_name=True)


# --------------------------------------------------------------------------- python_backend


def test_parse_model_config():
    spec = model_spec.parse_model_config(config_json("deepmet"))
    assert spec.max_batch_size == 16 and spec.parameters["intra_op_threads"] == "1"
    assert [(t.name, t.dtype, t.dims) for t in spec.inputs] == [
        ("pf_cont", np.dtype(np.float32), (4500, len(DEEPMET_CONTINUOUS))),
        ("pf_cat", np.dtype(np.int32), (4500, 3)),
    ]
    with pytest.raises(ValueError, match="TYPE_STRING"):
        model_spec.parse_model_config({"name": "m", "input": [{"name": "s", "data_type": "TYPE_STRING", "dims": [1]}]})


def backend_run(session):
    names = [o.name for o in session.get_outputs()]
    return lambda inputs: dict(zip(names, session.run(names, inputs), strict=True))


def test_batched_equals_per_request(events, sessions):
    spec = model_spec.parse_model_config(config_json("particlenet_ak4"))
    run = backend_run(sessions["particlenet_ak4"])
    requests = [build_particlenet_inputs(ev["jet"], ev["jet_pfcands"], ev["pfcands"]) for ev in events[:3]]
    batch, sizes = model_spec.concatenate_requests(requests)
    assert sizes == [len(ev["jet"]) for ev in events[:3]] and len(batch["pf_mask"]) == sum(sizes)
    for got, request in zip(model_spec.run_batched(spec, run, requests), requests, strict=True):
        np.testing.assert_allclose(got["softmax"], run(request)["softmax"], atol=1e-6)


def test_bad_request_fails_alone(events, sessions):
    spec = model_spec.parse_model_config(config_json("deepmet"))
    good = [build_deepmet_inputs(ev["pfcands"])[0] for ev in events[:2]]
    missing = {"pf_cont": good[0]["pf_cont"]}
    wrong_dims = {"pf_cont": good[0]["pf_cont"][:, :100], "pf_cat": good[0]["pf_cat"][:, :100]}
    results = model_spec.run_batched(
        spec, backend_run(sessions["deepmet"]), [good[0], missing, RuntimeError("unreadable"), wrong_dims, good[1]]
    )
    assert "input 'pf_cat' missing" in str(results[1]) and str(results[2]) == "unreadable"
    assert "has shape (1, 100, 8), expected ('batch', 4500, 8)" in str(results[3])
    for got, request in zip((results[0], results[4]), good, strict=True):
        np.testing.assert_allclose(got["weights"], sessions["deepmet"].run(None, request)[0], atol=1e-6)


def test_failing_batch_falls_back_to_single_requests():
    spec = model_spec.parse_model_config(
        {
            "name": "m",
            "max_batch_size": 8,
            "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [2]}],
            "output": [{"name": "y", "data_type": "TYPE_FP64", "dims": [2]}],
        }  # fmt: skip
    )

    def run(inputs):
        if np.any(inputs["x"] < 0):
            raise RuntimeError("negative input")
        return {"y": inputs["x"] * 2}

    results = model_spec.run_batched(
        spec, run, [{"x": np.ones((1, 2))}, {"x": -np.ones((2, 2))}, {"x": np.ones((3, 2))}]
    )
    assert results[0]["y"].dtype == np.float64 and results[0]["y"].shape == (1, 2)
    assert str(results[1]) == "negative input" and np.all(results[2]["y"] == 2)


def fake_pb_utils():
    """Just enough of triton_python_backend_utils for execute()."""
    pb = types.ModuleType("triton_python_backend_utils")

    class Tensor:
        def __init__(self, name, array):
            self.name, self.array = name, array

        def as_numpy(self):
            return self.array

    class InferenceResponse:
        def __init__(self, output_tensors, error=None):
            self.output_tensors, self.error = output_tensors, error

    pb.Tensor, pb.InferenceResponse = Tensor, InferenceResponse
    pb.TritonError = lambda message: message
    pb.get_input_tensor_by_name = lambda request, name: next((t for t in request if t.name == name), None)
    return pb


def test_triton_model_execute(events, sessions, monkeypatch):
    pb = fake_pb_utils()
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", pb)
    model = python_backend.TritonPythonModel()
    model.initialize(
        {
            "model_config": config_json("particlenet_ak4"),
            "model_repository": str(MODELS / "particlenet_ak4"),
            "model_version": "1",
        }
    )
    inputs = [build_particlenet_inputs(ev["jet"], ev["jet_pfcands"], ev["pfcands"]) for ev in events[:2]]
    requests = [[pb.Tensor(k, v) for k, v in x.items()] for x in inputs] + [
        [pb.Tensor("pf_mask", inputs[0]["pf_mask"])]
    ]
    responses = model.execute(requests)
    assert len(responses) == len(requests)
    for response, x in zip(responses[:2], inputs, strict=True):
        assert response.error is None and [t.name for t in response.output_tensors] == ["softmax"]
        np.testing.assert_allclose(
            response.output_tensors[0].array, sessions["particlenet_ak4"].run(None, x)[0], atol=1e-6
        )
    assert "pf_points' missing" in responses[2].error and responses[2].output_tensors == []
    model.finalize()


def test_config_onnx_mismatch_is_reported(tmp_path):
    config = json.loads(config_json("deepmet"))
    config["input"][0]["name"] = "pf_continuous"
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.onnx").write_bytes((MODELS / "deepmet" / "1" / "model.onnx").read_bytes())
    with pytest.raises(ValueError, match="pf_continuous"):
        python_backend.TritonPythonModel().initialize(
            {"model_config": json.dumps(config), "model_repository": str(tmp_path), "model_version": "1"}
        )


def test_runtime_modules_do_not_import_torch():
    code = (
        "import sys, framework.serving.onnx_backend, modules.particlenet_inputs, modules.deepmet_inputs; "
        "print('torch' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True, env=env)
    assert out.stdout.strip() == "False"


def test_committed_models_match_build_script():
    """scripts/build_models.py rebuilds byte-identical files (same torch version)."""
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "build_models.py"), "--check-only"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_onnxruntime_imported_without_leaving_its_telemetry_file(tmp_path):
    """onnxruntime's telemetry SDK writes ``$TMPDIR/.ses`` when imported, and leaves it;
    ``import_onnxruntime`` imports it with a TMPDIR of its own, removed after."""
    leaves, ours = tmp_path / "plain", tmp_path / "ours"
    for folder, code in (
        (leaves, "import onnxruntime"),
        (ours, "from framework.serving.onnx_backend import import_onnxruntime; import_onnxruntime().get_device()"),
    ):
        folder.mkdir()
        env = {**os.environ, "TMPDIR": str(folder)}
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert not list(ours.iterdir())
    if not list(leaves.iterdir()):  # CI's machine: a plain import left nothing there either
        pytest.skip("this onnxruntime left no telemetry file on a plain import here")
    assert [p.name for p in leaves.iterdir()] == [".ses"]
