"""What cmsbench does with Triton directly, not through framework.sonic.

* :func:`bare_async_loop`: the bare tritonclient ``async_infer`` loop that the SONIC client
  is measured against (``cmsbench client-overhead``): by definition it cannot go through
  the framework.
* :func:`write_edited_repository`: a model repository whose ``config.pbtxt`` files are
  edited (dynamic batching on/off, queue delays) through Triton's own protobuf.

framework.bench may import tritonclient for such baselines (``tests/test_layering.py``);
everything else reaches Triton through ``framework.sonic``.
"""

from __future__ import annotations

import pathlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from framework.serving._server import default_model_repository

from ._harness import percentiles

__all__ = ["bare_async_loop", "write_edited_repository"]


def write_edited_repository(
    folder: pathlib.Path,
    models: Sequence[str] | Mapping[str, str],
    edit: Callable[[Any], None] | None = None,
    source: pathlib.Path | None = None,
) -> pathlib.Path:
    """A copy of ``models`` of ``source`` (default ``data/models``) with ``edit(config)`` applied.

    ``models`` lists model names, or maps new names to source models (``{"pn_nobatching":
    "particlenet_ak4"}``: the copy's ``config.name`` is the new name). Version folders are
    symlinks; only ``config.pbtxt`` is rewritten. ``edit`` receives the parsed
    ``ModelConfig`` protobuf and changes it in place.
    """
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    source = source or default_model_repository()
    names = models if isinstance(models, Mapping) else {name: name for name in models}
    for name, model in names.items():
        target = folder / name
        target.mkdir(parents=True, exist_ok=True)
        for entry in (source / model).iterdir():
            if entry.name != "config.pbtxt" and not (target / entry.name).exists():
                (target / entry.name).symlink_to(entry.absolute())
        config = text_format.Parse((source / model / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
        config.name = name
        if edit is not None:
            edit(config)
        (target / "config.pbtxt").write_text(text_format.MessageToString(config))
    return folder


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
