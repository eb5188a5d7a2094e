"""Bad output paths: found when the job is built, before the first event, and nothing written.

The job is ``configs/dataset_cfg.py`` on a copy of a real NanoAOD file (``nano_dy.root``
from ``framework.io.samples``): its NanoAOD output (``outputFile``), its histograms
(``histFile``), ``--summary-json``, and a FastTimerService trace added by a small config
that loads it. Each case asserts exit code 1, one line naming the parameter and path, no
event processed, the input's bytes unchanged and nothing else in the folder.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest
import uproot
from test_bad_inputs import Result, cmsrun  # noqa: F401 - cmsrun is a fixture

from framework.io import remove_stale_temporaries, temporary_name
from framework.io.samples import locate_sample
from framework.utilities import host_id

from support import cmsrun_process

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "dataset_cfg.py"
OUT = "OutputModule 'out' (type NanoAODOutputModule): parameter 'fileName'"
HISTS = "EDAnalyzer 'hists' (type HistogramAnalyzer): parameter 'fileName'"
TRACE = "Service 'FastTimerService' (type FastTimerService): parameter 'traceFile'"


@pytest.fixture
def folder(tmp_path) -> pathlib.Path:
    """A folder with ``in.root``: a copy of a real NanoAOD file."""
    (tmp_path / "in.root").write_bytes(locate_sample("nano_dy.root").read_bytes())
    return tmp_path


def digest(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def traced_config(folder: pathlib.Path, trace: str) -> pathlib.Path:
    config = folder / "traced_cfg.py"
    config.write_text(
        f"exec(open({str(CONFIG)!r}).read())\n"
        f"process.FastTimerService = cms.Service('FastTimerService', traceFile=cms.untracked.string({trace!r}))\n"
    )
    return config


CASES = {
    # name: (arguments, expected message (format: {d} the folder), files the case makes first)
    "output is the input": (
        ["outputFile=in.root"],
        f"{OUT}: 'in.root' is the input file 'in.root'; writing it would replace the input",
    ),
    "histograms are the input": (["histFile=in.root"], f"{HISTS}: 'in.root' is the input file 'in.root'"),
    "output is the input, other spelling": (
        ["outputFile=./sub/../in.root"],
        f"{OUT}: 'sub/../in.root' is the input file 'in.root'",
    ),
    "output is the input by absolute path": (
        ["outputFile={d}/in.root"],
        f"{OUT}: '{{d}}/in.root' is the input file 'in.root'",
    ),
    "input given as file:": (
        ["inputFiles=file:in.root", "outputFile=in.root"],
        f"{OUT}: 'in.root' is the input file 'in.root'",
    ),
    "output is a symlink to the input": (["outputFile=link.root"], f"{OUT}: 'link.root' is the input file 'in.root'"),
    "output is a hard link to the input": (["outputFile=hard.root"], f"{OUT}: 'hard.root' is the input file 'in.root'"),
    "input is a symlink to the output": (
        ["inputFiles=link.root", "outputFile=in.root"],
        f"{OUT}: 'in.root' is the input file 'link.root'",
    ),
    "two outputs, one file": (
        ["outputFile=same.root", "histFile=same.root"],
        f"{HISTS} and {OUT} both write 'same.root'; each output needs a file of its own",
    ),
    "summary json is the output": (
        ["outputFile=s.json", "--summary-json", "s.json"],
        f"{OUT} and --summary-json both write 's.json'",
    ),
    "summary json is the input": (
        ["--summary-json", "in.root"],
        "--summary-json: 'in.root' is the input file 'in.root'",
    ),
    "output is a folder": (["outputFile=sub"], f"{OUT}: cannot write 'sub' (it is a folder)"),
    "histograms in a missing folder": (
        ["histFile=nosuch/h.root"],
        f"{HISTS}: cannot write 'nosuch/h.root' (folder 'nosuch' does not exist)",
    ),
    "output under a file": (
        ["outputFile=in.root/o.root"],
        f"{OUT}: cannot write 'in.root/o.root' (folder 'in.root' is a file, not a folder)",
    ),
    "summary json in a missing folder": (
        ["--summary-json", "nosuch/s.json"],
        "--summary-json: cannot write 'nosuch/s.json' (folder 'nosuch' does not exist)",
    ),
    "summary json is a folder": (["--summary-json", "sub"], "--summary-json: cannot write 'sub' (it is a folder)"),
    "output is a FIFO (as /dev/null is a device)": (
        ["outputFile=fifo"],
        f"{OUT}: cannot write 'fifo' (it is a FIFO; outputs are written to a temporary file renamed into place, "
        "which would replace it)",
    ),
    "output in a read-only folder": (
        ["outputFile=/proc/sys/o.root"],
        f"{OUT}: cannot write '/proc/sys/o.root' (folder '/proc/sys' is not writable)",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_output_path(cmsrun, folder, case):  # noqa: F811 - the fixture
    args, expected = CASES[case]
    (folder / "sub").mkdir()
    (folder / "link.root").symlink_to("in.root")
    os.link(folder / "in.root", folder / "hard.root")
    os.mkfifo(folder / "fifo")
    before = digest(folder / "in.root")
    listing = sorted(p.name for p in folder.rglob("*"))
    inputs = [] if any(a.startswith("inputFiles=") for a in args) else ["inputFiles=in.root"]
    result: Result = cmsrun(CONFIG, *inputs, *(a.format(d=folder) for a in args), cwd=folder)
    assert result.code == 1, result.stderr[-3000:]
    assert expected.format(d=folder) in result.message
    assert "Processed the" not in result.stderr  # no event ran
    assert digest(folder / "in.root") == before
    assert sorted(p.name for p in folder.rglob("*")) == listing, "something was written"


@pytest.mark.parametrize(
    ("trace", "expected"),
    [
        ("in.root", f"{TRACE}: 'in.root' is the input file 'in.root'"),
        ("nosuch/t.json", f"{TRACE}: cannot write 'nosuch/t.json' (folder 'nosuch' does not exist)"),
        ("dataset.root", f"{OUT} and {TRACE} both write 'dataset.root'"),
    ],
)
def test_bad_trace_file(cmsrun, folder, trace, expected):  # noqa: F811 - the fixture
    result = cmsrun(traced_config(folder, trace), "inputFiles=in.root", cwd=folder)
    assert result.code == 1, result.stderr[-3000:]
    assert expected in result.message
    assert sorted(p.name for p in folder.iterdir()) == ["in.root", "traced_cfg.py"]


def test_good_outputs_beside_the_input_every_event_once(cmsrun, folder):  # noqa: F811 - the fixture
    result = cmsrun(CONFIG, "inputFiles=in.root", "outputFile=o.root", "histFile=h.root", "-n", "40", cwd=folder)
    assert result.code == 0, result.stderr[-3000:]
    events = uproot.open(folder / "o.root")["Events"]["event"].array(library="np")
    assert len(events) == len(set(events.tolist())) and len(events) <= 40
    assert sorted(p.name for p in folder.iterdir()) == ["h.root", "in.root", "o.root"]


def test_temporary_names_differ_per_output_and_name_their_owner(tmp_path):
    a, b = temporary_name(tmp_path / "o.root"), temporary_name(tmp_path / "o.root")
    assert a != b
    pid, start, host, _ = a.name.removeprefix("o.root.tmp-").split("-")
    assert int(pid) == os.getpid() and abs(int(start) - time.time()) < 10 * 24 * 3600 and host == host_id()


def test_stale_temporaries_removed_running_ones_kept(cmsrun, folder):  # noqa: F811 - the fixture
    mine = temporary_name(folder / "o.root")  # this process is alive: kept
    host = host_id()
    reused = folder / f"o.root.tmp-{os.getpid()}-1000-{host}-0"  # this pid, another start time: gone
    gone = folder / f"h.root.tmp-999999999-1700000000-{host}-3"  # no such pid
    kept = [
        mine.name,
        "o.root.tmp-999999999",  # an older version's name: whose it is cannot be told
        "o.root.tmp-999999999-1700000000-0badf00d-0",  # another host's job: not seen from here
    ]
    for path in (reused, gone, *(folder / name for name in kept)):
        path.write_bytes(b"x")
    result = cmsrun(CONFIG, "inputFiles=in.root", "outputFile=o.root", "histFile=h.root", "-n", "5", cwd=folder)
    assert result.code == 0, result.stderr[-3000:]
    assert "removed 2 temporary output(s) left by jobs that are gone" in result.stderr
    assert sorted(p.name for p in folder.iterdir()) == sorted(["in.root", "o.root", "h.root", *kept])
    assert remove_stale_temporaries([folder]) == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--summary-json", "cfg.py"],
            "--summary-json: 'cfg.py' is the config file 'cfg.py'; writing it would replace it",
        ),
        (["histFile=cfg.py"], f"{HISTS}: 'cfg.py' is the config file 'cfg.py'"),
        (  # with --executor dask the run's summary is not named per dataset; no cluster starts
            ["--dataset", "fs.yaml", "--executor", "dask", "--summary-json", "fs.yaml"],
            "--summary-json: 'fs.yaml' is the fileset 'fs.yaml'",
        ),
    ],
    ids=["summary json", "histograms", "fileset"],
)
def test_output_that_is_the_config_or_the_fileset(cmsrun, folder, args, expected):  # noqa: F811 - the fixture
    # They are the job's inputs too: a typo there would replace the user's config with a ROOT
    # file or a JSON summary, as an output named after an input file would replace it.
    (folder / "cfg.py").write_text(CONFIG.read_text())
    (folder / "fs.yaml").write_text("DY:\n  files:\n    in.root: Events\n")
    before = {p.name: digest(p) for p in folder.iterdir()}
    result = cmsrun(pathlib.Path("cfg.py"), "inputFiles=in.root", *args, cwd=folder)
    assert result.code == 1, result.stderr[-3000:]
    assert expected in result.message
    assert {p.name: digest(p) for p in folder.iterdir()} == before


@pytest.mark.parametrize("executor", ["sequential", "dask"])
def test_dataset_output_that_is_an_input_found_before_any_work(cmsrun, folder, executor):  # noqa: F811
    # With --dataset the output is named per dataset: outputFile=x.root writes x_DY.root.
    (folder / "in.root").rename(folder / "x_DY.root")
    (folder / "fs.yaml").write_text("DY:\n  files:\n    x_DY.root: Events\n")
    before = digest(folder / "x_DY.root")
    result = cmsrun(CONFIG, "--dataset", "fs.yaml", "--executor", executor, "outputFile=x.root", cwd=folder)
    assert result.code == 1, result.stderr[-3000:]
    assert f"{OUT}: 'x_DY.root' is the input file '{folder / 'x_DY.root'}'" in result.message
    assert digest(folder / "x_DY.root") == before
    assert sorted(p.name for p in folder.iterdir()) == ["fs.yaml", "x_DY.root"]  # no cache, no parts


# ------------------------------------------------------------------ the commit of a job's outputs
#
# A job's outputs are renamed into place only when the whole job succeeded (framework/utilities/_commit.py):
# a job failing after the output module closed its file, on a full disk, or stopped by a
# signal, leaves the previous good files as they were and no temporary file.

FAULTS = '''
import pathlib, time
from framework import EDAnalyzer

class FailInEndJob(EDAnalyzer):
    """Raises in end_job: after every module's end_unit (the output module's file is closed)."""
    def analyze(self, event):
        pass
    def end_job(self):
        raise RuntimeError("the counts do not add up")

class Slow(EDAnalyzer):
    """Touches ``marker`` when it gets to ``where`` (the first event, or end_job), then waits."""
    def __init__(self, params):
        self.where = params.get("where", "end_job")
    @classmethod
    def fill_descriptions(cls, desc):
        import framework.config as cms
        desc.add("where", cms.untracked.string("end_job"), "event or end_job")
    def analyze(self, event):
        if self.where == "event":
            pathlib.Path("marker").touch()
            time.sleep(0.5)
    def end_job(self):
        if self.where == "end_job":
            pathlib.Path("marker").touch()
            time.sleep(3)  # the signal comes meanwhile; the job sees it once end_job returns

class CountsToFile(EDAnalyzer):
    """Writes its count to ``countsFile`` in end_job, and does not declare it."""
    @classmethod
    def fill_descriptions(cls, desc):
        import framework.config as cms
        desc.add("countsFile", cms.untracked.string("counts.txt"), "where the count goes")
    def __init__(self, params):
        self.file, self.n = params.countsFile, 0
    def analyze(self, event):
        self.n += 1
    def end_job(self):
        pathlib.Path(self.file).write_text(str(self.n))
'''


def faulty_config(folder: pathlib.Path, module: str, trace: bool = True, **params: str) -> pathlib.Path:
    """dataset_cfg.py with one more analyzer ``faults:<module>`` and (``trace``) a
    FastTimerService trace, so that every kind of output is there: event file, histograms,
    trace."""
    (folder / "faults.py").write_text(FAULTS)
    config = folder / "faulty_cfg.py"
    args = ", ".join(f"{k}=cms.untracked.string({v!r})" for k, v in params.items())
    timer = "process.FastTimerService = cms.Service('FastTimerService', traceFile=cms.untracked.string('t.json'))\n"
    config.write_text(
        f"exec(open({str(CONFIG)!r}).read())\n"
        + (timer if trace else "")
        + f"process.fault = cms.EDAnalyzer('faults:{module}'{', ' + args if args else ''})\n"
        "process.faultPath = cms.EndPath(process.fault)\n"
    )
    return config


GOOD = ["inputFiles=in.root", "outputFile=o.root", "histFile=h.root", "--summary-json", "s.json"]
OUTPUTS = ("o.root", "h.root", "s.json", "t.json")


@pytest.fixture
def previous(cmsrun, folder) -> dict[str, str]:  # noqa: F811 - the fixture
    """The outputs of a good job in ``folder``: their digests by name."""
    result = cmsrun(traced_config(folder, "t.json"), *GOOD, "-n", "10", cwd=folder)
    assert result.code == 0, result.stderr[-3000:]
    return {name: digest(folder / name) for name in OUTPUTS}


def assert_previous_intact(folder: pathlib.Path, previous: dict[str, str]) -> None:
    assert {name: digest(folder / name) for name in OUTPUTS} == previous, "a previous output was replaced"
    left = sorted(p.name for p in folder.iterdir() if ".tmp-" in p.name)
    assert not left, f"temporary files left: {left}"


def test_end_job_failing_after_the_outputs_closed_keeps_the_previous_ones(cmsrun, folder, previous):  # noqa: F811
    result = cmsrun(faulty_config(folder, "FailInEndJob"), *GOOD, cwd=folder)
    assert result.code == 1, result.stderr[-3000:]
    assert (
        result.message == "[RuntimeError] EDAnalyzer 'fault' (type faults:FailInEndJob): end_job() failed: "
        "RuntimeError: the counts do not add up"
    )
    assert "Traceback" not in result.stderr
    assert "its outputs were not written" in result.stderr
    assert_previous_intact(folder, previous)


def test_modules_on_no_path_do_not_run_and_keep_the_previous_outputs(cmsrun, folder, previous):  # noqa: F811
    """CMSSW removes an analyzer or output module that is on no Path or EndPath: it neither
    runs nor replaces its file with an empty one; one warning names them."""
    config = folder / "unscheduled_cfg.py"
    config.write_text(
        f"exec(open({str(traced_config(folder, 't.json'))!r}).read())\n"
        "del process.e\nprocess.p = cms.Path(process.jetHT * process.weight * process.twoJets)\n"
    )
    kept = {name: previous[name] for name in ("o.root", "h.root")}
    result = cmsrun(config, *GOOD, cwd=folder)
    assert result.code == 0, result.stderr[-3000:]
    assert "The following module labels are not assigned to any path: 'hists', 'out'" in result.stderr
    assert {name: digest(folder / name) for name in kept} == kept
    assert not [p.name for p in folder.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize(
    ("where", "signum"), [("event", signal.SIGINT), ("end_job", signal.SIGINT), ("event", signal.SIGHUP)]
)
def test_a_signal_keeps_the_previous_outputs(folder, previous, where, signum):
    """Ctrl-C in the event loop or in a module's end_job (after the output module closed its
    file), or the terminal closing (SIGHUP): exit 128 + the signal, the previous outputs
    intact, no temporary file left."""
    job = cmsrun_process(faulty_config(folder, "Slow", where=where), *GOOD, cwd=folder)
    try:
        deadline = time.monotonic() + 120
        while not (folder / "marker").exists():
            assert job.poll() is None and time.monotonic() < deadline, job.communicate(timeout=10)[1][-3000:]
            time.sleep(0.05)
        job.send_signal(signum)
        stderr = job.communicate(timeout=60)[1]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait(10)
    assert job.returncode == 128 + signum, stderr[-3000:]
    assert f"interrupted ({signal.Signals(signum).name})" in stderr and "Traceback" not in stderr
    assert_previous_intact(folder, previous)


def _mount_namespaces() -> str | None:
    """Why a private mount namespace with a tmpfs cannot be made here (None if it can)."""
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs -o size=64k t /mnt"],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if probe.returncode == 0 else f"cannot mount a tmpfs in a mount namespace: {probe.stderr.strip()}"


FULL_DISK = """
set -e
mount -t tmpfs -o size=1m tmpfs "$DISK"
cp in.root faults.py faulty_cfg.py o.root h.root s.json t.json "$DISK"/
cd "$DISK"
dd if=/dev/zero of=reserve bs=4096 count=8 2>/dev/null        # 32 kB: the histograms fit, the events not
dd if=/dev/zero of=filler bs=4096 2>/dev/null || true          # the rest of the disk
rm reserve
set +e
"$PYTHON" -m framework.cmsrun faulty_cfg.py --no-progress "$@" 2> stderr.txt
echo $? > rc.txt
rm filler
cp -a . "$AFTER"/
"""


def test_full_disk_keeps_the_previous_outputs(folder, previous):
    """A real full disk (a 1 MB tmpfs, filled; private mount namespace): the histograms'
    file is written, then the event file fails with ENOSPC; one line names that file, and
    every previous output is intact (before, the histograms were replaced already)."""
    why = _mount_namespaces()
    if why:
        pytest.skip(why)
    (folder / "disk").mkdir()
    (folder / "after").mkdir()
    faulty_config(folder, "Slow", where="never")  # an analyzer that does nothing
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", FULL_DISK, "sh", *GOOD],
        cwd=folder,
        env={**os.environ, "DISK": str(folder / "disk"), "AFTER": str(folder / "after"), "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    after = folder / "after"
    result = Result(int((after / "rc.txt").read_text()), (after / "stderr.txt").read_text())
    assert result.code == 1, result.stderr[-3000:]
    assert "'o.root'" in result.message and "No space left on device" in result.message
    assert "Traceback" not in result.stderr
    assert "EDAnalyzer 'hists' wrote 2 histograms" in result.stderr  # the histograms were written first
    assert {name: digest(after / name) for name in OUTPUTS} == previous
    assert sorted(p.name for p in after.iterdir()) == sorted(
        ["in.root", "faults.py", "faulty_cfg.py", *OUTPUTS, "rc.txt", "stderr.txt"]
    )


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (
            "CountsToFile",
            "EDAnalyzer 'fault' (type faults:CountsToFile): parameter 'countsFile' names a file ('counts.txt') "
            "that the module does not declare as an output (declared_outputs()): with --executor dask each "
            "worker would write its own and all but one would be lost",
        ),
        (
            "Slow",  # with FastTimerService's trace
            "Service 'FastTimerService' (type FastTimerService): parameter 'traceFile': with --executor dask "
            "this service would write 't.json' once per worker",
        ),
    ],
)
def test_dask_refuses_what_one_worker_would_write_before_any_work(cmsrun, folder, module, expected):  # noqa: F811
    """A module parameter naming a file the module does not declare, or a service writing its
    files at the end of the job: refused before the cluster starts (nothing written)."""
    config = faulty_config(folder, module, trace=module == "Slow")
    (folder / "fs.yaml").write_text("DY:\n  files:\n    in.root: Events\n")
    listing = sorted(p.name for p in folder.iterdir())
    result = cmsrun(config, "--dataset", "fs.yaml", "--executor", "dask", "--workers", "1", cwd=folder)
    assert result.code == 1, result.stderr[-3000:]
    assert expected in result.message
    assert "Dask scheduler" not in result.stderr  # no cluster was started
    assert sorted(p.name for p in folder.iterdir()) == listing
