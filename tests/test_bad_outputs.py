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
import time

import pytest
import uproot
from test_bad_inputs import Result, cmsrun  # noqa: F401 - cmsrun is a fixture

from framework.io import remove_stale_temporaries, temporary_name
from framework.io.samples import locate_sample
from framework.utilities import host_id

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
