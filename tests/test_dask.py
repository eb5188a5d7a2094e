"""``cmsrun --executor dask`` end to end: a real LocalCluster of 2 worker processes, the real
tritonserver, real NanoAOD files.

One cluster is shared by the tests (``--scheduler`` its address), except the Ctrl-C test,
whose cmsrun starts its own in a subprocess. Outputs are compared event by event with the
single-process ``cmsrun --dataset`` run of the same config: the same (run,
luminosityBlock, event) ids in the same order (one stream: rows in input order) and the
same products. Small chunk sizes on small files make many units quickly.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import uuid
from typing import Any

import awkward as ak
import numpy as np
import pytest
import uproot

from framework.cmsrun import main as cmsrun_main

from support import kill_once_module, local_sample, processes_with_marker

distributed = pytest.importorskip("distributed")

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATASET_CFG = ROOT / "configs" / "dataset_cfg.py"
SCALE_CFG = ROOT / "framework" / "bench" / "configs" / "scale_cfg.py"
ID = ["run", "luminosityBlock", "event"]


@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster of 2 worker processes (1 thread each), shared by the tests."""
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=40
    ) as c:
        yield c.scheduler_address


@pytest.fixture(scope="module")
def tiny_repository(tmp_path_factory):
    from framework.serving.testing import write_tiny_repository

    return write_tiny_repository(tmp_path_factory.mktemp("repository"))


def write_fileset(folder: pathlib.Path, datasets: dict[str, Any]) -> pathlib.Path:
    path = folder / "fileset.json"
    path.write_text(json.dumps(datasets))
    return path


def read_tree(path: pathlib.Path) -> ak.Array:
    with uproot.open(path) as f:
        return f["Events"].arrays(library="ak")


def hists_of(path: pathlib.Path) -> dict[str, list[float]]:
    with uproot.open(path) as f:
        return {k: f[k].values(flow=True).tolist() for k in f.keys(cycle=False)}


def run(folder: pathlib.Path, monkeypatch, *argv: str) -> int:
    folder.mkdir(exist_ok=True)
    monkeypatch.chdir(folder)
    return cmsrun_main([*argv, "--no-progress"])


def assert_same_rows(a: ak.Array, b: ak.Array) -> None:
    assert a.fields == b.fields
    assert ak.to_list(a) == ak.to_list(b)


def files_under(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_merged_outputs_equal_the_single_process_run(cluster, tmp_path, monkeypatch):
    dy, dimuon, tt = local_sample("nano_dy.root"), local_sample("nano_dimuon.root"), local_sample("nano_tt_v12.root")
    # Two files in both; DY's metadata weighs its events (XsecWeightProducer, on the workers too).
    meta = {"isMC": True, "xsec": 6077.22, "sumw": 80}
    fileset = write_fileset(tmp_path, {"DY": {"files": [dy, dimuon], "metadata": meta}, "Mixed": [dimuon, tt, dy]})
    common = [str(DATASET_CFG), "streams=1", "--dataset", str(fileset), "--chunk-size", "20"]
    assert (
        run(
            tmp_path / "dask",
            monkeypatch,
            *common,
            "--executor",
            "dask",
            "--scheduler",
            cluster,
            "--summary-json",
            "summary.json",
        )
        == 0
    )
    assert run(tmp_path / "single", monkeypatch, *common) == 0
    for dataset, events in (("DY", 80), ("Mixed", 280)):
        merged = read_tree(tmp_path / "dask" / f"dataset_{dataset}.root")
        single = read_tree(tmp_path / "single" / f"dataset_{dataset}.root")
        assert len(merged) == events and set(merged.fields) >= {*ID, "Jet_pt", "jetHT"}
        assert_same_rows(merged, single)  # ids in the same order, same products
        weight = 6077.22 * 1000.0 / 80 if dataset == "DY" else 1.0  # configs/dataset_cfg.py's lumi: 1000 pb^-1
        assert merged.weight.to_list() == [weight] * events
        ids = list(zip(*(merged[b].to_list() for b in ID), strict=True))
        assert len(set(ids)) == len(ids)  # every event exactly once
        assert hists_of(tmp_path / "dask" / f"dataset_hists_{dataset}.root") == hists_of(
            tmp_path / "single" / f"dataset_hists_{dataset}.root"
        )
    summary = json.loads((tmp_path / "dask" / "summary.json").read_text())
    assert summary["events"] == 360 and summary["paths"][0]["visited"] == 360
    # What the workers' jobs ran with (streams=1; numberOfThreads: CMSSW's default 1), and
    # the whole run's wall time beside that of its units and merge.
    assert (summary["streams"], summary["threads"]) == (1, 1)
    assert summary["job_wall_time"] > summary["wall_time"] > 0
    assert summary["units"]["done"] == summary["units"]["total"] == 18 and not summary["units"]["skipped"]
    assert sum(w["events"] for w in summary["workers"].values()) == 360
    assert summary["latency"]["p50"] > 0 and summary["modules"]["jetHT"]["calls"] == 360
    # Nothing but the outputs, the summary and the preprocessing cache is left.
    assert {p.name for p in files_under(tmp_path / "dask")} == {
        "summary.json",
        "fileset.preprocessed.json",
        "dataset_DY.root",
        "dataset_Mixed.root",
        "dataset_hists_DY.root",
        "dataset_hists_Mixed.root",
    }


def test_a_worker_killed_mid_unit_changes_nothing(cluster, tmp_path, monkeypatch):
    marker = tmp_path / "killed"
    (tmp_path / "killer.py").write_text(kill_once_module(marker, "str(event.id)"))
    config = tmp_path / "kill_cfg.py"
    config.write_text(SCALE_CFG.read_text())  # next to killer.py: "killer:KillOnce" is importable
    fileset = write_fileset(tmp_path, {"K": [local_sample("nano_dy.root"), local_sample("nano_dimuon.root")]})
    common = [str(config), "cpuTime=1", "extra=killer:KillOnce", "--dataset", str(fileset), "--chunk-size", "20"]
    assert (
        run(
            tmp_path / "dask",
            monkeypatch,
            *common,
            "--executor",
            "dask",
            "--scheduler",
            cluster,
            "--keep-parts",
            "--summary-json",
            "summary.json",
        )
        == 0
    )
    assert marker.exists()  # a worker did die
    summary = json.loads((tmp_path / "dask" / "summary.json").read_text())
    # Dask reran the unit that was running (and any queued) on the dead worker.
    assert summary["units"]["retried"] and summary["events"] == 80
    assert run(tmp_path / "single", monkeypatch, *common) == 0  # the marker exists: nobody dies
    assert_same_rows(read_tree(tmp_path / "dask" / "scale_K.root"), read_tree(tmp_path / "single" / "scale_K.root"))
    # --keep-parts: the parts and their manifest, but no temporary file of the killed worker.
    parts = tmp_path / "dask" / "scale_K.root.parts"
    manifest = json.loads((parts / "manifest.json").read_text())
    assert [(u["entry_start"], u["entry_stop"]) for u in manifest["units"]] == [(0, 20), (20, 40)] * 2
    assert sum(u["events"] for u in manifest["units"]) == 80
    assert sorted(p.name for p in parts.iterdir()) == sorted(
        ["manifest.json", *(pathlib.Path(u["part"]).name for u in manifest["units"])]
    )


def test_a_worker_killed_mid_unit_leaves_every_event_once_and_no_part(cluster, tmp_path, monkeypatch):
    """Without --keep-parts: the merged output holds every event once, and 10 s after
    cmsrun returned no parts folder nor part file exists (a unit recomputed late would
    have written into a re-created one)."""
    marker = tmp_path / "killed"
    killer = f"killer_{uuid.uuid4().hex}"  # a module name the shared workers have not imported yet
    (tmp_path / f"{killer}.py").write_text(kill_once_module(marker, "str(event.id)"))
    config = tmp_path / "kill_cfg.py"
    config.write_text(SCALE_CFG.read_text())
    fileset = write_fileset(tmp_path, {"K": [local_sample("nano_dy.root"), local_sample("nano_dimuon.root")]})
    common = [str(config), "cpuTime=1", f"extra={killer}:KillOnce", "--dataset", str(fileset), "--chunk-size", "20"]
    dask_args = ["--executor", "dask", "--scheduler", cluster, "--summary-json", "summary.json"]
    assert run(tmp_path / "dask", monkeypatch, *common, *dask_args) == 0
    assert marker.exists()  # a worker did die, in the middle of a unit (its 3rd event)
    assert json.loads((tmp_path / "dask" / "summary.json").read_text())["units"]["retried"]
    assert run(tmp_path / "single", monkeypatch, *common) == 0  # the marker exists: nobody dies
    merged, single = read_tree(tmp_path / "dask" / "scale_K.root"), read_tree(tmp_path / "single" / "scale_K.root")
    assert_same_rows(merged, single)  # event by event, in input order
    ids = list(zip(*(merged[b].to_list() for b in ID), strict=True))
    assert len(ids) == len(set(ids)) == 80  # every event once
    time.sleep(10)
    assert not [p for p in (tmp_path / "dask").rglob("*.parts*")]  # no parts folder
    assert {p.name for p in files_under(tmp_path / "dask")} == {
        "summary.json",
        "fileset.preprocessed.json",
        "scale_K.root",
    }


def test_a_unit_run_after_the_merge_writes_nothing(cluster, tmp_path, monkeypatch):
    """A unit's task run again once cmsrun has merged (as Dask does when a result is lost
    with a worker) finds the run's parts folder gone: it writes nothing."""
    submitted = []
    real_submit = distributed.Client.submit

    def recording_submit(self, function, *args, **kwargs):
        if getattr(function, "__name__", "") == "run_unit_task":
            submitted.append((function, args))
        return real_submit(self, function, *args, **kwargs)

    monkeypatch.setattr(distributed.Client, "submit", recording_submit)
    fileset = write_fileset(tmp_path, {"DY": [local_sample("nano_dy.root")]})
    folder = tmp_path / "dask"
    common = [str(DATASET_CFG), "streams=1", "--dataset", str(fileset), "--chunk-size", "20"]
    assert run(folder, monkeypatch, *common, "--executor", "dask", "--scheduler", cluster) == 0
    assert len(submitted) == 2  # 40 events, 2 units
    before = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    with distributed.Client(cluster) as client:
        outcomes = client.gather([real_submit(client, f, *args, pure=False) for f, args in submitted])
    assert [(o.discarded, o.parts, o.record, o.error) for o in outcomes] == [(True, (), None, "")] * 2
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == before  # nothing written, nothing re-created


def test_the_dashboard_line_only_with_a_dashboard(cluster, tmp_path):
    """cmsrun names the dashboard of a cluster that has one (and it answers), and none
    for a cluster started without one."""
    import io
    import urllib.error
    import urllib.request

    from rich.console import Console

    from framework.cmsrun.executor import DaskOptions
    from framework.cmsrun.executor._dask import _open_cluster

    def opening_line(address: str) -> str:
        out = io.StringIO()
        options = DaskOptions(config="", args=[], fileset="", chunk_size=1, scheduler=address)
        _cluster, client = _open_cluster(options, Console(file=out, width=300))
        client.close()
        return out.getvalue()

    line = opening_line(cluster)
    assert "dashboard: http://" in line
    link = line.split("dashboard: ")[1].split()[0]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(link, timeout=30) as response:
        assert response.status == 200
    with distributed.LocalCluster(  # as `dask scheduler --no-dashboard`: its HTTP server runs, without /status
        n_workers=1, threads_per_worker=1, processes=False, scheduler_kwargs={"dashboard": False}, silence_logs=40
    ) as bare:
        line = opening_line(bare.scheduler_address)
        with pytest.raises(urllib.error.HTTPError, match="404"):
            opener.open(bare.dashboard_link, timeout=30)  # the address it would have printed
    assert f"Dask scheduler {bare.scheduler_address}, 1 worker(s)" in line and "dashboard" not in line


def wait_for_both_workers(address: str) -> None:
    """The shared cluster's 2 workers, both up: a worker SIGKILLed by an earlier test is
    restarted by its nanny, which takes a few seconds."""
    with distributed.Client(address, timeout=60) as client:
        client.wait_for_workers(2, timeout=60)


def test_one_fallback_server_per_host(cluster, tiny_repository, tmp_path, monkeypatch, left_behind):
    wait_for_both_workers(cluster)
    fileset = write_fileset(tmp_path, {"S": [local_sample("nano_dy.root"), local_sample("nano_dimuon.root")]})
    assert (
        run(
            tmp_path,
            monkeypatch,
            str(SCALE_CFG),
            "cpuTime=1",
            "sonic=1",
            f"repository={tiny_repository}",
            "--dataset",
            str(fileset),
            "--chunk-size",
            "10",
            "--executor",
            "dask",
            "--scheduler",
            cluster,
            "--summary-json",
            "summary.json",
        )
        == 0
    )
    summary = json.loads((tmp_path / "summary.json").read_text())
    hosts = summary["host_servers"]
    assert len(hosts) == 2 and len(set(hosts.values())) == 1  # both workers found the same server
    triton = summary["services"]["TritonService"]
    assert set(triton["servers"]) == {"hostFallback"}  # no worker started a fallback of its own
    assert triton["servers"]["hostFallback"]["requests"] == 80 and triton["workers"] == 2
    [(key, served)] = triton["models"].items()  # Triton's own counters: every request on the one server
    assert key == f"tiny @ hostFallback@{hosts.popitem()[1]}" and served["requests"] == 80
    out = read_tree(tmp_path / "scale_S.root")
    assert np.array_equal(np.asarray(out.tiny), np.asarray(out.event).astype(np.float32))  # echoed as float32
    # The server is stopped with the run (the nannies' teardown): none of the session's is left.
    tag = f"pysonic-{os.environ['PYSONIC_SHM_TAG']}-"
    deadline = time.monotonic() + 10
    while left_behind(tag) != ([], []) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left_behind(tag) == ([], [])


@pytest.fixture
def corrupt_file(tmp_path) -> pathlib.Path:
    """nano_dy.root with its Jet_pt basket overwritten: metadata fine, the data unreadable."""
    good = pathlib.Path(local_sample("nano_dy.root"))
    data = bytearray(good.read_bytes())
    with uproot.open(good) as f:
        branch = f["Events"]["Jet_pt"]
        for seek, size in zip(branch.member("fBasketSeek"), branch.member("fBasketBytes"), strict=False):
            if size:
                data[int(seek) : int(seek) + int(size)] = b"\xff" * int(size)
    bad = tmp_path / "bad.root"
    bad.write_bytes(bytes(data))
    return bad


def test_a_corrupt_file_stops_the_run_or_is_skipped(cluster, corrupt_file, tmp_path, monkeypatch, capsys):
    fileset = write_fileset(tmp_path, {"C": [local_sample("nano_dimuon.root"), str(corrupt_file)]})
    common = [
        str(DATASET_CFG),
        "--dataset",
        str(fileset),
        "--chunk-size",
        "20",
        "--executor",
        "dask",
        "--scheduler",
        cluster,
    ]
    (tmp_path / "skip").mkdir()
    assert run(tmp_path / "stop", monkeypatch, *common) == 1
    err = capsys.readouterr().err
    fatal = err.split("Begin Fatal Exception -----\n")[1].split("\n")[0]
    assert str(corrupt_file) in fatal and "entries [" in fatal and "Jet_pt" in fatal
    # No part, no output, no preprocessing cache: a failed run leaves the folder as it found it
    assert [p.name for p in files_under(tmp_path / "stop")] == []

    # Skipped too: a truncated file, whose metadata cannot be read (preprocessing).
    truncated = tmp_path / "truncated.root"
    truncated.write_bytes(corrupt_file.read_bytes()[:20000])
    common[2] = str(
        write_fileset(tmp_path / "skip", {"C": [local_sample("nano_dimuon.root"), str(corrupt_file), str(truncated)]})
    )
    assert run(tmp_path / "skip", monkeypatch, *common, "--skip-bad-files", "--summary-json", "s.json") == 0
    summary = json.loads((tmp_path / "skip" / "s.json").read_text())
    skipped = summary["units"]["skipped"]
    assert {s["file"] for s in skipped} == {str(corrupt_file)} and sum(s["events"] for s in skipped) == 40
    [skipped_file] = summary["units"]["skipped_files"]
    assert skipped_file["file"] == str(truncated) and "truncated" in skipped_file["error"]
    assert summary["events"] == 40 and len(read_tree(tmp_path / "skip" / "dataset_C.root")) == 40


def test_ctrl_c_leaves_no_process_part_or_server(tiny_repository, tmp_path, left_behind):
    marker = uuid.uuid4().hex
    temp = tmp_path / "tmp"
    temp.mkdir()
    links = []
    for i in range(6):  # a file is listed once per dataset: links make six files of it
        links.append(tmp_path / f"pfnano_{i}.root")
        links[-1].symlink_to(local_sample("pfnano.root"))
    fileset = write_fileset(tmp_path, {"I": [str(link) for link in links]})
    env = {**os.environ, "TMPDIR": str(temp), "PYSONIC_TEST_MARKER": marker}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "framework.cmsrun",
            str(SCALE_CFG),
            "cpuTime=200",
            "sonic=1",
            f"repository={tiny_repository}",
            "--dataset",
            str(fileset),
            "--chunk-size",
            "2",
            "--executor",
            "dask",
            "--workers",
            "2",
            "--no-progress",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("scale_I.root.parts/*/*.root")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode()
            time.sleep(0.2)
        assert list(temp.glob("pysonic-triton-*.json"))  # the host server runs
        proc.send_signal(signal.SIGINT)
        output = proc.communicate(timeout=60)[0].decode()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    assert "interrupted (SIGINT)" in output
    deadline = time.monotonic() + 10
    while processes_with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with_marker(marker) == []  # no worker, nanny or server
    assert not list(tmp_path.glob("scale_I*")) and not list(temp.glob("pysonic-triton-*.json"))
    assert left_behind(f"pysonic-{os.environ['PYSONIC_SHM_TAG']}-") == ([], [])


def test_usage_errors(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cmsrun_main([str(DATASET_CFG), "--executor", "dask"]) == 2  # no --dataset
    assert cmsrun_main([str(DATASET_CFG), "--workers", "2"]) == 2  # no --executor dask
    assert "--executor dask needs --dataset" in capsys.readouterr().err


def test_a_run_summary_without_units_applies_the_builders_rule():
    """No unit ran: streams and threads are the builder's (0 threads: this machine's cores;
    0 streams: as many as threads), never the config's 0."""
    import framework.config as cms
    from framework.cmsrun.executor import JobSpec
    from framework.cmsrun.executor._report import run_summary
    from framework.core import available_cores

    process = cms.Process("X")
    process.options.numberOfThreads = 0
    process.options.numberOfStreams = 0
    spec = JobSpec("cfg.py", (), None, None, "/")
    summary = run_summary(process, spec, [], {}, [], {}, [], 1.0, {}, job_wall_time=2.0)
    assert summary["streams"] == summary["threads"] == available_cores()
    assert (summary["wall_time"], summary["job_wall_time"]) == (1.0, 2.0)


def test_max_events_and_skip_events_cut_the_units_as_without_dask(cluster, tmp_path, monkeypatch):
    """maxEvents and skipEvents apply per dataset with --executor dask as without it: the
    dataset's units are cut at them (-n overrides maxEvents in both)."""
    config = tmp_path / "limited_cfg.py"
    config.write_text(
        f"exec(open({str(DATASET_CFG)!r}).read())\n"
        "process.maxEvents.input = 100\n"
        "process.source.skipEvents = cms.untracked.uint32(5)\n"
    )
    dy, dimuon = local_sample("nano_dy.root"), local_sample("nano_dimuon.root")
    fileset = write_fileset(tmp_path, {"Two": [dimuon, dy]})  # 80 events, units of 20
    common = [str(config), "streams=1", "--dataset", str(fileset), "--chunk-size", "20", "-n", "42"]
    dask = ["--executor", "dask", "--scheduler", cluster, "--summary-json", "summary.json"]
    assert run(tmp_path / "dask", monkeypatch, *common, *dask) == 0
    assert run(tmp_path / "single", monkeypatch, *common) == 0
    merged = read_tree(tmp_path / "dask" / "dataset_Two.root")
    assert_same_rows(merged, read_tree(tmp_path / "single" / "dataset_Two.root"))
    assert len(merged) == 42  # entries [5, 47) of the dataset: 3 units, the first and last cut
    summary = json.loads((tmp_path / "dask" / "summary.json").read_text())
    assert summary["events"] == 42 and summary["units"]["done"] == 3


UNDECLARED = """
import pathlib
from framework import EDAnalyzer

class CountsPerUnit(EDAnalyzer):
    \"\"\"Writes its count to counts.txt at the end of every run of events; declares nothing.\"\"\"
    def begin_unit(self):
        self.n = 0
    def analyze(self, event):
        self.n += 1
    def end_unit(self):
        pathlib.Path("counts.txt").write_text(str(self.n))

class CountsAtEnd(CountsPerUnit):
    \"\"\"Writes its count to counts.txt in end_job; declares nothing.\"\"\"
    def end_unit(self):
        pass
    def end_job(self):
        pathlib.Path("counts.txt").write_text(str(self.n))
"""


@pytest.mark.parametrize(
    ("module", "found"),
    [("CountsPerUnit", "was written during work unit entries ["), ("CountsAtEnd", "was written during the run")],
)
def test_a_module_writing_an_undeclared_file_fails_the_run(cluster, tmp_path, monkeypatch, capsys, module, found):
    """Without Dask the file would hold the whole count; with it, one worker's. The run
    fails in one line naming the file, and commits nothing: the previous outputs stay."""
    name = f"undeclared_{uuid.uuid4().hex}"  # a module the shared workers have not imported yet
    (tmp_path / f"{name}.py").write_text(UNDECLARED)
    config = tmp_path / "counts_cfg.py"
    config.write_text(
        f"exec(open({str(DATASET_CFG)!r}).read())\n"
        f"process.counter = cms.EDAnalyzer('{name}:{module}')\n"
        "process.counting = cms.EndPath(process.counter)\n"
    )
    fileset = write_fileset(tmp_path, {"DY": [local_sample("nano_dy.root")]})
    folder = tmp_path / "run"
    folder.mkdir()
    previous = {f: (folder / f).write_bytes(b"a previous run's " + f.encode()) for f in ("dataset_DY.root", "s.json")}
    args = [str(config), "--dataset", str(fileset), "--chunk-size", "20", "--summary-json", "s.json"]
    assert run(folder, monkeypatch, *args, "--executor", "dask", "--scheduler", cluster) == 1
    err = capsys.readouterr().err
    fatal = err.split("Begin Fatal Exception -----\n")[1].split("\n")
    assert f"'{folder / 'counts.txt'}' {found}" in fatal[0] and "no module declares it" in fatal[0]
    assert "End Fatal Exception" in fatal[1] and "Traceback" not in err
    assert {f: (folder / f).read_bytes() for f in previous} == {f: b"a previous run's " + f.encode() for f in previous}
    assert not list(folder.rglob("*.parts")) and not list(folder.glob("*.tmp-*"))


def test_tfileservice_merged_equals_the_single_process_file(cluster, tmp_path, monkeypatch):
    """TFileService's file (a user's analyzer booking a histogram, a per-event table and a
    histogram in a sub-directory; a HistogramAnalyzer through the service): the units'
    parts merged per dataset equal the single-process file exactly, bin by bin and entry by
    entry (one stream: entries in input order)."""
    from test_tfileservice import analysis_config

    module = f"jetpt_{uuid.uuid4().hex}"  # a module the shared workers have not imported yet
    config = analysis_config(tmp_path, module=module, fill_at_end=False)
    fileset = write_fileset(tmp_path, {"DY": [local_sample("nano_dy.root")]})  # 40 events: 2 units, 2 parts
    common = [str(config), "streams=1", "--dataset", str(fileset), "--chunk-size", "20"]
    assert run(tmp_path / "dask", monkeypatch, *common, "--executor", "dask", "--scheduler", cluster) == 0
    assert run(tmp_path / "single", monkeypatch, *common) == 0
    with (
        uproot.open(tmp_path / "dask" / "analysis_DY.root") as merged,
        uproot.open(tmp_path / "single" / "analysis_DY.root") as single,
    ):
        layout = {k: v for k, v in single.classnames(cycle=False).items() if v != "TDirectory"}
        assert {k: v for k, v in merged.classnames(cycle=False).items() if v != "TDirectory"} == layout
        assert set(layout) == {"jetPt/pt", "jetPt/events", "jetPt/summary/njet", "fsHists/jet_pt", "fsHists/ht"}
        for name in ("jetPt/pt", "fsHists/jet_pt", "fsHists/ht"):
            assert merged[name].values(flow=True).tolist() == single[name].values(flow=True).tolist(), name
            assert merged[name].axis().edges().tolist() == single[name].axis().edges().tolist()
        assert merged["jetPt/pt"].values().sum() > 0
        assert ak.to_list(merged["jetPt/events"].arrays()) == ak.to_list(single["jetPt/events"].arrays())
        assert merged["jetPt/events"].num_entries == 40


def test_tfileservice_objects_filled_in_end_job_fail_the_run(cluster, tmp_path, monkeypatch, capsys):
    """Under Dask a part is written after each unit: what a module fills in end_job would
    be lost; the run says so in one line and commits nothing."""
    from test_tfileservice import analysis_config

    config = analysis_config(tmp_path, module=f"jetpt_{uuid.uuid4().hex}", fill_at_end=True)
    fileset = write_fileset(tmp_path, {"DY": [local_sample("nano_dy.root")]})
    args = [str(config), "--dataset", str(fileset), "--executor", "dask", "--scheduler", cluster]
    assert run(tmp_path / "dask", monkeypatch, *args) == 1
    err = capsys.readouterr().err
    fatal = err.split("Begin Fatal Exception -----\n")[1].split("\n")[0]
    assert "TFileService: 'jetPt/summary/njet' was filled after the last work unit's part was written" in fatal
    assert not list((tmp_path / "dask").glob("*.root*"))
