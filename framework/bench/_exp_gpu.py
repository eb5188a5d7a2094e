"""Benchmarks for a machine with a GPU: the seeds' GPU results, measured (``cmsbench gpu``).

Run on the GPU machine (16 cores, one H100; ``docs/performance-gpu.md`` says how), each
experiment against a ``LocalTritonServer`` whose models run on the GPU (``device``: the
environment variable ``PYSONIC_BENCH_DEVICE``, default ``auto``; on a machine without a
GPU the same code runs on the CPU, which is how the tests exercise it with ``--quick``):

* ``gpu-direct``: per model, direct (onnxruntime, 1 CPU thread, in the job) vs SONIC to
  the GPU server, one event at a time: per-event model time and the share of the
  external wait spent outside the server (transfer, (de)serialisation, gRPC).
* ``gpu-batching``: ParticleNet on ONE GPU instance, bare clients with 1 ... 256 requests
  in flight, Triton's dynamic batcher on vs off: events/s, p50/p99, requests per
  execution, execution time per batch (seed 004's gain, and the planner's input).
* ``gpu-peak``: ParticleNet on several GPU instances, bare clients on every core but two:
  the served rate against the raw limit (22,121 events/s, ``shared/gpu/README.md``) and
  the clients' CPU cost per request.
* ``gpu-clients``: N = 1 ... 14 ``cmsrun`` jobs, one core each, against one GPU instance:
  per-job and server rate, p50/p99, and the knee.
* ``gpu-miniaod``: the MiniAOD-like demonstrator, K jobs direct on the CPU vs K jobs with
  the four models as a service on the GPU: events/s per CPU core (seed 001: -10 % time).
* ``plan``: the capacity planner (:func:`capacity_plan`) from the ``gpu-batching`` and
  ``gpu-clients`` results, compared with the measured knee.

Jobs and load processes are pinned to cores of their own (:func:`start_pinned`),
leaving the first ``SERVER_CORES`` cores to the server (which is not pinned: with several
instances its backend stubs need more). All times are ``time.perf_counter``
seconds unless a name says otherwise; rates are events (= requests: one per event) per
second. Nothing here asserts a time.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from framework.serving.testing import write_edited_repository

from ._children import child_env, run_cmsruns_together, start_pinned
from ._harness import CONFIGS, MODEL_TIME_COLUMNS, MODELS, median_of, model_seconds, run_config, temporary_folder
from ._load import load_requests

MS = 1e3
DEVICE_ENV = "PYSONIC_BENCH_DEVICE"
RUNNER_ENV = "PYSONIC_BENCH_RUNNER"
SERVER_CORES = 2  # cores left to tritonserver and its backend stubs
RAW_LIMIT = {"particlenet_ak4": 22121.0}  # events/s, torch eager fp32, 512 events per call (shared/gpu/README.md)


def bench_device() -> str:
    """``$PYSONIC_BENCH_DEVICE`` (``cpu``, ``gpu`` or ``auto``; default ``auto``)."""
    return os.environ.get(DEVICE_ENV, "auto")


def bench_runner() -> str:
    """``$PYSONIC_BENCH_RUNNER``: the stand-ins' ``runner`` parameter (``onnx``, ``torch``);
    unset or empty keeps the configs' ``auto`` (torch on GPU instances, ONNX on CPU ones).
    ``torch`` on a CPU-only machine rehearses the GPU path (DLPack, TorchScript). CMS's
    models (``gpu-ak8``) keep their own: each has one model file."""
    return os.environ.get(RUNNER_ENV, "")


def client_cores() -> list[int]:
    """The cores for client processes: all this process may use but the first ``SERVER_CORES``."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[SERVER_CORES:] if len(cores) > SERVER_CORES + 1 else cores


# ----------------------------------------------------------------------------------------
# Servers and their counters


Variants = dict[str, tuple[str, Callable[[Any], None] | None]]
"""Models to serve: ``{served name: (model, edit(config) or None)}``."""


def _variant_repository(folder: pathlib.Path, variants: Variants, source: pathlib.Path | None) -> pathlib.Path:
    """Models of ``source`` under new names (:data:`Variants`); ``source`` None: the stand-ins of
    ``data/models``, each copy with :func:`bench_runner`'s ``runner`` when it is set."""

    def edited(config: Any, edit: Callable[[Any], None] | None) -> None:
        if source is None and bench_runner():
            config.parameters["runner"].string_value = bench_runner()
        if edit is not None:
            edit(config)

    for name, (model, edit) in variants.items():
        write_edited_repository(folder, {name: model}, functools.partial(edited, edit=edit), source=source)
    return folder


def _no_batching(config: Any) -> None:
    config.ClearField("dynamic_batching")


def with_and_without_batching(served: dict[str, str], model: str) -> Variants:
    """The variants of ``served`` (``{"on": name, "off": name}``): ``model`` as its config has
    it, and without dynamic batching."""
    return {served["on"]: (model, None), served["off"]: (model, _no_batching)}


@contextlib.contextmanager
def gpu_server(variants: Variants, instances: int, source: pathlib.Path | None = None) -> Iterator[Any]:
    """A started server of ``variants`` of ``source``'s models (see :func:`_variant_repository`)
    on :func:`bench_device`, ``instances`` instances per model."""
    from framework.serving import LocalTritonServer

    with temporary_folder("gpu") as folder:
        server = LocalTritonServer(
            _variant_repository(folder / "models", variants, source),
            device=bench_device(),
            instances=instances,
            work_dir=folder / "work",
        )
        server.start(300.0)
        try:
            yield server
        finally:
            server.stop()


def server_counters(address: str, model: str) -> dict[str, float]:
    """Triton's cumulative counters of ``model``: requests, executions, inferences (rows),
    and the execution time summed over executions (``batch_stats`` compute input + infer
    + output, seconds)."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)
    try:
        stats = client.get_inference_statistics(model, as_json=True, client_timeout=30)
    finally:
        client.close()
    total = {"requests": 0.0, "executions": 0.0, "inferences": 0.0, "exec_s": 0.0, "queue_s": 0.0}
    for version in stats.get("model_stats", []):
        infer = version.get("inference_stats", {})
        total["requests"] += int(infer.get("success", {}).get("count", 0))
        total["queue_s"] += int(infer.get("queue", {}).get("ns", 0)) / 1e9
        total["executions"] += int(version.get("execution_count", 0))
        total["inferences"] += int(version.get("inference_count", 0))
        for batch in version.get("batch_stats", []):
            total["exec_s"] += (
                sum(int(batch.get(k, {}).get("ns", 0)) for k in ("compute_input", "compute_infer", "compute_output"))
                / 1e9
            )
    return total


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in after}


def process_group_cpu(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of a process group
    (the server and its backend stubs), from ``/proc/<pid>/stat``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ...
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


# ----------------------------------------------------------------------------------------
# Client processes


def real_requests(folder: pathlib.Path, model: str = "particlenet", repeat: int = 1) -> pathlib.Path:
    """An ``.npz`` of real events' inputs of ``model`` (pfnano.root, through its input
    producer), for the load generator."""
    path = folder / f"{model}_inputs.npz"
    run_config(
        "models_cfg.py", backend="direct", models=model, repeat=repeat, streams=1, threads=1, dumpInputs=str(path)
    )
    return path


def run_load_processes(
    address: str,
    model: str,
    inputs: pathlib.Path,
    in_flight: int,
    processes: int,
    seconds: float,
    folder: pathlib.Path,
    warmup: float = 1.0,
) -> dict[str, Any]:
    """``processes`` load generators (``framework/bench/_load.py``), one core each, started
    together, ``in_flight`` requests each; their results combined.

    Returns:
        ``{"throughput"`` (sum), ``"p50_ms"`` (median of the processes'), ``"p99_ms"``
        (max of the processes'), ``"requests"``, ``"errors"``, ``"cpu_s"`` (sum),
        ``"processes"``, ``"first_error"}``.
    """
    cores = client_cores()
    start = folder / f"start-{time.monotonic_ns()}"
    jobs = []
    for i in range(processes):
        out = folder / f"load-{start.name}-{i}.json"
        command = [
            sys.executable,
            "-m",
            "framework.bench._load",
            address,
            model,
            str(inputs),
            "--in-flight",
            str(in_flight),
            "--seconds",
            str(seconds),
            "--warmup",
            str(warmup),
            "--start",
            str(start),
            "--out",
            str(out),
        ]
        jobs.append(
            (
                start_pinned(
                    command,
                    cores[i % len(cores)],
                    env=child_env(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                ),
                out,
            )
        )
    try:
        time.sleep(1.5 + 0.05 * processes)  # imports and channel set-up before the common start
        start.touch()
        results = []
        for process, out in jobs:
            _, err = process.communicate(timeout=warmup + seconds + 120)
            if process.returncode != 0:
                raise RuntimeError(f"load generator failed ({process.returncode}): {err.decode()[-800:]}")
            results.append(json.loads(out.read_text()))
    finally:
        for process, _ in jobs:
            if process.poll() is None:
                process.kill()
                process.wait()
    return {
        "throughput": sum(r["throughput"] for r in results),
        "p50_ms": float(np.median([r["latency"]["p50"] for r in results])) * MS,
        "p99_ms": max(r["latency"]["p99"] for r in results) * MS,
        "requests": sum(r["requests"] for r in results),
        "errors": sum(r["errors"] for r in results),
        "cpu_s": sum(r["cpu_s"] for r in results),
        "processes": processes,
        "first_error": next((r["first_error"] for r in results if r["first_error"]), ""),
    }


def run_jobs(n: int, options: dict[str, Any], folder: pathlib.Path, timeout: float) -> list[dict[str, Any]]:
    """``n`` ``cmsrun`` jobs of ``models_cfg.py`` with ``options``, one core each, started
    together (a start barrier); each job's summary (``--summary-json``) plus ``cpu_s``, the
    job's CPU seconds (``os.wait4`` rusage: user + system, all its threads).

    Raises:
        RuntimeError: a job failed, or did not start or end within ``timeout`` seconds (with its stderr).
    """
    return run_cmsruns_together(
        CONFIGS / "models_cfg.py", options, n, folder, "cmsbench gpu", timeout=timeout, cores=client_cores()
    )


# ----------------------------------------------------------------------------------------
# gpu-direct


def gpu_direct(quick: bool, repeat: int) -> dict[str, Any]:
    """Per model, one event at a time: direct (onnxruntime, 1 thread) vs SONIC to the GPU server."""
    names = ("deepmet", "facile") if quick else tuple(MODELS)
    copies = 1 if quick else 10
    rows = []
    with gpu_server({MODELS[n]: (MODELS[n], None) for n in names}, instances=1) as server:
        for name in names:
            entry: dict[str, Any] = {"model": name}
            for backend in ("direct", "sonic"):

                def measure(name: str = name, backend: str = backend) -> dict[str, Any]:
                    """One job: the model's ms per event after the first 3 events (both sides
                    alike); for SONIC also the wait, the server's time and the input size."""
                    result = run_config(
                        "models_cfg.py",
                        warmup=3,
                        models=name,
                        backend=backend,
                        server=server.grpc_address,
                        repeat=copies,
                        streams=1,
                        threads=1,
                    )
                    out = {"ms": result["module_seconds"][name] * MS}
                    if backend == "sonic":
                        triton = result["services"]["TritonService"]
                        model = triton["models"][MODELS[name]]
                        out["wait_ms"] = result["modules"][name]["mean_wait"] * MS
                        out["server_ms"] = model["queue_ms"] + model["compute_ms"]
                        out["input_mb"] = triton["clients"][name]["bytes_sent"] / max(result["events"], 1) / 1e6
                    return out

                result = median_of(repeat, measure)
                entry[f"{backend}_ms"] = result["ms"]
                entry[f"{backend}_runs"] = result["runs"]
                if backend == "sonic":
                    entry.update({k: result[k] for k in ("wait_ms", "server_ms", "input_mb")})
            entry["transfer_ms"] = max(0.0, entry["wait_ms"] - entry["server_ms"])
            entry["transfer_share"] = entry["transfer_ms"] / entry["sonic_ms"]
            entry["speedup"] = entry["direct_ms"] / entry["sonic_ms"]
            rows.append(entry)
    return {
        "experiment": "gpu-direct",
        "title": f"Direct (onnxruntime, 1 CPU thread) vs SONIC to the {server.device.upper()} server, per model",
        "settings": {
            "events": 10 * copies,
            "input": "pfnano.root",
            "streams": 1,
            "threads": 1,
            "server_device": server.device,
            "instances": 1,
        },
        "rows": rows,
        "columns": [
            *MODEL_TIME_COLUMNS,
            ("speedup", "direct/SONIC", ".2f"),
            ("server_ms", "server [ms]", ".2f"),
            ("transfer_ms", "outside server [ms]", ".2f"),
            ("transfer_share", "share outside", ".0%"),
            ("input_mb", "input [MB/ev]", ".3f"),
        ],
        "targets": [],
        "notes": [
            "SONIC time = acquire + external wait + produce of the SONIC producer; direct = the producer's run",
            "server = Triton's queue + compute per request; outside = external wait - server: "
            "serialisation, gRPC transfer, the Python backend's tensor hand-off",
            "untrained stand-ins; DeepTau with 3 jet-seeded candidates; FACILE's 16,000 channel rows synthetic",
        ],
    }


# ----------------------------------------------------------------------------------------
# gpu-batching and gpu-peak


def sweep_in_flight(
    address: str,
    served: dict[str, str],
    inputs: pathlib.Path,
    concurrency: Sequence[int],
    seconds: float,
    folder: pathlib.Path,
    repeat: int,
    figures: Callable[[dict[str, Any], dict[str, float]], dict[str, Any]],
) -> list[dict[str, Any]]:
    """Bare clients against each model of ``served`` (``{"on": name, "off": name}``, the same
    model with dynamic batching and without), ``c`` requests in flight for each ``c`` of
    ``concurrency``, shared by up to 8 load processes (:func:`run_load_processes`).

    Returns:
        One row per point: ``{"batching", "in_flight"`` (the processes' requests, ``c``
        rounded down to a multiple of the processes), ``**figures(load, counters)}``: the
        load processes' result and the change of the model's :func:`server_counters`,
        each figure the median of ``repeat`` runs.
    """
    processes_max = len(client_cores())
    rows = []
    for batching, model in served.items():
        for c in concurrency:
            processes = min(c, processes_max, 8)
            per_process = max(1, c // processes)

            def measure(
                model: str = model, processes: int = processes, per_process: int = per_process
            ) -> dict[str, Any]:
                before = server_counters(address, model)
                load = run_load_processes(address, model, inputs, per_process, processes, seconds, folder)
                counters = _delta(server_counters(address, model), before)
                return {"in_flight": per_process * processes, **figures(load, counters)}

            rows.append({"batching": batching, **median_of(repeat, measure)})
    return rows


def _per_execution(counters: dict[str, float], key: str) -> float:
    """``counters[key]`` per execution of the model (0 when it ran none)."""
    return counters[key] / counters["executions"] if counters["executions"] else 0.0


BATCHING_VARIANTS = {"on": "particlenet_ak4", "off": "particlenet_ak4_nobatching"}
"""Server variants of ``gpu-batching`` and ``gpu-clients``: dynamic batching on and off."""


def _batching_figures(load: dict[str, Any], counters: dict[str, float]) -> dict[str, Any]:
    return {
        "throughput": load["throughput"],
        "p50_ms": load["p50_ms"],
        "p99_ms": load["p99_ms"],
        "errors": load["errors"],
        "requests_per_execution": _per_execution(counters, "requests"),
        "rows_per_execution": _per_execution(counters, "inferences"),
        "exec_ms": _per_execution(counters, "exec_s") * MS,
    }


def gpu_batching(quick: bool, repeat: int) -> dict[str, Any]:
    """ParticleNet on one GPU instance: bare clients, concurrency 1 ... 256, batching on vs off."""
    concurrency = (1, 4) if quick else (1, 2, 4, 8, 16, 32, 64, 128, 256)
    seconds = 0.5 if quick else 2.5
    with temporary_folder("batching") as folder:
        inputs = real_requests(folder)
        jets_per_event = float(np.mean([len(r["pf_mask"]) for r in load_requests(inputs)]))
        variants = with_and_without_batching(BATCHING_VARIANTS, "particlenet_ak4")
        with gpu_server(variants, instances=1) as server:
            rows = sweep_in_flight(
                server.grpc_address, BATCHING_VARIANTS, inputs, concurrency, seconds, folder, repeat, _batching_figures
            )
    for r in rows:
        off = next(o for o in rows if o["batching"] == "off" and o["in_flight"] == r["in_flight"])
        r["gain"] = r["throughput"] / off["throughput"] if off["throughput"] else 0.0
    top = max(rows, key=lambda r: r["throughput"])
    best_gain = max((r for r in rows if r["batching"] == "on"), key=lambda r: r["gain"])
    return {
        "experiment": "gpu-batching",
        "title": f"Dynamic batching, ParticleNet on one {server.device.upper()} instance, bare clients",
        "settings": {
            "concurrency": list(concurrency),
            "seconds": seconds,
            "instances": 1,
            "jets_per_event": jets_per_event,
            "server_device": server.device,
            "max_queue_delay_us": 100,
        },
        "rows": rows,
        "columns": [
            ("batching", "batching", "s"),
            ("in_flight", "in flight", "d"),
            ("throughput", "events/s", ".0f"),
            ("gain", "on/off", ".2f"),
            ("p50_ms", "p50 [ms]", ".2f"),
            ("p99_ms", "p99 [ms]", ".2f"),
            ("requests_per_execution", "req/exec", ".1f"),
            ("exec_ms", "exec [ms]", ".2f"),
        ],
        "targets": [
            {
                "name": "best throughput gain from dynamic batching (seed 004)",
                "value": best_gain["gain"],
                "target": None,
                "met": None,
                "note": f"at {best_gain['in_flight']} in flight; peak {top['throughput']:.0f} events/s",
            }
        ],
        "notes": [
            "one request = one real pfnano event (all its jets); requests cycle over the 10 events",
            "exec = Triton's compute input + infer + output per execution (batch_stats)",
            "p99 is the largest of the load processes' p99, p50 the median of theirs",
        ],
    }


PEAK_SETUPS = ((8, 14, 32), (10, 4, 128))
"""(instances, client processes, requests in flight per process) tried by ``gpu-peak``: the
Python backend's stubs need CPU too (one core per busy instance), so the cores are shared
either way: many client cores, or few client cores and more instances."""


def gpu_peak(quick: bool, repeat: int) -> dict[str, Any]:
    """ParticleNet on several GPU instances, fed by bare client processes: the served rate."""
    setups = ((1, 1, 4),) if quick else PEAK_SETUPS
    seconds = 0.5 if quick else 6.0
    limit = RAW_LIMIT["particlenet_ak4"]
    rows = []
    with temporary_folder("peak") as folder:
        inputs = real_requests(folder)
        for instances, processes, in_flight in setups:
            with gpu_server({"particlenet_ak4": ("particlenet_ak4", None)}, instances=instances) as server:

                def measure(server: Any = server, processes: int = processes, in_flight: int = in_flight) -> dict:
                    cpu0, t0 = process_group_cpu(server.pid), time.perf_counter()
                    load = run_load_processes(
                        server.grpc_address, "particlenet_ak4", inputs, in_flight, processes, seconds, folder
                    )
                    server_cpu, wall = process_group_cpu(server.pid) - cpu0, time.perf_counter() - t0
                    client_ms = load["cpu_s"] / max(load["requests"], 1) * MS
                    return {
                        "throughput": load["throughput"],
                        "fraction_of_raw": load["throughput"] / limit,
                        "p50_ms": load["p50_ms"],
                        "p99_ms": load["p99_ms"],
                        "client_cpu_ms_per_request": client_ms,
                        "client_cores_busy": load["cpu_s"] / seconds,
                        "client_bound_rate": processes / (client_ms / MS) if client_ms else 0.0,
                        "server_cores_busy": server_cpu / wall,
                        "errors": load["errors"],
                    }

                result = median_of(repeat, measure)
            rows.append({"instances": instances, "processes": processes, "in_flight": in_flight * processes, **result})
    best = max(rows, key=lambda r: r["throughput"])
    busy = best["client_cores_busy"] / best["processes"]
    return {
        "experiment": "gpu-peak",
        "title": f"ParticleNet served at full rate on the {server.device.upper()}",
        "settings": {
            "setups": [list(x) for x in setups],
            "seconds": seconds,
            "server_device": server.device,
            "raw_limit": limit,
        },
        "rows": rows,
        "columns": [
            ("instances", "instances", "d"),
            ("processes", "client cores", "d"),
            ("in_flight", "in flight", "d"),
            ("throughput", "events/s", ".0f"),
            ("fraction_of_raw", "of raw limit", ".2f"),
            ("client_cpu_ms_per_request", "client CPU [ms/req]", ".3f"),
            ("client_cores_busy", "client cores busy", ".1f"),
            ("server_cores_busy", "server cores busy", ".1f"),
            ("p99_ms", "p99 [ms]", ".1f"),
        ],
        "targets": [
            {
                "name": "served ParticleNet >= 0.5 x raw GPU limit",
                "value": best["throughput"],
                "target": 0.5 * limit,
                "met": best["throughput"] >= 0.5 * limit,
                "note": (
                    f"{best['instances']} instances, {best['processes']} client cores {100 * busy:.0f} % busy, "
                    f"client CPU {best['client_cpu_ms_per_request']:.3f} ms per request, server "
                    f"{best['server_cores_busy']:.1f} cores busy"
                ),
            }
        ],
        "notes": [
            "raw limit: torch eager fp32 on the H100, 512 events per call, no server (shared/gpu/README.md)",
            "server cores busy: tritonserver and its backend stubs' CPU seconds over the wall time of the "
            "load (clients' start and warm-up included)",
        ],
    }


# ----------------------------------------------------------------------------------------
# gpu-clients and the capacity planner


def _job_options(repeat_files: int) -> dict[str, Any]:
    return dict(models="particlenet", backend="sonic", streams=4, threads=1, repeat=repeat_files)


def client_cpu_per_event(address: str, folder: pathlib.Path, small: int, large: int) -> dict[str, float]:
    """One job's CPU seconds per event: two runs of ``small`` and ``large`` file copies,
    ``(cpu(large) - cpu(small)) / (events(large) - events(small))``, so that start-up
    (imports, file opening, model metadata) does not count. Where start-up noise swamps the
    difference (``--quick``), the large run's CPU per event, start-up included."""
    a, b = (run_jobs(1, {**_job_options(n), "server": address}, folder, 300.0)[0] for n in (small, large))
    difference = (b["cpu_s"] - a["cpu_s"]) / (b["events"] - a["events"])
    if difference <= 0:  # start-up noise larger than the events' CPU (tiny runs): an upper bound instead
        difference = b["cpu_s"] / b["events"]
    return {"cpu_s_per_event": difference, "rate": b["throughput"]}


def gpu_clients(quick: bool, repeat: int) -> dict[str, Any]:
    """N cmsrun jobs (ParticleNet as a service, 4 streams, 1 thread, one core each) against one
    GPU instance, with Triton's dynamic batching on and off."""
    cores = client_cores()
    counts = {
        "on": (1, 2) if quick else tuple(n for n in (1, 2, 4, 6, 8, 10, 12, 14) if n <= len(cores)),
        "off": (1, 2) if quick else tuple(n for n in (1, 2, 3, 4, 6, 8) if n <= len(cores)),
    }
    rows = []
    with (
        temporary_folder("clients") as folder,
        gpu_server(with_and_without_batching(BATCHING_VARIANTS, "particlenet_ak4"), instances=1) as server,
    ):
        cpu = client_cpu_per_event(server.grpc_address, folder, 2, 4 if quick else 40)
        seconds = 1.0 if quick else 7.0
        copies = max(2, round(seconds * cpu["rate"] / 10))  # pfnano.root holds 10 events
        for batching, model in BATCHING_VARIANTS.items():
            for n in counts[batching]:

                def measure(model: str = model, n: int = n) -> dict[str, Any]:
                    before = server_counters(server.grpc_address, model)
                    summaries = run_jobs(
                        n, {**_job_options(copies), "server": server.grpc_address, "modelName": model}, folder, 300.0
                    )
                    d = _delta(server_counters(server.grpc_address, model), before)
                    rates = [s["throughput"] for s in summaries]
                    return {
                        "server_throughput": sum(rates),
                        "per_client": float(np.mean(rates)),
                        "p50_ms": float(np.median([s["latency"]["p50"] for s in summaries])) * MS,
                        "p99_ms": float(np.max([s["latency"]["p99"] for s in summaries])) * MS,
                        "requests_per_execution": _per_execution(d, "requests"),
                        "client_cpu_ms_per_event": float(np.mean([s["cpu_s"] / s["events"] for s in summaries])) * MS,
                    }

                rows.append({"batching": batching, "clients": n, **median_of(repeat, measure)})
    targets = []
    for batching in BATCHING_VARIANTS:
        pts = [r for r in rows if r["batching"] == batching]
        for r in pts:
            r["per_client_ratio"] = r["per_client"] / pts[0]["per_client"]
        knee = measured_knee(pts)
        targets.append(
            {
                "name": f"knee (measured), batching {batching}: plateau / one job's rate",
                "value": knee["knee"],
                "target": None,
                "met": None,
                "note": knee["note"],
            }
        )
    return {
        "experiment": "gpu-clients",
        "title": f"Clients per {server.device.upper()}: N cmsrun jobs (one core each) against one ParticleNet instance",
        "settings": {
            "clients": counts,
            "events_per_job": 10 * copies,
            "streams": 4,
            "threads": 1,
            "instances": 1,
            "server_device": server.device,
            "client_cpu_s_per_event": cpu["cpu_s_per_event"],
        },
        "rows": rows,
        "columns": [
            ("batching", "batching", "s"),
            ("clients", "N", "d"),
            ("server_throughput", "server ev/s", ".0f"),
            ("per_client", "per job ev/s", ".0f"),
            ("per_client_ratio", "vs N=1", ".2f"),
            ("p50_ms", "p50 [ms]", ".1f"),
            ("p99_ms", "p99 [ms]", ".1f"),
            ("requests_per_execution", "req/exec", ".1f"),
        ],
        "targets": targets,
        "notes": [
            "each job: pfnano.root repeated, ParticleNet inputs built per event on the job's core, one request "
            "per event, Async; jobs pinned with sched_setaffinity to cores 2..15",
            "p99 is the largest of the jobs' p99",
        ],
    }


def measured_knee(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The knee of the aggregate-rate curve: where N x (rate of one job) meets the plateau.

    The plateau is the highest aggregate rate; it counts as reached when the last step
    adds less than a quarter of one job's rate per added job (a per-job slowdown alone,
    e.g. jobs sharing physical cores, does not make a plateau). Returns ``{"knee": N or
    None, "plateau", "note"}``.
    """
    r1 = rows[0]["per_client"]
    plateau = max(r["server_throughput"] for r in rows)
    last, before = rows[-1], rows[-2] if len(rows) > 1 else rows[-1]
    added = last["clients"] - before["clients"]
    step = (last["server_throughput"] - before["server_throughput"]) / added if added else 0.0
    if step >= 0.25 * r1:
        return {
            "knee": None,
            "plateau": plateau,
            "note": f"not reached: the step to {last['clients']} jobs still adds {step:.0f} ev/s per job "
            f"({last['server_throughput']:.0f} ev/s in all)",
        }
    return {"knee": plateau / r1, "plateau": plateau, "note": f"plateau {plateau:.0f} ev/s, one job {r1:.0f} ev/s"}


def capacity_plan(
    client_cpu_s_per_event: float,
    server_points: Sequence[dict[str, Any]],
    instances: int,
    requests_in_flight_per_client: int,
    max_clients: int = 1000,
) -> dict[str, Any]:
    """Predict how many client cores one server sustains (the knee), from independent measurements.

    Model: a client core processes ``1 / c`` events/s (``c``: client CPU seconds per
    event, measured on one job); a server of ``instances`` instances sustains
    ``S(C) = instances x b(C) / t(C)`` requests/s, where ``b(C)`` is the requests per
    execution and ``t(C)`` the execution time (s) that Triton's dynamic batcher reached
    with ``C`` requests in flight (bare-client sweep, ``gpu-batching``), interpolated in
    log ``C``. N clients keep ``C = N x requests_in_flight_per_client`` in flight; the
    knee is the N where ``N / c`` meets ``S(N x in_flight)`` (linearly interpolated).

    Args:
        client_cpu_s_per_event: ``c`` (seconds).
        server_points: ``{"in_flight", "requests_per_execution", "exec_ms"}`` per point.
        instances: model instances of the server (that of the sweep and of the jobs).
        requests_in_flight_per_client: the jobs' streams (one request per event).

    Returns:
        ``{"knee"`` (clients, float; None if beyond ``max_clients``), ``"capacity"``
        (requests/s at the knee), ``"client_rate"`` (events/s per core)}.
    """
    points = sorted((p for p in server_points if p["exec_ms"] > 0), key=lambda p: p["in_flight"])
    logc = np.log([p["in_flight"] for p in points])
    capacity = np.array([instances * p["requests_per_execution"] / (p["exec_ms"] / MS) for p in points])

    def s(c: float) -> float:
        return float(np.interp(np.log(c), logc, capacity))

    rate = 1.0 / client_cpu_s_per_event
    previous = None
    for n in range(1, max_clients + 1):
        gap = n * rate - s(n * requests_in_flight_per_client)
        if gap >= 0:
            if previous is None:
                return {"knee": 1.0, "capacity": s(requests_in_flight_per_client), "client_rate": rate}
            knee = (n - 1) + previous / (previous - gap)  # where the gap crosses 0
            return {"knee": knee, "capacity": s(knee * requests_in_flight_per_client), "client_rate": rate}
        previous = gap
    return {"knee": None, "capacity": s(max_clients * requests_in_flight_per_client), "client_rate": rate}


def plan(quick: bool, repeat: int, results: pathlib.Path | None = None) -> dict[str, Any]:
    """The planner's prediction from ``gpu-batching`` and ``gpu-clients`` results, vs the measured knee,
    for the server with dynamic batching on and off."""
    folder = results or pathlib.Path("results")
    batching = json.loads((folder / "gpu-batching.json").read_text())
    clients = json.loads((folder / "gpu-clients.json").read_text())
    c = clients["settings"]["client_cpu_s_per_event"]
    rows, targets = [], []
    for variant in BATCHING_VARIANTS:
        points = [r for r in batching["rows"] if r["batching"] == variant]
        prediction = capacity_plan(c, points, batching["settings"]["instances"], clients["settings"]["streams"])
        measured = [r for r in clients["rows"] if r["batching"] == variant]
        knee = measured_knee(measured)
        error = (prediction["knee"] / knee["knee"] - 1) if prediction["knee"] and knee["knee"] else None
        beyond = max(r["clients"] for r in measured)
        if knee["knee"] is None and (prediction["knee"] is None or prediction["knee"] > beyond):
            knee["note"] += f"; consistent with the prediction, which lies beyond {beyond} jobs, but not a check of it"
        rows.append(
            {
                "batching": variant,
                "client_cpu_ms_per_event": c * MS,
                "client_rate": prediction["client_rate"],
                "predicted_capacity": prediction["capacity"],
                "predicted_knee": prediction["knee"],
                "measured_plateau": knee["plateau"],
                "measured_knee": knee["knee"],
                "error": error,
            }
        )
        targets.append(
            {
                "name": f"planner within 25 % of the measured knee, batching {variant}",
                "value": error,
                "target": 0.25,
                "met": None if error is None else abs(error) <= 0.25,
                "note": f"predicted {prediction['knee'] or float('inf'):.1f} client cores; measured: {knee['note']}",
            }
        )
    return {
        "experiment": "plan",
        "title": "Capacity planner: client cores one server sustains, predicted vs measured",
        "settings": {
            "from": ["gpu-batching.json", "gpu-clients.json"],
            "instances": batching["settings"]["instances"],
            "streams": clients["settings"]["streams"],
        },
        "rows": rows,
        "columns": [
            ("batching", "batching", "s"),
            ("client_cpu_ms_per_event", "client CPU [ms/ev]", ".3f"),
            ("client_rate", "ev/s per core", ".0f"),
            ("predicted_capacity", "server ev/s (pred.)", ".0f"),
            ("predicted_knee", "knee (pred.)", ".1f"),
            ("measured_plateau", "server ev/s (meas.)", ".0f"),
            ("measured_knee", "knee (meas.)", ".1f"),
            ("error", "error", "+.0%"),
        ],
        "targets": targets,
        "notes": [
            "prediction inputs: client CPU per event (one job, start-up subtracted) and the server's "
            "requests per execution and execution time vs requests in flight (bare clients, gpu-batching); "
            "the measured knee comes from the cmsrun jobs of gpu-clients"
        ],
    }


# ----------------------------------------------------------------------------------------
# gpu-miniaod


def gpu_miniaod(quick: bool, repeat: int) -> dict[str, Any]:
    """K jobs with CPU work ~90 % and four models ~10 %: direct on the CPU vs as a service on the GPU."""
    names = ("facile",) if quick else tuple(MODELS)
    jobs = 1 if quick else min(8, len(client_cores()))
    copies = 1 if quick else 3
    source: dict[str, Any] = {"source": "empty", "events": 8} if quick else {"repeat": copies}
    calibration = run_config("models_cfg.py", warmup=2, backend="direct", models=names, streams=1, threads=1, **source)
    model_ms = sum(model_seconds(calibration["modules"][n]) for n in names) * MS  # what moves to the server
    input_ms = sum(model_seconds(calibration["modules"][f"{n}Inputs"]) for n in names) * MS  # stays in the job
    cpu_ms = max(0.0, 9 * model_ms - input_ms)  # the models are 10 % of the direct event
    options = dict(models=list(names), streams=2, threads=1, cpuTime=cpu_ms, **source)
    rows = []
    with (
        temporary_folder("miniaod") as folder,
        gpu_server({MODELS[n]: (MODELS[n], None) for n in names}, instances=2) as server,
    ):
        for variant, backend in (("direct, CPU", "direct"), (f"SONIC, {server.device.upper()} server", "sonic")):

            def measure(backend: str = backend) -> dict[str, Any]:
                cpu0, t0 = process_group_cpu(server.pid), time.perf_counter()
                summaries = run_jobs(
                    jobs, {**options, "backend": backend, "server": server.grpc_address}, folder, 600.0
                )
                wall = time.perf_counter() - t0
                server_cores = (process_group_cpu(server.pid) - cpu0) / wall if backend == "sonic" else 0.0
                total = sum(s["throughput"] for s in summaries)
                return {
                    "throughput": total,
                    "per_client_core": total / jobs,
                    "server_cores": server_cores,
                    "per_core_all": total / (jobs + server_cores),
                    "p50_ms": float(np.median([s["latency"]["p50"] for s in summaries])) * MS,
                    "job_cpu_ms_per_event": float(np.mean([s["cpu_s"] / s["events"] for s in summaries])) * MS,
                    "cpu_module_ms": float(np.mean([s["modules"]["cpu"]["mean_run"] for s in summaries])) * MS,
                }

            rows.append({"variant": variant, "jobs": jobs, **median_of(repeat, measure)})
    direct, sonic = rows
    for r in rows:
        r["change"] = r["per_client_core"] / direct["per_client_core"] - 1
        r["change_all"] = r["per_core_all"] / direct["per_core_all"] - 1
    return {
        "experiment": "gpu-miniaod",
        "title": "MiniAOD-like demonstrator: direct on the CPU vs the four models as a service on the GPU",
        "settings": {
            "models": list(names),
            "models_ms_direct": model_ms,
            "inputs_ms": input_ms,
            "cpu_ms": cpu_ms,
            "jobs": jobs,
            "streams": 2,
            "threads": 1,
            "server_device": server.device,
        },
        "rows": rows,
        "columns": [
            ("variant", "variant", "s"),
            ("throughput", "events/s", ".2f"),
            ("per_client_core", "ev/s per job core", ".3f"),
            ("change", "vs direct", "+.1%"),
            ("server_cores", "server cores", ".2f"),
            ("change_all", "vs direct, server CPU counted", "+.1%"),
            ("job_cpu_ms_per_event", "job CPU incl. start-up [ms/ev]", ".1f"),
            ("cpu_module_ms", "CPU module [ms/ev]", ".1f"),
            ("p50_ms", "p50 [ms]", ".0f"),
        ],
        "targets": [
            {
                "name": "events/s per CPU core as a service vs direct (seed 001: -10 % computing time)",
                "value": sonic["change"],
                "target": 0.10,
                "met": sonic["change"] >= 0.10,
                "note": f"{sonic['change_all']:+.1%} when the server's CPU ({sonic['server_cores']:.2f} cores) counts",
            }
        ],
        "notes": [
            "CPU work calibrated so that the four models' direct inference is 10 % of the event (seed 001); "
            "their input producers stay in the job either way",
            "each job on one core, 2 streams, 1 thread; the server (tritonserver + stubs) on other cores",
        ],
    }


GPU_EXPERIMENTS: dict[str, Callable[[bool, int], dict[str, Any]]] = {
    "gpu-direct": gpu_direct,
    "gpu-batching": gpu_batching,
    "gpu-peak": gpu_peak,
    "gpu-clients": gpu_clients,
    "gpu-miniaod": gpu_miniaod,
}
"""The GPU machine's experiments (``cmsbench gpu`` runs them all, then ``plan``)."""
