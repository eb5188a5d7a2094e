"""Benchmarks of the framework itself and of direct vs as-a-service inference.

Same conventions as :mod:`framework.bench._exp_sonic`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Any

import trio

import framework.config as cms
from framework.core import build_job

from ._harness import (
    CONFIGS,
    MODEL_TIME_COLUMNS,
    MODELS,
    SERVERS,
    config_args,
    median_of,
    model_seconds,
    run_config,
    run_records,
)
from ._proxy import DelayProxy

MS = 1e3

SEEDS: dict[str, dict[str, Any]] = {
    "particlenet": {"label": "PN-AK4", "ms": 42.4, "mb": 0.04},
    "deepmet": {"label": "DeepMET", "ms": 13.2, "mb": 0.33},
    "deeptau": {"label": "DeepTau", "ms": 21.1, "mb": 1.18},
    "facile": {"label": "FACILE (HLT, seed 004)", "ms": None, "mb": None},
}
"""Seed talk 001 (MiniAOD, CPU, per event of 993.3 ms): time and input size per algorithm."""
SEEDS_TOTAL_MS = 993.3
QUICK_MODELS = ("deepmet", "facile")  # the two cheapest, for --quick


# ----------------------------------------------------------------------------------------
# Framework overhead


def framework_overhead(quick: bool, repeat: int) -> dict[str, Any]:
    """Microseconds per module call: Paths of 0, 10, 50 no-op modules, 1 and 8 streams."""
    events = 300 if quick else 10000
    rows = []
    for streams in (1, 8):
        walls = {}
        for k in (0, 10, 50):
            result = median_of(
                repeat,
                partial(run_config, "noop_cfg.py", modules=k, events=events, streams=streams),
            )
            walls[k] = result["wall_time"]
            rows.append(
                {
                    "streams": streams,
                    "modules": k,
                    "events": events,
                    "wall_time": result["wall_time"],
                    "us_per_event": result["wall_time"] / events * 1e6,
                    "runs": run_records(result, "wall_time"),
                }
            )
        for r in rows:
            if r["streams"] == streams and r["modules"]:
                r["us_per_module_call"] = (walls[r["modules"]] - walls[0]) / (events * r["modules"]) * 1e6
    worst = max(r["us_per_module_call"] for r in rows if r["modules"])
    return {
        "experiment": "overhead",
        "title": "Framework overhead per module call (EmptySource, no-op producers)",
        "settings": {
            "events": events,
            "modules": [0, 10, 50],
            "streams": [1, 8],
            "threads": 1,
        },
        "rows": rows,
        "columns": [
            ("streams", "streams", "d"),
            ("modules", "modules", "d"),
            ("wall_time", "wall [s]", ".3f"),
            ("us_per_event", "us/event", ".1f"),
            ("us_per_module_call", "us/module call", ".2f"),
        ],
        "targets": [
            {
                "name": "us per module call (worst)",
                "value": worst,
                "target": 10.0,
                "met": worst <= 10.0,
                "note": "(wall(k) - wall(0)) / (events x k)",
            }
        ],
        "notes": ["no-op producers are not thread-safe: they run on the scheduler's thread (no thread hand-off)"],
    }


# ----------------------------------------------------------------------------------------
# Source throughput


def _bare_iterate(file: str, copies: int, tree: str, branches: list[str]) -> dict[str, Any]:
    """``TTree.iterate`` (uproot's default step size), awkward arrays, over ``file`` read
    ``copies`` times: opened once, as PoolSource opens a file that its list repeats."""
    import uproot

    t0 = time.perf_counter()
    events = 0
    with uproot.open(file, array_cache=None) as opened:
        ttree = opened[tree]
        for _ in range(copies):
            for arrays in ttree.iterate(expressions=branches, library="ak", how=dict):
                events += len(arrays[branches[0]])
    return {"events": events, "wall_time": time.perf_counter() - t0, "file_opens": 1}


def _bare_arrays(file: str, copies: int, tree: str, branches: list[str]) -> dict[str, Any]:
    """The leanest uproot loop: open ``file`` once, ``TTree.arrays(branches, how=dict)``
    ``copies`` times, close (the same opens as PoolSource's)."""
    import uproot

    t0 = time.perf_counter()
    events = 0
    with uproot.open(file, array_cache=None) as opened:
        ttree = opened[tree]
        for _ in range(copies):
            events += len(ttree.arrays(branches, how=dict)[branches[0]])
    return {"events": events, "wall_time": time.perf_counter() - t0, "file_opens": 1}


def _source_alone(sample: str, tree: str, copies: int, collections: list[str]) -> dict[str, Any]:
    """The job's PoolSource without scheduler and modules: one task takes its events and
    gets every collection of each (``event.collections[name]``), as the job's reader does.
    Construction, opening and reading included, as for the other readers."""
    t0 = time.perf_counter()
    options = config_args(inputFiles=sample, treeName=tree, repeat=copies, collections=collections)
    source = build_job(cms.load_config(CONFIGS / "source_cfg.py", options)).source
    source.collections()
    source.set_branch_request({name: None for name in collections})
    events = 0

    async def drain() -> None:
        nonlocal events
        send, receive = trio.open_memory_channel(0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(source.run, send, -1)
            async with receive:
                async for event in receive:
                    for name in collections:
                        event.collections[name]
                    events += 1

    try:
        trio.run(drain)
    finally:
        source.close()
    opens = len(source.statistics().files_opened)
    return {"events": events, "wall_time": time.perf_counter() - t0, "file_opens": opens}


def _bytes_per_event(file: str, tree: str, branches: list[str]) -> float:
    import uproot

    with uproot.open(file) as f:
        arrays = f[tree].arrays(branches, how=dict)
    return sum(a.nbytes for a in arrays.values()) / len(arrays[branches[0]])


def _file_opens(result: dict[str, Any]) -> int | None:
    """Files a reader opened (None: it reads no file)."""
    if "file_opens" in result:
        return int(result["file_opens"])
    stats = result.get("source")
    return len(stats.files_opened) if stats is not None and hasattr(stats, "files_opened") else None


ITERATE = "uproot TTree.iterate"
ARRAYS = "uproot TTree.arrays"
SOURCE_SAMPLES = [
    # (file, tree, collections, copies in the full run): many small events and a tree of
    # 2,656 branches (opening the TTree costs ~2 s), and a flat ntuple of 2,421 events.
    ("nano_tt_v15.root", "Events", ["Jet", "Tau", "Muon", "Electron"], 8),
    ("uproot-HZZ.root", "events", ["Jet", "Muon", "Electron", "Photon"], 10),
]


def source_throughput(quick: bool, repeat: int) -> dict[str, Any]:
    """PoolSource (one analyzer reading whole collections) vs bare uproot loops, same branches.

    The framework's time is the whole job (construction and the first file's opening
    included), as the bare loops' is. Each side opens the file once and reads all its
    entries ``copies`` times.
    """
    from framework.io.samples import locate_sample

    rows, targets = [], []
    for file_name, tree, collections, copies in SOURCE_SAMPLES[1:] if quick else SOURCE_SAMPLES:
        sample = str(locate_sample(file_name))
        copies = 1 if quick else copies
        framework = median_of(
            repeat,
            partial(
                run_config, "source_cfg.py", inputFiles=sample, treeName=tree, repeat=copies, collections=collections
            ),
        )
        branches = list(framework["source"].branches)
        mb_per_event = _bytes_per_event(sample, tree, branches) / 1e6
        empty = median_of(repeat, partial(run_config, "source_cfg.py", emptyEvents=framework["events"]))
        # (reader, median_of result, its time key): the jobs' time is the whole job
        readers = [
            ("PoolSource (cmsrun job)", framework, "total_time"),
            (
                "PoolSource alone (no scheduler)",
                median_of(repeat, partial(_source_alone, sample, tree, copies, collections)),
                "wall_time",
            ),
            ("EmptySource (cmsrun job, no reads)", empty, "total_time"),
            (ITERATE, median_of(repeat, partial(_bare_iterate, sample, copies, tree, branches)), "wall_time"),
            (ARRAYS, median_of(repeat, partial(_bare_arrays, sample, copies, tree, branches)), "wall_time"),
        ]
        rates = {}
        for name, r, time_key in readers:
            rates[name] = r["events"] / r[time_key]
            rows.append(
                {
                    "file": file_name,
                    "reader": name,
                    "events": r["events"],
                    "wall_time": r[time_key],
                    "events_per_s": rates[name],
                    "mb_per_s": rates[name] * mb_per_event,
                    "branches": len(branches),
                    "file_opens": _file_opens(r),
                    "runs": run_records(r, "events", time_key),
                }
            )
        note = f"{len(branches)} branches, {mb_per_event * 1e3:.1f} kB/event"
        for bare in (ITERATE, ARRAYS):
            ratio = rates["PoolSource (cmsrun job)"] / rates[bare]
            targets.append(
                {
                    "name": f"{file_name}: PoolSource / {bare}",
                    "value": ratio,
                    "target": 0.8,
                    "met": ratio >= 0.8,
                    "note": note,
                }
            )
        alone = rates["PoolSource alone (no scheduler)"] / rates[ITERATE]
        targets.append(
            {
                "name": f"{file_name}: PoolSource alone / {ITERATE}",
                "value": alone,
                "target": 0.8,
                "met": alone >= 0.8,
                "note": "the source itself, without scheduler and modules",
            }
        )
        ceiling = rates["EmptySource (cmsrun job, no reads)"] / rates[ITERATE]
        targets.append(
            {
                "name": f"{file_name}: EmptySource job / {ITERATE}",
                "value": ceiling,
                "target": None,
                "met": None,
                "note": "the bound: a per-event job that reads nothing",
            }
        )
    return {
        "experiment": "source",
        "title": "Source throughput: PoolSource vs bare uproot loops (same branches)",
        "settings": {
            "samples": [s[:3] for s in SOURCE_SAMPLES],
            "copies": [1 if quick else s[3] for s in SOURCE_SAMPLES],
            "threads": 1,
            "streams": 1,
        },
        "rows": rows,
        "columns": [
            ("file", "file", "s"),
            ("reader", "reader", "s"),
            ("events", "events", "d"),
            ("wall_time", "time [s]", ".2f"),
            ("events_per_s", "events/s", ".0f"),
            ("mb_per_s", "MB/s (uncompressed)", ".2f"),
        ],
        "targets": targets,
        "notes": [
            "each file is listed many times with duplicateCheckMode = noDuplicateCheck",
            "EmptySource job: the same job (one analyzer, one stream) over as many events, reading nothing",
            "MB/s counts the uncompressed arrays of the branches read",
            "every reader opens each file once and reads it as many times as PoolSource's list repeats it "
            "(PoolSource keeps a file open until its last listing): the same opens, the same reads",
        ],
    }


# ----------------------------------------------------------------------------------------
# Direct vs as a service


def _with_model_ms(model: str, job: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``job()``'s result with ``"model_ms"``: the model's time per event in that run."""
    result = job()
    return {**result, "model_ms": result["module_seconds"][model] * MS}


def direct_vs_service(quick: bool, repeat: int) -> dict[str, Any]:
    """Each model: per-event latency and throughput, onnxruntime in-process vs local Triton."""
    copies = 1 if quick else 10
    rows = []
    server = SERVERS.models_server()
    for name in QUICK_MODELS if quick else MODELS:
        entry = {"model": name, **{f"seed_{k}": v for k, v in SEEDS[name].items()}}
        # The first inferences of a model are slow on both sides (onnxruntime's first runs,
        # in the server or in-process; gRPC channels). Each side runs the same short job
        # first (it warms the server's model; the direct producer's session lives in its
        # job), and each measured job leaves its first 2 events out of the model's time
        # as well as out of throughput (warmup=2), so neither side counts first runs.
        for backend, shm in (("direct", True), ("sonic", True), ("sonic_grpc", False)):
            job = partial(
                run_config,
                "models_cfg.py",
                models=name,
                backend=backend.split("_")[0],
                server=server.grpc_address,
                streams=1,
                threads=1,
                sharedMemory=shm,
            )
            job(events=3)
            # sonic: Client.useSharedMemory at its default (true: the server is local);
            # sonic_grpc: the same with gRPC payloads, side by side
            result = median_of(repeat, partial(_with_model_ms, name, partial(job, warmup=2, repeat=copies)))
            entry[f"{backend}_ms"] = result["model_ms"]
            entry[f"{backend}_throughput"] = result["throughput"]
            entry[f"{backend}_runs"] = run_records(result, "model_ms", "throughput")
            if backend == "sonic":
                client = result["services"]["TritonService"]["clients"][name]
                entry["input_mb"] = client["bytes_sent"] / max(result["events"], 1) / 1e6
                # Client.useSharedMemory is true by default and the server is local
                entry["transport"] = "shm" if client.get("shm_calls", 0) == client["calls"] > 0 else "gRPC"
        entry["latency_ratio"] = entry["sonic_ms"] / entry["direct_ms"]
        entry["grpc_latency_ratio"] = entry["sonic_grpc_ms"] / entry["direct_ms"]
        entry["throughput_ratio"] = entry["sonic_throughput"] / entry["direct_throughput"]
        rows.append(entry)
    return {
        "experiment": "direct",
        "title": "Direct (onnxruntime in-process) vs as a service (local Triton), per model",
        "settings": {
            "events": 10 * copies,
            "input": "pfnano.root",
            "streams": 1,
            "threads": 1,
        },
        "rows": rows,
        "columns": [
            *MODEL_TIME_COLUMNS,
            ("latency_ratio", "SONIC/direct", ".2f"),
            ("throughput_ratio", "thr. ratio", ".2f"),
            ("sonic_grpc_ms", "SONIC gRPC [ms]", ".2f"),
            ("grpc_latency_ratio", "gRPC/direct", ".2f"),
            ("input_mb", "input [MB/ev]", ".3f"),
            ("transport", "transport", "s"),
            ("seed_ms", "seed [ms]", "s"),
            ("seed_mb", "seed [MB]", "s"),
        ],
        "targets": [
            {
                "name": f"{r['model']}: SONIC / direct latency",
                "value": r["latency_ratio"],
                "target": 2.0,
                "met": r["latency_ratio"] <= 2.0,
                "note": f"tensors via {r['transport']}",
            }
            for r in rows
            if r["model"] in ("facile", "deeptau")
        ],
        "notes": [
            "model time per event: direct = the producer's run time; SONIC = acquire + external wait + produce; "
            "both after the same warm-up job and without each measured job's first 2 events",
            "SONIC: tensors as the transport column says (shared memory by default with a local server); "
            "SONIC gRPC: the same job with Client.useSharedMemory = false (gRPC payloads)",
            "DeepTau with minTaus = 3 jet-seeded candidates per event (pfnano.root stores no taus)",
            "the stand-ins are untrained and smaller than CMS's models; the seeds' times are CMS CPU times",
        ],
    }


# ----------------------------------------------------------------------------------------
# MiniAOD-like demonstrator


def miniaod(quick: bool, repeat: int) -> dict[str, Any]:
    """CPU work ~90 % and the four models ~10 % of the event; direct vs SONIC (local, behind a proxy)."""
    copies = 1 if quick else 4
    streams, threads = (2, 2) if quick else (4, 2)
    rtt_ms = 10
    models = ("facile",) if quick else tuple(MODELS)
    # --quick: FACILE alone on 8 EmptySource events (its inputs need no file)
    source = {"source": "empty", "events": 8} if quick else {"repeat": copies}
    calibration = run_config("models_cfg.py", warmup=2, backend="direct", models=models, streams=1, threads=1, **source)
    model_ms = sum(model_seconds(m) for m in calibration["modules"].values()) * MS
    cpu_ms = 9 * model_ms  # the seeds' table: the algorithms are ~10 % of the event
    rows = []
    server = SERVERS.models_server()
    with DelayProxy(server.grpc_address, rtt_ms / MS) as proxy:
        variants = [
            ("direct", "direct", ""),
            ("SONIC, local server", "sonic", server.grpc_address),
            (f"SONIC, server at +{rtt_ms} ms RTT", "sonic", proxy.address),
        ]
        for label, backend, address in variants:
            result = median_of(
                repeat,
                partial(
                    run_config,
                    "models_cfg.py",
                    warmup=2 * streams,
                    backend=backend,
                    server=address or server.grpc_address,
                    models=models,
                    streams=streams,
                    threads=threads,
                    cpuTime=cpu_ms,
                    **source,
                ),
            )
            rows.append(
                {
                    "variant": label,
                    "throughput": result["throughput"],
                    "p50_ms": result["latency"]["p50"] * MS,
                    "p99_ms": result["latency"]["p99"] * MS,
                    "runs": run_records(result, "throughput", "latency"),
                }
            )
    for r in rows:
        r["change"] = r["throughput"] / rows[0]["throughput"] - 1
    return {
        "experiment": "miniaod",
        "title": "MiniAOD-like demonstrator: CPU work ~90 %, four models ~10 % of the event",
        "settings": {
            "models_ms_direct": model_ms,
            "cpu_ms": cpu_ms,
            "streams": streams,
            "threads": threads,
            "events": 10 * copies,
            "rtt_ms": rtt_ms,
        },
        "rows": rows,
        "columns": [
            ("variant", "variant", "s"),
            ("throughput", "events/s", ".2f"),
            ("change", "vs direct", "+.1%"),
            ("p50_ms", "p50 [ms]", ".1f"),
            ("p99_ms", "p99 [ms]", ".1f"),
        ],
        "targets": [
            {
                "name": "throughput change as a service (seed 004: -10 % computing time)",
                "value": rows[1]["change"],
                "target": None,
                "met": None,
                "note": "server and jobs share the same 2 CPU cores here: no coprocessor takes the work away",
            }
        ],
        "notes": [
            "CPU work calibrated so that the four models plus their input producers are ~10 % (seed 001)",
            "a gain as a service needs the inference to run elsewhere (a GPU); here it runs on the same cores",
        ],
    }
