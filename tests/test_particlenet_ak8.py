"""CMSSW's ParticleNet AK8 on the real pfnano.root, against the scores CMSSW stored in it.

The job (``configs/particlenet_ak8_cfg.py``) runs as a user runs it (cmsrun in a
subprocess) on a copy of pfnano.root WITHOUT the ``FatJet_particleNet*`` branches, so the
producers cannot read the stored scores; the test compares its output with the original
file. CMS's models and preprocess files come from ``CMSSW_SEARCH_PATH`` (the shared copy
of CMS's data layout, ``PYSONIC_CMS_MODELS`` or ``../shared/models`` beside the checkout); without it the
tests skip.

The SONIC test serves the ONNX files through the project's Python backend from a
repository generated in tmp_path (a ``config.pbtxt`` per model next to a link to CMS's
``model.onnx``): tritonserver here has no ONNX Runtime backend. Once the server serves
standard repositories (``onnxruntime_onnx`` configs), it should serve CMS's repository
itself: drop the generated one and put only ``CMS_MODELS`` on the search path.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import trio
import uproot

import framework.config as cms
from framework.cmsrun import summary_dict
from framework.core import build_job
from framework.core import run_job as run_built_job
from framework.io.samples import locate_sample, shared_folder
from modules.particlenet_ak8_inputs import PreprocessParams, build_tag_infos

from support import processes_with_marker

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "particlenet_ak8_cfg.py"
CMS_MODELS = Path(os.environ.get("PYSONIC_CMS_MODELS") or (shared_folder() or Path("/nonexistent")) / "models")
COMBINED = "RecoBTag/Combined/data"
MODELS = ("particlenet", "particlenet_AK8_MD-2prong")
SCORES = [f"particleNet_{n}" for n in ("QCD", "TvsQCD", "WvsQCD", "ZvsQCD", "HbbvsQCD", "HccvsQCD", "H4qvsQCD")] + [
    f"particleNetMD_{n}" for n in ("QCD", "Xbb", "Xcc", "Xqq")
]
COLLECTIONS = ("FatJet", "FatJetPFCands", "PFCands", "FatJetSVs", "SV")


def cmsrun(*args: str, cwd: Path, marker: str = "") -> subprocess.CompletedProcess:
    """``cmsrun`` as a user runs it; ``marker`` goes into its environment (see :func:`processes_with_marker`)."""
    env = dict(os.environ, PYSONIC_TEST_MARKER=marker) if marker else None
    command = [sys.executable, "-m", "framework.cmsrun", *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


pytestmark = pytest.mark.skipif(
    not (CMS_MODELS / COMBINED / "models/particlenet/config.pbtxt").is_file(),
    reason=f"CMS's models are not in {CMS_MODELS} (set PYSONIC_CMS_MODELS to a CMSSW data layout)",
)


def stripped_copy(path: Path) -> Path:
    """pfnano.root's event ids and the five collections the tagger reads, without ``FatJet_particleNet*``."""
    with uproot.open(locate_sample("pfnano.root")) as f:
        tree = f["Events"]
        columns: dict = {b: tree[b].array(library="np") for b in ("run", "luminosityBlock", "event")}
        for name in COLLECTIONS:
            fields = [
                b[len(name) + 1 :]
                for b in tree.keys()  # noqa: SIM118 - a TTree, not a dict
                if b.startswith(name + "_") and not b.startswith("FatJet_particleNet")
            ]
            columns[name] = ak.zip({f: tree[f"{name}_{f}"].array() for f in fields})
    with uproot.recreate(path) as out:
        out.mktree("Events", {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in columns.items()})
        out["Events"].extend(columns)
    return path


def fat_jet_columns(path: Path, events: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """``FatJet_<pt and the scores>`` of a file (of the given event numbers), flattened,
    events in (run, lumi, event) order, and ``"event"``: the event numbers.

    With several streams the output module writes events in the order they finish.
    """
    with uproot.open(path) as f:
        tree = f["Events"]
        ids = tree.arrays(["run", "luminosityBlock", "event"], library="np")
        order = np.lexsort((ids["event"], ids["luminosityBlock"], ids["run"]))
        if events is not None:
            order = order[np.isin(ids["event"][order], events)]
        columns = {s: ak.to_numpy(ak.flatten(tree[f"FatJet_{s}"].array()[order])) for s in SCORES + ["pt"]}
        return columns | {"event": ids["event"][order]}


def stored_scores(events: np.ndarray | None = None) -> dict[str, np.ndarray]:
    return fat_jet_columns(locate_sample("pfnano.root"), events)


def run_job(tmp: Path, search_path: str, *args: str, marker: str = "") -> dict[str, np.ndarray]:
    """cmsrun the config on ``tmp/input.root`` (no comparison: the copy has no stored scores)."""
    out = tmp / "particlenet_ak8.root"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CMSSW_SEARCH_PATH", search_path)
        result = cmsrun(
            str(CONFIG), f"inputFiles={tmp / 'input.root'}", f"outputFile={out}", "compare=0", *args,
            cwd=tmp, marker=marker,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return fat_jet_columns(out)


@pytest.fixture(scope="module")
def direct_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pn_direct")
    stripped_copy(tmp / "input.root")
    with uproot.open(tmp / "input.root") as f:
        assert not [b for b in f["Events"].keys() if "particleNet" in b]  # noqa: SIM118 - a TTree
    return run_job(tmp, str(CMS_MODELS))


def test_direct_job_meets_cmssw_target(direct_job):
    produced = direct_job
    stored = stored_scores()
    assert len(stored["pt"]) == 24
    np.testing.assert_array_equal(produced["pt"], stored["pt"])  # the input's fat jets, in order
    within = 0
    for score in SCORES:
        diff = np.abs(produced[score] - stored[score])
        within += int(np.sum(diff < 0.01))
        corr = np.corrcoef(produced[score], stored[score])[0, 1]
        assert corr >= 0.999, f"{score}: correlation {corr:.5f}"
    assert within >= 0.95 * 24 * len(SCORES), f"{within} of {24 * len(SCORES)} pairs within 0.01"


def test_agreement_table_printed(tmp_path, monkeypatch):
    """With the stored scores in the input, the analyzer prints one row per score."""
    monkeypatch.setenv("CMSSW_SEARCH_PATH", str(CMS_MODELS))
    result = cmsrun(str(CONFIG), f"outputFile={tmp_path / 'o.root'}", "maxEvents=3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    table = result.stdout[result.stdout.index("Agreement with the input's stored scores") :].splitlines()
    rows = {line.split()[0]: line.split() for line in table[2:] if line.split() and line.split()[0] in SCORES}
    assert set(rows) == set(SCORES) and all(int(r[1]) == 7 for r in rows.values())  # 3 + 2 + 2 fat jets
    # The output holds the new scores, not the input's branches of the same names.
    written = fat_jet_columns(tmp_path / "o.root")
    stored = stored_scores(written["event"])
    assert len(written["event"]) == 3 and np.array_equal(written["pt"], stored["pt"])
    assert not np.array_equal(written["particleNet_TvsQCD"], stored["particleNet_TvsQCD"])
    np.testing.assert_allclose(written["particleNet_TvsQCD"], stored["particleNet_TvsQCD"], atol=0.01)


def test_unresolvable_file_in_path_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CMSSW_SEARCH_PATH", str(tmp_path / "nowhere"))
    result = cmsrun(str(CONFIG), f"outputFile={tmp_path / 'o.root'}", cwd=tmp_path)
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if "FileInPath" in line]
    assert len(lines) == 1, result.stderr[-2000:]
    assert f"'{COMBINED}/" in lines[0] and f"CMSSW_SEARCH_PATH ({tmp_path / 'nowhere'})" in lines[0]
    assert not list(tmp_path.glob("o.root*"))


def test_preprocess_json_drives_the_inputs(tmp_path):
    """Inputs follow the file read at run time: its medians, bounds and lengths, not code."""
    original = CMS_MODELS / COMBINED / "ParticleNetAK8/General/V01/preprocess.json"
    js = json.loads(original.read_text())
    with uproot.open(locate_sample("pfnano.root")) as f:
        event = f["Events"].arrays(entry_start=0, entry_stop=1)[0]

    def collection(name):
        return {b[len(name) + 1 :]: np.asarray(event[b]) for b in event.fields if b.startswith(name + "_")}

    tag_infos = build_tag_infos(*(collection(c) for c in COLLECTIONS))
    before = PreprocessParams(str(original)).make_inputs(tag_infos, "test")
    info = js["pf_features"]["var_infos"]["pfcand_pt_log_nopuppi"]
    info["median"] += 1.0
    info["upper_bound"] = 2.0
    for group in ("pf_points", "pf_features", "pf_mask"):
        js[group]["max_length"] = 20
    changed = tmp_path / "preprocess.json"
    changed.write_text(json.dumps(js))
    after = PreprocessParams(str(changed)).make_inputs(tag_infos, "test")
    row = js["pf_features"]["var_names"].index("pfcand_pt_log_nopuppi")
    assert before["pf_features"].shape[2] > 20 and after["pf_features"].shape[2] == 20
    raw = np.stack([t["pfcand_pt_log_nopuppi"][:20] for t in tag_infos])
    expected = np.clip((raw - (info["median"])) * info["norm_factor"], info["lower_bound"], 2.0)
    np.testing.assert_allclose(after["pf_features"][:, row, :], expected, rtol=1e-6)
    others = [i for i in range(before["pf_features"].shape[1]) if i != row]
    np.testing.assert_array_equal(after["pf_features"][:, others, :], before["pf_features"][:, others, :20])
    del js["sv_features"]["var_infos"]["sv_mass"]
    changed.write_text(json.dumps(js))
    with pytest.raises(Exception, match=r"preprocess_json .*preprocess.json: missing or invalid key 'sv_mass'"):
        PreprocessParams(str(changed))


def test_preprocess_json_found_first_on_search_path(direct_job, tmp_path):
    """A changed preprocess.json in an earlier CMSSW_SEARCH_PATH folder changes the scores."""
    reference = direct_job
    target = tmp_path / "area" / COMBINED / "ParticleNetAK8/General/V01/preprocess.json"
    target.parent.mkdir(parents=True)
    js = json.loads((CMS_MODELS / COMBINED / "ParticleNetAK8/General/V01/preprocess.json").read_text())
    js["pf_features"]["var_infos"]["pfcand_pt_log_nopuppi"]["median"] += 2.0
    target.write_text(json.dumps(js))
    stripped_copy(tmp_path / "input.root")
    produced = run_job(tmp_path, f"{tmp_path / 'area'}:{CMS_MODELS}")
    nominal = [s for s in SCORES if not s.startswith("particleNetMD")]
    assert max(np.abs(produced[s] - reference[s]).max() for s in nominal) > 0.05
    for score in SCORES:
        if score.startswith("particleNetMD"):  # the MD model's file was not changed
            np.testing.assert_array_equal(produced[score], reference[score])


def test_sonic_equals_direct(direct_job, tmp_path):
    """ParticleNetSonicJetTagsProducer through a real tritonserver gives the direct scores within 1e-5."""
    direct = direct_job
    stripped_copy(tmp_path / "input.root")
    marker = uuid.uuid4().hex
    # The fallback server serves CMS's repository as it is (onnxruntime_onnx, checksum agent).
    sonic = run_job(tmp_path, str(CMS_MODELS), "sonic=1", marker=marker)
    assert processes_with_marker(marker) == []  # the fallback server is gone
    for score in SCORES:
        np.testing.assert_allclose(sonic[score], direct[score], atol=1e-5, rtol=0, err_msg=score)


# What CMSSW's pfParticleNet_cff sets under particleNetSonicTriton (ONNX) and, with
# particleNetPTSonicTriton too, the TorchScript twins: module -> (model name, preprocess file).
ONNX_MODELS = {
    "pfParticleNetJetTags": ("particlenet", "General/V01/preprocess.json"),
    "pfMassDecorrelatedParticleNetJetTags": ("particlenet_AK8_MD-2prong", "MD-2prong/V01/preprocess.json"),
}
PT_MODELS = {
    "pfParticleNetJetTags": ("particlenet_PT", "General/V01/preprocess_PT.json"),
    "pfMassDecorrelatedParticleNetJetTags": ("particlenet_AK8_MD-2prong_PT", "MD-2prong/V01/preprocess_PT.json"),
}


def model_files(model: str, preprocess: str) -> list[str]:
    return [f"{COMBINED}/models/{model}/config.pbtxt", f"{COMBINED}/ParticleNetAK8/{preprocess}"]


def missing(files: list[str]) -> list[str]:
    return [f for f in files if not (CMS_MODELS / f).is_file()]


def set_model(module, model: str, preprocess: str) -> None:
    module.Client.modelName = model
    module.Client.modelConfigPath = f"{COMBINED}/models/{model}/config.pbtxt"
    module.preprocess_json = f"{COMBINED}/ParticleNetAK8/{preprocess}"


def test_particleNetPTSonicTriton_switches_both_models_as_cmssw():
    """sonic=1 pt=1 gives both JetTags modules CMSSW's TorchScript models and preprocess_PT.json
    (pfParticleNet_cff); sonic=1 alone keeps the ONNX ones. Loads the config only: no server."""
    for args, expected in ((["sonic=1"], ONNX_MODELS), (["sonic=1", "pt=1"], PT_MODELS)):
        process = cms.load_config(CONFIG, [*args, "compare=0"])
        for label, (model, preprocess) in expected.items():
            module = getattr(process, label)
            assert module.type_() == "ParticleNetSonicJetTagsProducer", label
            assert module.Client.modelName.value() == model, label
            config, json_file = model_files(model, preprocess)
            assert module.Client.modelConfigPath.value() == config, label
            assert module.preprocess_json.value() == json_file, label


def test_torchscript_model_through_particleNetPTSonicTriton(direct_job, tmp_path, monkeypatch):
    """sonic=1 pt=1 (CMSSW's particleNetPTSonicTriton), in-process, on the CPU fallback server.

    What runs in CI: ``../shared/models`` has CMS's TorchScript General model
    (``particlenet_PT``, ``General/V01/preprocess_PT.json``) but not the MD-2prong one
    (``particlenet_AK8_MD-2prong_PT`` nor ``MD-2prong/V01/preprocess_PT.json``). The loaded
    process is then edited by hand: the MD-2prong module goes back to CMS's ONNX model, and
    only the General model goes through TorchScript (the torch runner). Its scores meet
    CMSSW's stored ones as the ONNX path does (correlation >= 0.999, >= 95 % of the pairs
    within 0.01) and equal direct onnxruntime's within 1e-4; the MD scores equal the
    direct ones within 1e-5. Where the MD-2prong TorchScript files are present, both models
    go through TorchScript, unedited, with the same checks (1e-4 for MD too).
    """
    general = PT_MODELS["pfParticleNetJetTags"]
    if lacking := missing(model_files(*general)):
        pytest.skip(f"CMS's TorchScript ParticleNet AK8 lacks in {CMS_MODELS}: {lacking}")
    md_label = "pfMassDecorrelatedParticleNetJetTags"
    md_pt = not missing(model_files(*PT_MODELS[md_label]))
    stripped_copy(tmp_path / "input.root")
    marker = uuid.uuid4().hex
    monkeypatch.setenv("CMSSW_SEARCH_PATH", str(CMS_MODELS))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the generated models, not the user's cache
    monkeypatch.setenv("PYSONIC_TEST_MARKER", marker)  # the fallback server inherits it
    out = tmp_path / "particlenet_ak8.root"
    args = [f"inputFiles={tmp_path / 'input.root'}", f"outputFile={out}", "compare=0", "sonic=1", "pt=1"]
    process = cms.load_config(CONFIG, args)
    if not md_pt:
        set_model(getattr(process, md_label), *ONNX_MODELS[md_label])
    job = build_job(process)
    report = trio.run(run_built_job, job)
    assert [p for p in processes_with_marker(marker) if p != os.getpid()] == []  # the server is gone
    md_model = (PT_MODELS if md_pt else ONNX_MODELS)[md_label][0]
    served = summary_dict(job, report)["services"]["TritonService"]["models"]
    assert set(served) == {"particlenet_PT", md_model}, sorted(served)
    # The config the server loaded (generated from CMS's pytorch_libtorch one): the torch
    # runner on CMS's model.pt; the model folder has no ONNX file another runner could load.
    [loaded] = (tmp_path / "cache").rglob("particlenet_PT/config.pbtxt")
    assert re.search(r'key: "runner"\s*value \{\s*string_value: "torch"', loaded.read_text()), loaded.read_text()
    assert not list((CMS_MODELS / COMBINED / "models/particlenet_PT").rglob("*.onnx"))

    sonic, stored = fat_jet_columns(out), stored_scores()
    np.testing.assert_array_equal(sonic["pt"], stored["pt"])
    checked = SCORES if md_pt else [s for s in SCORES if not s.startswith("particleNetMD")]
    within = sum(int(np.sum(np.abs(sonic[s] - stored[s]) < 0.01)) for s in checked)
    assert within >= 0.95 * 24 * len(checked), f"{within} of {24 * len(checked)} pairs within 0.01"
    for score in SCORES:
        if score in checked:
            corr = np.corrcoef(sonic[score], stored[score])[0, 1]
            assert corr >= 0.999, f"{score}: correlation {corr:.5f}"
        atol = 1e-4 if score in checked else 1e-5
        np.testing.assert_allclose(sonic[score], direct_job[score], atol=atol, rtol=0, err_msg=score)


def test_pt_without_sonic_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CMSSW_SEARCH_PATH", str(CMS_MODELS))
    result = cmsrun(str(CONFIG), "pt=1", f"outputFile={tmp_path / 'o.root'}", cwd=tmp_path)
    assert result.returncode != 0
    assert "pt=1 (particleNetPTSonicTriton) acts only together with sonic=1" in result.stderr
    assert not list(tmp_path.glob("o.root*"))


def test_sv_eta_rebuilt_from_jet_relative_columns():
    """The SVs that NanoAOD's SV table holds, treated as missing from it: same sv_etarel within 2e-3."""
    with uproot.open(locate_sample("pfnano.root")) as f:
        events = f["Events"].arrays(filter_name=[f"{c}_*" for c in COLLECTIONS])
    errors, checked = [], 0
    for event in events:
        tables = {
            c: {b[len(c) + 1 :]: np.asarray(event[b]) for b in event.fields if b.startswith(c + "_")}
            for c in COLLECTIONS
        }
        args = [tables[c] for c in COLLECTIONS]
        hidden = dict(tables["FatJetSVs"], sVIdx=np.full_like(tables["FatJetSVs"]["sVIdx"], -1))
        with_sv = build_tag_infos(*args)
        without = build_tag_infos(*args[:3], hidden, tables["SV"])
        for j, (a, b) in enumerate(zip(with_sv, without, strict=True)):
            known = tables["FatJetSVs"]["sVIdx"][tables["FatJetSVs"]["jetIdx"] == j] >= 0
            if a:
                errors.append(np.abs(a["sv_etarel"] - b["sv_etarel"])[known])
                checked += int(known.sum())
    assert checked == 32  # of the 44 fat-jet SVs, 12 are missing from SV
    assert np.concatenate(errors).max() < 2e-3
