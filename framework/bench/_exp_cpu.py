"""``cmsbench cpu``: the job's own CPU per event, direct vs SONIC, and the client's CPU against a bare loop.

Every job is a ``cmsrun`` child process of ``framework/bench/configs/models_cfg.py`` (4 streams, 1
thread); its CPU time (user + system, all its threads) comes from the OS when it exits
(``os.wait4``). Start-up (imports, config, begin_job, sessions, channels) is removed by
running each job at two event counts and taking the difference:

    CPU per event = (cpu(events_2) - cpu(events_1)) / (events_2 - events_1)

The variants, on the same events and the same server (a ``LocalTritonServer`` of
``data/models`` in its own process):

* ``direct``: the model producers run onnxruntime in the job (one intra-op thread);
* ``sonic``: the SONIC producers, one request per event and model (batching off);
* ``sonic_batched``: the same with cross-event batching (``Client.batching``);
* ``noinference``: the same job whose model producers do no inference at all (the
  direct twin with ``runInference = False``: the same conversion of inputs and outputs
  as the SONIC producers, zeros for outputs). The client's CPU per event is measured as
  ``sonic - noinference``, the direct inference's as ``direct - noinference``;
* ``bare``: a bare ``tritonclient.grpc`` ``async_infer`` loop (``python -m
  framework.bench._exp_cpu``, a child process too) replaying the job's own tensors
  (dumped from the same events by ``models_cfg.py dumpFolder=``), one request per event
  and model, event by event, with as many requests in flight as the job has streams,
  all outputs requested; its CPU per request is taken the same way (two event counts).

Both the SONIC jobs and the bare loop send the tensors as gRPC payloads
(``Client.useSharedMemory = false``): the same transport on both sides of the ratio. The
four-model config also runs both sides with Triton's system shared memory, what a job
uses by default with a server on its own host (CMSSW's ``useSharedMemory``, default true):
``sonic_shm`` and ``sonic_batched_shm`` (the SONIC jobs with ``Client.useSharedMemory =
true``) against ``bare_shm`` (the bare loop writing each request's inputs into a region
registered once per request in flight, its outputs requested into the region too, as
pysonic's client does for fixed-size outputs).

Every transport side by side: each SONIC variant also over HTTP
(``Client.transport = http``, the server's HTTP endpoint declared: ``sonic_http``,
``sonic_batched_http``, ``sonic_http_shm``, ``sonic_batched_http_shm``); a bare
``tritonclient.http`` loop (``bare_http``); and, in the four-model config, each transport
unbatched beside a GIL-busy Python thread (``*_busy``: a thread of pure-Python loops, what
a job's source thread does while it reads; its own CPU, from its thread clock, is taken
off the job's), with the null consumer and the bare loops beside one too. The figures of
each transport carry a prefix (:data:`TRANSPORTS`: ``""`` gRPC payloads, ``http_``,
``shm_``, ``http_shm_``); the HTTP client is compared with the bare tritonclient gRPC loop
and the grpcio floor, as the issue's targets are (:func:`http_targets`).
Also the server's CPU per event (the ``tritonserver`` process and its Python-backend
stubs, from ``/proc``), so that the job's plus the local server's CPU is reported too.

Two configs: the four models alone (events 10 and 310), and the MiniAOD-like job
(``cpuTime``: CPU work per event nine times the direct inference's, so the models are
~10 % of the event; events 10 and 80, since each event costs ten times more). Its CPU
work is the same number of SHA-256 chunks in every job (``cpuChunks``, calibrated once
here): a calibration per job differs by a few per cent, as much as the client costs. The
bare loop runs at 10 and 310 events in both (it does no CPU work of its own). Every
figure is the median of ``repeat`` runs (the variants of one run side by side, in
turn); every run is kept in the JSON with the load average at its start. On a 2-core
machine one run of the four-model config took 16.5 minutes on 2026-11-29 (all three
configs with ``--repeat 3``: 46 minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import pathlib
import statistics
import sys
import tempfile
import threading
from typing import Any

import numpy as np

from ._children import cmsrun_command, run_child
from ._harness import CONFIGS, SERVERS, local_server
from ._modules import chunks_for

MS = 1e3
US = 1e6
STREAMS = 4
MODELS = ("particlenet", "deepmet", "deeptau", "facile")
TRITON_NAMES = {"particlenet": "particlenet_ak4", "deepmet": "deepmet", "deeptau": "deeptau", "facile": "facile"}
VARIANTS = ("direct", "sonic", "sonic_batched", "noinference", "sonic_http", "sonic_batched_http")  # payloads
SHM_VARIANTS = ("sonic_shm", "sonic_batched_shm", "sonic_http_shm", "sonic_batched_http_shm")  # four models only
BUSY_VARIANTS = (  # a GIL-busy Python thread beside the job (its own CPU subtracted); four models only
    "noinference_busy",
    "sonic_busy",
    "sonic_http_busy",
    "sonic_shm_busy",
    "sonic_http_shm_busy",
)
BARE_SIDES = ("bare", "floor", "bare_http")  # every config
FOUR_MODEL_SIDES = ("bare_shm", "bare_busy", "floor_busy", "bare_http_busy", "bare_shm_busy")
# --quick (the test's minutes): one of each kind, enough for every code path of the figures
QUICK_VARIANTS = (
    "direct",
    "noinference",
    "sonic",
    "sonic_http",
    "sonic_batched_http",
    "sonic_http_shm",
    "noinference_busy",
    "sonic_http_busy",
)
QUICK_SIDES = ("bare", "floor", "bare_http", "bare_http_busy")
TRANSPORTS = {  # figure prefix -> (its SONIC variant, its bare loop): the four ways a request travels
    "": ("sonic", "bare"),
    "http_": ("sonic_http", "bare"),  # the HTTP transport's targets: against the bare tritonclient gRPC loop
    "shm_": ("sonic_shm", "bare_shm"),
    "http_shm_": ("sonic_http_shm", "bare_shm"),
}
BATCH_ROWS = 65536  # Client.batching.maxRows of sonic_batched: in effect each model's max_batch_size
BATCH_DELAY_US = 10_000  # its maxDelay: long enough for the 4 streams to fall into step (the hold ends
# as soon as no other task can run, so a lone request does not wait for it; docs/performance.md)
JOB_CORE = 0  # the jobs' core; the server gets the others (where the machine has them)


def _cmsrun(summary: pathlib.Path | None = None, **options: Any) -> list[str]:
    """The command of a ``cmsrun framework/bench/configs/models_cfg.py`` child with ``options``."""
    return cmsrun_command(CONFIGS / "models_cfg.py", options, summary=summary)


def _child(command: list[str], folder: pathlib.Path, what: str, timeout: float = 900.0) -> tuple[float, float]:
    """Run ``command``; its (CPU seconds, user + system of all its threads, wall seconds).

    Raises:
        RuntimeError: it failed (with the end of its stderr) or ran past ``timeout``.
    """
    return run_child(command, folder, f"cmsbench cpu: {what}", timeout, core=JOB_CORE)


def _tree_cpu(pid: int) -> float:
    """CPU seconds so far of process ``pid`` and its children (the server's Python-backend
    stubs), from ``/proc`` (0 where unreadable)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state (field 3 of proc(5)); ppid is field 4, utime/stime 14/15
        if int(stat.parent.name) == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _pin_tree(pid: int, cores: set[int]) -> None:
    """Pin process ``pid`` and its children (the server's Python-backend stubs), every
    thread of each, to ``cores`` (``/proc``; after their start, as ``start_pinned``)."""
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(stat.parent.name) != pid and int(fields[1]) != pid:
                continue
            for task in (stat.parent / "task").iterdir():
                os.sched_setaffinity(int(task.name), cores)
        except (OSError, ValueError):  # gone meanwhile
            continue


def _job(
    variant: str, events: int, server: Any, folder: pathlib.Path, models: tuple[str, ...], cpu_chunks: int
) -> dict[str, Any]:
    """One cmsrun of ``variant`` on ``events`` events: its CPU, wall, the server's CPU, its summary."""
    parts = variant.split("_")
    shared_memory, batched, http, busy = "shm" in parts, "batched" in parts, "http" in parts, "busy" in parts
    backend = parts[0]  # direct | sonic | noinference: a backend of models_cfg.py
    busy_file = folder / f"busy_{variant}_{events}.txt"
    options: dict[str, Any] = dict(
        backend=backend,
        models=list(models),
        server=f"{server.grpc_address},http://{server.http_address}" if http else server.grpc_address,
        transport="http" if http else "grpc",
        busyThread=busy_file if busy else "",
        events=events,
        repeat=events,  # pfnano.root holds 10 events: list it often enough (opened once)
        streams=STREAMS,
        threads=1,
        sharedMemory=shared_memory,
        cpuChunks=cpu_chunks,  # the MiniAOD-like work: the same chunks in every job (0: none)
        batchRows=BATCH_ROWS if batched else 0,
        batchDelay=BATCH_DELAY_US,
    )
    summary = folder / f"{variant}_{events}.json"
    server_before = _tree_cpu(server.pid)
    cpu, wall = _child(_cmsrun(summary, **options), folder, f"{variant} job on {events} events")
    busy_cpu = float(busy_file.read_text()) if busy else 0.0  # the busy thread's own CPU: not the job's
    out = {"cpu_s": cpu - busy_cpu, "wall_s": wall, "server_cpu_s": _tree_cpu(server.pid) - server_before}
    out["busy_cpu_s"] = busy_cpu
    report = json.loads(summary.read_text())
    # The job's own split of its event loop's CPU: the trio thread's and the other threads'.
    out["event_loop_cpu_s"] = report["cpu"]["event_loop"]
    out["other_threads_cpu_s"] = report["cpu"]["other_threads"] - busy_cpu
    out["http_calls"] = sum(c.get("http_calls", 0) for c in report["services"]["TritonService"]["clients"].values())
    clients = report.get("services", {}).get("TritonService", {}).get("clients", {})
    out["calls"] = sum(c.get("calls", 0) for c in clients.values())
    out["shm_calls"] = sum(c.get("shm_calls", 0) for c in clients.values())  # calls whose inputs went in a region
    out["requests"] = sum(c.get("requests", c.get("calls", 0)) for c in clients.values())
    return out


AK8_EVENTS = (20, 220)  # the AK8 job's two event counts (the 10-event sample listed 22 times)
AK8_MODELS = ("particlenet", "particlenet_AK8_MD-2prong")  # CMS's General and MD-2prong, ONNX


def _ak8_repository() -> pathlib.Path | None:
    """CMS's model repository on ``CMSSW_SEARCH_PATH`` (None where absent: no AK8 row)."""
    import framework.config as cms

    try:
        config = pathlib.Path(cms.FileInPath("RecoBTag/Combined/data/models/particlenet/config.pbtxt").fullPath())
    except Exception:  # noqa: BLE001 - not found: the row is left out, and the JSON says why
        return None
    return config.parents[1]


def _ak8_jets_per_event() -> float:
    """Fat jets per event of the real sample (the AK8 job tags every one)."""
    import uproot

    from framework.io.samples import locate_sample

    with uproot.open(locate_sample("pfnano.root")) as file:
        counts = file["Events"]["nFatJet"].array(library="np")
    return float(counts.sum() / len(counts))


def _ak8_run(server: Any, folder: pathlib.Path) -> dict[str, Any]:
    """The AK8 job direct and as a service (``framework/bench/configs/ak8_cfg.py``) at
    :data:`AK8_EVENTS`, once each; CPU per event of each and their ratio."""
    run: dict[str, Any] = {"loadavg": list(os.getloadavg())}
    http = f"{server.grpc_address},http://{server.http_address}"  # its HTTP endpoint declared: auto = HTTP
    for variant, sonic, address in (
        ("direct", 0, server.grpc_address),
        ("sonic", 1, server.grpc_address),
        ("sonic_http", 1, http),
    ):
        jobs = []
        for events in AK8_EVENTS:
            options = dict(sonic=sonic, server=address, repeat=AK8_EVENTS[1] // 10, events=events)
            server_before = _tree_cpu(server.pid)
            command = cmsrun_command(CONFIGS / "ak8_cfg.py", options)
            cpu_s, wall = _child(command, folder, f"AK8 {variant} job on {events} events")
            jobs.append({"cpu_s": cpu_s, "wall_s": wall, "server_cpu_s": _tree_cpu(server.pid) - server_before})
        run[variant] = {
            "cpu_ms_per_event": _per_event(jobs[0], jobs[1], AK8_EVENTS, "cpu_s") * MS,
            "server_cpu_ms_per_event": _per_event(jobs[0], jobs[1], AK8_EVENTS, "server_cpu_s") * MS,
            "jobs": jobs,
        }
    run["sonic_vs_direct"] = run["sonic"]["cpu_ms_per_event"] / run["direct"]["cpu_ms_per_event"]
    run["http_sonic_vs_direct"] = run["sonic_http"]["cpu_ms_per_event"] / run["direct"]["cpu_ms_per_event"]
    return run


def _ak8_row(repeat: int, folder: pathlib.Path, cores: set[int]) -> dict[str, Any]:
    """CMS's ParticleNet AK8 job, direct vs SONIC: CPU per event and per jet, medians of
    ``repeat`` runs; its server serves CMS's two ONNX models (``LocalTritonServer``)."""
    repository = _ak8_repository()
    if repository is None:
        return {"config": "ParticleNet AK8 (CMS)", "skipped": "CMS's models are not on CMSSW_SEARCH_PATH"}
    jets = _ak8_jets_per_event()
    with local_server(repository, AK8_MODELS) as server:
        _pin_tree(server.pid, cores)
        runs = [_ak8_run(server, folder) for _ in range(max(1, repeat))]
    row: dict[str, Any] = {"config": "ParticleNet AK8 (CMS)", "jets_per_event": jets, "runs": len(runs)}
    for variant in ("direct", "sonic", "sonic_http"):
        for key in ("cpu_ms_per_event", "server_cpu_ms_per_event"):
            row[f"{variant}_{key}"] = float(statistics.median(r[variant][key] for r in runs))
        row[f"{variant}_cpu_ms_per_jet"] = row[f"{variant}_cpu_ms_per_event"] / jets
    for key in ("sonic_vs_direct", "http_sonic_vs_direct"):
        ratios = [r[key] for r in runs]
        row[key] = float(statistics.median(ratios))
        row[f"{key}_spread"] = [min(ratios), max(ratios)]
    row["loadavg"] = [r["loadavg"][0] for r in runs]
    row["all_runs"] = runs
    return row


def _bare(
    events: int, server: Any, folder: pathlib.Path, models: tuple[str, ...], side: str = "bare"
) -> dict[str, Any]:
    """The bare replay of the dumped tensors of ``events`` events, as a child process;
    ``side``: ``bare`` (tritonclient's gRPC ``async_infer``), ``floor`` (the prebuilt
    request bytes over grpcio), ``bare_shm`` (the inputs through shared memory),
    ``bare_http`` (tritonclient.http's ``async_infer``), each with ``_busy``: a GIL-busy
    Python thread beside the loop, its own CPU subtracted (see :func:`bare_replay`)."""
    kind = side.removesuffix("_busy")
    busy_file = folder / f"busy_{side}_{events}.txt"
    command = [
        sys.executable,
        "-m",
        "framework.bench._exp_cpu",
        server.grpc_address,
        str(folder / "tensors"),
        "--models",
        ",".join(models),
        "--events",
        str(events),
        "--in-flight",
        str(STREAMS),
        *{"floor": ["--floor"], "bare_shm": ["--shared-memory"], "bare_http": ["--http", server.http_address]}.get(
            kind, []
        ),
        *(["--busy", str(busy_file)] if side.endswith("_busy") else []),
    ]
    server_before = _tree_cpu(server.pid)
    cpu, wall = _child(command, folder, f"{side} loop on {events} events")
    busy_cpu = float(busy_file.read_text()) if side.endswith("_busy") else 0.0
    return {
        "cpu_s": cpu - busy_cpu,
        "busy_cpu_s": busy_cpu,
        "wall_s": wall,
        "server_cpu_s": _tree_cpu(server.pid) - server_before,
    }


def _per_event(low: dict[str, Any], high: dict[str, Any], events: tuple[int, int], key: str) -> float:
    return (high[key] - low[key]) / (events[1] - events[0])


def _one_run(
    server: Any,
    folder: pathlib.Path,
    models: tuple[str, ...],
    events: tuple[int, int],
    cpu_chunks: int,
    bare_events: tuple[int, int],
    variants: tuple[str, ...] = VARIANTS,
    sides: tuple[str, ...] = BARE_SIDES,
) -> dict[str, Any]:
    """Every variant at ``events`` and the bare loops at ``bare_events`` (they do no CPU
    work of their own: the same counts for both configs), once each; per-event figures of
    each transport whose variants ran (:data:`TRANSPORTS`)."""
    run: dict[str, Any] = {"loadavg": list(os.getloadavg())}
    for variant in variants:
        low, high = (_job(variant, n, server, folder, models, cpu_chunks) for n in events)
        run[variant] = {
            "cpu_ms_per_event": _per_event(low, high, events, "cpu_s") * MS,
            "server_cpu_ms_per_event": _per_event(low, high, events, "server_cpu_s") * MS,
            "event_loop_cpu_ms_per_event": _per_event(low, high, events, "event_loop_cpu_s") * MS,
            "other_threads_cpu_ms_per_event": _per_event(low, high, events, "other_threads_cpu_s") * MS,
            "calls_per_event": _per_event(low, high, events, "calls"),
            "shm_calls_per_event": _per_event(low, high, events, "shm_calls"),
            "http_calls_per_event": _per_event(low, high, events, "http_calls"),
            "requests_per_event": _per_event(low, high, events, "requests"),
            "jobs": [low, high],
        }
    requests = len(models)  # per event: one request per model
    for side in sides:
        low, high = (_bare(n, server, folder, models, side) for n in bare_events)
        run[side] = {
            "cpu_ms_per_request": _per_event(low, high, bare_events, "cpu_s") / requests * MS,
            "server_cpu_ms_per_request": _per_event(low, high, bare_events, "server_cpu_s") / requests * MS,
            "jobs": [low, high],
        }
    sonic, noinf = run["sonic"], run["noinference"]
    run["direct_inference_ms_per_event"] = run["direct"]["cpu_ms_per_event"] - noinf["cpu_ms_per_event"]
    floor = run["floor"]["cpu_ms_per_request"]
    for prefix, (variant, bare) in TRANSPORTS.items():
        if variant not in run:
            continue
        batched = variant.replace("sonic", "sonic_batched", 1)
        _client_figures(run, prefix, variant, batched if batched in run else None, bare, requests)
        run[f"{prefix}client_vs_floor"] = run[f"{prefix}client_ms_per_request"] / floor
        busy = f"{variant}_busy"
        if busy in run:  # the same client beside a GIL-busy thread (the null consumer's beside one too)
            client = run[busy]["cpu_ms_per_event"] - run["noinference_busy"]["cpu_ms_per_event"]
            run[f"{prefix}busy_client_ms_per_request"] = client / max(run[busy]["calls_per_event"], 1e-9)
            run[f"{prefix}busy_rise"] = (
                run[f"{prefix}busy_client_ms_per_request"] / run[f"{prefix}client_ms_per_request"] - 1
            )
    for part in ("event_loop", "other_threads"):  # where the client's CPU runs: the job's thread or the others
        key = f"{part}_cpu_ms_per_event"
        run[f"client_{part}_ms_per_event"] = sonic[key] - noinf[key]
        run[f"http_client_{part}_ms_per_event"] = run["sonic_http"][key] - noinf[key]
    if "batched_client_ms_per_event" in run:
        run["batched_client_ms_per_request"] = run["batched_client_ms_per_event"] / requests  # per event and model
    run["bare_vs_floor"] = run["bare"]["cpu_ms_per_request"] / floor
    run["bare_http_vs_bare"] = run["bare_http"]["cpu_ms_per_request"] / run["bare"]["cpu_ms_per_request"]
    run["http_client_vs_bare_http"] = run["http_client_ms_per_request"] / run["bare_http"]["cpu_ms_per_request"]
    for side in ("bare", "floor", "bare_http", "bare_shm"):
        if f"{side}_busy" in run and side in run:
            run[f"{side}_busy_rise"] = run[f"{side}_busy"]["cpu_ms_per_request"] / run[side]["cpu_ms_per_request"] - 1
    return run


def _client_figures(
    run: dict[str, Any], prefix: str, sonic: str, batched: str | None, bare: str, requests: int
) -> None:
    """One transport's figures of one run, each key with ``prefix``: the client's CPU
    (``sonic`` - no inference) per event and per request, unbatched and ``batched``,
    against the ``bare`` loop's per request, and the jobs against direct."""
    noinf, direct = run["noinference"]["cpu_ms_per_event"], run["direct"]["cpu_ms_per_event"]
    bare_ms = run[bare]["cpu_ms_per_request"] if bare in run else math.nan  # --quick: not every loop
    client = run[f"{prefix}client_ms_per_event"] = run[sonic]["cpu_ms_per_event"] - noinf
    run[f"{prefix}client_ms_per_request"] = client / max(run[sonic]["calls_per_event"], 1e-9)
    run[f"{prefix}client_vs_bare"] = run[f"{prefix}client_ms_per_request"] / bare_ms
    run[f"{prefix}sonic_vs_direct"] = run[sonic]["cpu_ms_per_event"] / direct
    run[f"{prefix}client_vs_inference"] = client / run["direct_inference_ms_per_event"]
    if batched is not None:
        batched_client = run[f"{prefix}batched_client_ms_per_event"] = run[batched]["cpu_ms_per_event"] - noinf
        run[f"{prefix}batched_client_vs_bare"] = batched_client / requests / bare_ms
        run[f"{prefix}batched_vs_direct"] = run[batched]["cpu_ms_per_event"] / direct


_TRANSPORT_KEYS = (  # each with a transport's prefix (TRANSPORTS)
    "client_ms_per_event",
    "client_ms_per_request",
    "batched_client_ms_per_event",
    "client_vs_bare",
    "client_vs_floor",
    "batched_client_vs_bare",
    "sonic_vs_direct",
    "batched_vs_direct",
    "client_vs_inference",
)
ROW_KEYS = (
    *_TRANSPORT_KEYS,
    *(f"http_{key}" for key in _TRANSPORT_KEYS),
    "client_event_loop_ms_per_event",
    "client_other_threads_ms_per_event",
    "http_client_event_loop_ms_per_event",
    "http_client_other_threads_ms_per_event",
    "batched_client_ms_per_request",
    "bare_vs_floor",
    "bare_http_vs_bare",
    "http_client_vs_bare_http",
    "direct_inference_ms_per_event",
)
SHM_ROW_KEYS = (  # the four-model config: shared memory and the GIL-busy sides
    *(f"shm_{key}" for key in _TRANSPORT_KEYS),
    *(f"http_shm_{key}" for key in _TRANSPORT_KEYS),
    *(f"{prefix}busy_client_ms_per_request" for prefix in TRANSPORTS),
    *(f"{prefix}busy_rise" for prefix in TRANSPORTS),
    *(f"{side}_busy_rise" for side in ("bare", "floor", "bare_http", "bare_shm")),
)


def client_resolved(row: dict[str, Any]) -> bool:
    """Whether a row's client figures mean anything. The client is the difference of two
    jobs' CPU: where the runs disagree on its sign, the jobs' own noise is larger than it
    (reported, flagged, not drawn)."""
    return bool(row["client_ms_per_event_spread"][0] > 0)


def _row(config: str, cpu_time: float, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians over ``runs`` of every reported figure (all runs kept beside them)."""

    def median(get: Any) -> float:
        return float(statistics.median(get(r) for r in runs))

    row: dict[str, Any] = {"config": config, "cpu_time_ms": cpu_time, "runs": len(runs)}
    for variant in (v for v in VARIANTS + SHM_VARIANTS + BUSY_VARIANTS if v in runs[0]):
        for key in (
            "cpu_ms_per_event",
            "server_cpu_ms_per_event",
            "event_loop_cpu_ms_per_event",
            "other_threads_cpu_ms_per_event",
        ):
            row[f"{variant}_{key}"] = median(lambda r, v=variant, k=key: r[v][k])
        row[f"{variant}_total_ms_per_event"] = median(
            lambda r, v=variant: r[v]["cpu_ms_per_event"] + r[v]["server_cpu_ms_per_event"]
        )
    for prefix, (variant, _bare) in TRANSPORTS.items():
        batched = variant.replace("sonic", "sonic_batched", 1)
        if batched in runs[0]:
            row[f"{prefix}rows_per_call_batched"] = median(
                lambda r, b=batched: r[b]["requests_per_event"] / max(r[b]["calls_per_event"], 1e-9)
            )
    for side in (s for s in BARE_SIDES + FOUR_MODEL_SIDES if s in runs[0]):
        row[f"{side}_cpu_ms_per_request"] = median(lambda r, b=side: r[b]["cpu_ms_per_request"])
    for key in (k for k in ROW_KEYS + SHM_ROW_KEYS if k in runs[0]):
        row[key] = median(lambda r, k=key: r[k])
        values = [r[key] for r in runs]
        row[f"{key}_spread"] = [min(values), max(values)]
    row["client_resolved"] = client_resolved(row)
    row["loadavg"] = [r["loadavg"][0] for r in runs]
    row["all_runs"] = runs
    return row


def cpu(quick: bool, repeat: int) -> dict[str, Any]:
    """The job's CPU per event for direct, SONIC (unbatched, batched) and no inference, and the
    client's CPU against a bare tritonclient loop; the four-model and the MiniAOD-like configs."""
    models = ("deepmet",) if quick else MODELS
    events = (2, 6) if quick else (10, 310)
    events_miniaod = (10, 80)  # ten times the CPU per event: the jobs take as long as with 310
    server = SERVERS.models_server()
    cores = os.sched_getaffinity(0)
    server_cores = cores - {JOB_CORE} if len(cores) > 1 and JOB_CORE in cores else cores
    _pin_tree(server.pid, server_cores)  # the jobs run on JOB_CORE (start_pinned)
    rows = []
    ak8: dict[str, Any] = {"skipped": "--quick"}
    with tempfile.TemporaryDirectory(prefix="pysonic-bench-cpu-") as name:
        folder = pathlib.Path(name)
        (folder / "tensors").mkdir()
        # The job's own tensors, from the same events (also warms the server's models up).
        dump = _cmsrun(
            backend="sonic",
            models=list(models),
            server=server.grpc_address,
            events=events[1],
            repeat=events[1],
            streams=STREAMS,
            threads=1,
            dumpFolder=folder / "tensors",
        )
        _child(dump, folder, "the tensor dump")
        variants = QUICK_VARIANTS if quick else VARIANTS + SHM_VARIANTS + BUSY_VARIANTS
        sides = QUICK_SIDES if quick else BARE_SIDES + FOUR_MODEL_SIDES
        runs = [_one_run(server, folder, models, events, 0, events, variants, sides) for _ in range(max(1, repeat))]
        rows.append(_row("four models", 0.0, runs))
        if not quick:  # --quick: the smoke test's minute; the MiniAOD-like job adds nothing to it
            # MiniAOD-like: the rest of the event costs nine times the direct inference.
            # The same bytes hashed in every job (calibrated here, once): a calibration per
            # job differs by a few per cent, as much as the client's whole cost.
            cpu_time = 9 * max(rows[0]["direct_inference_ms_per_event"], 0.1)
            chunks = chunks_for(cpu_time * 1e-3)
            runs = [_one_run(server, folder, models, events_miniaod, chunks, events) for _ in range(max(1, repeat))]
            rows.append(_row("MiniAOD-like (cpuTime)", cpu_time, runs) | {"cpu_chunks": chunks})
            ak8 = _ak8_row(repeat, folder, server_cores)
    return {
        "experiment": "cpu",
        "title": "The job's CPU per event: direct vs SONIC over HTTP and gRPC, and the client's CPU vs bare loops",
        "settings": {
            "models": list(models),
            "events": list(events),
            "events_miniaod": list(events_miniaod),
            "bare_events": list(events),
            "streams": STREAMS,
            "threads": 1,
            "transport": "payloads (Client.useSharedMemory = false; the bare loops too) over gRPC (sonic, "
            "sonic_batched) and HTTP (Client.transport = http: sonic_http, sonic_batched_http); the four-model "
            "config also with system shared memory on both sides (*_shm, bare_shm) and each transport beside "
            "a GIL-busy Python thread (*_busy; its own CPU subtracted)",
            "batching": f"sonic_batched*: Client.batching maxRows {BATCH_ROWS} (each model's max_batch_size), "
            f"maxDelay {BATCH_DELAY_US} us",
            "cores": f"jobs and bare loops on core {JOB_CORE}, the server on {sorted(server_cores)} "
            f"(of {sorted(cores)})",
            "bare": "tritonclient.grpc async_infer (bare), tritonclient.http async_infer (bare_http, gevent), "
            "both with 4 in flight",
            "floor": "the same request bytes built once (tritonclient's own message, serialized), re-sent "
            "through grpcio's ModelInfer multi-callable on a tritonclient channel (its options)",
            "server": "LocalTritonServer of data/models, its own process",
            "quick": quick,
            "repeat": repeat,
        },
        "rows": rows,
        "ak8": ak8,
        "columns": [
            ("config", "config", "s"),
            ("direct_cpu_ms_per_event", "direct [ms/ev]", ".2f"),
            ("noinference_cpu_ms_per_event", "no inference [ms/ev]", ".2f"),
            ("sonic_cpu_ms_per_event", "SONIC gRPC [ms/ev]", ".2f"),
            ("sonic_http_cpu_ms_per_event", "SONIC HTTP [ms/ev]", ".2f"),
            ("sonic_batched_http_cpu_ms_per_event", "batched HTTP [ms/ev]", ".2f"),
            ("client_ms_per_request", "client gRPC [ms/req]", ".3f"),
            ("http_client_ms_per_request", "client HTTP [ms/req]", ".3f"),
            ("http_shm_client_ms_per_request", "client HTTP shm [ms/req]", ".3f"),
            ("bare_cpu_ms_per_request", "bare gRPC [ms/req]", ".3f"),
            ("bare_http_cpu_ms_per_request", "bare HTTP [ms/req]", ".3f"),
            ("floor_cpu_ms_per_request", "floor [ms/req]", ".3f"),
            ("client_vs_bare", "gRPC client/bare", ".2f"),
            ("http_client_vs_bare", "HTTP client/bare", ".2f"),
            ("http_client_vs_floor", "HTTP client/floor", ".2f"),
            ("http_busy_rise", "HTTP busy rise", ".2f"),
            ("busy_rise", "gRPC busy rise", ".2f"),
            ("http_batched_client_vs_bare", "HTTP batched/bare", ".2f"),
            ("http_rows_per_call_batched", "rows/call", ".1f"),
            ("sonic_vs_direct", "SONIC/direct gRPC", ".2f"),
            ("http_sonic_vs_direct", "SONIC/direct HTTP", ".2f"),
            ("http_shm_sonic_vs_direct", "SONIC/direct HTTP shm", ".2f"),
            ("shm_sonic_vs_direct", "SONIC/direct gRPC shm", ".2f"),
            ("runs", "runs", "d"),
        ],
        "targets": http_targets(rows[0], ak8) + grpc_targets(rows[0], ak8),
        "notes": [
            "CPU from the OS (os.wait4 of each cmsrun child), start-up removed by two event counts",
            "the server runs on the same cores: the job's CPU saved is not the machine's",
            "busy sides: a Python thread that wants the GIL all the time beside the job or loop; its CPU subtracted",
            "medians of all runs; every run with its load average in all_runs",
        ],
    }


def _target(
    four: dict[str, Any], key: str, name: str, wanted: float, note: str = "", rows_key: str = ""
) -> list[dict[str, Any]]:
    """The target ``four[key] <= wanted`` (and at least 3 requests per call, ``four[rows_key]``,
    if given) as a one-item list; none where the run lacks the figure (``--quick``)."""
    if key not in four or (rows_key and rows_key not in four):
        return []
    value = four[key]
    also = True
    if rows_key:
        also = four[rows_key] >= 3
        note = f"{four[rows_key]:.1f} requests per call (target >= 3)" + (f"; {note}" if note else "")
    return [{"name": name, "value": value, "target": wanted, "met": value <= wanted and also, "note": note}]


def http_targets(four: dict[str, Any], ak8: dict[str, Any]) -> list[dict[str, Any]]:
    """The HTTP transport's targets (docs/performance.md), from the four-model row and the AK8 row."""
    targets = [
        *_target(
            four,
            "http_client_vs_bare",
            "HTTP: client CPU per request / the bare tritonclient gRPC loop's (batching off)",
            0.6,
            "client = SONIC job - the same job without inference; the same tensors and server, same run",
        ),
        *_target(
            four,
            "http_client_vs_floor",
            "HTTP: client CPU per request / the grpcio floor's (batching off)",
            1.0,
            "floor: the same request bytes built once, re-sent through grpcio",
        ),
        *_target(
            four,
            "http_busy_rise",
            "HTTP: rise of the client CPU per request beside a GIL-busy Python thread",
            0.10,
            f"gRPC's rise: {four['busy_rise']:.2f}" if "busy_rise" in four else "",
        ),
        *_target(four, "http_sonic_vs_direct", "HTTP payloads: SONIC / direct job CPU per event (four models)", 0.45),
        *_target(
            four,
            "http_shm_sonic_vs_direct",
            "HTTP + shared memory: SONIC / direct job CPU per event (four models)",
            0.40,
        ),
        *_target(
            four,
            "http_batched_client_vs_bare",
            "HTTP batched: client CPU per event and model / the bare gRPC loop's per request",
            0.3,
            rows_key="http_rows_per_call_batched",
        ),
    ]
    if "skipped" not in ak8:
        targets += _target(
            ak8,
            "http_sonic_vs_direct",
            "CMS's ParticleNet AK8 job over HTTP: SONIC / direct CPU per event",
            0.2,
            f"direct {ak8['direct_cpu_ms_per_event']:.2f} ms/event, over HTTP "
            f"{ak8['sonic_http_cpu_ms_per_event']:.2f}, over gRPC {ak8['sonic_cpu_ms_per_event']:.2f}",
        )
    return targets


def grpc_targets(four: dict[str, Any], ak8: dict[str, Any]) -> list[dict[str, Any]]:
    """The gRPC transport's targets (docs/performance.md: the earlier client study), measured
    beside (payloads and shared memory)."""
    targets = []
    sides = (("", "gRPC payloads", "bare loop's"), ("shm_", "gRPC + shared memory", "bare shared-memory loop's"))
    for prefix, label, bare in sides:
        targets += [
            *_target(four, f"{prefix}client_vs_bare", f"{label}: client CPU per request / {bare} (batching off)", 1.0),
            *_target(
                four,
                f"{prefix}batched_client_vs_bare",
                f"{label}: batched client CPU per event and model / {bare} per request",
                0.4,
                rows_key=f"{prefix}rows_per_call_batched",
            ),
            *_target(
                four, f"{prefix}sonic_vs_direct", f"{label}: SONIC / direct job CPU per event (four models)", 0.55
            ),
            *_target(
                four, f"{prefix}client_vs_inference", f"{label}: client CPU / the direct inference it replaces", 0.15
            ),
        ]
    targets += _target(four, "client_vs_floor", "gRPC payloads: client CPU per request / the floor's", 1.5)
    if "skipped" not in ak8:
        targets += _target(ak8, "sonic_vs_direct", "CMS's ParticleNet AK8 job over gRPC: SONIC / direct", 0.5)
    return targets


# ----------------------------------------------------------------------------------------
# The bare loop (a child process of the experiment)


def bare_replay(
    address: str,
    folder: pathlib.Path,
    models: list[str],
    events: int,
    in_flight: int,
    floor: bool = False,
    shared_memory: bool = False,
    http: str = "",
    busy: pathlib.Path | None = None,
) -> int:
    """Replay the dumped tensors of the first ``events`` events: for each event, one
    ``async_infer`` per model (all its outputs), ``in_flight`` at most in flight.

    ``floor``: instead, each request's bytes are built once at start-up (tritonclient's own
    ``ModelInferRequest``, serialized) and sent as bytes through grpcio's ``ModelInfer``
    multi-callable on the tritonclient client's channel (the same channel options); the
    response stays bytes. What remains per request is the wire: gRPC's call, its threads
    and the socket.

    ``shared_memory``: the inputs of each request are written into one of ``in_flight``
    system shared-memory regions (registered once at start-up) and its outputs requested
    into the same region, as pysonic's client does with a local server (64-byte aligned
    offsets; the outputs' sizes from one payload call per dumped request at start-up).

    ``http`` (``host:port``): instead, tritonclient.http's ``async_infer`` on that HTTP
    endpoint (its gevent pool of ``in_flight`` connections, binary tensors), ``in_flight``
    requests in flight (the oldest awaited first).

    ``busy``: a GIL-busy Python thread runs beside the loop (``_modules.BusyThread``) and
    its CPU seconds are written to that file at the end (the caller subtracts them).

    Every dumped event is loaded whatever ``events`` is, so that loading is start-up (it
    cancels in the difference of two event counts). Returns the failed requests.
    """
    import tritonclient.grpc as grpcclient

    from ._load import load_requests

    client = grpcclient.InferenceServerClient(address)
    plan = []
    for model in models:
        triton = TRITON_NAMES[model]
        metadata = client.get_model_metadata(triton, as_json=True)
        names = [i["name"] for i in metadata["inputs"]]
        requests = [
            {n: np.ascontiguousarray(r[n] if n in r else r["array"]) for n in names}  # "array": the product's one
            for r in load_requests(folder / f"{model}.npz")
        ]
        outputs = [o["name"] for o in metadata["outputs"]]
        plan.append((triton, requests, outputs))
    slots = threading.Semaphore(in_flight)
    failures: list[Any] = []

    def done(result: Any, error: Any) -> None:
        if error is not None:
            failures.append(error)
        slots.release()

    thread = None
    if busy is not None:
        from ._modules import BusyThread

        thread = BusyThread()
        thread.start()
    try:
        if http:
            _http_replay(http, plan, events, in_flight, failures)
        elif floor:
            _floor_replay(client, plan, events, in_flight, failures)
        elif shared_memory:
            _shm_replay(client, plan, events, in_flight, failures)
        else:
            for event in range(events):
                for triton, requests, outputs in plan:
                    inputs = _payload_inputs(requests[event % len(requests)])
                    slots.acquire()
                    client.async_infer(
                        triton,
                        inputs,
                        done,
                        outputs=[grpcclient.InferRequestedOutput(n) for n in outputs],
                        client_timeout=120,
                    )
            for _ in range(in_flight):
                slots.acquire()
    finally:
        client.close()
        if thread is not None and busy is not None:
            busy.write_text(f"{thread.stop():.6f}\n")
    if failures:
        print(f"bare loop: {len(failures)} failed requests, first: {failures[0]}", file=sys.stderr)
    return len(failures)


def _http_replay(address: str, plan: list[Any], events: int, in_flight: int, failures: list[Any]) -> None:
    """:func:`bare_replay` over tritonclient.http (see there)."""
    import collections

    import tritonclient.http as httpclient
    from tritonclient.utils import np_to_triton_dtype

    client = httpclient.InferenceServerClient(address, concurrency=in_flight, network_timeout=120)
    pending: collections.deque[Any] = collections.deque()

    def wait_oldest() -> None:
        try:
            pending.popleft().get_result()
        except Exception as exc:  # noqa: BLE001 - counted, as the other loops count theirs
            failures.append(exc)

    try:
        for event in range(events):
            for triton, requests, outputs in plan:
                inputs = []
                for name, array in requests[event % len(requests)].items():
                    tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
                    tensor.set_data_from_numpy(array)
                    inputs.append(tensor)
                if len(pending) >= in_flight:
                    wait_oldest()
                requested = [httpclient.InferRequestedOutput(n) for n in outputs]
                pending.append(client.async_infer(triton, inputs, outputs=requested))
        while pending:
            wait_oldest()
    finally:
        client.close()


def _payload_inputs(arrays: dict[str, np.ndarray[Any, Any]]) -> list[Any]:
    """tritonclient's ``InferInput`` of each array, its data in the request (gRPC payload)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    inputs = []
    for name, array in arrays.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _floor_replay(client: Any, plan: list[Any], events: int, in_flight: int, failures: list[Any]) -> None:
    """:func:`bare_replay`'s floor: prebuilt request bytes over grpcio (see there)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc._utils import _get_inference_request

    def message(model: str, arrays: dict[str, np.ndarray], outputs: list[str]) -> bytes:
        inputs = _payload_inputs(arrays)
        requested = [grpcclient.InferRequestedOutput(n) for n in outputs]
        request = _get_inference_request(model, inputs, "", "", requested, 0, False, False, 0, None, None)
        return bytes(request.SerializeToString())

    built = [[message(triton, r, outputs) for r in requests] for triton, requests, outputs in plan]
    channel = client._channel  # noqa: SLF001 - tritonclient's channel: its options
    infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer", _registered_method=True)
    slots = threading.Semaphore(in_flight)

    def done(future: Any) -> None:
        if future.exception() is not None:
            failures.append(future.exception())
        slots.release()

    for event in range(events):
        for requests in built:
            slots.acquire()
            infer.future(requests[event % len(requests)], timeout=120).add_done_callback(done)
    for _ in range(in_flight):
        slots.acquire()


def _shm_replay(client: Any, plan: list[Any], events: int, in_flight: int, failures: list[Any]) -> None:
    """:func:`bare_replay` with system shared memory (see there)."""
    import queue

    import tritonclient.grpc as grpcclient
    import tritonclient.utils.shared_memory as shm
    from tritonclient.utils import np_to_triton_dtype

    def aligned(n: int) -> int:
        return -(-n // 64) * 64

    # Each request's layout: (name, array, offset) of its inputs, (name, offset, bytes) of its outputs.
    layouts = []
    for triton, requests, outputs in plan:
        per_model = []
        for arrays in requests:
            result = client.infer(
                triton, _payload_inputs(arrays), outputs=[grpcclient.InferRequestedOutput(n) for n in outputs]
            )
            offset, placed, out_places = 0, [], []
            for name, array in arrays.items():
                placed.append((name, array, offset))
                offset = aligned(offset + array.nbytes)
            for name in outputs:
                nbytes = result.as_numpy(name).nbytes
                out_places.append((name, offset, nbytes))
                offset = aligned(offset + nbytes)
            per_model.append((placed, out_places, offset))
        layouts.append(per_model)
    size = max(end for per_model in layouts for _, _, end in per_model)
    from framework.sonic import shm_region_name  # a killed loop's regions: removed by the next job

    regions = []
    with contextlib.ExitStack() as cleanup:  # every region unregistered and destroyed, whatever fails
        for _slot in range(in_flight):
            name = shm_region_name("bareloop")
            handle = shm.create_shared_memory_region(name, "/" + name, size)
            cleanup.callback(shm.destroy_shared_memory_region, handle)
            client.register_system_shared_memory(name, "/" + name, size)
            cleanup.callback(client.unregister_system_shared_memory, name)
            regions.append((name, handle))
        free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(in_flight):
            free.put(slot)

        def done(slot: int, result: Any, error: Any) -> None:
            if error is not None:
                failures.append(error)
            free.put(slot)

        for event in range(events):
            for (triton, requests, _outputs), per_model in zip(plan, layouts, strict=True):
                placed, out_places, _end = per_model[event % len(requests)]
                slot = free.get()
                region, handle = regions[slot]
                inputs = []
                for name, array, offset in placed:
                    shm.set_shared_memory_region(handle, [array], offset=offset)
                    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
                    tensor.set_shared_memory(region, array.nbytes, offset=offset)
                    inputs.append(tensor)
                requested = []
                for name, offset, nbytes in out_places:
                    output = grpcclient.InferRequestedOutput(name)
                    output.set_shared_memory(region, nbytes, offset=offset)
                    requested.append(output)
                client.async_infer(triton, inputs, functools.partial(done, slot), outputs=requested, client_timeout=120)
        for _ in range(in_flight):
            free.get()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m framework.bench._exp_cpu", description=bare_replay.__doc__)
    parser.add_argument("address")
    parser.add_argument("tensors", type=pathlib.Path, help="folder of <model>.npz (models_cfg.py dumpFolder=)")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--events", type=int, required=True)
    parser.add_argument("--in-flight", type=int, default=STREAMS)
    parser.add_argument("--floor", action="store_true", help="prebuilt request bytes over grpcio (the floor)")
    parser.add_argument("--shared-memory", action="store_true", help="inputs and outputs in shared-memory regions")
    parser.add_argument("--http", default="", help="tritonclient.http on this HTTP endpoint (host:port)")
    parser.add_argument("--busy", type=pathlib.Path, help="a GIL-busy thread beside; its CPU seconds to this file")
    ns = parser.parse_args(argv)
    failed = bare_replay(
        ns.address,
        ns.tensors,
        ns.models.split(","),
        ns.events,
        ns.in_flight,
        ns.floor,
        ns.shared_memory,
        ns.http,
        ns.busy,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
