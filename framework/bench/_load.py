"""A bare tritonclient load generator: one process, ``in_flight`` requests kept in flight.

Run by the GPU benchmarks as a subprocess (one per client core)::

    python -m framework.bench._load ADDRESS MODEL INPUTS.npz --in-flight 32 --seconds 4 \\
        [--warmup 1] [--start FILE] [--out RESULT.json]

``INPUTS.npz`` holds the requests to cycle through: arrays named ``<i>/<input name>``,
one request per ``i`` (real events, built by the caller). The process waits for
``--start`` to exist (so that many processes start together), sends ``async_infer`` calls
for ``warmup + seconds`` seconds (``time.perf_counter`` clock), and writes one JSON
object: requests completed and failed in the measured window, their latency percentiles
(seconds), and this process's CPU time (``time.process_time``, seconds) in that window,
so that the client's CPU cost per request is measured, not assumed.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import threading
import time
from typing import Any

import numpy as np


def load_requests(path: pathlib.Path) -> list[dict[str, np.ndarray]]:
    """The requests of an ``.npz`` written by :func:`save_requests`, in order."""
    with np.load(path) as data:
        out: dict[int, dict[str, np.ndarray]] = {}
        for key in data.files:
            index, name = key.split("/", 1)
            out.setdefault(int(index), {})[name] = data[key]
    return [out[i] for i in sorted(out)]


def save_requests(path: pathlib.Path, requests: list[dict[str, np.ndarray]]) -> pathlib.Path:
    """Write requests (one dict of input arrays each) for :func:`load_requests`."""
    np.savez(path, **{f"{i}/{name}": array for i, request in enumerate(requests) for name, array in request.items()})
    return path


def run_load(
    address: str, model: str, requests: list[dict[str, np.ndarray]], in_flight: int, seconds: float, warmup: float = 1.0
) -> dict[str, Any]:
    """Keep ``in_flight`` ``async_infer`` calls of ``model`` going for ``warmup + seconds``.

    Returns:
        ``{"requests", "errors", "seconds", "throughput"`` (requests/s completed in the
        measured window), ``"latency"`` (p50/p90/p99/mean in seconds), ``"cpu_s"``,
        ``"first_error"}``.
    """
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import np_to_triton_dtype

    client = grpcclient.InferenceServerClient(address)
    outputs = [
        grpcclient.InferRequestedOutput(o["name"]) for o in client.get_model_metadata(model, as_json=True)["outputs"]
    ]
    prepared = []
    for request in requests:
        tensors = []
        for name, array in request.items():
            tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
            tensor.set_data_from_numpy(np.ascontiguousarray(array))
            tensors.append(tensor)
        prepared.append(tensors)
    slots = threading.Semaphore(in_flight)
    lock = threading.Lock()
    window = {"start": float("inf"), "stop": float("inf")}
    latencies: list[float] = []
    errors: list[str] = []

    def done(start: float, result: Any, error: Any) -> None:
        now = time.perf_counter()
        with lock:
            if window["start"] <= start and now <= window["stop"]:
                if error is None:
                    latencies.append(now - start)
                else:
                    errors.append(str(error))
        slots.release()

    t0 = time.perf_counter()
    window["start"], window["stop"] = t0 + warmup, t0 + warmup + seconds
    cpu0 = None
    i = 0
    try:
        while True:
            now = time.perf_counter()
            if cpu0 is None and now >= window["start"]:
                cpu0 = time.process_time()
            if now >= window["stop"]:
                break
            if not slots.acquire(timeout=30.0):
                raise RuntimeError(f"load: no {model} request completed for 30 s at {address}")
            start = time.perf_counter()
            client.async_infer(
                model,
                prepared[i % len(prepared)],
                lambda result, error, s=start: done(s, result, error),
                outputs=outputs,
                client_timeout=60,
            )
            i += 1
        cpu = time.process_time() - (cpu0 if cpu0 is not None else time.process_time())
        for _ in range(in_flight):  # let the last ones finish before closing the channel
            slots.acquire(timeout=60.0)
    finally:
        client.close()
    lat = np.asarray(latencies) if latencies else np.zeros(1)
    p50, p90, p99 = np.percentile(lat, [50, 90, 99])
    return {
        "requests": len(latencies),
        "errors": len(errors),
        "seconds": seconds,
        "throughput": len(latencies) / seconds,
        "cpu_s": cpu,
        "latency": {"mean": float(lat.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)},
        "first_error": errors[0] if errors else "",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m framework.bench._load", description=__doc__.split("\n\n")[0])
    parser.add_argument("address")
    parser.add_argument("model")
    parser.add_argument("inputs", type=pathlib.Path)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--start", type=pathlib.Path, default=None, help="wait for this file before sending")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="result JSON (default: stdout)")
    ns = parser.parse_args(argv)
    requests = load_requests(ns.inputs)
    if ns.start is not None:
        deadline = time.monotonic() + 120.0
        while not ns.start.exists():
            if time.monotonic() > deadline:
                print(f"load: {ns.start} did not appear in 120 s", file=sys.stderr)
                return 1
            time.sleep(0.005)
    result = run_load(ns.address, ns.model, requests, ns.in_flight, ns.seconds, ns.warmup)
    text = json.dumps(result)
    if ns.out is not None:
        ns.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
