"""What every benchmark needs: run a config in-process, servers on edited repositories, statistics.

All times are ``time.perf_counter`` seconds unless a name says otherwise. Nothing here
asserts a time: the experiments measure, the CLI reports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
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
from framework.cmsrun import summary_dict
from framework.core import build_job, run_job
from framework.serving.testing import serving, write_tiny_repository

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFIGS = pathlib.Path(__file__).resolve().parent / "configs"
"""The benchmarks' jobs (package data of ``framework.bench``); they name their module
types ``framework.bench._modules:Class``, so no entry point is needed."""
MODELS = {"particlenet": "particlenet_ak4", "deepmet": "deepmet", "deeptau": "deeptau", "facile": "facile"}
"""The models of ``configs/models_cfg.py`` (its ``models`` option) -> their Triton model names."""
MODEL_TIME_COLUMNS = [("model", "model", "s"), ("direct_ms", "direct [ms]", ".2f"), ("sonic_ms", "SONIC [ms]", ".2f")]
"""The first columns of the per-model comparisons (``direct``, ``gpu-direct``): a model's time
per event in the job, direct and as a service."""


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
    """Run ``framework/bench/configs/<config>`` in this process and measure it.

    Args:
        config: file name in :data:`CONFIGS`.
        warmup: events left out of throughput and latency (the first completions:
            first-call costs of onnxruntime, gRPC channels, file opening).
        options: the config's VarParsing options.

    Returns:
        ``{"events", "wall_time", "throughput"`` (events/s over the completions after
        the warm-up), ``"total_time"`` (config loading, construction, begin_job and
        end_job included; ``wall_time`` is the event loop only), ``"latency"``
        (percentiles in seconds, after the warm-up),
        ``"module_seconds"`` (module label -> mean seconds per event after the warm-up:
        acquire + external wait + produce, as :func:`model_seconds` over all events),
        ``"modules"``, ``"services"`` (as ``framework.cmsrun.summary_dict``),
        ``"source"`` (the source's ``statistics()`` if it has one)}.
    """
    start = time.perf_counter()
    process = cms.load_config(CONFIGS / config, config_args(**options))
    job = build_job(process)
    done: list[tuple[float, float, dict[str, float]]] = []
    # module label -> seconds of the event in flight, per principal (its phases arrive
    # before its completion; a principal is one event in flight at a time)
    in_flight: dict[int, dict[str, float]] = {}

    def on_phase(principal: Any, label: str, phase: str, t0: float, t1: float) -> None:
        times = in_flight.setdefault(id(principal), {})
        times[label] = times.get(label, 0.0) + (t1 - t0)

    def on_event(principal: Any, latency: float) -> None:
        done.append((time.perf_counter(), latency, in_flight.pop(id(principal), {})))

    job.activity.post_module_phase.connect(on_phase)
    report = trio.run(functools.partial(run_job, job, on_event=on_event))
    summary = summary_dict(job, report)
    steady = done[warmup:] if len(done) - warmup >= 2 else done
    span = steady[-1][0] - steady[0][0] if len(steady) >= 2 else 0.0
    labels = {label for _, _, times in steady for label in times}
    result = {
        "events": report.events,
        "wall_time": report.wall_time,
        "total_time": time.perf_counter() - start,
        "throughput": (len(steady) - 1) / span if span > 0 else summary["throughput"],
        "latency": percentiles([lat for _, lat, _ in steady]),
        "module_seconds": {
            label: sum(times.get(label, 0.0) for _, _, times in steady) / len(steady) for label in sorted(labels)
        },
        "modules": summary["modules"],
        "services": summary["services"],
    }
    stats = getattr(job.source, "statistics", None)
    if callable(stats):
        result["source"] = stats()
    return result


def median_of(repeat: int, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run ``measure`` ``repeat`` times (at least once); the median of every run's figures.

    Every key of the runs' dicts, at any depth (nested dicts such as ``latency``,
    ``modules``, ``services``), is combined over the runs by :func:`combine_runs`: a
    number becomes its median over all the runs that have it, so no reported figure is
    one run's. ``"runs"``: every run's own dict, each with ``"loadavg"``, the machine's
    1-, 5- and 15-minute load averages (``os.getloadavg``) at the run's end.
    """
    runs = []
    for _ in range(max(1, repeat)):
        run = dict(measure())
        run["loadavg"] = list(os.getloadavg())
        runs.append(run)
    out: dict[str, Any] = combine_runs([{k: v for k, v in r.items() if k != "loadavg"} for r in runs])
    out["runs"] = runs
    return out


def combine_runs(values: Sequence[Any]) -> Any:
    """One value for the same figure of several runs (``values``: one per run, in order).

    * values that are all equal: that value (an event count stays an int);
    * numbers (``bool`` is not one): their median (``statistics.median``: the mean of
      the two middle values for an even count);
    * dicts: a dict of every key of any of them, each combined over the runs that have it;
    * records (dataclasses) of one type: that type, each field combined over the runs
      (``PoolSource.statistics()``);
    * anything else that differs between runs (strings, lists, records): the list of the
      runs' values, so that nothing is chosen silently.

    Raises:
        ValueError: ``values`` is empty.
    """
    if not values:
        raise ValueError("combine_runs: no runs")
    first = values[0]
    if all(_same(v, first) for v in values[1:]):
        return first
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return statistics.median(values)
    if all(isinstance(v, dict) for v in values):
        keys = list(dict.fromkeys(k for v in values for k in v))
        return {k: combine_runs([v[k] for v in values if k in v]) for k in keys}
    if dataclasses.is_dataclass(first) and not isinstance(first, type) and all(type(v) is type(first) for v in values):
        fields = [f.name for f in dataclasses.fields(first) if f.init]
        return dataclasses.replace(first, **{f: combine_runs([getattr(v, f) for v in values]) for f in fields})
    return list(values)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(type(a) is type(b) and a == b)
    except (TypeError, ValueError):  # arrays: an ambiguous truth value
        return False


def run_records(result: dict[str, Any], *keys: str) -> list[dict[str, Any]]:
    """Each run of a :func:`median_of` result, reduced to ``keys`` and its ``loadavg``: the
    runs behind a reported median, for the experiment's JSON rows."""
    return [{**{k: run.get(k) for k in keys}, "loadavg": run["loadavg"]} for run in result["runs"]]


# ----------------------------------------------------------------------------------------
# Model repositories and servers


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
