"""TFileService (``framework/io/_tfileservice.py``): what modules book is written to one
ROOT file, one directory per module label, when the job succeeded.

The job is ``configs/dataset_cfg.py`` on the real ``nano_dy.root`` with two more analyzers:
a user's own (:data:`ANALYZER`, booking a histogram and a per-event table through the
service, as the example of docs/writing-modules.md does) and a ``HistogramAnalyzer``
without ``fileName`` (its histograms then go to the service). The values are checked
against the input read with uproot. The merge under ``--executor dask``: ``test_dask.py``.
"""

from __future__ import annotations

import pathlib

import awkward as ak
import numpy as np
import pytest
import uproot
from test_bad_inputs import Result, cmsrun  # noqa: F401 - cmsrun is a fixture

import framework.config as cms
from framework import ConfigurationError
from framework.core import build_job
from framework.io import Table
from framework.io.samples import locate_sample

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATASET_CFG = ROOT / "configs" / "dataset_cfg.py"

ANALYZER = '''
import hist
import numpy as np

import framework.config as cms
from framework import EDAnalyzer, get_service


class JetPtAnalyzer(EDAnalyzer):
    """Jets' pT: a histogram and a per-event table, booked with TFileService."""

    @classmethod
    def fill_descriptions(cls, desc):
        desc.add("src", cms.InputTag("Jet"), "the jets")
        desc.add("fillAtEnd", cms.untracked.bool(True), "fill summary/njet in end_job")

    def __init__(self, params):
        self.jets = self.consumes(params.src, branches=["pt"])
        self.fill_at_end = params.fillAtEnd
        fs = get_service("TFileService")  # CMSSW: edm::Service<TFileService> fs;
        self.pt = fs.make("pt", hist.Hist(hist.axis.Regular(50, 0.0, 250.0, label="jet pT [GeV]")), title="Jet pT")
        self.events = fs.make_table(
            "events", {"event": "uint64", "njet": "int32", "ht": "float64", "jet_pt": "var * float32"}
        )
        self.summary = fs.mkdir("summary").make("njet", hist.Hist(hist.axis.Integer(0, 20)))

    def analyze(self, event):
        pt = np.asarray(event.get(self.jets)["pt"])
        self.pt.fill(pt)
        self.events.fill(event=event.id.event, njet=len(pt), ht=float(pt.sum()), jet_pt=pt)

    def end_job(self):
        if self.fill_at_end:
            self.summary.fill(np.arange(3))  # at the end of the job: written all the same (not under Dask)


class Broken(EDAnalyzer):
    def analyze(self, event):
        pass

    def end_job(self):
        raise RuntimeError("broken at the end")
'''

EXTRA = """
process.TFileService = cms.Service("TFileService", fileName=cms.string({file!r}))
process.jetPt = cms.EDAnalyzer("{module}:JetPtAnalyzer")
process.fsHists = process.hists.clone(fileName="")
process.analysis = cms.Path(process.jetPt + process.twoJets + process.fsHists)  # fsHists: as hists
"""


def analysis_config(
    folder: pathlib.Path, module: str = "jetpt", file: str = "analysis.root", fill_at_end: bool = True
) -> pathlib.Path:
    """dataset_cfg.py with TFileService, the user's analyzer and a HistogramAnalyzer using the service."""
    (folder / f"{module}.py").write_text(ANALYZER)
    config = folder / "analysis_cfg.py"
    config.write_text(
        f"exec(open({str(DATASET_CFG)!r}).read())\n"
        + EXTRA.format(file=file, module=module)
        + f"process.jetPt.fillAtEnd = cms.untracked.bool({fill_at_end})\n"
    )
    return config


def test_booked_objects_written_in_the_modules_directories(cmsrun, tmp_path):  # noqa: F811 - the fixture
    sample = locate_sample("nano_dy.root")
    result = cmsrun(analysis_config(tmp_path), f"inputFiles={sample}", "streams=1", cwd=tmp_path)
    assert result.code == 0, result.stderr[-3000:]
    with uproot.open(sample) as f:
        events = f["Events"].arrays(["event", "Jet_pt"])
    with uproot.open(tmp_path / "analysis.root") as f:
        assert {k: v for k, v in f.classnames(cycle=False).items() if v != "TDirectory"} == {
            "jetPt/pt": "TH1D",
            "jetPt/events": "TTree",
            "jetPt/summary/njet": "TH1D",
            "fsHists/jet_pt": "TH1D",
            "fsHists/ht": "TH1D",
        }
        all_pt = ak.to_numpy(ak.flatten(events.Jet_pt))
        expected, _ = np.histogram(all_pt[all_pt < 250], np.linspace(0, 250, 51))
        assert f["jetPt/pt"].values().tolist() == expected.tolist() and f["jetPt/pt"].title == "Jet pT"
        table = f["jetPt/events"].arrays()
        assert table.event.tolist() == events.event.tolist()  # every event, input order (1 stream)
        assert ak.to_list(table.jet_pt) == ak.to_list(events.Jet_pt)
        assert table.njet.tolist() == ak.num(events.Jet_pt).tolist()
        assert f["jetPt/summary/njet"].values().tolist() == [1, 1, 1] + [0] * 17  # end_job's fill
        # HistogramAnalyzer through the service: the same histograms as with its own fileName
        with uproot.open(tmp_path / "dataset_hists.root") as own:
            for name in ("jet_pt", "ht"):
                assert f[f"fsHists/{name}"].values(flow=True).tolist() == own[name].values(flow=True).tolist()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "analysis.root",
        "analysis_cfg.py",
        "dataset.root",
        "dataset_hists.root",
        "jetpt.py",
    ]


def test_a_failed_job_writes_no_file(cmsrun, tmp_path):  # noqa: F811 - the fixture
    (tmp_path / "analysis.root").write_bytes(b"the previous analysis")
    config = analysis_config(tmp_path)
    config.write_text(
        config.read_text()
        + "process.broken = cms.EDAnalyzer('jetpt:Broken')\nprocess.b = cms.EndPath(process.broken)\n"
    )
    result = cmsrun(config, f"inputFiles={locate_sample('nano_dy.root')}", cwd=tmp_path)
    assert result.code == 1 and "EDAnalyzer 'broken' (type jetpt:Broken): end_job() failed" in result.message
    assert (tmp_path / "analysis.root").read_bytes() == b"the previous analysis"
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def build(config: str):
    process = cms.Process("T")
    process.source = cms.Source("EmptySource")
    exec(config, {"cms": cms, "process": process})
    return build_job(process)


def test_booking_errors_are_one_line_naming_the_module(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "twice.py").write_text(
        "import hist\nfrom framework import EDAnalyzer, get_service\n"
        "class Twice(EDAnalyzer):\n"
        "    def __init__(self, params):\n"
        "        fs = get_service('TFileService')\n"
        "        fs.make('h', hist.Hist(hist.axis.Regular(2, 0, 1)))\n"
        "        fs.make('h', hist.Hist(hist.axis.Regular(2, 0, 1)))\n"
    )
    services = "process.TFileService = cms.Service('TFileService', fileName=cms.string('x.root'))\n"
    with pytest.raises(
        ConfigurationError, match=r"Service 'TFileService' \(type TFileService\): 'a/h' is booked twice"
    ):
        build(services + "process.a = cms.EDAnalyzer('twice:Twice')\nprocess.p = cms.Path(process.a)\n")
    with pytest.raises(ConfigurationError, match=r"service 'TFileService' is needed but not configured"):
        build(
            "process.h = cms.EDAnalyzer('HistogramAnalyzer', histograms=cms.VPSet())\nprocess.p = cms.Path(process.h)\n"
        )
    job = build(services)
    fs = job.services.services["TFileService"]
    with pytest.raises(ConfigurationError, match=r"call it while the module is constructed"):
        fs.make("h", Table({"x": "float32"}))
    with pytest.raises(ConfigurationError, match=r"branch 'x': type 'vector<float>' is neither"):
        Table({"x": "vector<float>"})
    table = Table({"x": "float32", "y": "var * int32"})
    with pytest.raises(TypeError, match=r"missing branches \['y'\]"):
        table.fill(x=1.0)
    with pytest.raises(TypeError, match="branch 'x' takes one number"):
        table.fill(x=[1.0], y=[1])
