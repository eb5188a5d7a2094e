"""End to end: the main job on the real pfnano.root through the real local Triton server.

``cmsrun`` runs as a user runs it (a subprocess, the console entry point); the fallback
server is started by TritonService and must be gone afterwards. The products written
are compared with a direct onnxruntime evaluation of the same ONNX models on inputs built
from the same file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import awkward as ak
import numpy as np
import onnxruntime as ort
import pytest
import uproot

from framework.io.samples import locate_sample
from modules.deepmet_inputs import build_deepmet_inputs, met_from_weights
from modules.particlenet_inputs import PARTICLENET_CLASSES, build_particlenet_inputs

from support import processes_with_marker

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "sonic_pfnano_cfg.py"
MODELS = ROOT / "data" / "models"


def cmsrun(*args: str, cwd: Path, timeout: float = 300, marker: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSONIC_TEST_MARKER=marker) if marker else None
    return subprocess.run(
        [sys.executable, "-m", "framework.cmsrun", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    out = tmp_path_factory.mktemp("main_job")
    marker = uuid.uuid4().hex
    result = cmsrun(
        str(CONFIG),
        f"outputFile={out / 'out.root'}",
        f"histFile={out / 'hist.root'}",
        "--summary-json",
        str(out / "summary.json"),
        cwd=out,
        marker=marker,
    )
    leftover = processes_with_marker(marker)
    return result, out, leftover


def test_main_job_succeeds_with_summary(main_job):
    result, out, leftover = main_job
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stderr
    for heading in ("TrigReport", "TimeReport", "particlenet_ak4", "deepmet"):
        assert heading in log
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events"] == 10 and summary["streams"] == 4
    # The event loop's wall time and the whole job's (the fallback server's start and stop
    # included), each named for what it covers.
    assert summary["job_wall_time"] > summary["wall_time"] > 0
    assert "Total loop: event loop, wall time [s]" in log and "Total job: build to end_job" in log
    assert f"events processed in {summary['wall_time']:.2f} s (event loop; the whole job: " in log
    assert summary["modules"]["particleNetAK4"]["calls"] == 10
    assert summary["modules"]["deepMET"]["external_work"] is True
    # CPU over the event loop: every thread's, and the trio thread's share of it
    cpu = summary["cpu"]
    assert 0 < cpu["event_loop"] <= cpu["process"] + 0.01  # clock ticks: both round
    assert cpu["other_threads"] == pytest.approx(cpu["process"] - cpu["event_loop"])
    assert not leftover, f"processes of the job left behind (its tritonserver?): {leftover}"


def test_output_holds_every_input_event(main_job):
    result, out, _ = main_job
    assert result.returncode == 0, result.stderr[-3000:]
    with uproot.open(locate_sample("pfnano.root")) as f:
        ids_in = f["Events"].arrays(["run", "luminosityBlock", "event"], library="np")
    with uproot.open(out / "out.root") as f:
        ids_out = f["Events"].arrays(["run", "luminosityBlock", "event"], library="np")
    key = lambda ids: sorted(zip(ids["run"], ids["luminosityBlock"], ids["event"], strict=True))  # noqa: E731
    assert key(ids_out) == key(ids_in)
    assert not list(out.glob("*.tmp-*")), "temporary output left behind"


def read_input_events():
    with uproot.open(locate_sample("pfnano.root")) as f:
        arrays = f["Events"].arrays(filter_name=["event", "Jet_*", "JetPFCands_*", "PFCands_*"])
    for i in range(len(arrays)):
        ev = arrays[i]
        yield (
            int(ev["event"]),
            {
                "Jet": {k[4:]: np.asarray(ev[k]) for k in arrays.fields if k.startswith("Jet_")},
                "JetPFCands": {k[11:]: np.asarray(ev[k]) for k in arrays.fields if k.startswith("JetPFCands_")},
                "PFCands": {k[8:]: np.asarray(ev[k]) for k in arrays.fields if k.startswith("PFCands_")},
            },
        )


def test_products_equal_direct_onnxruntime(main_job):
    result, out, _ = main_job
    assert result.returncode == 0, result.stderr[-3000:]
    pn = ort.InferenceSession(str(MODELS / "particlenet_ak4" / "1" / "model.onnx"))
    dm = ort.InferenceSession(str(MODELS / "deepmet" / "1" / "model.onnx"))
    with uproot.open(out / "out.root") as f:
        written = f["Events"].arrays()
    row_of = {int(e): i for i, e in enumerate(written["event"])}
    checked_jets = 0
    for event, ev in read_input_events():
        row = written[row_of[event]]
        inputs = build_particlenet_inputs(ev["Jet"], ev["JetPFCands"], ev["PFCands"])
        scores = pn.run(["softmax"], inputs)[0] if len(inputs["pf_points"]) else np.zeros((0, 5))
        for i, c in enumerate(PARTICLENET_CLASSES):
            got = np.asarray(row[f"particleNetAK4_prob{c}"])
            assert got.shape == (len(ev["Jet"]["pt"]),)
            np.testing.assert_allclose(got, scores[:, i], rtol=1e-5, atol=1e-6)
        checked_jets += len(scores)
        dm_inputs, n = build_deepmet_inputs(ev["PFCands"])
        weights = dm.run(["weights"], dm_inputs)[0]
        pt, phi = met_from_weights(weights[0], ev["PFCands"], n)
        np.testing.assert_allclose(float(row["deepMET_pt"]), pt, rtol=1e-5)
        np.testing.assert_allclose(float(row["deepMET_phi"]), phi, rtol=1e-5, atol=1e-6)
    assert checked_jets > 50  # the file has real jets: the comparison was not vacuous
    assert ak.all(written["deepMET_pt"] > 0)


def test_histograms_written(main_job):
    result, out, _ = main_job
    assert result.returncode == 0, result.stderr[-3000:]
    with uproot.open(out / "hist.root") as f:
        names = {k.split(";")[0] for k in f.keys()}  # noqa: SIM118 - uproot's keys() ("name;cycle"), not a dict
        assert {"jet_pt", "jet_probb", "deepmet_pt", "rawmet_pt"} <= names
        summary = json.loads((out / "summary.json").read_text())
        dijet = next(p for p in summary["paths"] if p["name"] == "dijet")
        # one MET entry per event that passed the dijet filter
        assert f["deepmet_pt"].values().sum() == dijet["passed"] > 0


BOOM = """
from framework import EDProducer

class Boom(EDProducer):
    def __init__(self, params):
        self.jets = self.consumes("Jet", branches=["pt"])
        self.produces()

    def produce(self, event):
        if event.id.event == {bad_event}:
            raise RuntimeError("cannot handle this event")
        event.put(len(event.get(self.jets)))
"""

BOOM_CFG = """
import framework.config as cms
from framework.io.samples import locate_sample
process = cms.Process("BOOM")
process.source = cms.Source("PoolSource", fileNames=cms.untracked.vstring(str(locate_sample("pfnano.root"))))
process.options.numberOfStreams = 2
process.boom = cms.EDProducer("boom_module:Boom")
process.out = cms.OutputModule("NanoAODOutputModule", fileName=cms.untracked.string("boom.root"))
process.p = cms.Path(process.boom)
process.e = cms.EndPath(process.out)
"""


def test_module_exception_fails_the_job_cleanly(tmp_path):
    with uproot.open(locate_sample("pfnano.root")) as f:
        bad_event = int(f["Events"]["event"].array(library="np")[5])
    (tmp_path / "boom_module.py").write_text(BOOM.replace("{bad_event}", str(bad_event)))
    (tmp_path / "boom_cfg.py").write_text(textwrap.dedent(BOOM_CFG))
    result = cmsrun("boom_cfg.py", cwd=tmp_path)
    assert result.returncode == 1
    message = " ".join(result.stderr.split())
    assert "EDProducer 'boom' (type boom_module:Boom) on path 'p' failed for event 1:" in message
    assert f":{bad_event}: RuntimeError: cannot handle this event" in message
    assert not list(tmp_path.glob("boom.root*")), "a half-written output file was left behind"


def test_configuration_error_names_label_and_parameter(tmp_path):
    cfg = tmp_path / "bad_cfg.py"
    cfg.write_text(
        textwrap.dedent("""
        import framework.config as cms
        process = cms.Process("BAD")
        process.source = cms.Source("EmptySource")
        process.maxEvents.input = 1
        process.jets = cms.EDFilter("JetMultiplicityFilter", minPT=cms.double(20.0))
        process.p = cms.Path(process.jets)
    """)
    )
    result = cmsrun(str(cfg), cwd=tmp_path)
    assert result.returncode == 1
    message = " ".join(result.stderr.split())
    assert "'jets'" in message and "minPT" in message and "minPt" in message  # nearest valid name


# ------------------------------------------------------------------ CMSSW's habits at the command line


def test_cmsRun_is_cmsrun_and_config_help_lists_the_configs_options(tmp_path):  # noqa: N802 - the command's name
    """``cmsRun`` is a console script too; ``cmsRun CONFIG --help`` prints the config's own
    options (its VarParsing), as under CMSSW, and ``cmsrun --help`` says so."""
    script = Path(sys.executable).parent / "cmsRun"
    assert script.is_file(), "the cmsRun console script is not installed (pip install -e .)"
    result = subprocess.run(
        [str(script), str(ROOT / "configs" / "dataset_cfg.py"), "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "lumi (float) = 1000.0: luminosity of the weights [pb^-1]" in result.stdout
    assert "usage: cmsrun" not in result.stdout
    own = cmsrun("--help", cwd=tmp_path)
    assert own.returncode == 0 and "usage: cmsrun" in own.stdout
    assert "'cmsrun CONFIG --help' (or 'help') lists the config's own options" in " ".join(own.stdout.split())


def test_list_types_shows_kind_and_package(capsys):
    from framework.cmsrun import main

    assert main(["--list-types"]) == 0
    lines = {line.split()[0]: line.split(None, 2)[1:] for line in capsys.readouterr().out.splitlines()}
    assert lines["HistogramAnalyzer"] == ["EDAnalyzer", "pysonic (modules.histograms:HistogramAnalyzer)"]
    assert lines["JetMultiplicityFilter"][0] == "EDFilter" and lines["JetHTProducer"][0] == "EDProducer"
    assert lines["NanoAODOutputModule"][0] == "OutputModule"
    assert lines["PoolSource"] == ["Source", "pysonic (built in: framework.io:PoolSource)"]
    assert lines["TritonService"][0] == "Service"


@pytest.fixture
def two_packages(tmp_path, monkeypatch):
    """Two installed distributions (their ``.dist-info`` as pip writes it) that both provide
    the module type ``MyProducer`` through the ``pysonic.modules`` entry point."""
    from framework.core import _registry

    for dist in ("alpha", "beta"):
        info = tmp_path / f"{dist}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[pysonic.modules]\nMyProducer = {dist}_jets:MyProducer\n")
        (tmp_path / f"{dist}_jets.py").write_text(
            "from framework import EDProducer\nclass MyProducer(EDProducer): pass\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    _registry._entry_points.cache_clear()
    yield tmp_path
    _registry._entry_points.cache_clear()


def test_a_type_name_two_packages_provide_is_one_error_naming_both(two_packages, capsys):
    from framework import ConfigurationError
    from framework.cmsrun import main
    from framework.core import find_type

    with pytest.raises(ConfigurationError) as info:
        find_type("MyProducer", context="EDProducer 'mine'")
    assert (
        "EDProducer 'mine': module type 'MyProducer' is provided twice: entry point 'MyProducer = "
        "alpha_jets:MyProducer' of package 'alpha' and entry point 'MyProducer = beta_jets:MyProducer' of "
        "package 'beta' (as CMSSW's plugin manager" in str(info.value)
    )
    assert main(["--list-types"]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if x.startswith("MyProducer ")]
    assert "alpha (alpha_jets:MyProducer), beta (beta_jets:MyProducer)  ! " in line and "provided twice" in line
