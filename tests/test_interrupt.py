"""Ctrl-C and SIGTERM: ``cmsrun`` stops promptly and leaves nothing behind.

The job: the real ``pfnano.root`` listed 200 times (``noDuplicateCheck``: 2,000 events,
minutes of work), ParticleNet and DeepMET through the fallback Triton server started by
the job, and an output module. Once the job has processed 16 events (its progress log
says so), the signal goes to cmsrun's process group, as a terminal sends Ctrl-C. Then:
cmsrun exits within a bounded time with 128 + the signal number; the output, already
begun as ``out.root.tmp-<pid>``, is removed (see cmsrun's docstring for why not kept);
the fallback server that the job started is gone.

Policy: cmsrun runs in its own session (so that the signal reaches nothing else); every
wait has a deadline, and a job that outlives it is killed.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

from framework.io.samples import locate_sample

JOB = """
import framework.config as cms
process = cms.Process("INTERRUPT")
process.source = cms.Source("PoolSource", fileNames=cms.untracked.vstring(*[{sample!r}] * 200),
                            duplicateCheckMode=cms.untracked.string("noDuplicateCheck"))
process.options.numberOfStreams = 4
process.options.numberOfThreads = 2
process.particleNetInputs = cms.EDProducer("ParticleNetInputProducer")
process.particleNetAK4 = cms.EDProducer("ParticleNetSonicProducer", src=cms.InputTag("particleNetInputs"),
                                        Client=cms.PSet(modelName=cms.string("particlenet_ak4"),
                                                        mode=cms.string("Async"),
                                                        modelConfigPath=cms.FileInPath("models/particlenet_ak4/config.pbtxt"),
                                                        timeout=cms.untracked.uint32(10)))
process.deepMETInputs = cms.EDProducer("DeepMETInputProducer")
process.deepMET = cms.EDProducer("DeepMETSonicProducer", src=cms.InputTag("deepMETInputs"),
                                 Client=cms.PSet(modelName=cms.string("deepmet"), mode=cms.string("Async"),
                                                 modelConfigPath=cms.FileInPath("models/deepmet/config.pbtxt"),
                                                 timeout=cms.untracked.uint32(10)))
process.out = cms.OutputModule("NanoAODOutputModule", fileName=cms.untracked.string("out.root"),
                               outputCommands=cms.untracked.vstring("drop *", "keep Jet_pt", "keep particleNetAK4_*",
                                                                    "keep deepMET_*"),
                               basketSize=cms.untracked.uint32(8))  # baskets on disk before the signal
process.p = cms.Path(process.particleNetAK4 + process.deepMET,
                     cms.Task(process.particleNetInputs, process.deepMETInputs))
process.e = cms.EndPath(process.out)
"""

STARTED = "Processed the 16th record"  # cmsrun's progress log, at 1, 2, 4, 8, 16... events
START_DEADLINE = 180.0  # seconds for imports, the fallback server and 16 events
STOP_DEADLINE = 60.0  # seconds from the signal to cmsrun's exit


def _proc_state(pid: int) -> str | None:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def tritonserver_children(parent: int) -> set[int]:
    found = set()
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text()
            if (proc / "comm").read_text().strip() == "tritonserver" and int(
                stat.rsplit(")", 1)[1].split()[1]
            ) == parent:
                found.add(int(proc.name))
        except (OSError, ValueError, IndexError):
            pass
    return found


class StderrReader:
    """Reads a process' stderr on a thread; ``wait_for(text, timeout)`` waits for a line."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._stream = stream
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for(self, text: str, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: any(text in line for line in self.lines), timeout)

    def text(self) -> str:
        self._thread.join(10)
        return "".join(self.lines)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_the_job_cleanly(tmp_path, signum, code):
    config = tmp_path / "interrupt_cfg.py"
    config.write_text(JOB.format(sample=str(locate_sample("pfnano.root"))))
    job = subprocess.Popen(
        [sys.executable, "-m", "framework.cmsrun", str(config), "--no-progress"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    stderr = StderrReader(job.stderr)
    try:
        assert stderr.wait_for(STARTED, START_DEADLINE), f"the job did not start:\n{stderr.text()[-3000:]}"
        servers = tritonserver_children(job.pid)
        assert servers, "no fallback tritonserver was started by the job"
        assert list(tmp_path.glob(f"out.root.tmp-{job.pid}-*")), "the output was not begun"
        os.killpg(job.pid, signum)
        t0 = time.monotonic()
        job.wait(STOP_DEADLINE)
        print(f"stopped {time.monotonic() - t0:.1f} s after {signal.Signals(signum).name}")
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(10)
    log = stderr.text()
    assert job.returncode == code, log[-3000:]
    assert f"{signal.Signals(signum).name} received: stopping the job" in log
    assert "stopped after" in log and "unfinished outputs were removed" in log
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out.root"))
    assert not left, f"output left behind: {left}"
    # The SONIC clients' shared-memory regions: unlinked by the job itself (not by
    # multiprocessing's resource tracker at exit, which would warn of leaked objects)
    assert "leaked shared_memory" not in log and not [
        n for n in os.listdir("/dev/shm") if n.startswith(f"pysonic_shm_{job.pid}_")
    ]
    # The job stops its server before exiting; a zombie is only an entry of the process table.
    alive = {pid for pid in servers if _proc_state(pid) not in (None, "Z")}
    assert not alive, f"tritonserver left running: {alive}"
