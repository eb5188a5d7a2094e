"""What cmsbench does with Triton directly, not through framework.sonic.

* :func:`bare_async_loop`: the bare tritonclient ``async_infer`` loop that the SONIC client
  is measured against (``cmsbench client-overhead``): by definition it cannot go through
  the framework.

framework.bench may import tritonclient for such baselines (``tests/test_layering.py``);
everything else reaches Triton through ``framework.sonic``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from ._harness import percentiles

__all__ = ["bare_async_loop"]


def bare_async_loop(
    address: str, in_flight: int, requests: int, width: int = 4, timeout: float = 300.0
) -> dict[str, Any]:
    """``requests`` tritonclient ``async_infer`` calls to ``tiny``, ``in_flight`` at a time.

    Returns ``{"throughput"`` (completions/s after the first ``in_flight``), ``"latency"``,
    ``"errors"}``.

    Raises:
        RuntimeError: not all requests completed within ``timeout`` seconds.
    """
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)
    x = np.zeros((1, width), np.float32)
    slots = threading.Semaphore(in_flight)
    finished = threading.Event()
    stamps: list[float] = []
    latencies: list[float] = []
    errors: list[Any] = []
    lock = threading.Lock()

    def done(start: float, result: Any, error: Any) -> None:
        now = time.perf_counter()
        with lock:
            stamps.append(now)
            latencies.append(now - start)
            if error is not None:
                errors.append(error)
            if len(stamps) == requests:
                finished.set()
        slots.release()

    try:
        for _ in range(requests):
            if not slots.acquire(timeout=timeout):  # a lost callback must not hang the benchmark
                raise RuntimeError(f"bare async loop: no request completed for {timeout:g} s")
            tensor = grpcclient.InferInput("x", [1, width], "FP32")
            tensor.set_data_from_numpy(x)
            start = time.perf_counter()
            client.async_infer("tiny", [tensor], lambda result, error, s=start: done(s, result, error))
        if not finished.wait(timeout):
            raise RuntimeError(f"bare async loop: {len(stamps)} of {requests} requests done after {timeout:g} s")
    finally:
        client.close()
    steady = stamps[in_flight:] if len(stamps) - in_flight >= 2 else stamps
    return {
        "throughput": (len(steady) - 1) / (steady[-1] - steady[0]),
        "latency": percentiles(latencies[in_flight:]),
        "errors": len(errors),
    }
