"""Where a SONIC request's CPU goes: py-spy samples of a job, attributed to the client's stages.

    python scripts/profile_client.py record --server 127.0.0.1:8001 --out bench-results/profile-after \
        --figures docs/performance/profile-after
    python scripts/profile_client.py table bench-results/profile-before bench-results/profile-after

``record`` runs ``framework/bench/configs/models_cfg.py`` (the four models, 4 streams, 1
thread, gRPC payloads) twice under py-spy (``pip install py-spy``; a tool of this script,
not a dependency of pysonic): the SONIC job and the same job with a null consumer
(``backend=noinference``: the same input producers, zeros instead of inference), each
once as raw collapsed stacks (``<name>.txt``, with ``settings.json``: what ``table`` reads)
and once as a flame graph (``<name>.svg``, into ``--figures``: the docs show those; default:
``--out``).
The job is pinned to CPU 0 (the server should be on the others: ``taskset``).

``table`` attributes every sample to one stage, by the innermost frame that names one
(:data:`STAGES`, in order); a sample with no Python frame is a thread of gRPC's C core;
what names no stage is the job's own work (source, scheduler, input producers), the same
in both jobs. Per request: samples / rate / requests (the job's requests: events x models).
py-spy samples threads that are running or runnable: on a loaded machine a runnable
thread waiting for a core counts too, so compare shares, and runs made side by side.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
CONFIG = REPO / "framework" / "bench" / "configs" / "models_cfg.py"
RATE = 250  # samples per second and thread
MODELS = 4

# (stage, patterns of a frame "function (file:line)"): the first stage whose pattern the
# innermost matching frame carries wins.
STAGES: list[tuple[str, tuple[str, ...]]] = [
    (
        "output decoding (from_server)",
        (
            "decode_response",
            "as_numpy",
            "output_array",
            "TritonRequest._finish",
            "_check_output",
            "_fw_complete",
            "InferResult",
        ),
    ),
    (
        "request encoding",
        (
            "RequestPlan.encode",
            "WireCall.__init__",
            "InferInput",
            "set_data_from_numpy",
            "grpc/_common.py",
            "RequestMessages",
            "_get_inference_request",
        ),
    ),
    ("gRPC call", ("grpc/_channel.py", "Thread.start", "_wire_stub", "WireCall.send", "_async_infer", "async_infer")),
    (
        "hand-off into trio",
        ("framework/core/_bridge.py", "_entry_queue.py", "_wire_done", "_deliver", "wakeup_thread_and_signal_safe"),
    ),
    ("input conversion (to_server)", ("to_server", "_fw_acquire")),
    (
        "bookkeeping (retry, routing, counters, request)",
        (
            "sonic/_retry.py",
            "sonic/_waits.py",
            "sonic/_routing.py",
            "_client_stats.py",
            "sonic/_request.py",
            "sonic/_client.py",
            "sonic/_transport.py",
            "sonic/_batching.py",
        ),
    ),
]
C_CORE = "gRPC C-core threads (no Python frame)"
JOB = "the job's own (source, scheduler, input producers, imports)"


def classify(stack: str) -> str:
    if not stack.strip():
        return C_CORE
    for frame in reversed(stack.split(";")):
        for stage, patterns in STAGES:
            if any(p in frame for p in patterns):
                return stage
    return JOB


def attribute(raw: pathlib.Path) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        counts[classify(stack)] += int(n)
    return counts


def record(server: str, out: pathlib.Path, events: int, figures: pathlib.Path) -> None:
    for folder in (out, figures):
        folder.mkdir(parents=True, exist_ok=True)
    for backend in ("sonic", "noinference"):
        for fmt, folder, suffix in (("raw", out, "txt"), ("flamegraph", figures, "svg")):
            job = [
                sys.executable,
                "-m",
                "framework.cmsrun",
                str(CONFIG),
                f"backend={backend}",
                f"server={server}",
                f"events={events}",
                f"repeat={events}",
                "streams=4",
                "threads=1",
                "sharedMemory=False",
                "--no-progress",
            ]
            command = [
                "taskset",
                "-c",
                "0",
                "py-spy",
                "record",
                "-r",
                str(RATE),
                "-f",
                fmt,
                "--nonblocking",
                "-o",
                str(folder / f"{backend}.{suffix}"),
                "--",
                *job,
            ]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    (out / "settings.json").write_text(json.dumps({"events": events, "rate": RATE, "models": MODELS}))


def table(folders: list[pathlib.Path]) -> str:
    columns = []
    for folder in folders:
        settings = json.loads((folder / "settings.json").read_text())
        requests = settings["events"] * settings["models"]
        sonic, null = attribute(folder / "sonic.txt"), attribute(folder / "noinference.txt")
        columns.append((folder.name, requests, settings["rate"], sonic, null))
    stages = [s for s, _ in STAGES] + [C_CORE, JOB]
    head = "| stage | " + " | ".join(f"{name}: SONIC | {name}: null" for name, *_ in columns) + " |"
    lines = [head, "|---|" + "---|---|" * len(columns)]
    for stage in [*stages, "total"]:
        cells = []
        for _, requests, rate, sonic, null in columns:
            for counts in (sonic, null):
                n = sum(counts.values()) if stage == "total" else counts[stage]
                cells.append(f"{n / rate / requests * 1e6:.0f}")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\nµs of sampled CPU per request (events x 4 models)."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--server", required=True)
    rec.add_argument("--out", type=pathlib.Path, required=True, help="raw stacks and settings")
    rec.add_argument("--figures", type=pathlib.Path, default=None, help="flame graphs (default: --out)")
    rec.add_argument("--events", type=int, default=610)
    tab = sub.add_parser("table")
    tab.add_argument("folders", type=pathlib.Path, nargs="+")
    ns = parser.parse_args()
    if ns.command == "record":
        record(ns.server, ns.out, ns.events, ns.figures or ns.out)
    else:
        print(table(ns.folders))


if __name__ == "__main__":
    main()
