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
machine ``--repeat 5`` takes about 18 minutes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
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
VARIANTS = ("direct", "sonic", "sonic_batched", "noinference")
SHM_VARIANTS = ("sonic_shm", "sonic_batched_shm")  # the four-model config only: a local server's default
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
    shared_memory = variant.endswith("_shm")
    batched = variant.startswith("sonic_batched")
    backend = "sonic" if variant.startswith("sonic") else variant  # noinference: a backend of models_cfg.py
    options: dict[str, Any] = dict(
        backend=backend,
        models=list(models),
        server=server.grpc_address,
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
    out = {"cpu_s": cpu, "wall_s": wall, "server_cpu_s": _tree_cpu(server.pid) - server_before}
    report = json.loads(summary.read_text())
    # The job's own split of its event loop's CPU: the trio thread's and the other threads'.
    out["event_loop_cpu_s"] = report["cpu"]["event_loop"]
    out["other_threads_cpu_s"] = report["cpu"]["other_threads"]
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
    for variant, sonic in (("direct", 0), ("sonic", 1)):
        jobs = []
        for events in AK8_EVENTS:
            options = dict(sonic=sonic, server=server.grpc_address, repeat=AK8_EVENTS[1] // 10, events=events)
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
    for variant in ("direct", "sonic"):
        for key in ("cpu_ms_per_event", "server_cpu_ms_per_event"):
            row[f"{variant}_{key}"] = float(statistics.median(r[variant][key] for r in runs))
        row[f"{variant}_cpu_ms_per_jet"] = row[f"{variant}_cpu_ms_per_event"] / jets
    ratios = [r["sonic_vs_direct"] for r in runs]
    row["sonic_vs_direct"] = float(statistics.median(ratios))
    row["sonic_vs_direct_spread"] = [min(ratios), max(ratios)]
    row["loadavg"] = [r["loadavg"][0] for r in runs]
    row["all_runs"] = runs
    return row


def _bare(
    events: int, server: Any, folder: pathlib.Path, models: tuple[str, ...], side: str = "bare"
) -> dict[str, Any]:
    """The bare replay of the dumped tensors of ``events`` events, as a child process;
    ``side``: ``bare``, ``floor`` (the prebuilt request bytes over grpcio) or ``bare_shm``
    (the inputs through shared memory), see :func:`bare_replay`."""
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
        *({"floor": ["--floor"], "bare_shm": ["--shared-memory"]}.get(side, [])),
    ]
    server_before = _tree_cpu(server.pid)
    cpu, wall = _child(command, folder, f"bare loop on {events} events")
    return {"cpu_s": cpu, "wall_s": wall, "server_cpu_s": _tree_cpu(server.pid) - server_before}


def _per_event(low: dict[str, Any], high: dict[str, Any], events: tuple[int, int], key: str) -> float:
    return (high[key] - low[key]) / (events[1] - events[0])


def _one_run(
    server: Any,
    folder: pathlib.Path,
    models: tuple[str, ...],
    events: tuple[int, int],
    cpu_chunks: int,
    bare_events: tuple[int, int],
    shared_memory: bool = False,
) -> dict[str, Any]:
    """Every variant at ``events`` and the bare loop at ``bare_events`` (it does no CPU
    work of its own: the same counts for both configs), once each; per-event figures.
    ``shared_memory``: the shared-memory sides too (:data:`SHM_VARIANTS`, ``bare_shm``)."""
    run: dict[str, Any] = {"loadavg": list(os.getloadavg())}
    for variant in VARIANTS + (SHM_VARIANTS if shared_memory else ()):
        low, high = (_job(variant, n, server, folder, models, cpu_chunks) for n in events)
        run[variant] = {
            "cpu_ms_per_event": _per_event(low, high, events, "cpu_s") * MS,
            "server_cpu_ms_per_event": _per_event(low, high, events, "server_cpu_s") * MS,
            "event_loop_cpu_ms_per_event": _per_event(low, high, events, "event_loop_cpu_s") * MS,
            "other_threads_cpu_ms_per_event": _per_event(low, high, events, "other_threads_cpu_s") * MS,
            "calls_per_event": _per_event(low, high, events, "calls"),
            "shm_calls_per_event": _per_event(low, high, events, "shm_calls"),
            "requests_per_event": _per_event(low, high, events, "requests"),
            "jobs": [low, high],
        }
    requests = len(models)  # per event: one request per model
    for side in ("bare", "floor", *(("bare_shm",) if shared_memory else ())):
        low, high = (_bare(n, server, folder, models, side) for n in bare_events)
        run[side] = {
            "cpu_ms_per_request": _per_event(low, high, bare_events, "cpu_s") / requests * MS,
            "server_cpu_ms_per_request": _per_event(low, high, bare_events, "server_cpu_s") / requests * MS,
            "jobs": [low, high],
        }
    sonic, noinf = run["sonic"], run["noinference"]
    run["direct_inference_ms_per_event"] = run["direct"]["cpu_ms_per_event"] - noinf["cpu_ms_per_event"]
    _client_figures(run, "", "sonic", "sonic_batched", "bare", requests)
    for part in ("event_loop", "other_threads"):  # where the client's CPU runs: the job's thread or the others
        key = f"{part}_cpu_ms_per_event"
        run[f"client_{part}_ms_per_event"] = sonic[key] - noinf[key]
    run["batched_client_ms_per_request"] = run["batched_client_ms_per_event"] / requests  # per event and model
    run["client_vs_floor"] = run["client_ms_per_request"] / run["floor"]["cpu_ms_per_request"]
    run["bare_vs_floor"] = run["bare"]["cpu_ms_per_request"] / run["floor"]["cpu_ms_per_request"]
    if shared_memory:
        _client_figures(run, "shm_", "sonic_shm", "sonic_batched_shm", "bare_shm", requests)
    return run


def _client_figures(run: dict[str, Any], prefix: str, sonic: str, batched: str, bare: str, requests: int) -> None:
    """One transport's figures of one run, each key with ``prefix``: the client's CPU
    (``sonic`` - no inference) per event and per request, unbatched and ``batched``,
    against the ``bare`` loop's per request, and the jobs against direct."""
    noinf, direct = run["noinference"]["cpu_ms_per_event"], run["direct"]["cpu_ms_per_event"]
    bare_ms = run[bare]["cpu_ms_per_request"]
    client = run[f"{prefix}client_ms_per_event"] = run[sonic]["cpu_ms_per_event"] - noinf
    run[f"{prefix}client_ms_per_request"] = client / max(run[sonic]["calls_per_event"], 1e-9)
    run[f"{prefix}client_vs_bare"] = run[f"{prefix}client_ms_per_request"] / bare_ms
    batched_client = run[f"{prefix}batched_client_ms_per_event"] = run[batched]["cpu_ms_per_event"] - noinf
    run[f"{prefix}batched_client_vs_bare"] = batched_client / requests / bare_ms
    run[f"{prefix}sonic_vs_direct"] = run[sonic]["cpu_ms_per_event"] / direct
    run[f"{prefix}batched_vs_direct"] = run[batched]["cpu_ms_per_event"] / direct
    run[f"{prefix}client_vs_inference"] = client / run["direct_inference_ms_per_event"]


ROW_KEYS = (
    "client_ms_per_event",
    "client_ms_per_request",
    "client_event_loop_ms_per_event",
    "client_other_threads_ms_per_event",
    "batched_client_ms_per_event",
    "batched_client_ms_per_request",
    "client_vs_bare",
    "client_vs_floor",
    "bare_vs_floor",
    "batched_client_vs_bare",
    "direct_inference_ms_per_event",
    "sonic_vs_direct",
    "batched_vs_direct",
    "client_vs_inference",
)
SHM_ROW_KEYS = (
    "shm_client_ms_per_event",
    "shm_client_ms_per_request",
    "shm_batched_client_ms_per_event",
    "shm_client_vs_bare",
    "shm_batched_client_vs_bare",
    "shm_sonic_vs_direct",
    "shm_batched_vs_direct",
    "shm_client_vs_inference",
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
    shared_memory = "sonic_shm" in runs[0]
    for variant in VARIANTS + (SHM_VARIANTS if shared_memory else ()):
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
    sides = [("", "sonic_batched", "bare"), *([("shm_", "sonic_batched_shm", "bare_shm")] if shared_memory else [])]
    for prefix, batched, bare in sides:
        row[f"{prefix}rows_per_call_batched"] = median(
            lambda r, b=batched: r[b]["requests_per_event"] / max(r[b]["calls_per_event"], 1e-9)
        )
        row[f"{bare}_cpu_ms_per_request"] = median(lambda r, b=bare: r[b]["cpu_ms_per_request"])
    row["floor_cpu_ms_per_request"] = median(lambda r: r["floor"]["cpu_ms_per_request"])
    for key in ROW_KEYS + (SHM_ROW_KEYS if shared_memory else ()):
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
        runs = [_one_run(server, folder, models, events, 0, events, True) for _ in range(max(1, repeat))]
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
    four = rows[0]
    payload = _transport_targets(
        four,
        "",
        "",
        "bare loop's",
        "client = SONIC job - the same job without inference",
        "direct: onnxruntime, one intra-op thread",
    )
    return {
        "experiment": "cpu",
        "title": "The job's CPU per event: direct vs SONIC, and the client's CPU vs a bare tritonclient loop",
        "settings": {
            "models": list(models),
            "events": list(events),
            "events_miniaod": list(events_miniaod),
            "bare_events": list(events),
            "streams": STREAMS,
            "threads": 1,
            "transport": "gRPC payloads (Client.useSharedMemory = false; the bare loop too); the four-model "
            "config also with system shared memory on both sides (sonic_shm, sonic_batched_shm, bare_shm)",
            "batching": f"sonic_batched: Client.batching maxRows {BATCH_ROWS} (each model's max_batch_size), "
            f"maxDelay {BATCH_DELAY_US} us",
            "cores": f"jobs and bare loops on core {JOB_CORE}, the server on {sorted(server_cores)} "
            f"(of {sorted(cores)})",
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
            ("sonic_cpu_ms_per_event", "SONIC [ms/ev]", ".2f"),
            ("sonic_batched_cpu_ms_per_event", "batched [ms/ev]", ".2f"),
            ("noinference_cpu_ms_per_event", "no inference [ms/ev]", ".2f"),
            ("client_ms_per_event", "client [ms/ev]", ".3f"),
            ("client_ms_per_request", "client [ms/req]", ".3f"),
            ("client_event_loop_ms_per_event", "client, job's thread [ms/ev]", ".3f"),
            ("client_other_threads_ms_per_event", "client, other threads [ms/ev]", ".3f"),
            ("bare_cpu_ms_per_request", "bare [ms/req]", ".3f"),
            ("floor_cpu_ms_per_request", "floor [ms/req]", ".3f"),
            ("client_vs_bare", "client/bare", ".2f"),
            ("client_vs_floor", "client/floor", ".2f"),
            ("batched_client_vs_bare", "batched/bare", ".2f"),
            ("rows_per_call_batched", "rows/call", ".1f"),
            ("sonic_vs_direct", "SONIC/direct", ".2f"),
            ("sonic_total_ms_per_event", "SONIC+server [ms/ev]", ".2f"),
            ("sonic_shm_cpu_ms_per_event", "SONIC shm [ms/ev]", ".2f"),
            ("sonic_batched_shm_cpu_ms_per_event", "batched shm [ms/ev]", ".2f"),
            ("shm_client_ms_per_request", "client shm [ms/req]", ".3f"),
            ("bare_shm_cpu_ms_per_request", "bare shm [ms/req]", ".3f"),
            ("shm_client_vs_bare", "client/bare, shm", ".2f"),
            ("shm_batched_client_vs_bare", "batched/bare, shm", ".2f"),
            ("shm_sonic_vs_direct", "SONIC/direct, shm", ".2f"),
            ("shm_batched_vs_direct", "batched/direct, shm", ".2f"),
            ("runs", "runs", "d"),
        ],
        "targets": [
            payload["bare"],
            {
                "name": "client CPU per request / the floor's (batching off)",
                "value": four["client_vs_floor"],
                "target": 1.5,
                "met": four["client_vs_floor"] <= 1.5,
                "note": "floor: the same request bytes built once, re-sent through grpcio",
            },
            payload["batched"],
            payload["direct"],
            *(
                [
                    {
                        "name": "CMS's ParticleNet AK8 job: SONIC / direct CPU per event",
                        "value": ak8["sonic_vs_direct"],
                        "target": 0.5,
                        "met": ak8["sonic_vs_direct"] <= 0.5,
                        "note": f"direct {ak8['direct_cpu_ms_per_event']:.2f} ms/event = "
                        f"{ak8['direct_cpu_ms_per_jet']:.2f} ms/jet ({ak8['jets_per_event']:.1f} jets/event), "
                        f"SONIC {ak8['sonic_cpu_ms_per_event']:.2f} ms/event",
                    }
                ]
                if "skipped" not in ak8
                else []
            ),
            payload["inference"],
            *(
                _transport_targets(
                    four,
                    "shm_",
                    "shared memory: ",
                    "bare shared-memory loop's",
                    "both sides write the inputs into registered regions",
                    f"batched: {four['shm_batched_vs_direct']:.2f}",
                ).values()
                if "shm_client_vs_bare" in four
                else ()
            ),
        ],
        "notes": [
            "CPU from the OS (os.wait4 of each cmsrun child), start-up removed by two event counts",
            "the server runs on the same cores: the job's CPU saved is not the machine's (SONIC+server column)",
            "medians of all runs; every run with its load average in all_runs",
        ],
    }


def _transport_targets(
    four: dict[str, Any], prefix: str, label: str, bare: str, bare_note: str, direct_note: str
) -> dict[str, dict[str, Any]]:
    """The client-CPU targets (docs/performance.md) that each transport has (figures with ``prefix``, names
    starting with ``label``, against the ``bare`` loop), by kind: ``bare``, ``batched``
    (>= 3 requests per call too), ``direct``, ``inference``."""

    def target(kind: str, name: str, wanted: float, note: str, also: bool = True) -> dict[str, Any]:
        value = four[f"{prefix}{kind}"]
        return {"name": label + name, "value": value, "target": wanted, "met": value <= wanted and also, "note": note}

    rows = four[f"{prefix}rows_per_call_batched"]
    return {
        "bare": target("client_vs_bare", f"client CPU per request / {bare} (batching off)", 1.0, bare_note),
        "batched": target(
            "batched_client_vs_bare",
            f"client CPU per event and model (batched) / {bare} per request",
            0.4,
            f"{rows:.1f} requests per call (target >= 3)",
            rows >= 3,
        ),
        "direct": target("sonic_vs_direct", "SONIC / direct job CPU per event (four models)", 0.55, direct_note),
        "inference": target(
            "client_vs_inference",
            "client CPU / the direct inference it replaces",
            0.15,
            "inference = direct job - the same job without inference",
        ),
    }


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

    try:
        if floor:
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
    if failures:
        print(f"bare loop: {len(failures)} failed requests, first: {failures[0]}", file=sys.stderr)
    return len(failures)


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
    ns = parser.parse_args(argv)
    failed = bare_replay(
        ns.address, ns.tensors, ns.models.split(","), ns.events, ns.in_flight, ns.floor, ns.shared_memory
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
