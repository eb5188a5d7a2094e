"""Bad command lines, values out of range, CMSSW features pysonic lacks, damaged real files.

The exit codes are cmsrun's docstring's: 2 for a usage error (cmsrun's own options as
argparse reports them, a config's ``name=value``), 1 for a configuration or input error;
each case asserts its code, one line naming the option or parameter as the user typed
it, no traceback, and nothing written in the folder. Values CMSSW gives a meaning (``-t 0``
one thread per core, ``-j 0`` as many streams as threads, ``-n 0``, ``-n -1``) run, and
their outputs hold every event of the input once.

Inputs are real files from ``../shared/data`` (``framework.samples``) and damaged copies;
everything runs in-process (``cmsrun`` fixture of ``test_bad_inputs``) except the
``cmstriton`` cases, which call its ``main`` in-process too.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import uproot
from test_bad_inputs import cmsrun  # noqa: F401 - the fixture

from framework.io import temporary_name
from framework.samples import locate_sample
from framework.serving import _leftovers
from framework.serving._cmstriton import main as cmstriton

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATASET = ROOT / "configs" / "dataset_cfg.py"
SONIC = ROOT / "configs" / "sonic_pfnano_cfg.py"

# Every event to one output (no filter), so that a completed run can be checked event by event.
ALL_EVENTS = """
import framework.config as cms
process = cms.Process("ALL")
process.source = cms.Source("PoolSource", fileNames=cms.untracked.vstring("in.root"))
process.out = cms.OutputModule("NanoAODOutputModule", fileName=cms.untracked.string("out.root"),
                               outputCommands=cms.untracked.vstring("drop *", "keep Jet_pt"))
process.e = cms.EndPath(process.out)
"""


@pytest.fixture
def folder(tmp_path) -> pathlib.Path:
    (tmp_path / "in.root").write_bytes(locate_sample("nano_dy.root").read_bytes())
    (tmp_path / "all_cfg.py").write_text(ALL_EVENTS)
    return tmp_path


def listing(folder: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def usage_line(stderr: str) -> str:
    """argparse's (and cmsrun's) usage error: the last line, ``cmsrun: error: ...``."""
    lines = stderr.strip().splitlines()
    assert lines and "Traceback" not in stderr, stderr[-3000:]
    return lines[-1]


DASK = ["--dataset", "f.json", "--executor", "dask"]
USAGE = {
    "-n -5": (["-n", "-5"], "argument -n/--max-events: -5 is not -1 (all events) or >= 0"),
    "--max-events=-2": (["--max-events=-2"], "argument -n/--max-events: -2 is not -1"),
    "-n abc": (["-n", "abc"], "argument -n/--max-events: invalid int value: 'abc'"),
    "-t -1": (["-t", "-1"], "argument -t/--threads: -1 is not >= 0 (0: one thread per core)"),
    "--threads two": (["--threads", "two"], "argument -t/--threads: invalid int value: 'two'"),
    "-j -3": (["-j", "-3"], "argument -j/--streams: -3 is not >= 0 (0: as many streams as threads)"),
    "--workers 0": ([*DASK, "--workers", "0"], "argument --workers: 0 is not >= 1"),
    "--chunk-size 0": (["--dataset", "f.json", "--chunk-size", "0"], "argument --chunk-size: 0 is not >= 1"),
    "--chunk-size alone": (["--chunk-size", "10"], "--chunk-size needs --dataset"),
    "dask without dataset": (["--executor", "dask"], "--executor dask needs --dataset"),
    "--executor nosuch": (["--executor", "nosuch"], "argument --executor: invalid choice: 'nosuch'"),
    "--keep-parts alone": (["--keep-parts"], "--keep-parts need(s) --executor dask"),
    "--scheduler alone": (["--scheduler", "tcp://x:8786"], "--scheduler need(s) --executor dask"),
    "--summary-json without value": (["--summary-json"], "argument --summary-json: expected one argument"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(USAGE))
def test_cmsrun_usage_error_exits_2(cmsrun, folder, case):  # noqa: F811 - the fixture
    args, expected = USAGE[case]
    before = listing(folder)
    result = cmsrun(DATASET, "inputFiles=in.root", *args, cwd=folder)
    assert result.code == 2
    assert expected in usage_line(result.stderr)
    assert usage_line(result.stderr).startswith("cmsrun: error: ")
    assert listing(folder) == before


def test_no_config_is_a_usage_error(capsys):
    from framework._cmsrun import main

    assert main([]) == 2
    assert usage_line(capsys.readouterr().err) == "cmsrun: error: a configuration file is required"


CONFIG_ARGUMENTS = {
    "unknown name": (["nosuch=3"], "unknown argument 'nosuch' (valid: inputFiles, outputFile, histFile, streams)"),
    "near name": (["outputFil=o.root"], "'outputFil' (did you mean 'outputFile' or 'inputFiles'?); valid: "),
    "not name=value": (["--nosuch"], "argument '--nosuch' is not of the form name=value"),
    "wrong type": (["streams=abc"], "argument 'streams=abc': expected int, got 'abc'"),
    "given twice": (["outputFile=a.root", "outputFile=b.root"], "argument 'outputFile' given twice"),
    "server port beyond 65535": ([], "argument 'server=127.0.0.1:117611': expected host:port with a TCP port"),
    "server port not a number": ([], "argument 'server=127.0.0.1:abc': expected host:port"),
    "server without port": ([], "argument 'server=localhost': expected host:port"),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CONFIG_ARGUMENTS))
def test_config_argument_error_exits_2(cmsrun, folder, case):  # noqa: F811 - the fixture
    args, expected = CONFIG_ARGUMENTS[case]
    before = listing(folder)
    if case.startswith("server"):
        server = expected.split("'")[1]
        result = cmsrun(SONIC, server, cwd=folder)
    else:
        result = cmsrun(DATASET, "inputFiles=in.root", *args, cwd=folder)
    assert result.code == 2
    assert expected in result.message and result.message.count("valid:") <= 1
    assert "Traceback" not in result.stderr
    assert listing(folder) == before


TRITON_PORT = """
process.TritonService = cms.Service("TritonService", servers=cms.untracked.VPSet(cms.PSet(
    name=cms.untracked.string("remote"), address=cms.untracked.string("127.0.0.1"),
    port=cms.untracked.uint32({port}))))
"""

UNSUPPORTED = {
    "cms.SwitchProducer": 'process.s = cms.SwitchProducer(cpu=cms.EDProducer("JetHTProducer"))\n',
    "cms.Looper": 'process.looper = cms.Looper("IterateNTimesLooper")\n',
    "cms.EDLooper": 'process.looper = cms.EDLooper("X")\n',
    "cms.SubProcess": 'sub = cms.SubProcess(cms.Process("SUB"))\n',
    "process.addSubProcess": "process.addSubProcess(None)\n",
}


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (TRITON_PORT.format(port=port), f"TritonService: servers 'remote': port: {port} is not a TCP port (1-65535)")
        for port in (0, 65536, 99999, 117611)
    ]
    + [(code, f"{feature} is a CMSSW feature not supported by pysonic") for feature, code in UNSUPPORTED.items()]
    + [
        ("process.maxEvents.input = -5\n", "process.maxEvents.input must be >= -1 (-1 = all events), got -5"),
        (  # no type guessed from the value: the module declares an InputTag, not an int32
            'process.h = cms.EDProducer("JetHTProducer", src=3)\nprocess.p = cms.Path(process.h)\n',
            "(cms.double(...), cms.InputTag(...), ...: 'cmsrun --describe JetHTProducer' lists them), got int 3",
        ),
    ],
    ids=[f"port {p}" for p in (0, 65536, 99999, 117611)] + list(UNSUPPORTED) + ["maxEvents -5", "src=3"],
)
def test_configuration_error_exits_1(cmsrun, folder, extra, expected):  # noqa: F811 - the fixture
    (folder / "all_cfg.py").write_text(ALL_EVENTS + extra)
    before = listing(folder)
    result = cmsrun(folder / "all_cfg.py", cwd=folder)
    assert result.code == 1
    assert expected in result.message and "AttributeError" not in result.message
    assert listing(folder) == before


def events(path: pathlib.Path) -> list[int]:
    with uproot.open(path) as f:
        return f["Events"]["event"].array(library="np").tolist()


@pytest.mark.parametrize(
    ("args", "count"),
    [
        (["-t", "0"], 40),
        (["-t", "2", "-j", "0"], 40),
        (["-n", "0"], 0),
        (["-n", "-1", "-j", "3"], 40),
        (["-n", "7", "-j", "2"], 7),
        ([], 40),  # process.options.numberOfThreads = 0 in the config
    ],
    ids=["-t 0: one thread per core", "-j 0: streams = threads", "-n 0", "-n -1: all", "-n 7", "config threads 0"],
)
def test_values_cmssw_defines_run_every_event_once(cmsrun, folder, args, count):  # noqa: F811 - the fixture
    if not args:
        (folder / "all_cfg.py").write_text(ALL_EVENTS + "process.options.numberOfThreads = 0\n")
    result = cmsrun(folder / "all_cfg.py", *args, cwd=folder)
    assert result.code == 0, result.stderr[-3000:]
    written = events(folder / "out.root")
    assert sorted(written) == sorted(events(folder / "in.root")[:count])  # the first `count` events, each once
    assert len(set(written)) == len(written) == count
    assert listing(folder) == ["all_cfg.py", "in.root", "out.root"]


def damaged(folder: pathlib.Path, name: str) -> tuple[str, str]:
    """A damaged copy of a real file in ``folder``: (file name, expected message)."""
    data = locate_sample("nano_dy.root").read_bytes()
    path = folder / "in.root"
    if name == "truncated copy":
        path.write_bytes(data[: len(data) // 3])
        return "in.root", f"input file 'in.root' is truncated: it has {len(data) // 3:,} bytes"
    if name == "header zeroed":
        path.write_bytes(b"\0" * 64 + data[64:])
        return "in.root", "input file 'in.root' is not a ROOT file (it starts with b'\\x00\\x00\\x00\\x00'"
    if name == "empty copy":
        path.write_bytes(b"")
        return "in.root", "input file 'in.root' is empty (0 bytes)"
    if name == "RNTuple (CMS open data)":
        path.write_bytes(locate_sample("Run2012BC_DoubleMuParked_Muons_1000evts_rntuple_v1-0-0-0.root").read_bytes())
        return "in.root", "'Events' in input file 'in.root' is a ROOT::RNTuple, not a TTree"
    if name == "no Events tree (uproot's HZZ)":
        path.write_bytes(locate_sample("uproot-HZZ.root").read_bytes())
        return "in.root", "input file 'in.root' has no tree 'Events' (trees in the file: events)"
    assert name == "a folder named .root"
    path.unlink()
    path.mkdir()
    return "in.root", "input file 'in.root'"


@pytest.mark.parametrize(
    "name",
    [
        "truncated copy",
        "header zeroed",
        "empty copy",
        "RNTuple (CMS open data)",
        "no Events tree (uproot's HZZ)",
        "a folder named .root",
    ],
)
def test_damaged_real_file_exits_1(cmsrun, folder, name):  # noqa: F811 - the fixture
    _, expected = damaged(folder, name)
    before = listing(folder)
    result = cmsrun(folder / "all_cfg.py", cwd=folder)
    assert result.code == 1
    assert expected in result.message
    assert listing(folder) == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["start", "--grpc-port", "70000"], "argument --grpc-port: 70000 is not a TCP port (1-65535; 0: a free one)"),
        (["start", "--grpc-port", "-1"], "argument --grpc-port: -1 is not a TCP port"),
        (["start", "--grpc-port", "abc"], "argument --grpc-port: invalid port value: 'abc'"),
        (["restart"], "argument {start,check,stop}: invalid choice: 'restart'"),
    ],
)
def test_cmstriton_usage_error_exits_2(tmp_path, capsys, args, expected):
    assert cmstriton([*args, "--dir", str(tmp_path / "state")] if args[0] == "start" else args) == 2
    assert expected in usage_line(capsys.readouterr().err)
    assert not (tmp_path / "state").exists()


# ---------------------------------------------------------------------------- after a kill


def dead_owner(code: str) -> None:
    """Run ``code`` in a Python child that then dies by SIGKILL (no cleanup runs)."""
    done = subprocess.run(
        [sys.executable, "-c", f"import os, signal\n{code}\nos.kill(os.getpid(), signal.SIGKILL)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == -9, done.stderr


def test_next_job_removes_the_outputs_a_killed_job_left(cmsrun, folder):  # noqa: F811 - the fixture
    dead_owner(
        "from pathlib import Path\nfrom framework.io import temporary_name\n"
        f"temporary_name(Path({str(folder / 'out.root')!r})).write_bytes(b'half a file')"
    )
    (left,) = folder.glob("out.root.tmp-*")
    alive = temporary_name(folder / "out.root")  # this process's: a job still running
    alive.write_bytes(b"x")
    result = cmsrun(folder / "all_cfg.py", "-n", "3", cwd=folder)
    assert result.code == 0, result.stderr[-3000:]
    assert "removed 1 temporary output(s) left by jobs that are gone" in result.stderr  # rich wraps the path
    assert not left.exists()
    assert listing(folder) == sorted(["all_cfg.py", "in.root", "out.root", alive.name])


def test_next_server_start_removes_the_folders_a_killed_job_left(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    dead_owner(
        "import tempfile\nfrom framework.serving._leftovers import owned_prefix\n"
        "tempfile.mkdtemp(prefix=owned_prefix()); tempfile.mkstemp(prefix=owned_prefix(), suffix='.log')"
    )
    left = sorted(tmp_path.glob("pysonic-tritonserver-*"))
    assert len(left) == 2
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    other = tmp_path / "pysonic-tritonserver-abcd"  # no owner tag (older versions): not ours to judge
    other.mkdir()
    (tmp_path / "repo" / "bad").mkdir(parents=True)
    (tmp_path / "repo" / "bad" / "config.pbtxt").write_text("this is not a model config")
    args = ["--repository", str(tmp_path / "repo"), "--dir", str(tmp_path / "state"), "--wait", "30"]
    assert cmstriton(["start", *args]) == 1  # fails after the clean-up, as any start may
    assert sorted(tmp_path.glob("pysonic-tritonserver-*")) == [other]
    assert f"removed 2 Triton server folder(s)/log(s) left by jobs that are gone: {left[0]}" in caplog.text
    assert not (tmp_path / "state").exists()
    assert _leftovers.remove_stale_server_files(tmp_path) == []
    os.rmdir(other)
