"""Benchmark: Triton system shared memory vs gRPC payloads, per MB of input.

Same conventions as :mod:`framework.bench._exp_sonic`. One local server (``data/models``),
the real ``facile`` model (15 float32 per HCAL channel, one channel per batch row; one
event of 16,000 channels = 0.96 MB, seed talk 004), inputs of 16 kB to 2 MB, through the
SONIC client (:class:`~framework.sonic.TritonClient`, Async mode) with
``useSharedMemory`` true and false, alternated point by point in one run: one call at a
time, and N calls in flight.
"""

from __future__ import annotations

import statistics
import time
from functools import partial
from typing import Any

import numpy as np
import trio

from ._harness import SERVERS, median_of, run_records

MS = 1e3
ROW_BYTES = 15 * 4  # one FACILE channel: 15 float32
SIZES_MB = (0.016, 0.064, 0.1, 0.256, 0.5, 1.0, 2.0)
"""Input sizes: around the client's threshold (``framework.sonic._transport.SHM_MIN_BYTES``,
64 KiB: payloads below it whatever the server), up to two FACILE events."""
IN_FLIGHT = (1, 8)


def _client(address: str, shared_memory: bool) -> Any:
    from framework.sonic import ServerInfo, TritonClient, client_description

    params = client_description().validate(
        {
            "modelName": "facile",
            "modelConfigPath": "models/facile/config.pbtxt",
            "mode": "Async",
            "useSharedMemory": shared_memory,
            "timeout": 120,
        },
        "Client",
    )
    client = TritonClient(params, debug_name="shmBench" if shared_memory else "grpcBench")
    client.connect(ServerInfo("bench", address))
    return client


async def _measure(client: Any, x: np.ndarray, in_flight: int, calls: int) -> dict[str, float]:
    """``calls`` calls, ``in_flight`` at a time: the median per-call latency (``p50``, s),
    the wall time (s) and the input MB/s."""
    latencies: list[float] = []

    async def worker(count: int) -> None:
        for _ in range(count):
            request = client.new_request()
            request.input["rechit_inputs"].to_server(x)
            t0 = time.perf_counter()
            await request.infer_async()
            latencies.append(time.perf_counter() - t0)
            assert request.output["energy"].from_server().shape == (len(x), 1)

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(in_flight):
            nursery.start_soon(worker, calls // in_flight + (index < calls % in_flight))
    wall = time.perf_counter() - t0
    return {"p50": statistics.median(latencies), "wall": wall, "mb_per_s": calls * x.nbytes / 1e6 / wall}


def _run(client: Any, x: np.ndarray, in_flight: int, calls: int) -> dict[str, float]:
    return trio.run(_measure, client, x, in_flight, calls)


def shared_memory_vs_payloads(quick: bool, repeat: int) -> dict[str, Any]:
    """Latency per call and per MB, shared memory vs gRPC payloads, one local server."""
    sizes = (0.1, 1.0) if quick else SIZES_MB
    calls = 8 if quick else 200
    address = SERVERS.models_server().grpc_address
    clients = {mode: _client(address, mode == "shm") for mode in ("shm", "grpc")}
    rng = np.random.default_rng(4)
    rows = []
    try:
        for size in sizes:
            x = rng.normal(size=(round(size * 1e6 / ROW_BYTES), 15)).astype(np.float32)
            mb = x.nbytes / 1e6
            for n in IN_FLIGHT:
                entry: dict[str, Any] = {"input_mb": mb, "in_flight": n}
                for mode, client in clients.items():
                    trio.run(_measure, client, x, n, max(n, 2))  # warm-up: regions, channels
                    result = median_of(repeat, partial(_run, client, x, n, calls))
                    entry[f"{mode}_ms"] = result["p50"] * MS
                    entry[f"{mode}_ms_per_mb"] = result["p50"] * MS / mb
                    entry[f"{mode}_mb_per_s"] = result["mb_per_s"]
                    entry[f"{mode}_runs"] = run_records(result, "p50", "mb_per_s")
                entry["latency_ratio"] = entry["shm_ms"] / entry["grpc_ms"]
                entry["throughput_ratio"] = entry["shm_mb_per_s"] / entry["grpc_mb_per_s"]
                rows.append(entry)
        shm_calls = clients["shm"].transport.shm_calls
        grpc_shm_calls = clients["grpc"].transport.shm_calls
    finally:
        for client in clients.values():
            client.close()
    one_mb = [r for r in rows if r["in_flight"] == 1 and abs(r["input_mb"] - 1.0) < 0.05]
    targets = [
        {
            "name": "shared memory / gRPC latency, 1 MB, one call at a time",
            "value": r["latency_ratio"],
            "target": 1.0,
            "met": r["latency_ratio"] < 1.0,
            "note": "below 1: shared memory is faster",
        }
        for r in one_mb
    ]
    targets += [
        {
            "name": f"shared memory / gRPC throughput, 256 kB, {r['in_flight']} in flight",
            "value": r["throughput_ratio"],
            "target": None,
            "met": None,
            "note": "calls/s at the same size (_transport.SHM_MIN_BYTES is 64 KiB)",
        }
        for r in rows
        if abs(r["input_mb"] - 0.256) < 0.01
    ]
    return {
        "experiment": "shm",
        "title": "Shared memory vs gRPC payloads: FACILE inputs, one local server",
        "settings": {
            "sizes_mb": list(sizes),
            "in_flight": list(IN_FLIGHT),
            "calls": calls,
            "model": "facile",
            "mode": "Async",
            "quick": quick,
            "repeat": repeat,
            "shm_calls": shm_calls,
            "grpc_client_shm_calls": grpc_shm_calls,
        },
        "rows": rows,
        "columns": [
            ("input_mb", "input [MB]", ".2f"),
            ("in_flight", "N", "d"),
            ("shm_ms", "shm p50 [ms]", ".2f"),
            ("grpc_ms", "gRPC p50 [ms]", ".2f"),
            ("latency_ratio", "shm/gRPC", ".2f"),
            ("shm_ms_per_mb", "shm [ms/MB]", ".2f"),
            ("grpc_ms_per_mb", "gRPC [ms/MB]", ".2f"),
            ("shm_mb_per_s", "shm [MB/s]", ".0f"),
            ("grpc_mb_per_s", "gRPC [MB/s]", ".0f"),
            ("throughput_ratio", "thr. shm/gRPC", ".2f"),
        ],
        "targets": targets,
        "notes": [
            "p50 latency of one call (SONIC client, Async, to_server to outputs checked) at N calls in flight",
            "both transports alternate point by point against the same server; the model's own time is "
            "included (onnxruntime MLP per channel), so ms/MB is an upper bound of the transport cost",
            f"calls through shared memory: {shm_calls} (shm client), {grpc_shm_calls} (gRPC client)",
        ],
    }
