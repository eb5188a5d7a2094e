"""Ctrl-C and SIGTERM: ``cmsrun`` stops promptly and leaves nothing behind.

The job: the real ``pfnano.root`` listed 200 times (``noDuplicateCheck``: 2,000 events,
minutes of work), ParticleNet and DeepMET through the fallback Triton server started by
the job, and an output module. Once the job has processed 16 events (its progress log
says so), the signal goes to cmsrun's process group, as a terminal sends Ctrl-C. Then:
cmsrun exits within a bounded time with 128 + the signal number; the output, already
begun as ``out.root.tmp-<pid>``, is removed (see cmsrun's docstring for why not kept);
the fallback server that the job started is gone.

A module stuck for good (in ``analyze`` on the trio thread, on a worker thread, in
``end_job``) keeps the first signal from taking effect; the second one ends cmsrun at once
(as CMSSW's): 128 + its number within seconds, one line naming the module, its method and
event, no unfinished output, the fallback server stopped. Those jobs are tiny (EmptySource,
a module that blocks in C on a lock with the GIL released, as on a socket).

Policy: cmsrun runs in its own session (so that the signal reaches nothing else); every
wait has a deadline, and a job that outlives it is killed.
"""

from __future__ import annotations

import os
import pathlib
import signal
import threading
import time

import pytest

from framework.io.samples import locate_sample

from support import cmsrun_process

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
    job = cmsrun_process(str(config), cwd=tmp_path)
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


# ---------------------------------------------------------------------------- a stuck module

# A module that blocks forever where the case says: in analyze() of event 3 (on the trio
# thread, or on a worker thread when thread-safe) or in end_job(). The wait is a lock's, in
# C with the GIL released, as a module waiting on a socket or a library would be. It
# touches stuck.flag first, so that the test signals it once it is stuck.
STUCK_MODULE = """
import threading

import numpy as np

import framework.config as cms
from framework import EDAnalyzer
from framework.sonic import SonicEDProducer


class Stuck(EDAnalyzer):
    @classmethod
    def fill_descriptions(cls, desc):
        desc.add("where", cms.string("analyze"), "analyze or end_job")
        desc.add("threadSafe", cms.bool(False), "analyze() on a worker thread")

    def __init__(self, params):
        super().__init__(params)
        self.where, self.thread_safe = params.where, params.threadSafe

    def analyze(self, event):
        if self.where == "analyze" and event.id.event == 3:
            self._block()

    def end_job(self):
        if self.where == "end_job":
            self._block()

    @staticmethod
    def _block():
        open("stuck.flag", "w").close()
        threading.Event().wait()


class Sender(SonicEDProducer):
    def __init__(self, params):
        super().__init__(params)
        self.produces()

    def acquire(self, event, input):
        input["x"].to_server(np.ones((1, 4), np.float32))

    def produce(self, event, output):
        event.put(output["y"].from_server()[0])
"""

STUCK_JOB = """
import framework.config as cms
process = cms.Process("STUCK")
process.source = cms.Source("EmptySource")
process.maxEvents.input = 20
process.options.numberOfThreads = 2
process.options.numberOfStreams = 2
process.stuck = cms.EDAnalyzer("stuck_module:Stuck", where=cms.string({where!r}), threadSafe=cms.bool({thread_safe}))
process.out = cms.OutputModule("NanoAODOutputModule", fileName=cms.untracked.string("out.root"))
process.p = cms.Path(process.stuck)
process.e = cms.EndPath(process.out)
"""

# With a SONIC module, the job's fallback server runs while end_job() is stuck.
SONIC_PART = """
process.sender = cms.EDProducer("stuck_module:Sender", Client=cms.PSet(
    modelName=cms.string("doubler"), mode=cms.string("Async"), timeout=cms.untracked.uint32(20),
    modelConfigPath=cms.FileInPath({repository!r} + "/doubler/config.pbtxt")))
process.TritonService = cms.Service("TritonService", fallback=cms.PSet(
    enable=cms.untracked.bool(True), modelRepository=cms.untracked.string({repository!r})))
process.p = cms.Path(process.sender + process.stuck)
"""

DOUBLER = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("y", 2 * pb_utils.get_input_tensor_by_name(r, "x").as_numpy())]) for r in requests]
"""

SECOND_SIGNAL_DEADLINE = 20.0  # seconds from the second signal to the exit: the cleanup's bound (10 s) and slack


@pytest.mark.parametrize(
    ("where", "thread_safe", "sonic", "signums", "stuck_in"),
    [
        ("analyze", False, False, (signal.SIGINT, signal.SIGINT), "analyze() for event 1:1:3"),
        ("analyze", True, False, (signal.SIGTERM, signal.SIGTERM), "analyze() for event 1:1:3"),
        ("end_job", False, True, (signal.SIGINT, signal.SIGTERM), "in end_job() of EDAnalyzer 'stuck'"),
    ],
    ids=["trio thread", "worker thread", "end_job with a fallback server"],
)
def test_second_signal_ends_a_stuck_job_at_once(tmp_path, where, thread_safe, sonic, signums, stuck_in):
    from framework.serving.testing import TensorConfig, write_python_model

    (tmp_path / "stuck_module.py").write_text(STUCK_MODULE)
    config = STUCK_JOB.format(where=where, thread_safe=thread_safe)
    if sonic:
        repository = tmp_path / "models"
        tensors = {"inputs": [TensorConfig("x", dims=(4,))], "outputs": [TensorConfig("y", dims=(4,))]}
        write_python_model(repository, "doubler", DOUBLER, **tensors)
        config += SONIC_PART.format(repository=str(repository))
    (tmp_path / "stuck_cfg.py").write_text(config)
    job = cmsrun_process("stuck_cfg.py", cwd=tmp_path)
    stderr = StderrReader(job.stderr)
    try:
        deadline = time.monotonic() + START_DEADLINE
        while not (tmp_path / "stuck.flag").exists():
            assert job.poll() is None and time.monotonic() < deadline, f"the module never got stuck:\n{stderr.text()}"
            time.sleep(0.1)
        servers = tritonserver_children(job.pid)
        assert bool(servers) == sonic, servers
        first, second = signums
        os.kill(job.pid, first)
        assert stderr.wait_for(f"{signal.Signals(first).name} received: stopping the job", 30), stderr.text()
        time.sleep(0.5)  # the graceful stop cannot end: the module is stuck
        assert job.poll() is None, stderr.text()
        os.kill(job.pid, second)
        t0 = time.monotonic()
        job.wait(SECOND_SIGNAL_DEADLINE)
        print(f"ended {time.monotonic() - t0:.1f} s after the second signal")
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(10)
    log = stderr.text()
    assert job.returncode == 128 + second, log[-3000:]
    (line,) = [line for line in log.splitlines() if "received again" in line]
    assert f"cmsrun: {signal.Signals(second).name} received again: stopping at once; the job was in " in line
    assert stuck_in in line and "EDAnalyzer 'stuck' (type stuck_module:Stuck)" in line, line
    assert "stopped at once: unfinished outputs removed, servers stopped" in log
    assert "Traceback" not in log
    # No unfinished output. Stuck in end_job(), every event was written: whether the output is
    # committed then is the output writer's business (tests/test_output.py).
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out.root"))
    assert not [name for name in left if where != "end_job" or ".tmp-" in name], f"output left behind: {left}"
    alive = {pid for pid in servers if _proc_state(pid) not in (None, "Z")}
    assert not alive, f"tritonserver left running: {alive}"
    assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"pysonic_shm_{job.pid}_")]
