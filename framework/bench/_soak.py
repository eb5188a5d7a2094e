"""Soak benchmark: does a long cmsrun job against the local Triton server leak memory?

    python -m framework.bench._soak [--events 50000] [--streams 32] [--threads 2] [--out results/soak.json]

The job: the real ``pfnano.root`` (10 events) listed ``events / 10`` times with
``duplicateCheckMode = "noDuplicateCheck"``, ``numberOfStreams = 32``; every event sends
its jets to a tiny model on the local fallback server that the job's TritonService
starts; an output module writes the scores. Sampled every ``--interval`` seconds: the
resident memory (RSS, ``/proc/<pid>/status`` VmRSS) of cmsrun, and of the tritonserver it
started together with that server's children (the Python backend stubs, which hold the
model's memory).

Why a tiny model (``jetscore``: a logistic function of each jet's pt, eta, phi and mass,
in Triton's Python backend, dynamic batching): a leak in the framework, the gRPC client
or the server grows with the number of requests, not with the model's arithmetic. The
real models cost ~20-40 ms of server CPU per event (ParticleNet, DeepMET: 50,000 events
would take ~30 min on 2 cores); this one ~1 ms per batch, so the request count stays
that of the real job (one request per event with jets) while the run takes minutes.
The module is defined here (``framework.bench._soak:JetScoreSonicProducer``; the
repository is put on the job's PYTHONPATH).

Memory: "warm-up" is the sample taken when cmsrun logs its 4,096th event (8 % of the
default 50,000: every pool, cache and buffer has been used thousands of times); "end" is
the last sample before end_job (all events processed, the server still up). Growth is
(end - warm-up) / warm-up; the target is below 10 %. The result goes to ``--out`` as JSON
(with a time series of the samples and the versions of tritonclient, grpcio, trio...);
a one-paragraph summary to stdout. Exit code 0 if both growths are under the target.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import pathlib
import platform
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

import framework.config as cms
from framework.serving.testing import TensorConfig, write_python_model
from framework.sonic import SonicEDProducer

from ._children import child_env, cmsrun_command

REPO = pathlib.Path(__file__).resolve().parents[2]
EVENTS_PER_FILE = 10  # pfnano.root
WARMUP_RECORD = 4096  # cmsrun logs its 1st, 2nd, 4th, ... event: the warm-up point
TARGET_GROWTH = 10.0  # percent
FEATURES = ("pt", "eta", "phi", "mass")

MODEL_CONFIG = {
    "inputs": [TensorConfig("jet_features", dims=(4,))],
    "outputs": [TensorConfig("score", dims=(1,))],
    "max_batch_size": 1024,
    "extra": "dynamic_batching { max_queue_delay_microseconds: 100 }",
}

# score = sigmoid(features . W): W in 1/GeV, 1, 1/rad, 1/GeV; arbitrary, only to compute something.
MODEL_CODE = """\
import numpy as np
import triton_python_backend_utils as pb_utils

W = np.array([0.01, 0.5, 0.1, -0.02], np.float32)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "jet_features").as_numpy()
            score = (1.0 / (1.0 + np.exp(-(x @ W))))[:, None].astype(np.float32)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("score", score)]))
        return responses
"""

CONFIG = """\
import framework.config as cms
process = cms.Process("SOAK")
process.source = cms.Source("PoolSource", fileNames=cms.untracked.vstring(*[{sample!r}] * {listings}),
                            duplicateCheckMode=cms.untracked.string("noDuplicateCheck"))
process.maxEvents.input = {events}
process.options.numberOfStreams = {streams}
process.options.numberOfThreads = {threads}
process.TritonService = cms.Service("TritonService", fallback=cms.PSet(
    enable=cms.untracked.bool(True), modelRepository=cms.untracked.string({repository!r})))
process.jetScore = cms.EDProducer("framework.bench._soak:JetScoreSonicProducer", Client=cms.PSet(
    modelName=cms.string("jetscore"), mode=cms.string({mode!r}), timeout=cms.untracked.uint32(60),
    modelConfigPath=cms.FileInPath({repository!r} + "/jetscore/config.pbtxt")))
process.out = cms.OutputModule("NanoAODOutputModule", fileName=cms.untracked.string("soak.root"),
                               outputCommands=cms.untracked.vstring("drop *", "keep jetScore"))
process.p = cms.Path(process.jetScore)
process.e = cms.EndPath(process.out)
"""


class JetScoreSonicProducer(SonicEDProducer):
    """Per-jet score from the ``jetscore`` model: float32, shape (n_jets,), in [0, 1]."""

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        super().fill_descriptions(desc)
        desc.add("src", cms.InputTag("Jet"), "jets (fields pt, eta, phi, mass)")

    def __init__(self, params: cms.ParameterSet) -> None:
        super().__init__(params)
        self.jets = self.consumes(params.src, branches=list(FEATURES))
        self.produces()

    def acquire(self, event, input) -> None:
        jets = event.get(self.jets)
        features = np.stack([np.asarray(jets[f], np.float32) for f in FEATURES], axis=1)
        input["jet_features"].to_server(features.reshape(-1, len(FEATURES)))  # (n_jets, 4)

    def produce(self, event, output) -> None:  # type: ignore[override]  # SONIC: (event, Triton map), as in CMSSW
        event.put(np.ascontiguousarray(output["score"].from_server()[:, 0]))


# ---------------------------------------------------------------------------- /proc


def _rss_bytes(pid: int) -> int:
    """VmRSS of ``pid`` in bytes (0 if it is gone)."""
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            tree.setdefault(ppid, []).append(int(proc.name))
    return tree


def _comm(pid: int) -> str:
    try:
        return pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def sample(job_pid: int) -> dict[str, int]:
    """RSS of cmsrun, and of its tritonserver children with all their descendants (bytes)."""
    tree = _children()
    servers = [p for p in tree.get(job_pid, []) if _comm(p) == "tritonserver"]
    server_tree, todo = [], list(servers)
    while todo:
        pid = todo.pop()
        server_tree.append(pid)
        todo += tree.get(pid, [])
    return {
        "cmsrun": _rss_bytes(job_pid),
        "tritonserver": sum(_rss_bytes(p) for p in server_tree),
        "server_processes": len(server_tree),
    }


# ---------------------------------------------------------------------------- the run


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for dist in ("tritonclient", "grpcio", "nvidia-pytriton", "trio", "numpy", "awkward", "uproot", "protobuf"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def write_job(folder: pathlib.Path, args: argparse.Namespace, sample_path: str) -> pathlib.Path:
    write_python_model(folder / "models", "jetscore", MODEL_CODE, **MODEL_CONFIG)
    config = folder / "soak_cfg.py"
    listings = -(-args.events // EVENTS_PER_FILE)
    config.write_text(
        CONFIG.format(
            sample=sample_path,
            listings=listings,
            events=args.events,
            streams=args.streams,
            threads=args.threads,
            mode=args.mode,
            repository=str(folder / "models"),
        )
    )
    return config


def run_job(config: pathlib.Path, args: argparse.Namespace) -> dict:
    """Run cmsrun on ``config``, sampling memory; returns what was measured."""
    cmd = cmsrun_command(config, summary=config.parent / "summary.json")
    job = subprocess.Popen(  # stderr read line by line as it comes (the records' times): not run_cmsrun
        cmd,
        cwd=config.parent,
        env=child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log: list[str] = []
    records: dict[int, float] = {}  # cmsrun's "Processed the Nth record" lines: N -> time

    stderr = job.stderr
    assert stderr is not None  # stderr=PIPE

    def read() -> None:
        for line in stderr:
            log.append(line)
            found = re.search(r"Processed the (\d+)\w\w record", line)
            if found:
                records[int(found.group(1))] = time.monotonic()
            elif "OutputModule 'out' wrote" in line:  # end_job: the event loop is over
                records[-1] = time.monotonic()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    # 4,096 events, or the power of two nearest below 1/8 of a shorter job (cmsrun logs those).
    warmup_record = min(WARMUP_RECORD, 1 << max(args.events // 8, 1).bit_length() - 1)
    t0 = time.monotonic()
    samples, warmup, end = [], None, None
    try:
        while job.poll() is None:
            if time.monotonic() - t0 > args.timeout:
                raise TimeoutError(f"the soak job did not finish within {args.timeout:g} s")
            s = {"t": round(time.monotonic() - t0, 2), **sample(job.pid)}
            samples.append(s)
            if warmup is None and warmup_record in records:
                warmup = s
            if warmup is not None and -1 not in records:
                end = s  # the last sample before end_job (which then stops the server)
            time.sleep(args.interval)
    finally:
        if job.poll() is None:
            job.kill()
        job.wait()
        reader.join(10)
    duration = time.monotonic() - t0
    if job.returncode != 0 or warmup is None or end is None:
        raise RuntimeError(
            f"soak job failed (exit code {job.returncode}, warm-up sample {warmup is not None}):\n" + "".join(log[-40:])
        )
    summary = json.loads((config.parent / "summary.json").read_text())
    return {
        "duration_s": round(duration, 1),
        "samples": samples,
        "warmup": warmup,
        "end": end,
        "warmup_events": warmup_record,
        "summary": summary,
        "log_tail": "".join(log[-15:]),
    }


def _growth(before: int, after: int) -> float:
    return round(100.0 * (after - before) / before, 2) if before else float("nan")


def _mib(n: int) -> float:
    return round(n / 2**20, 1)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=50_000)
    p.add_argument("--streams", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", default="Async", help="SONIC client mode: Async, Sync or PseudoAsync")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between memory samples")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before the job is killed")
    p.add_argument("--out", type=pathlib.Path, default=REPO / "results" / "soak.json")
    args = p.parse_args(argv)

    from framework.io.samples import locate_sample

    sample_path = str(locate_sample("pfnano.root"))
    with tempfile.TemporaryDirectory(prefix="pysonic-soak-") as tmp:
        folder = pathlib.Path(tmp)
        measured = run_job(write_job(folder, args, sample_path), args)
        import uproot

        with uproot.open(folder / "soak.root") as f:
            scores = f["Events"]["jetScore"].array(library="np")
        flat = np.concatenate(scores) if len(scores) else np.zeros(0)
        written = {
            "events": len(scores),
            "jets": int(flat.size),
            "scores_in_0_1": bool(flat.size and np.all((flat > 0) & (flat < 1))),
        }
    warm, end = measured["warmup"], measured["end"]
    events = measured["summary"].get("events")
    result = {
        "config": {
            "events": args.events,
            "streams": args.streams,
            "threads": args.threads,
            "mode": args.mode,
            "model": "jetscore (Python backend, 4 -> 1 per jet, dynamic batching)",
            "input": f"pfnano.root x {-(-args.events // EVENTS_PER_FILE)}, noDuplicateCheck",
        },
        "versions": _versions(),
        "events_processed": events,
        "duration_s": measured["duration_s"],
        "event_loop_s": round(measured["summary"]["wall_time"], 1),
        "throughput_per_s": round(measured["summary"]["throughput"], 1),
        "rss_mib": {
            "cmsrun": {
                "warmup": _mib(warm["cmsrun"]),
                "end": _mib(end["cmsrun"]),
                "peak": _mib(max(s["cmsrun"] for s in measured["samples"])),
            },
            "tritonserver": {
                "warmup": _mib(warm["tritonserver"]),
                "end": _mib(end["tritonserver"]),
                "peak": _mib(max(s["tritonserver"] for s in measured["samples"])),
            },
        },
        "growth_percent": {
            "cmsrun": _growth(warm["cmsrun"], end["cmsrun"]),
            "tritonserver": _growth(warm["tritonserver"], end["tritonserver"]),
        },
        "target_growth_percent": TARGET_GROWTH,
        "warmup_at_s": warm["t"],
        "warmup_events": measured["warmup_events"],
        "end_at_s": end["t"],
        "output": written,
        "samples": measured["samples"],
    }
    ok = all(g < TARGET_GROWTH for g in result["growth_percent"].values()) and written["events"] == events
    result["passed"] = ok
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    rss, growth = result["rss_mib"], result["growth_percent"]
    print(
        f"Soak: {events} events (pfnano.root listed {-(-args.events // EVENTS_PER_FILE)} times) at "
        f"{args.streams} streams / {args.threads} threads, {args.mode} requests to the tiny 'jetscore' model "
        f"on the job's fallback tritonserver, in {result['duration_s']} s. Resident memory from the warm-up "
        f"point ({measured['warmup_events']} events, t = {warm['t']} s) to the end (t = {end['t']} s): cmsrun "
        f"{rss['cmsrun']['warmup']} -> {rss['cmsrun']['end']} MiB ({growth['cmsrun']:+.1f} %), tritonserver "
        f"with its backend stubs {rss['tritonserver']['warmup']} -> {rss['tritonserver']['end']} MiB "
        f"({growth['tritonserver']:+.1f} %); target < {TARGET_GROWTH:g} %: {'PASSED' if ok else 'FAILED'}. "
        f"tritonclient {result['versions']['tritonclient']}, grpcio {result['versions']['grpcio']}. "
        f"Details: {args.out}."
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
