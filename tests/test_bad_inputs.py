"""The catalogue of bad inputs: every case runs ``cmsrun`` as a user does and must fail cleanly.

"Cleanly" means: exit code 1, ONE line between cmsrun's "Begin Fatal Exception" markers
naming the culprit (file, branch, module label, parameter, model, server, port), and
nothing left behind: every job that gets that far has a ``NanoAODOutputModule``, and
neither its output file nor a ``*.tmp-*`` file may remain. One case is no error at all: a
file with zero events gives a valid, empty output and exit code 0.

Policy: tiny ROOT files written with uproot in temporary folders; small Python-backend
models written there too, served by ONE Triton server shared by the module (127.0.0.1
only, stopped by its fixture) or by the job's own fallback server where the fallback is
the point. Most cases call ``framework.cmsrun.main`` in-process (the same code path,
~1.5 s of imports cheaper); a few run ``python -m framework.cmsrun`` in a subprocess, as a
user does, to cover the real process exit.

What uproot cannot write is not here: a ``vector<vector<float>>`` branch (jagged of
jagged). Its stand-ins are a fixed-size array per event (``double[2]``) and strings
(``char*``) where the reader expects one number per object; both fail the same check.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import awkward as ak
import numpy as np
import pytest
import uproot

from framework.cmsrun import main as cmsrun_main
from framework.serving import _server
from framework.serving._processes import TAG_VARIABLE
from framework.serving.testing import TensorConfig, write_python_model

# ---------------------------------------------------------------------------- helpers


@dataclasses.dataclass
class Result:
    code: int
    stderr: str

    @property
    def message(self) -> str:
        """The text between the fatal-exception markers, which must be exactly one line."""
        lines = self.stderr.splitlines()
        begin = next((i for i, line in enumerate(lines) if "Begin Fatal Exception" in line), None)
        assert begin is not None, f"no fatal exception printed (exit code {self.code}):\n{self.stderr[-3000:]}"
        end = next(i for i in range(begin, len(lines)) if "End Fatal Exception" in lines[i])
        body = lines[begin + 1 : end]
        assert len(body) == 1, f"the error is not one line: {body}"
        return body[0]


def cmsrun_subprocess(config: pathlib.Path, *args: str, cwd: pathlib.Path, env: dict | None = None) -> Result:
    done = subprocess.run(
        [sys.executable, "-m", "framework.cmsrun", str(config), "--no-progress", *args],
        cwd=cwd,
        env=None if env is None else {**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return Result(done.returncode, done.stderr)


@pytest.fixture
def cmsrun(capsys, monkeypatch):
    """``cmsrun(config, *args, cwd=...)`` in this process; restores logging and sys.path."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # cmsrun puts the config's folder first

    def run(config: pathlib.Path, *args: str, cwd: pathlib.Path) -> Result:
        monkeypatch.chdir(cwd)
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        capsys.readouterr()
        try:
            code = cmsrun_main([str(config), "--no-progress", *args])
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        return Result(code, capsys.readouterr().err)

    return run


def assert_nothing_left(folder: pathlib.Path) -> None:
    left = sorted(p.name for p in folder.iterdir() if p.name.startswith("out.root") or ".tmp-" in p.name)
    assert not left, f"left behind: {left}"


def write_tree(path: pathlib.Path, data: dict, tree: str = "Events") -> pathlib.Path:
    def branch_type(v):
        if isinstance(v, ak.Array):
            return v.type
        return np.dtype((v.dtype, v.shape[1:])) if v.ndim > 1 else v.dtype

    with uproot.recreate(path) as f:
        t = f.mktree(tree, {k: branch_type(v) for k, v in data.items()})
        if len(next(iter(data.values()))):
            t.extend(data)
    return path


def ids(n: int) -> dict:
    return {
        "run": np.ones(n, np.uint32),
        "luminosityBlock": np.ones(n, np.uint32),
        "event": np.arange(1, n + 1, dtype=np.uint64),
    }


JET_PT = ak.Array([[35.0, 40.0], [50.0], []])  # GeV; 3 events

# The job of the file cases: a filter consuming Jet pt and eta, an output module.
FILE_JOB = """
import framework.config as cms
process = cms.Process("BAD")
process.source = cms.Source("PoolSource", fileNames=cms.untracked.vstring({files}))
process.jets = cms.EDFilter("JetMultiplicityFilter", minNumber=cms.uint32(1))
process.out = cms.OutputModule("NanoAODOutputModule", fileName=cms.untracked.string({out!r}))
process.p = cms.Path(process.jets)
process.e = cms.EndPath(process.out)
"""


def file_job(
    folder: pathlib.Path, *files: pathlib.Path | str, out: str = "out.root", extra: str = "", name: str = "job_cfg.py"
) -> pathlib.Path:
    config = folder / name
    config.write_text(FILE_JOB.format(files=", ".join(repr(str(f)) for f in files), out=out) + extra)
    return config


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, pathlib.Path]:
    """Good and bad input files, by name."""
    d = tmp_path_factory.mktemp("inputs")
    good = write_tree(d / "good.root", {**ids(3), "Jet": ak.zip({"pt": JET_PT, "eta": JET_PT * 0})})
    files = {"good": good}
    files["zero_bytes"] = d / "zero_bytes.root"
    files["zero_bytes"].write_bytes(b"")
    files["text"] = d / "text.root"
    files["text"].write_text("this is not a ROOT file\n" * 50)
    data = good.read_bytes()
    files["truncated"] = d / "truncated.root"
    files["truncated"].write_bytes(data[: len(data) // 2])  # as an interrupted copy leaves it
    branch = uproot.open(good)["Events"]["Jet_pt"]
    seek, size = int(branch.member("fBasketSeek")[0]), int(branch.member("fBasketBytes")[0])
    corrupt = bytearray(data)
    corrupt[seek : seek + size] = b"\xff" * size  # the Jet_pt basket overwritten
    files["corrupt"] = d / "corrupt.root"
    files["corrupt"].write_bytes(bytes(corrupt))
    files["other_tree"] = write_tree(d / "other_tree.root", {"x": np.arange(3.0)}, tree="Other")
    with uproot.recreate(d / "rntuple.root") as f:
        f["Events"] = {**ids(3), "Jet_pt": JET_PT}  # uproot writes a dict as an RNTuple
    files["rntuple"] = d / "rntuple.root"
    files["no_eta"] = write_tree(d / "no_eta.root", {**ids(3), "Jet": ak.zip({"pt": JET_PT})})
    files["pt_strings"] = write_tree(
        d / "pt_strings.root", {**ids(3), "Jet": ak.zip({"eta": JET_PT}), "Jet_pt": ak.Array(["35", "50", ""])}
    )
    files["pt_arrays"] = write_tree(
        d / "pt_arrays.root", {**ids(3), "Jet": ak.zip({"eta": JET_PT}), "Jet_pt": np.zeros((3, 2))}
    )
    files["empty"] = write_tree(d / "empty.root", {**ids(0), "Jet": ak.zip({"pt": JET_PT[:0], "eta": JET_PT[:0]})})
    return files


# ---------------------------------------------------------------------------- files


def test_missing_file(tmp_path):
    result = cmsrun_subprocess(file_job(tmp_path, tmp_path / "nosuch.root"), cwd=tmp_path)
    assert result.code == 1
    assert f"input file '{tmp_path / 'nosuch.root'}' does not exist" in result.message
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("zero_bytes", "input file '{path}' is empty (0 bytes)"),
        ("text", "input file '{path}' is not a ROOT file (it starts with b'this', not b'root')"),
        ("truncated", "input file '{path}' is truncated: it has {size:,} bytes, its header says"),
        ("corrupt", "cannot read branch 'Jet_pt', entries [0, 3) of tree 'Events' in input file '{path}'"),
        ("other_tree", "input file '{path}' has no tree 'Events' (trees in the file: Other)"),
        ("rntuple", "'Events' in input file '{path}' is a ROOT::RNTuple, not a TTree"),
        (
            "no_eta",
            (
                "input file '{path}' has no branch 'Jet_eta' (nearest: 'Jet_pt'); "
                "consumed by EDFilter 'jets' (type JetMultiplicityFilter)"
            ),
        ),
        (
            "pt_strings",
            (
                "branch 'Jet_pt' of input file '{path}' is char* (uproot AsStrings), "
                "expected one number per Jet object (a numeric jagged branch counted by 'nJet')"
            ),
        ),
        (
            "pt_arrays",
            (
                "branch 'Jet_pt' of input file '{path}' is double[2] (uproot AsDtype), "
                "expected one number per Jet object"
            ),
        ),
    ],
)
def test_bad_file(cmsrun, tmp_path, inputs, name, expected):
    path = inputs[name]
    result = cmsrun(file_job(tmp_path, path), cwd=tmp_path)
    assert result.code == 1
    assert expected.format(path=path, size=path.stat().st_size) in result.message
    assert_nothing_left(tmp_path)


def test_bad_second_file_removes_the_output_begun(cmsrun, tmp_path, inputs):
    # The output file exists (as *.tmp-<pid>) when the second file turns out damaged.
    path = inputs["truncated"]
    result = cmsrun(file_job(tmp_path, inputs["good"], path), cwd=tmp_path)
    assert result.code == 1
    assert f"input file '{path}' is truncated" in result.message
    assert "Processed the 1st record" in result.stderr  # the first file's events did run
    assert_nothing_left(tmp_path)


def test_file_with_zero_events_is_no_error(tmp_path, inputs):
    result = cmsrun_subprocess(file_job(tmp_path, inputs["empty"]), cwd=tmp_path)
    assert result.code == 0, result.stderr[-3000:]
    assert "0 events processed" in result.stderr
    with uproot.open(tmp_path / "out.root") as f:
        tree = f["Events"]
        assert tree.num_entries == 0
        assert {"run", "luminosityBlock", "event"} <= set(tree.keys())
    assert not list(tmp_path.glob("*.tmp-*"))


# ---------------------------------------------------------------------------- configs


def test_python_syntax_error(tmp_path, inputs):
    config = file_job(tmp_path, inputs["good"], extra="process.x = = 3\n")
    line = config.read_text().splitlines().index("process.x = = 3") + 1
    result = cmsrun_subprocess(config, cwd=tmp_path)
    assert result.code == 1
    assert f"{config}:{line}: syntax error: invalid syntax" in result.message
    assert_nothing_left(tmp_path)


def test_no_process(cmsrun, tmp_path, inputs):
    config = file_job(tmp_path, inputs["good"], extra="proc, process = process, None\ndel process\n")
    result = cmsrun(config, cwd=tmp_path)
    assert result.code == 1
    assert f"{config}: defines no 'process' (expected process = cms.Process(\"NAME\"))" in result.message


# A histogram of JetHTProducer's product, for the Path-order cases.
HT_HISTOGRAM = """process.hist = cms.EDAnalyzer("HistogramAnalyzer", fileName=cms.untracked.string("h.root"),
    histograms=cms.VPSet(cms.PSet(name=cms.string("ht"), src=cms.InputTag("ht"), nbins=cms.uint32(4),
                                  min=cms.double(0.0), max=cms.double(100.0))))
"""

RAISING = """
from framework import EDAnalyzer


class RaisingInBeginJob(EDAnalyzer):
    def begin_job(self):
        raise ValueError("no calibration")

    def analyze(self, event):
        pass


class ExitingInAnalyze(EDAnalyzer):
    def analyze(self, event):
        raise SystemExit(5)


class RaisingInBeginUnit(EDAnalyzer):
    def begin_unit(self):
        raise OSError(28, "No space left on device")

    def analyze(self, event):
        pass
"""


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (
            'process.ht = cms.EDProducer("JetHTProducr")\nprocess.p2 = cms.Path(process.ht)\n',
            "EDProducer 'ht': unknown module type 'JetHTProducr'",
        ),
        (
            "process.jets.minNumbr = cms.uint32(2)\n",
            "EDFilter 'jets' (type JetMultiplicityFilter): unknown parameter 'minNumbr' (did you mean 'minNumber'?)",
        ),
        (
            'process.jets.minNumber = cms.string("two")\n',
            "EDFilter 'jets' (type JetMultiplicityFilter): parameter 'minNumber': expected uint32, got string 'two'",
        ),
        (
            'process.jets.minPt = cms.string("30")\n',
            "EDFilter 'jets' (type JetMultiplicityFilter): parameter 'minPt': expected double, got string '30'",
        ),
        (
            "del process.out.fileName\n",
            "OutputModule 'out' (type NanoAODOutputModule): missing required parameter 'fileName'",
        ),
        (
            "process.jets.minPt = 30.0\n",
            "EDFilter 'jets' (type JetMultiplicityFilter): parameter 'minPt' does not exist yet, so it can only "
            "be set to a typed value",
        ),
        ("process.p3 = cms.Path(process.jets + process.nosuch)\n", "AttributeError: process 'BAD' has no 'nosuch'"),
        (
            'process.p3 = cms.Path(cms.EDFilter("JetMultiplicityFilter"))\n',
            "Path 'p3' refers to an EDFilter of type 'JetMultiplicityFilter' that is not attached to the process",
        ),
        (
            "process.jets.minPt = cms.int32(30)\n",
            "EDFilter 'jets' (type JetMultiplicityFilter): parameter 'minPt': expected double, got int32 30 "
            "(CMSSW's types must match: cms.double(30))",
        ),
        (
            'process.jets.minPt = cms.double(float("nan"))\n',
            "EDFilter 'jets' (type JetMultiplicityFilter): parameter 'minPt': nan is not a number; every "
            "comparison with it is false",
        ),
        (
            'process.ht = cms.EDProducer("JetHTProducer")\n'
            + HT_HISTOGRAM.replace("cms.uint32(4)", "cms.uint32(4294967295)")
            + "process.p2 = cms.Path(process.ht + process.hist)\n",
            "EDAnalyzer 'hist': histogram 'ht': nbins=4294967295 is more than 134217728 (its counts alone would "
            "take 32 GiB)",
        ),
        (
            'process.ht = cms.EDProducer("JetHTProducer")\n'
            + HT_HISTOGRAM
            + "process.p2 = cms.Path(process.hist + process.ht)\n",
            "Unrunnable schedule: EDAnalyzer 'hist' (type HistogramAnalyzer) is on Path 'p2' and consumes products of "
            "module 'ht', which follows it on the Path; put 'ht' before 'hist', or in a Task to run on demand",
        ),
        (
            "process.s = cms.Sequence(process.jets)\nprocess.s += process.s\nprocess.p2 = cms.Path(process.s)\n",
            "job_cfg.py: Sequence 's' contains itself (s -> s)",
        ),
        (
            'process.ht = cms.EDProducer("JetHTProducer")\nprocess.t1 = cms.Task(process.ht)\n'
            "process.t2 = cms.Task(process.t1)\nprocess.t1.add(process.t2)\n"
            "process.p2 = cms.Path(process.jets, process.t1)\n",
            "job_cfg.py: Task 't1' contains itself (t1 -> t2 -> t1)",
        ),
        (
            "import raising\nprocess.raiser = cms.EDAnalyzer('raising:RaisingInBeginJob')\n"
            "process.p2 = cms.Path(process.raiser)\n",
            "EDAnalyzer 'raiser' (type raising:RaisingInBeginJob): begin_job() failed: ValueError: no calibration",
        ),
        (  # the module's failure, not "the config called sys.exit(5)"
            "import raising\nprocess.raiser = cms.EDAnalyzer('raising:ExitingInAnalyze')\n"
            "process.p2 = cms.Path(process.raiser)\n",
            "EDAnalyzer 'raiser' (type raising:ExitingInAnalyze) on path 'p2' failed for event 1:1:1: SystemExit: 5",
        ),
    ],
    ids=[
        "unknown type",
        "unknown parameter",
        "wrong type",
        "string for double",
        "missing required",
        "untyped new parameter",
        "undefined module in Path",
        "unattached module in Path",
        "int32 for double",
        "NaN threshold",
        "nbins beyond memory",
        "consumer before its producer on a Path",
        "Sequence containing itself",
        "Task containing itself",
        "module raising in begin_job",
        "module calling sys.exit in analyze",
    ],
)
def test_bad_config(cmsrun, tmp_path, inputs, extra, expected):
    (tmp_path / "raising.py").write_text(RAISING)
    result = cmsrun(file_job(tmp_path, inputs["good"], extra=extra), cwd=tmp_path)
    assert result.code == 1
    assert expected in result.message
    assert_nothing_left(tmp_path)


def test_module_placed_twice_on_a_path_is_warned_and_runs_once(cmsrun, tmp_path, inputs):
    # CMSSW runs such a module once per event too (its schedule check takes a module's first
    # place on a Path); a second place is most likely a slip: one warning line says so.
    extra = (
        'process.ht = cms.EDProducer("JetHTProducer")\nprocess.p2 = cms.Path(process.ht + process.jets + process.ht)\n'
    )
    result = cmsrun(file_job(tmp_path, inputs["good"], extra=extra), cwd=tmp_path)
    assert result.code == 0, result.stderr[-3000:]
    warned = [line for line in result.stderr.splitlines() if "placed twice" in line]
    assert (
        len(warned) == 1
        and "Path 'p2': module 'ht' is placed twice (entries 1 and 3); it runs once per event, at entry 1" in warned[0]
    )


def test_config_calling_sys_exit(tmp_path, inputs):
    config = file_job(tmp_path, inputs["good"], extra="import sys\nsys.exit(3)\n")
    line = config.read_text().splitlines().index("sys.exit(3)") + 1
    result = cmsrun_subprocess(config, cwd=tmp_path)
    assert result.code == 3
    assert f"{config}:{line}: the config called sys.exit(3): the job did not run" in result.message
    assert "Traceback" not in result.stderr
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize(
    ("out", "problem"),
    [
        ("a_file/out.root", "folder 'a_file' is a file, not a folder"),
        ("no_folder/out.root", "folder 'no_folder' does not exist"),
    ],
)
def test_unwritable_output(cmsrun, tmp_path, inputs, out, problem):
    (tmp_path / "a_file").write_text("a regular file\n")
    result = cmsrun(file_job(tmp_path, inputs["good"], out=out), cwd=tmp_path)
    assert result.code == 1
    assert (
        f"OutputModule 'out' (type NanoAODOutputModule): parameter 'fileName': cannot write '{out}' ({problem})"
        in result.message
    )
    assert not (tmp_path / "no_folder").exists(), "the missing folder was created"
    assert not list(tmp_path.rglob("*.tmp-*"))


# ---------------------------------------------------------------------------- filesets


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        (
            "fs.yaml",
            "DY:\n  files:\n    {good}: Events\nDY:\n  files:\n    {good}: Events\n",
            "fileset 'fs.yaml': key 'DY' is given twice (lines 1 and 4); the second would replace the first",
        ),
        (
            "fs.json",
            '{{"DY": {{"files": {{"{good}": "Events"}}}}, "DY": {{"files": {{"{good}": "Events"}}}}}}',
            "fileset 'fs.json': key 'DY' is given twice; the second would replace the first",
        ),
        (
            "fs.yaml",
            "DY:\n  files:\n    {good}:\n      object_path: Events\n      steps: [[0, 2], [2, 30]]\n",
            "fileset 'fs.yaml': dataset 'DY': steps [2, 30] of file '{good}' are beyond its 3 entries (tree 'Events')",
        ),
    ],
    ids=["dataset twice (YAML)", "dataset twice (JSON)", "steps beyond the entries"],
)
def test_bad_fileset(cmsrun, tmp_path, inputs, name, text, expected):
    (tmp_path / name).write_text(text.format(good=inputs["good"]))
    before = sorted(p.name for p in tmp_path.iterdir())
    result = cmsrun(file_job(tmp_path, inputs["good"]), "--dataset", name, cwd=tmp_path)
    assert result.code == 1
    assert expected.format(good=inputs["good"]) in result.message
    assert sorted(p.name for p in tmp_path.iterdir()) == [*before, "job_cfg.py"]  # no cache, no output


def test_fileset_is_mc_that_is_not_a_boolean(cmsrun, tmp_path, inputs):
    # isMC: "false" (a string, as JSON filesets are sometimes written) would count as true:
    # data weighted as simulation, exit 0.
    (tmp_path / "fs.yaml").write_text(
        f"DY:\n  files:\n    {inputs['good']}: Events\n  metadata: {{isMC: 'false', xsec: 1.0, sumw: 2.0}}\n"
    )
    extra = 'process.weight = cms.EDProducer("XsecWeightProducer")\nprocess.p2 = cms.Path(process.weight)\n'
    before = sorted(p.name for p in tmp_path.iterdir())
    result = cmsrun(file_job(tmp_path, inputs["good"], extra=extra), "--dataset", "fs.yaml", cwd=tmp_path)
    assert result.code == 1
    assert (
        "module 'weight' (XsecWeightProducer): dataset 'DY' has isMC: 'false' in its fileset metadata: "
        "expected true or false" in result.message
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == [*before, "job_cfg.py"]  # no cache, no output


def test_failed_dataset_run_leaves_no_preprocessing_cache(cmsrun, tmp_path, inputs):
    # The cache is written once the fileset is read; the job then fails: the folder is as it was.
    (tmp_path / "raising.py").write_text(RAISING)
    (tmp_path / "fs.yaml").write_text(f"DY:\n  files:\n    {inputs['good']}: Events\n")
    extra = "process.raiser = cms.EDAnalyzer('raising:RaisingInBeginJob')\nprocess.p2 = cms.Path(process.raiser)\n"
    result = cmsrun(file_job(tmp_path, inputs["good"], extra=extra), "--dataset", "fs.yaml", cwd=tmp_path)
    assert result.code == 1
    assert "begin_job() failed: ValueError: no calibration" in result.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fs.yaml", "job_cfg.py", "raising.py"]


def test_unit_raising_on_dask_prints_one_line_and_no_worker_traceback(tmp_path, inputs):
    # A module's transition failing on a worker is one line naming the module, the
    # transition and the work unit; the worker's "Compute Failed" block (with its traceback)
    # does not precede it, and Dask's scratch space ($TMPDIR/dask-scratch-space) is gone
    # with the cluster.
    (tmp_path / "raising.py").write_text(RAISING)
    (tmp_path / "fs.yaml").write_text(f"DY:\n  files:\n    {inputs['good']}: Events\n")
    extra = "process.raiser = cms.EDAnalyzer('raising:RaisingInBeginUnit')\nprocess.p2 = cms.Path(process.raiser)\n"
    config = file_job(tmp_path, inputs["good"], extra=extra)
    scratch = tmp_path / "tmp"  # the run's TMPDIR: Dask's scratch space must not stay there
    scratch.mkdir()
    args = ("--dataset", "fs.yaml", "--executor", "dask", "--workers", "1")
    result = cmsrun_subprocess(config, *args, cwd=tmp_path, env={"TMPDIR": str(scratch)})
    assert result.code == 1
    assert (
        "EDAnalyzer 'raiser' (type raising:RaisingInBeginUnit): begin_unit() failed: OSError: [Errno 28] "
        "No space left on device (work unit: entries [0, 3) of tree 'Events'" in result.message
    )
    assert "Compute Failed" not in result.stderr and "Traceback" not in result.stderr  # the workers' too
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fs.yaml", "job_cfg.py", "raising.py", "tmp"]
    assert not list(scratch.iterdir()), f"left in TMPDIR: {sorted(p.name for p in scratch.iterdir())}"


# ---------------------------------------------------------------------------- inference

# Every model: x -> y, FP32 (batch, 4), batch <= 8.
TENSORS = {"inputs": [TensorConfig("x", dims=(4,))], "outputs": [TensorConfig("y", dims=(4,))]}

MODELS = {
    "doubler": """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("y", 2 * x)]))
        return responses
""",
    "raiser": """\
class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("raiser: x must be positive")
""",
}

BROKEN_MODEL = "raise ImportError(\"broken: no module named 'torch_scatter'\")\n"

# A SONIC module that sends (1, width) ones of a given dtype to input "x", one per event.
SENDER = """
import numpy as np
import framework.config as cms
from framework.sonic import SonicEDProducer


class Sender(SonicEDProducer):
    @classmethod
    def fill_descriptions(cls, desc):
        super().fill_descriptions(desc)
        desc.add("width", cms.uint32(4), "columns sent")
        desc.add("dtype", cms.string("float32"), "dtype sent")

    def __init__(self, params):
        super().__init__(params)
        self.jets = self.consumes("Jet", branches=["pt"])
        self.width, self.dtype = params.width, params.dtype
        self.produces()

    def acquire(self, event, input):
        input["x"].to_server(np.ones((1, self.width), self.dtype))

    def produce(self, event, output):
        event.put(output["y"].from_server()[0])
"""

SONIC_JOB = """
import framework.config as cms
process = cms.Process("SONICBAD")
process.source = cms.Source("PoolSource", fileNames=cms.untracked.vstring({input!r}))
process.TritonService = cms.Service(
    "TritonService",
    servers=cms.untracked.VPSet(*[cms.PSet(name=cms.untracked.string("remote"),
                                           address=cms.untracked.string("127.0.0.1"),
                                           port=cms.untracked.uint32(p)) for p in {ports!r}]),
    fallback=cms.PSet(enable=cms.untracked.bool({fallback}), wait=cms.untracked.int32(60),
                                modelRepository=cms.untracked.string({fallback_repository!r})),
)
process.sender = cms.EDProducer("sonic_sender:Sender", width=cms.uint32({width}), dtype=cms.string({dtype!r}),
                                Client=cms.PSet(modelName=cms.string({model!r}), timeout=cms.untracked.uint32(20),
                                                mode=cms.string("Async"),
                                                modelConfigPath=cms.FileInPath(
                                                    {repository!r} + "/{config_model}/config.pbtxt")))
process.out = cms.OutputModule("NanoAODOutputModule", fileName=cms.untracked.string("out.root"))
process.p = cms.Path(process.sender)
process.e = cms.EndPath(process.out)
"""


@pytest.fixture(scope="module")
def repositories(tmp_path_factory) -> dict[str, pathlib.Path]:
    d = tmp_path_factory.mktemp("models")
    for name, code in MODELS.items():
        write_python_model(d / "good", name, code, **TENSORS)
    write_python_model(d / "broken", "broken", BROKEN_MODEL, **TENSORS)
    return {"good": d / "good", "broken": d / "broken"}


@pytest.fixture(scope="module")
def server(repositories, start_server):
    """One server with doubler and raiser for the module (~2 s to start)."""
    return start_server(repositories["good"])


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def sonic_job(
    folder: pathlib.Path,
    inputs,
    repositories,
    *,
    model="doubler",
    ports=(),
    fallback=True,
    repository="good",
    width=4,
    dtype="float32",
    config_model=None,
    input="good",
    fallback_repository=None,
) -> pathlib.Path:
    (folder / "sonic_sender.py").write_text(SENDER)
    config = folder / "sonic_cfg.py"
    config.write_text(
        SONIC_JOB.format(
            input=str(inputs[input]) if input in inputs else input,
            config_model=config_model or model,
            fallback_repository=str(repositories[repository]) if fallback_repository is None else fallback_repository,
            ports=list(ports),
            fallback=fallback,
            repository=str(repositories[repository]),
            model=model,
            width=width,
            dtype=dtype,
        )
    )
    return config


def tritonserver_pids() -> set[int]:
    """This test session's tritonserver processes (their command line carries the session's
    /dev/shm tag, tests/conftest.py): other runs on a shared machine do not count."""
    pids = set()
    tag = f"pysonic-{os.environ[TAG_VARIABLE]}-"
    for proc in pathlib.Path("/proc").iterdir():
        try:
            if (
                proc.name.isdigit()
                and (proc / "comm").read_text().strip() == "tritonserver"
                and tag in (proc / "cmdline").read_bytes().decode(errors="replace")
            ):
                pids.add(int(proc.name))
        except OSError:
            pass
    return pids


def test_model_served_nowhere_and_fallback_disabled(cmsrun, tmp_path, inputs, repositories):
    result = cmsrun(sonic_job(tmp_path, inputs, repositories, fallback=False), cwd=tmp_path)
    assert result.code == 1
    assert (
        "TritonService: model(s) doubler (modules sender) are served by no server (no server configured) "
        "and the fallback server is disabled (fallback.enable)"
    ) in result.message
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize(
    ("width", "dtype", "got"), [(3, "float32", "(1, 3) float32"), (4, "float64", "(1, 4) float64")]
)
def test_input_the_model_rejects(cmsrun, tmp_path, inputs, repositories, server, width, dtype, got):
    port = server.ports["grpc"]
    config = sonic_job(tmp_path, inputs, repositories, ports=[port], fallback=False, width=width, dtype=dtype)
    result = cmsrun(config, cwd=tmp_path)
    assert result.code == 1
    message = result.message
    assert "EDProducer 'sender' (type sonic_sender:Sender) on path 'p' failed for event 1:1:" in message
    assert "model 'doubler' (module 'sender')" in message
    assert f"input 'x' expects (batch, 4) float32, got {got}" in message
    assert_nothing_left(tmp_path)


def test_server_returns_an_error(tmp_path, inputs, repositories, server):
    port = server.ports["grpc"]
    config = sonic_job(tmp_path, inputs, repositories, model="raiser", ports=[port], fallback=False)
    result = cmsrun_subprocess(config, cwd=tmp_path)
    assert result.code == 1
    message = result.message
    assert "EDProducer 'sender' (type sonic_sender:Sender) on path 'p' failed for event 1:1:" in message
    assert "model 'raiser' (module 'sender')" in message
    assert f"on server 'remote' (127.0.0.1:{port})" in message
    assert "ValueError: raiser: x must be positive" in message  # the model's own words
    assert_nothing_left(tmp_path)


FREEZER = """
import os, signal, time
import framework.config as cms
from sonic_sender import Sender


class FreezingSender(Sender):
    \"\"\"Stops the server (SIGSTOP) before its first request, noting when in freeze.time.\"\"\"

    @classmethod
    def fill_descriptions(cls, desc):
        super().fill_descriptions(desc)
        desc.add("serverPid", cms.int32(0), "the server to stop")

    def __init__(self, params):
        super().__init__(params)
        self.pid = params.serverPid

    def acquire(self, event, input):
        if not os.path.exists("freeze.time"):
            os.kill(self.pid, signal.SIGSTOP)
            with open("freeze.time", "w") as f:
                f.write(repr(time.monotonic()))
        super().acquire(event, input)
"""


def test_frozen_server_ends_the_job_at_its_deadline(cmsrun, tmp_path, inputs, repositories, server):
    # The request's deadline (Client.timeout, 2 s) ends the job; the end of the job must not
    # wait for the frozen server again (its statistics call had a 5 s deadline of its own).
    (tmp_path / "freezer.py").write_text(FREEZER)
    config = sonic_job(tmp_path, inputs, repositories, ports=[server.ports["grpc"]], fallback=False)
    text = config.read_text().replace("sonic_sender:Sender", "freezer:FreezingSender")
    text = text.replace("timeout=cms.untracked.uint32(20)", "timeout=cms.untracked.uint32(2)")
    config.write_text(text.replace("Client=cms.PSet(", f"serverPid=cms.int32({server.pid}), Client=cms.PSet(", 1))
    try:
        result = cmsrun(config, cwd=tmp_path)
        ended = time.monotonic()
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert result.code == 1
    assert "deadline exceeded after 2 seconds (Client.timeout)" in result.message
    frozen = float((tmp_path / "freeze.time").read_text())
    assert ended - frozen < 2 + 3.5, f"the job ended {ended - frozen:.1f} s after the server froze"
    assert "no end-of-job statistics of model 'doubler' from server 'remote' (its last call failed)" in result.stderr


def test_unreachable_server(cmsrun, tmp_path, inputs, repositories):
    port = closed_port()
    result = cmsrun(sonic_job(tmp_path, inputs, repositories, ports=[port], fallback=False), cwd=tmp_path)
    assert result.code == 1
    assert f"tried 'remote' at 127.0.0.1:{port}: unreachable" in result.message
    assert "the fallback server is disabled" in result.message
    assert_nothing_left(tmp_path)


def test_fallback_takes_other_ports_when_its_ports_are_taken(cmsrun, tmp_path, inputs, repositories, monkeypatch):
    # Triton's default ports (8000-8002) are held by someone else, and so is the first
    # automatic choice: the fallback server must relaunch on fresh ports and the job succeed.
    held = []
    for port in (8000, 8001, 8002):
        sock = socket.socket()
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            held.append(sock)
        except OSError:
            sock.close()  # already taken by another process: taken all the same
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    held.append(taken)
    free_ports = _server._free_ports
    calls = []

    def first_choice_taken(count):
        calls.append(count)
        ports = free_ports(count)
        return [taken.getsockname()[1], *ports[1:]] if len(calls) == 1 else ports

    monkeypatch.setattr(_server, "_free_ports", first_choice_taken)
    before = tritonserver_pids()
    try:
        result = cmsrun(sonic_job(tmp_path, inputs, repositories), cwd=tmp_path)
    finally:
        for sock in held:
            sock.close()
    assert result.code == 0, result.stderr[-3000:]
    assert len(calls) >= 2, "the taken port was not tried first"
    with uproot.open(tmp_path / "out.root") as f:
        np.testing.assert_array_equal(f["Events"]["sender"].array(library="np").tolist(), np.full((3, 4), 2.0))
    assert not tritonserver_pids() - before


def test_explicit_port_taken(tmp_path, repositories):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "framework.serving._cmstriton",
                "start",
                "--repository",
                str(repositories["good"]),
                "--grpc-port",
                str(port),
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if "already in use" in line]
    assert len(lines) == 1, done.stderr
    assert f"--grpc-port {port} is already in use on 127.0.0.1 (use --grpc-port 0 for a free one)" in lines[0]


def test_fallback_server_that_fails_to_start(tmp_path, inputs, repositories):
    before = tritonserver_pids()
    config = sonic_job(tmp_path, inputs, repositories, model="broken", repository="broken")
    result = cmsrun_subprocess(config, cwd=tmp_path)
    assert result.code == 1
    assert "TritonService: fallback server for broken did not start" in result.message
    assert "tritonserver exited with code" in result.message
    # The server log's tail follows the markers: it says why.
    tail = result.stderr.split("End Fatal Exception", 1)[1]
    assert "ImportError: broken: no module named 'torch_scatter'" in tail
    assert_nothing_left(tmp_path)
    assert not tritonserver_pids() - before


def test_model_name_not_the_config_paths_model(cmsrun, tmp_path, inputs, repositories):
    # The fallback would serve doubler's folder: CMSSW's answers "model not found" for nosuch.
    before = tritonserver_pids()
    # The fallback takes the model from its Client.modelConfigPath (fallback.modelRepository unset)
    job = sonic_job(tmp_path, inputs, repositories, model="nosuch", config_model="doubler", fallback_repository="")
    result = cmsrun(job, cwd=tmp_path)
    assert result.code == 1
    doubler = repositories["good"] / "doubler" / "config.pbtxt"
    assert (
        f"TritonService: model 'nosuch' is served by no server, and its Client.modelConfigPath {doubler} is the "
        "config of model 'doubler', which a fallback server serves as 'doubler' (CMSSW's would answer 'model not "
        "found' for 'nosuch')"
    ) in result.message
    assert "starting the fallback server" not in result.stderr
    assert_nothing_left(tmp_path)
    assert not tritonserver_pids() - before


def test_wrong_input_found_before_the_fallback_server_starts(cmsrun, tmp_path, inputs, repositories):
    result = cmsrun(sonic_job(tmp_path, inputs, repositories, input=str(tmp_path / "nosuch.root")), cwd=tmp_path)
    assert result.code == 1
    assert f"input file '{tmp_path / 'nosuch.root'}' does not exist" in result.message
    assert "starting the fallback server" not in result.stderr  # found first: no server started for nothing
    assert_nothing_left(tmp_path)


def test_every_message_fits_one_line_even_when_long(cmsrun, tmp_path, inputs):
    # A long path (wider than any console) must not be wrapped by cmsrun's console.
    deep = tmp_path / ("x" * 120) / ("y" * 120)
    deep.mkdir(parents=True)
    result = cmsrun(file_job(deep, deep / "nosuch.root"), cwd=deep)
    assert result.code == 1
    assert str(deep / "nosuch.root") in result.message  # .message asserts the single line
