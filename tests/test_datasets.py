"""Datasets end to end on the real NanoAOD samples: ``cmsrun --dataset``, per-dataset
outputs, and unit parts merged into the same output as one full run.

The fileset is ``configs/datasets/nano_fileset.yaml`` with each file located through
``framework.io.samples`` (the example's relative paths assume the samples beside the
repository); ``nano_dy.root`` is in two datasets. The config is ``configs/dataset_cfg.py``
(CPU only: HT, a filter, histograms, a slim NanoAOD output). Outputs are compared event
by event: ids (run, luminosityBlock, event) and every product branch.
"""

from __future__ import annotations

import json
from pathlib import Path

import awkward as ak
import numpy as np
import pytest
import trio
import uproot
import yaml

import framework.config as cms
from framework import EDAnalyzer, FileOpenError, FileReadError, register_type
from framework.cmsrun import main as cmsrun_main
from framework.cmsrun import plan_datasets, run_unit
from framework.core import build_job, run_job
from framework.io import (
    WorkUnit,
    dataset_output_path,
    merge_parts,
    merge_unit_parts,
    part_path,
    parts_folder,
    preprocess_file,
    split_units,
)
from framework.io.samples import locate_sample

from support import local_sample

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "dataset_cfg.py"
EXAMPLE = ROOT / "configs" / "datasets" / "nano_fileset.yaml"
ID = ["run", "luminosityBlock", "event"]
# XsecWeightProducer's weight per dataset of the example (xsec [pb] * 1000 pb^-1 / sumw; 1: data)
WEIGHTS = {"DYJets": 6077.22 * 1000.0 / 40, "TTbar": 831.76 * 1000.0 / 400, "DoubleMuon": 1.0}


@pytest.fixture
def fileset(tmp_path):
    """The example fileset (its files named ``sample:NAME``), as JSON, where its samples are
    on this machine (never fetched here: the test is skipped, saying which is missing)."""
    data = yaml.safe_load(EXAMPLE.read_text())
    for value in data.values():
        files = value if isinstance(value, list) else value["files"]
        for path in files:
            name = path.removeprefix("sample:").split(":")[0]
            try:
                locate_sample(name, fetch=False)
            except FileOpenError as exc:
                pytest.skip(f"no local {name} ({exc})")
    folder = tmp_path / "filesets"
    folder.mkdir()
    path = folder / "nano.json"
    path.write_text(json.dumps(data))
    return path


def read_tree(path):
    with uproot.open(path) as f:
        return f["Events"].arrays(library="ak")


def by_id(arrays):
    order = np.lexsort([np.asarray(arrays[b]) for b in reversed(ID)])
    return arrays[order]


def assert_same_events(a, b, *, but=()):
    fields = [f for f in a.fields if f not in but]
    assert fields == [f for f in b.fields if f not in but]
    assert ak.to_list(a[fields]) == ak.to_list(b[fields])


def hists_of(path):
    with uproot.open(path) as f:
        return {k: (f[k].values(flow=True).tolist(), f[k].member("fTitle")) for k in f.keys(cycle=False)}


def test_cmsrun_dataset_writes_one_output_per_dataset(fileset, tmp_path, monkeypatch, capsys):
    work = tmp_path / "run"
    work.mkdir()
    monkeypatch.chdir(work)
    assert (
        cmsrun_main(
            [
                str(CONFIG),
                "--dataset",
                str(fileset),
                "--chunk-size",
                "15",
                "--no-progress",
                "--summary-json",
                "summary.json",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "dataset 'DYJets': 1 file(s), 40 events in 3 unit(s)" in err
    assert "dataset 'TTbar': 2 file(s), 400 events" in err and "dataset 'DoubleMuon': 2 file(s), 80 events" in err
    expected = {
        "DYJets": ["nano_dy.root"],
        "TTbar": ["nano_tt_v12.root", "nano_tt_v15.root"],
        "DoubleMuon": ["nano_dimuon.root", "nano_dy.root"],
    }
    for dataset, names in expected.items():
        out = read_tree(work / f"dataset_{dataset}.root")
        # The same events as the config run by hand over the dataset's files.
        files = ",".join(str(locate_sample(n)) for n in names)
        single = tmp_path / f"single_{dataset}"
        single.mkdir()
        monkeypatch.chdir(single)
        assert cmsrun_main([str(CONFIG), f"inputFiles={files}", "--no-progress"]) == 0
        monkeypatch.chdir(work)
        # The events' weights are their dataset's (the files alone belong to no dataset: 1).
        assert_same_events(by_id(out), by_id(read_tree(single / "dataset.root")), but=["weight"])
        assert out.weight.to_list() == [WEIGHTS[dataset]] * len(out)
        assert hists_of(work / f"dataset_hists_{dataset}.root") == hists_of(single / "dataset_hists.root")
        assert json.loads((work / f"summary_{dataset}.json").read_text())["events"] == len(out)
    # The preprocessing is cached next to the output; a second run reads no file for it.
    cache = work / "nano.preprocessed.json"
    assert len(json.loads(cache.read_text())["files"]) == 4  # nano_dy.root once
    assert not list(work.glob("*.tmp-*"))


def test_parts_merged_equal_one_full_run(fileset, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    process = cms.load_config(str(CONFIG), ["streams=1"])  # one stream: rows in input order
    plan = dict((d.name, units) for d, units in plan_datasets(process, fileset, 60))
    units = plan["TTbar"]
    assert len(units) > 4 and {u.file for u in units} == {
        str(locate_sample(n)) for n in ("nano_tt_v12.root", "nano_tt_v15.root")
    }
    results = [run_unit(process, u) for u in units]
    for r in results:
        out = dataset_output_path("dataset.root", "TTbar")
        assert set(r.parts) == {
            part_path(out, r.unit),
            part_path(dataset_output_path("dataset_hists.root", "TTbar"), r.unit),
        }
        assert all(p.exists() for p in r.parts)
    assert not list(tmp_path.rglob("*.tmp-*"))
    reports = merge_unit_parts([r.parts for r in results], remove_parts=False)
    reports = {r.target: r for r in reports}
    assert set(reports) == {Path("dataset_TTbar.root"), Path("dataset_hists_TTbar.root")}
    assert reports[Path("dataset_TTbar.root")].entries == {"Events": 400}
    assert reports[Path("dataset_hists_TTbar.root")].histograms == ("jet_pt", "ht")

    # The same config over the whole dataset in one job.
    full = tmp_path / "full"
    full.mkdir()
    monkeypatch.chdir(full)
    files = ",".join(str(locate_sample(n)) for n in ("nano_tt_v12.root", "nano_tt_v15.root"))
    assert cmsrun_main([str(CONFIG), f"inputFiles={files}", "streams=1", "--no-progress"]) == 0
    monkeypatch.chdir(tmp_path)
    merged, single = read_tree("dataset_TTbar.root"), read_tree(full / "dataset.root")
    assert len(merged) == 400 and set(merged.fields) >= {"nJet", "Jet_pt", "Jet_eta", "jetHT", *ID}
    assert_same_events(merged, single, but=["weight"])  # row by row, in input order
    assert set(merged.weight.to_list()) == {WEIGHTS["TTbar"]} and set(single.weight.to_list()) == {1.0}
    with uproot.open("dataset_TTbar.root") as a, uproot.open(full / "dataset.root") as b:
        assert {k: v.typename for k, v in a["Events"].items()} == {k: v.typename for k, v in b["Events"].items()}
    assert hists_of("dataset_hists_TTbar.root") == hists_of(full / "dataset_hists.root")

    # Merging again removes the parts and their folders.
    merge_unit_parts([r.parts for r in results])
    assert not parts_folder("dataset_TTbar.root").exists() and not parts_folder("dataset_hists_TTbar.root").exists()
    assert_same_events(read_tree("dataset_TTbar.root"), single, but=["weight"])


def test_a_unit_of_a_corrupt_file_names_file_and_range(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.root"
    data = locate_sample("nano_dy.root").read_bytes()
    bad.write_bytes(data[: len(data) // 3])
    process = cms.load_config(str(CONFIG), [])
    with pytest.raises(FileOpenError) as info:
        run_unit(process, WorkUnit("DY", str(bad), "Events", 0, 40))
    message = str(info.value)
    assert f"input file '{bad}' is truncated" in message and "entries [0, 40) of tree 'Events'" in message
    assert "\n" not in message
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p != bad]  # no part, no temporary file


def test_merge_errors_and_empty_parts(tmp_path):
    src = str(locate_sample("nano_dy.root"))
    units = split_units("DY", preprocess_file(src, "Events"), 10)
    a, b = (tmp_path / "x.root.parts" / f"{u.part_name}.root" for u in units[:2])
    a.parent.mkdir()
    first = {"run": np.ones(3, np.uint32), "Jet": ak.Array([[{"pt": 1.0}], [], [{"pt": 2.0}]])}
    with uproot.recreate(a) as f:
        f.mktree("Events", {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in first.items()})
        f["Events"].extend(first)
    with uproot.recreate(b) as f:
        f.mktree("Events", {"run": np.uint32})  # an empty part knows fewer branches: fine
    report = merge_parts([a, b], tmp_path / "x.root", remove_parts=False)
    assert report.entries == {"Events": 3}
    assert ak.to_list(read_tree(tmp_path / "x.root").Jet_pt) == [[1.0], [], [2.0]]
    with uproot.recreate(b) as f:
        f.mktree("Events", {"run": np.uint32}).extend({"run": np.ones(2, np.uint32)})
    with pytest.raises(FileReadError, match=rf"tree 'Events' of part '{b}' has other branches than in part '{a}'"):
        merge_parts([a, b], tmp_path / "y.root")
    with uproot.recreate(b) as f:
        f.mktree("other", {"x": np.float64})
    with pytest.raises(FileReadError, match=rf"part '{b}' holds 'other' \(TTree\), but part '{a}' holds 'Events'"):
        merge_parts([a, b], tmp_path / "y.root")
    with pytest.raises(ValueError, match="no parts to merge"):
        merge_parts([], tmp_path / "y.root")
    assert not (tmp_path / "y.root").exists() and a.exists() and b.exists()


def test_dataset_usage_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cmsrun_main([str(CONFIG), "--chunk-size", "5"]) == 2
    assert "--chunk-size needs --dataset" in capsys.readouterr().err
    config = tmp_path / "empty_cfg.py"
    config.write_text(
        "import framework.config as cms\nprocess = cms.Process('X')\n"
        "process.source = cms.Source('EmptySource')\nprocess.maxEvents.input = 3\n"
    )
    fs = tmp_path / "fs.json"
    fs.write_text('{"A": ["x.root"]}')
    assert cmsrun_main([str(config), "--dataset", str(fs)]) == 1
    assert (
        "--dataset needs process.source = cms.Source('PoolSource', ...); the config has source type 'EmptySource'"
        in capsys.readouterr().err
    )


def test_units_and_file_facts_are_picklable():
    import pickle

    info = preprocess_file(str(locate_sample("nano_dy.root")), "Events")
    [unit] = split_units("DY", info, 100)
    assert pickle.loads(pickle.dumps(info)) == info and pickle.loads(pickle.dumps(unit)).id == unit.id


def test_run_folders_of_a_killed_driver_are_removed_by_the_next_run(tmp_path, caplog):
    """A Dask driver killed with SIGKILL leaves ``<output>.parts/run-<owner>-<n>/``: the next
    run removes the folders whose driver is gone (one line), never those of a driver that
    still runs or of another host, nor folders without an owner tag."""
    import os
    import subprocess

    import psutil

    from framework.io import new_run_name, remove_stale_runs
    from framework.utilities import host_id, owner_tag

    final = tmp_path / "out.root"
    folder = parts_folder(final)
    gone = subprocess.Popen(["sleep", "60"])
    gone_tag = owner_tag(gone.pid)
    gone.kill()
    gone.wait()
    dead = folder / f"run-{gone_tag}-abc123"
    alive = folder / new_run_name()
    other_host = folder / f"run-{os.getpid()}-{int(psutil.Process().create_time())}-{'0' * 8}-abc123"
    untagged = folder / "run-0123456789ab"
    assert host_id() != "0" * 8
    for run in (dead, alive, other_host, untagged):
        (run / "part.root").parent.mkdir(parents=True)
        (run / "part.root").write_bytes(b"x")
    with caplog.at_level("WARNING", logger="pysonic.merge"):
        assert remove_stale_runs(final) == [dead]
    assert not dead.exists() and alive.exists() and other_host.exists() and untagged.exists()
    assert "removed 1 parts folder(s) left by runs whose driver is gone" in caplog.text


class MetadataRecorder(EDAnalyzer):
    """Records the metadata a module reads: its own at each transition, the event's per event."""

    seen: list = []

    def begin_job(self):
        self.seen.append(("begin_job", dict(self.metadata)))

    def begin_unit(self):
        self.seen.append(("begin_unit", dict(self.metadata)))

    def analyze(self, event):
        self.seen.append((str(event.id), dict(event.metadata)))


register_type("testMetadataRecorder", MetadataRecorder)


def recorder_process(files=()):
    process = cms.Process("META")
    process.source = cms.Source("PoolSource", fileNames=cms.untracked.vstring(*files))
    process.options.numberOfStreams = 2
    process.rec = cms.EDAnalyzer("testMetadataRecorder")
    process.p = cms.Path(process.rec)
    return process


def test_modules_read_the_dataset_metadata_per_unit_and_per_event(tmp_path, monkeypatch):
    """``self.metadata``: the dataset's name and fileset metadata from begin_job on;
    ``event.metadata``: coffea's per-chunk keys (file, tree, the unit's entry range) with
    them, the fileset's keys taking precedence as in coffea. Without a fileset: the file's
    keys only."""
    dy = local_sample("nano_dy.root")
    monkeypatch.chdir(tmp_path)
    meta = {"isMC": True, "xsec": 6077.22, "era": "2016", "treename": "overridden"}
    fs = tmp_path / "fs.json"
    fs.write_text(json.dumps({"DY": {"files": [dy], "metadata": meta}}))
    process = recorder_process()
    [(dataset, units)] = plan_datasets(process, fs, 15)
    assert [(u.entry_start, u.entry_stop) for u in units] == [(0, 14), (14, 28), (28, 40)]
    MetadataRecorder.seen = []
    for unit in units[1:]:  # one job per unit, as run_unit builds it
        run_unit(process, unit)
    dataset_keys = {"dataset": "DY", **meta}
    transitions = [m for what, m in MetadataRecorder.seen if what.startswith("begin")]
    assert transitions == [dataset_keys] * 4  # begin_job and begin_unit of each job
    events = [m for what, m in MetadataRecorder.seen if not what.startswith("begin")]
    ranges = [(m["entrystart"], m["entrystop"]) for m in events]
    assert ranges == [(14, 28)] * 14 + [(28, 40)] * 12
    assert all(
        m == {"dataset": "DY", "filename": dy, **meta} | {"entrystart": m["entrystart"], "entrystop": m["entrystop"]}
        for m in events
    )

    # A job over a config's own fileNames belongs to no dataset.
    MetadataRecorder.seen = []
    job = build_job(recorder_process([dy]), max_events=3)
    trio.run(run_job, job)
    assert MetadataRecorder.seen[0] == ("begin_job", {})
    assert MetadataRecorder.seen[-1][1] == {"filename": dy, "treename": "Events", "entrystart": 0, "entrystop": 40}


def test_a_simulated_dataset_without_its_weight_metadata_fails_naming_it(tmp_path, monkeypatch, capsys):
    local_sample("nano_dy.root")
    monkeypatch.chdir(tmp_path)
    fs = tmp_path / "fs.yaml"
    fs.write_text("DY:\n  files: [sample:nano_dy.root]\n  metadata: {isMC: true, xsec: 6077.22}\n")
    assert cmsrun_main([str(CONFIG), "--dataset", str(fs), "--no-progress"]) == 1
    assert (
        "module 'weight' (XsecWeightProducer): dataset 'DY' has isMC: true but no numeric 'sumw' in its fileset "
        "metadata (got None)" in capsys.readouterr().err
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fs.yaml"]  # no output, no preprocessing cache left


DOCS = ROOT / "docs" / "writing-modules.md"


def test_the_analysis_of_writing_modules_runs_as_documented(tmp_path, monkeypatch, capsys):
    """docs/writing-modules.md's producer, filter, ExternalWork, weight producer and analyzer,
    taken from the page as they are, run on a fileset with metadata: the yields it logs are
    the weights of the dataset (simulation) and 1 per event (data)."""
    import re

    for name in ("nano_dy.root", "nano_dimuon.root"):
        local_sample(name)
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), re.S)
    classes = [b for b in blocks if "\nclass " in "\n" + b and "process." not in b]
    classes = [b for b in classes if not re.search(r"class (HcalEnergySonicProducer|MyWriter|MySonic)", b)]
    package = tmp_path / "docpackage"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "analysis.py").write_text("\n\n".join(classes))
    (tmp_path / "doc_cfg.py").write_text(
        "import framework.config as cms\n"
        "process = cms.Process('DOC')\n"
        "process.source = cms.Source('PoolSource', fileNames=cms.untracked.vstring())\n"
        "process.options.numberOfThreads = 2\n"
        "process.jetHT = cms.EDProducer('docpackage.analysis:JetHTProducer')\n"
        "process.slow = cms.EDProducer('docpackage.analysis:SlowSum')\n"
        "process.weight = cms.EDProducer('docpackage.analysis:XsecWeightProducer', lumi=cms.double(1000.0))\n"
        "process.dimuon = cms.EDFilter('docpackage.analysis:DimuonFilter')\n"
        "process.yields = cms.EDAnalyzer('docpackage.analysis:YieldAnalyzer')\n"
        "process.p = cms.Path(process.jetHT * process.slow * process.weight * process.dimuon * process.yields)\n"
    )
    [fileset] = re.findall(r"```yaml\n(DYJets:.*?)```", DOCS.read_text(), re.S)
    (tmp_path / "fs.yaml").write_text(fileset)
    monkeypatch.chdir(tmp_path)
    assert cmsrun_main([str(tmp_path / "doc_cfg.py"), "--dataset", "fs.yaml", "--no-progress"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    dy = re.search(r"yields: (\d+) events, yield ([\d.]+) \(dataset DYJets\)", err)
    assert dy and float(dy[2]) == pytest.approx(int(dy[1]) * 6077.22 * 1000.0 / 40)
    data = re.search(r"yields: (\d+) events, yield ([\d.]+) \(dataset DoubleMuon\)", err)
    assert data and int(data[1]) > 0 and float(data[2]) == int(data[1])
