"""What every benchmark needs: run a config in-process, servers on edited repositories, statistics.

All times are ``time.perf_counter`` seconds unless a name says otherwise. Nothing here
asserts a time: the experiments measure, the CLI reports.
"""

from __future__ import annotations

import contextlib
import functools
import pathlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import trio

import framework.config as cms
from framework._builder import build_job
from framework._scheduler import run_job
from framework._summary import summary_dict
from framework.serving.testing import serving, write_python_model

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFIGS = REPO / "configs" / "bench"

TINY_MODEL_PY = """\
# The "tiny" benchmark model: returns its input (no compute), so that the server is never the bottleneck.
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())])
                for r in requests]
"""


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """mean, p50, p90, p99, max of ``values`` (0 for an empty list)."""
    if not len(values):
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    a = np.asarray(values, dtype=float)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(a.max())}


def config_args(**options: Any) -> list[str]:
    """``name=value`` strings for a config's VarParsing (lists joined with commas)."""
    out = []
    for key, value in options.items():
        if isinstance(value, (list, tuple)):
            value = ",".join(map(str, value))
        out.append(f"{key}={value}")
    return out


def run_config(config: str, warmup: int = 0, **options: Any) -> dict[str, Any]:
    """Run ``configs/bench/<config>`` in this process and measure it.

    Args:
        config: file name in ``configs/bench``.
        warmup: events left out of throughput and latency (the first completions:
            first-call costs of onnxruntime, gRPC channels, file opening).
        options: the config's VarParsing options.

    Returns:
        ``{"events", "wall_time", "throughput"`` (events/s over the completions after
        the warm-up), ``"total_time"`` (config loading, construction, begin_job and
        end_job included; ``wall_time`` is the event loop only), ``"latency"``
        (percentiles in seconds, after the warm-up),
        ``"modules"``, ``"services"`` (as ``framework._summary.summary_dict``),
        ``"source"`` (the source's ``statistics()`` if it has one)}.
    """
    start = time.perf_counter()
    process = cms.load_config(CONFIGS / config, config_args(**options))
    job = build_job(process)
    done: list[tuple[float, float]] = []

    def on_event(principal: Any, latency: float) -> None:
        done.append((time.perf_counter(), latency))

    report = trio.run(functools.partial(run_job, job, on_event=on_event))
    summary = summary_dict(job, report)
    steady = done[warmup:] if len(done) - warmup >= 2 else done
    span = steady[-1][0] - steady[0][0] if len(steady) >= 2 else 0.0
    result = {
        "events": report.events,
        "wall_time": report.wall_time,
        "total_time": time.perf_counter() - start,
        "throughput": (len(steady) - 1) / span if span > 0 else summary["throughput"],
        "latency": percentiles([lat for _, lat in steady]),
        "modules": summary["modules"],
        "services": summary["services"],
    }
    stats = getattr(job.source, "statistics", None)
    if callable(stats):
        result["source"] = stats()
    return result


def median_of(
    repeat: int, measure: Callable[[], dict[str, Any]], keys: Sequence[str] = ("throughput",)
) -> dict[str, Any]:
    """Run ``measure`` ``repeat`` times; the last result with each numeric key (and
    each ``latency`` percentile) replaced by its median over the runs; ``runs`` = repeat."""
    results = [measure() for _ in range(max(1, repeat))]
    out = dict(results[-1])
    for key in keys:
        out[key] = statistics.median(r[key] for r in results)
    if "latency" in out:
        out["latency"] = {k: statistics.median(r["latency"][k] for r in results) for k in out["latency"]}
    out["runs"] = len(results)
    return out


# ----------------------------------------------------------------------------------------
# Model repositories and servers


def write_tiny_repository(folder: pathlib.Path, max_batch_size: int = 64) -> pathlib.Path:
    """A repository with the ``tiny`` identity model: ``x`` float32 (batch, -1) -> ``y`` = ``x``."""
    write_python_model(folder, "tiny", TINY_MODEL_PY, max_batch_size=max_batch_size)
    return folder


def local_server(
    repository: pathlib.Path, models: Sequence[str] | None = None
) -> contextlib.AbstractContextManager[Any]:
    """A started :class:`~framework.serving._server.LocalTritonServer`, stopped on exit
    (:func:`framework.serving.testing.serving`, 120 s to start)."""
    return serving(repository, models, timeout=120.0)


@contextlib.contextmanager
def temporary_folder(prefix: str) -> Iterator[pathlib.Path]:
    folder = pathlib.Path(tempfile.mkdtemp(prefix=f"pysonic-bench-{prefix}-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class ServerPool:
    """Servers shared by the experiments of one run (each costs seconds to start).

    ``models_server()``: ``data/models`` with all its models; ``tiny_server()``: the
    ``tiny`` identity model. Started on first use, stopped by :meth:`close` (the CLI and
    the tests' fixture call it). Experiments that need a server of their own (edited
    configs) use :func:`local_server` instead.
    """

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._servers: dict[str, Any] = {}

    def models_server(self) -> Any:
        if "models" not in self._servers:
            self._servers["models"] = self._stack.enter_context(local_server(REPO / "data" / "models"))
        return self._servers["models"]

    def tiny_server(self) -> Any:
        if "tiny" not in self._servers:
            folder = self._stack.enter_context(temporary_folder("tiny"))
            self._servers["tiny"] = self._stack.enter_context(local_server(write_tiny_repository(folder)))
        return self._servers["tiny"]

    def close(self) -> None:
        self._servers.clear()
        self._stack.close()


SERVERS = ServerPool()
"""The pool of this process."""


def model_seconds(module: dict[str, Any]) -> float:
    """Mean time per event of one module from ``summary_dict``'s entry: its own code plus,
    for ExternalWork, the external wait (seconds)."""
    return module["mean_acquire"] + module["mean_wait"] + module["mean_run"]
