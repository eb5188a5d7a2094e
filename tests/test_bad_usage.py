"""Bad command lines, values out of range, CMSSW features pysonic lacks, damaged real files.

The exit codes are cmsrun's docstring's: 2 for a usage error (cmsrun's own options as
argparse reports them, a config's ``name=value``), 1 for a configuration or input error;
each case asserts its code, one line naming the option or parameter as the user typed
it, no traceback, and nothing written in the folder. Values CMSSW gives a meaning (``-t 0``
one thread per core, ``-j 0`` as many streams as threads, ``-n 0``, ``-n -1``) run, and
their outputs hold every event of the input once.

Inputs are real samples (``framework.io.samples``: located, or fetched from the packages that
ship them) and damaged copies; everything runs in-process (``cmsrun`` fixture of
``test_bad_inputs``) except the ``cmstriton`` cases, which call its ``main`` in-process too.
"""

from __future__ import annotations

import http.server
import os
import pathlib
import socket
import subprocess
import sys
import threading
import time

import pytest
import uproot
from test_bad_inputs import cmsrun  # noqa: F401 - the fixture

from framework.io import temporary_name
from framework.io.samples import locate_sample
from framework.serving import _leftovers
from framework.serving._cmstriton import main as cmstriton
from framework.serving.testing import TensorConfig, write_python_model

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


TENSORS = {"inputs": [TensorConfig("x", dims=(4,))], "outputs": [TensorConfig("y", dims=(4,))]}
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
    "--workers beyond the machine": (
        [*DASK, "--workers", "100000"],
        "argument --workers: 100000 is more worker processes than this machine can run: at most ",
    ),
    "--workers with --scheduler": (
        [*DASK, "--workers", "2", "--scheduler", "tcp://127.0.0.1:8786"],
        "--workers starts a local cluster's workers: not with --scheduler",
    ),
    "--dump with --list-types": (["--dump", "--list-types"], "argument --list-types: not allowed with argument --dump"),
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
    from framework.cmsrun import main

    assert main([]) == 2
    assert usage_line(capsys.readouterr().err) == "cmsrun: error: a configuration file is required"


CONFIG_ARGUMENTS = {
    "unknown name": (["nosuch=3"], "unknown argument 'nosuch' (valid: inputFiles, outputFile, histFile, streams, "),
    "near name": (["outputFil=o.root"], "'outputFil' (did you mean 'outputFile' or 'inputFiles'?); valid: "),
    "not name=value": (["--nosuch"], "argument '--nosuch' is not of the form name=value"),
    "wrong type": (["streams=abc"], "argument 'streams=abc': expected int, got 'abc'"),
    "given twice": (["outputFile=a.root", "outputFile=b.root"], "argument 'outputFile' given twice"),
    "name==value": (
        ["outputFile==x.root"],
        "argument 'outputFile==x.root': one '=' between name and value (outputFile=x.root)",
    ),
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


@pytest.fixture
def http_server():
    """An HTTP server on a free port of 127.0.0.1 (not a Dask scheduler): its address."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    ("scheduler", "code", "expected"),
    [
        ("notaurl", 2, "--scheduler notaurl: not a Dask scheduler address ([tcp://]HOST:PORT): missing port number"),
        ("closed", 1, "--scheduler tcp://127.0.0.1:{port}: no Dask scheduler there (Connection refused)"),
        ("http", 1, "--scheduler {http}: something listens there, but it is not a Dask scheduler (to Dask's identity "),
    ],
    ids=["not an address", "nothing listens", "an HTTP server"],
)
def test_scheduler_that_is_not_one_fails_in_bounded_time(
    cmsrun,  # noqa: F811 - the fixture
    folder,
    monkeypatch,
    http_server,
    scheduler,
    code,
    expected,
):
    from framework.cmsrun.executor import _address

    monkeypatch.setattr(_address, "SCHEDULER_TIMEOUT", 2.0)  # 10 s in use; the bound is the point here
    port = closed_port()
    address = {"closed": f"tcp://127.0.0.1:{port}", "http": http_server}.get(scheduler, scheduler)
    (folder / "f.yaml").write_text("DY:\n  files:\n    in.root: Events\n")
    before = listing(folder)
    t0 = time.monotonic()
    result = cmsrun(DATASET, "--dataset", "f.yaml", "--executor", "dask", "--scheduler", address, cwd=folder)
    assert time.monotonic() - t0 < 30
    assert result.code == code, result.stderr[-3000:]
    assert expected.format(port=port, http=http_server) in result.message
    assert "Traceback" not in result.stderr
    assert listing(folder) == before


TRITON_PORT = """
process.TritonService = cms.Service("TritonService", servers=cms.untracked.VPSet(cms.PSet(
    name=cms.untracked.string("remote"), address=cms.untracked.string("127.0.0.1"),
    port=cms.untracked.uint32({port}))))
"""

# CMSSW's configs build loopers, SubProcesses and secondary sources unconditionally: they
# load and dump here, and the job that holds one is refused when it is built.
TLS_FILE = """
process.TritonService = cms.Service("TritonService", servers=cms.untracked.VPSet(cms.PSet(
    name=cms.untracked.string("remote"), address=cms.untracked.string("127.0.0.1"), port=cms.untracked.uint32(8001),
    useSsl=cms.untracked.bool(True), rootCertificates=cms.untracked.string({root!r}))))
"""

UNSUPPORTED = {
    "a looper (process.looper = cms.Looper(...))": 'process.looper = cms.Looper("IterateNTimesLooper")\n',
    "a SubProcess (process.addSubProcess)": 'process.addSubProcess(cms.SubProcess(cms.Process("SUB")))\n',
    "cms.SecSource (process.mix.input)": (
        'process.mix = cms.EDProducer("MixingModule", input=cms.SecSource("EmbeddedRootSource"))\n'
    ),
    "cms.EDLooper": 'process.looper = cms.EDLooper("X")\n',
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
        (
            TLS_FILE.format(root="/nosuch/ca.pem"),
            "TritonService: servers 'remote': rootCertificates '/nosuch/ca.pem' does not exist",
        ),
        (  # no type guessed from the value: the module declares an InputTag, not an int32
            'process.h = cms.EDProducer("JetHTProducer", src=3)\nprocess.p = cms.Path(process.h)\n',
            "(cms.double(...), cms.InputTag(...), ...: 'cmsrun --describe JetHTProducer' lists them), got int 3",
        ),
    ],
    ids=[f"port {p}" for p in (0, 65536, 99999, 117611)]
    + list(UNSUPPORTED)
    + ["maxEvents -5", "useSsl with a missing certificate file", "src=3"],
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
    if name == "RNTuple (coffea's nano_dy_rntuple)":
        path.write_bytes(locate_sample("nano_dy_rntuple.root").read_bytes())
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
        "RNTuple (coffea's nano_dy_rntuple)",
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


@pytest.mark.parametrize(
    ("repository", "state", "expected"),
    [
        ("nosuch", "state", "cmstriton: --repository nosuch does not exist"),
        ("afile", "state", "cmstriton: --repository afile is a file, not a folder"),
        ("repo", "afile", "cmstriton: --dir afile is a file, not a folder"),
    ],
    ids=["repository missing", "repository a file", "--dir a file"],
)
def test_cmstriton_start_with_a_path_that_is_not_a_folder(tmp_path, capsys, monkeypatch, repository, state, expected):
    # Before: the state folder was made and left, or a traceback (NotADirectoryError).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    (tmp_path / "repo").mkdir()
    assert cmstriton(["start", "--repository", repository, "--dir", state]) == 1
    err = capsys.readouterr().err.strip()
    assert err == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "repo"]


def test_cmstriton_start_on_a_repository_without_models(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cmstriton(["start", "--repository", str(tmp_path / "empty"), "--dir", str(tmp_path / "state")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"cmstriton: --repository {tmp_path / 'empty'} holds no model (a model is a folder with a config.pbtxt, "
        "or with 1/model.onnx): a server would start serving nothing"
    )
    assert not (tmp_path / "state").exists()


def test_cmstriton_start_with_a_model_file_missing_names_the_users_file(tmp_path, capsys):
    # tritonserver would name its copy of the repository, and wait for the model until --wait.
    write_python_model(tmp_path / "repo", "m", "class TritonPythonModel:\n    pass\n", **TENSORS)
    (tmp_path / "repo" / "m" / "1" / "model.py").unlink()
    t0 = time.monotonic()
    assert cmstriton(["start", "--repository", str(tmp_path / "repo"), "--dir", str(tmp_path / "state")]) == 1
    assert time.monotonic() - t0 < 30
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"model 'm': {tmp_path / 'repo' / 'm' / '1' / 'model.py'} does not exist (the model file of version 1)"
    )
    assert len(err.splitlines()) == 1
    assert not (tmp_path / "state").exists()


def test_cmstriton_start_that_fails_leaves_no_log_in_a_state_folder_that_was_there(tmp_path, capsys):
    write_python_model(tmp_path / "repo", "broken", "raise ImportError('no torch_scatter')\n", **TENSORS)
    state = tmp_path / "state"
    state.mkdir()  # the user's folder: it stays, as empty as it was
    assert cmstriton(["start", "--repository", str(tmp_path / "repo"), "--dir", str(state), "--wait", "60"]) == 1
    first = capsys.readouterr().err.splitlines()[0]
    assert "failed to load 'broken' version 1: Internal: ImportError: no torch_scatter" in first
    assert first.endswith("; the last lines of its log:") and str(state) not in first
    assert list(state.iterdir()) == []


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
