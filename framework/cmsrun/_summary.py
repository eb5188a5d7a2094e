"""The end-of-job summary: CMSSW's TrigReport and TimeReport, and a JSON form of both.

TrigReport: events visited/passed per Path and per module in each Path (CMSSW's
``Trig Bit#  Executed  Passed  Failed  Error  Name`` tables). TimeReport: per-module mean
time in the module's own code and, for ExternalWork modules, the mean external wait; the
per-event latency percentiles and the throughput. Services (TritonService) add their own
tables (server-side statistics per model).

A job run as many work units (``cmsrun --executor dask``) is summarised from mergeable
per-unit records (:func:`unit_record`, :func:`merge_records`, :func:`summary_from_record`):
counts are summed, and every time distribution (event latency; per module own, acquire,
external wait, produce) travels as a :class:`TimeSketch`, a histogram of fixed
logarithmic bins, so that the percentiles are those of ALL events of the run. A sketch's
quantile is the geometric middle of its bin: relative error at most
``SKETCH_RELATIVE_ERROR`` / 2 = 0.5 % (for times >= 0.1 us); means and maxima are exact.
A plain job's summary uses the exact values.
"""

from __future__ import annotations

import dataclasses
import math
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from framework.core import Job, JobReport, PathSpec

__all__ = [
    "summary_dict",
    "print_summary",
    "print_summary_dict",
    "TimeSketch",
    "unit_record",
    "merge_records",
    "summary_from_record",
    "SKETCH_RELATIVE_ERROR",
]

SKETCH_RELATIVE_ERROR = 0.01  # a TimeSketch bin spans a factor 1.01: quantiles within +-0.5 %
_SKETCH_MIN = 1e-7  # seconds; shorter times share the first bin
_LOG_GAMMA = math.log1p(SKETCH_RELATIVE_ERROR)


@dataclass
class TimeSketch:
    """A mergeable distribution of times (seconds): counts in logarithmic bins.

    Bin ``i`` holds times in ``[t0 * g**i, t0 * g**(i+1))`` with ``t0`` = 0.1 us and
    ``g`` = 1 + ``SKETCH_RELATIVE_ERROR`` (the log-bucket idea of HdrHistogram and
    DDSketch, Masson et al., VLDB 2019); 1 s needs ~1,600 bins, so a sketch is a few KiB
    however many events it counts. Count, sum (mean) and max are exact.

    Attributes:
        counts: int64, shape (n_bins,): times per bin.
        count: number of times; total: their sum (s); max: the largest (s).
    """

    counts: np.ndarray[Any, Any] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    count: int = 0
    total: float = 0.0
    max: float = 0.0

    @classmethod
    def of(cls, values: Sequence[float]) -> TimeSketch:
        """The sketch of ``values`` (seconds; an ``array("d")``, list or NumPy array)."""
        a = np.frombuffer(values, dtype=np.float64) if isinstance(values, array) else np.asarray(values, float)
        if not len(a):
            return cls()
        index = np.floor(np.log(np.maximum(a, _SKETCH_MIN) / _SKETCH_MIN) / _LOG_GAMMA).astype(np.int64)
        return cls(np.bincount(index), int(len(a)), float(a.sum()), float(a.max()))

    def merge(self, other: TimeSketch) -> TimeSketch:
        """A new sketch counting the times of both."""
        n = max(len(self.counts), len(other.counts))
        counts = np.zeros(n, dtype=np.int64)
        counts[: len(self.counts)] += self.counts
        counts[: len(other.counts)] += other.counts
        return TimeSketch(counts, self.count + other.count, self.total + other.total, max(self.max, other.max))

    def quantile(self, q: float) -> float:
        """The ``q`` quantile (0..1), seconds: the geometric middle of its bin (<= max)."""
        if not self.count:
            return 0.0
        rank = q * (self.count - 1)  # numpy's default (linear) rank, rounded to its bin
        i = int(np.searchsorted(np.cumsum(self.counts), math.floor(rank) + 1))
        return min(_SKETCH_MIN * math.exp((i + 0.5) * _LOG_GAMMA), self.max)

    def percentiles(self) -> dict[str, float]:
        """As ``_percentiles``: mean, p50, p90, p99, max (seconds)."""
        if not self.count:
            return _percentiles(())
        return {
            "mean": self.total / self.count,
            "p50": self.quantile(0.5),
            "p90": self.quantile(0.9),
            "p99": self.quantile(0.99),
            "max": self.max,
        }


def _percentiles(values: Sequence[float]) -> dict[str, float]:
    if not len(values):
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    a = np.frombuffer(values, dtype=np.float64) if isinstance(values, array) else np.asarray(values)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99), "max": float(a.max())}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if len(values) else 0.0


def _path_dict(spec: PathSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "visited": spec.visited,
        "passed": spec.passed,
        "failed": spec.visited - spec.passed - spec.errors,
        "errors": spec.errors,
        "modules": [
            {
                "label": w.label,
                "type": w.type_name,
                "inverted": bool(inverted),
                "ignored": inverted is None,
                "visited": spec.entry_visited[i],
                "passed": spec.entry_passed[i],
                "failed": spec.entry_visited[i] - spec.entry_passed[i] - spec.entry_errors[i],
                "errors": spec.entry_errors[i],
            }
            for i, (w, inverted) in enumerate(spec.entries)
        ],
    }


# What the two wall times cover, as the Event Summary names them (CMSSW's Timing service
# reports "Total loop" and "Total job"): a plain job's, and a Dask run's (executor/_report.py).
SPANS = {
    "": ("event loop", "build to end_job, servers' start and stop incl."),
    "dask": ("preprocessing, units and merge", "cluster start to merge end"),
}


def summary_dict(job: Job, report: JobReport) -> dict[str, Any]:
    """The summary as plain data (JSON-ready), computed once per report (``report.summary``). Times in seconds.

    Keys: ``events``, ``passed``, ``events_with_errors``, ``wall_time`` (the event loop:
    CMSSW's "Total loop"), ``job_wall_time`` (the whole job, from ``build_job`` to the end
    of ``end_job``, servers' start and stop included: CMSSW's "Total job"; 0 for a run of
    events without ``end_job``), ``throughput`` (events/s over the event loop), ``cpu`` (CPU
    seconds over the same span as ``wall_time``: ``process``, every thread; ``event_loop``,
    the thread that ran the events; ``other_threads``, the difference), ``latency``
    (mean/p50/p90/p99/max of per-event latency), ``paths``, ``endpaths`` (TrigReport
    counters), ``modules`` (label -> calls, errors, skipped, mean_cpu, mean_acquire,
    mean_wait, mean_run, and percentiles of ``own`` (acquire + produce), ``acquire``,
    ``wait`` (ExternalWork) and ``run`` (produce/filter/...)), ``streams``, ``threads`` (as
    ``framework.core.concurrency`` computed them), ``services`` (type name -> the
    service's ``statistics()``, e.g. Triton's per-model server-side numbers), ``source``
    (the source's ``statistics()``: files opened and where, entries read, read retries).
    """
    if report.summary is None:
        report.summary = _summary(job, report)
    return report.summary


def _module_identity(w: Any) -> dict[str, Any]:
    """A module's type, kind and call counts, as both summary forms give them."""
    return {
        "type": w.type_name,
        "kind": w.kind,
        "external_work": w.external,
        "calls": w.times.calls,
        "errors": w.errors,
        "skipped": w.skipped,
    }


def _summary(job: Job, report: JobReport) -> dict[str, Any]:
    modules = {}
    for w in job.workers.values():
        t = w.times
        modules[w.label] = {
            **_module_identity(w),
            "mean_cpu": t.cpu_mean,
            "mean_acquire": _mean(t.acquire),
            "mean_wait": _mean(t.wait),
            "mean_run": _mean(t.run),
            "own": _percentiles(t.own),
            "acquire": _percentiles(t.acquire),
            "wait": _percentiles(t.wait),
            "run": _percentiles(t.run),
        }
    return {
        "process": job.process_name,
        "streams": job.streams,
        "threads": job.threads,
        "events": report.events,
        "passed": report.passed,
        "events_with_errors": report.events_with_errors,
        "wall_time": report.wall_time,
        "job_wall_time": report.job_wall_time,
        "throughput": report.events / report.wall_time if report.wall_time > 0 else 0.0,
        "cpu": {
            "process": report.cpu_time,
            "event_loop": report.event_loop_cpu_time,
            "other_threads": report.cpu_time - report.event_loop_cpu_time,
        },
        "latency": _percentiles(report.latencies),
        "paths": [_path_dict(p) for p in job.paths],
        "endpaths": [_path_dict(p) for p in job.endpaths],
        "modules": modules,
        "services": {name: stats for name, svc in job.services.services.items() if (stats := svc.statistics())},
        "source": _source_statistics(job.source),
    }


def unit_record(job: Job, report: JobReport) -> dict[str, Any]:
    """What one run of events (a work unit) counted, in mergeable form (picklable).

    Keys: ``events``, ``passed``, ``events_with_errors``, ``wall_time`` (s), ``latency``
    (:class:`~framework.cmsrun._summary.TimeSketch`), ``paths``/``endpaths`` (as :func:`summary_dict`), ``modules``
    (label -> type, kind, external_work, calls, errors, skipped, ``sum_acquire``,
    ``sum_run`` and ``sum_wait`` in s, and sketches ``own``, ``acquire``, ``wait``, ``run``).
    """
    modules = {}
    for w in job.workers.values():
        t = w.times
        modules[w.label] = {
            **_module_identity(w),
            "sum_acquire": float(sum(t.acquire)),
            "sum_wait": float(sum(t.wait)),
            "sum_run": float(sum(t.run)),
            "own": TimeSketch.of(t.own),
            "acquire": TimeSketch.of(t.acquire),
            "wait": TimeSketch.of(t.wait),
            "run": TimeSketch.of(t.run),
        }
    return {
        "events": report.events,
        "passed": report.passed,
        "events_with_errors": report.events_with_errors,
        "wall_time": report.wall_time,
        "latency": TimeSketch.of(report.latencies),
        "paths": [_path_dict(p) for p in job.paths],
        "endpaths": [_path_dict(p) for p in job.endpaths],
        "modules": modules,
    }


def _add(a: Any, b: Any) -> Any:
    """Sum two records field by field: numbers added, sketches merged, the rest kept."""
    if isinstance(a, TimeSketch):
        return a.merge(b)
    if isinstance(a, (bool, str)):
        return a
    if isinstance(a, (int, float)):
        return a + b
    if isinstance(a, dict):
        return {k: _add(v, b[k]) if k in b else v for k, v in a.items()} | {k: v for k, v in b.items() if k not in a}
    if isinstance(a, list):
        return [_add(x, y) for x, y in zip(a, b, strict=True)]
    return a


def merge_records(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The sum of :func:`unit_record` records of one config (TrigReport counts summed,
    sketches merged). Raises ValueError if there are none."""
    merged: dict[str, Any] | None = None
    for record in records:
        merged = record if merged is None else _add(merged, record)
    if merged is None:
        raise ValueError("no unit records to merge")
    return merged


def summary_from_record(
    record: dict[str, Any],
    *,
    process: str,
    streams: int,
    threads: int,
    wall_time: float,
    services: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The :func:`summary_dict` of merged records: the same keys, percentiles from the sketches.

    Args:
        wall_time: the run's wall-clock time (s); the throughput is events / wall_time.
        services: type name -> statistics, as ``summary_dict``'s ``services``.
    """
    modules = {}
    for label, m in record["modules"].items():
        calls = m["calls"]
        ext_calls = m["wait"].count
        modules[label] = {
            "type": m["type"],
            "kind": m["kind"],
            "external_work": m["external_work"],
            "calls": calls,
            "errors": m["errors"],
            "skipped": m["skipped"],
            "mean_cpu": (m["sum_acquire"] + m["sum_run"]) / calls if calls else 0.0,
            "mean_acquire": m["sum_acquire"] / m["acquire"].count if m["acquire"].count else 0.0,
            "mean_wait": m["sum_wait"] / ext_calls if ext_calls else 0.0,
            "mean_run": m["sum_run"] / calls if calls else 0.0,
            "own": m["own"].percentiles(),
            "acquire": m["acquire"].percentiles(),
            "wait": m["wait"].percentiles(),
            "run": m["run"].percentiles(),
        }
    return {
        "process": process,
        "streams": streams,
        "threads": threads,
        "events": record["events"],
        "passed": record["passed"],
        "events_with_errors": record["events_with_errors"],
        "wall_time": wall_time,
        "throughput": record["events"] / wall_time if wall_time > 0 else 0.0,
        "latency": record["latency"].percentiles(),
        "latency_error": SKETCH_RELATIVE_ERROR / 2,
        "paths": record["paths"],
        "endpaths": record["endpaths"],
        "modules": modules,
        "services": dict(services or {}),
    }


def _source_statistics(source: Any) -> dict[str, Any]:
    stats = source.statistics()
    return dataclasses.asdict(stats) if dataclasses.is_dataclass(stats) and not isinstance(stats, type) else {}


def _trig_tables(summary: dict[str, Any]) -> list[Table]:
    tables = []
    paths = Table(title=Text("TrigReport ---------- Path / EndPath Summary ------------"), title_justify="left")
    for col in ("Trig Bit#", "Executed", "Passed", "Failed", "Error", "Name"):
        paths.add_column(Text(col), justify="right" if col != "Name" else "left")
    for bit, p in enumerate(summary["paths"] + summary["endpaths"]):
        kind = "EndPath" if bit >= len(summary["paths"]) else "Path"
        paths.add_row(
            str(bit),
            str(p["visited"]),
            str(p["passed"]),
            str(p["failed"]),
            str(p["errors"]),
            Text(f"{p['name']} ({kind})"),
        )
    tables.append(paths)
    for p in summary["paths"] + summary["endpaths"]:
        t = Table(title=Text(f"TrigReport ---------- Modules in Path: {p['name']} ------------"), title_justify="left")
        for col in ("Visited", "Passed", "Failed", "Error", "Name"):
            t.add_column(Text(col), justify="right" if col != "Name" else "left")
        for m in p["modules"]:
            name = ("~" if m["inverted"] else "") + f"{m['label']} ({m['type']})"
            t.add_row(str(m["visited"]), str(m["passed"]), str(m["failed"]), str(m["errors"]), Text(name))
        tables.append(t)
    return tables


def _time_tables(summary: dict[str, Any]) -> list[Table]:
    # Text, not str, wherever a string could hold "[...]": rich would read it as markup
    # and drop it (a unit such as "[ms]", or a label).
    ms = 1e3
    mods = Table(title=Text("TimeReport ---------- Module Summary ---[ms per call]----"), title_justify="left")
    for col in (
        "Calls",
        "acquire [ms]",
        "ext. wait [ms]",
        "produce [ms]",
        "own mean [ms]",
        "own p50 [ms]",
        "own p99 [ms]",
        "Errors",
        "Skipped",
        "Name",
    ):
        mods.add_column(Text(col), justify="right" if col != "Name" else "left")
    for label, m in summary["modules"].items():
        ext = m["external_work"]
        mods.add_row(
            str(m["calls"]),
            f"{m['mean_acquire'] * ms:.3f}" if ext else "-",
            f"{m['mean_wait'] * ms:.3f}" if ext else "-",
            f"{m['mean_run'] * ms:.3f}",
            f"{m['own']['mean'] * ms:.3f}",
            f"{m['own']['p50'] * ms:.3f}",
            f"{m['own']['p99'] * ms:.3f}",
            str(m["errors"]),
            str(m["skipped"]),
            Text(f"{label} ({m['type']})"),
        )
    lat = summary["latency"]
    ev = Table(title=Text("TimeReport ---------- Event Summary ------------"), title_justify="left")
    ev.add_column(Text("Quantity"))
    ev.add_column(Text("Value"), justify="right")
    ev.add_row("events", str(summary["events"]))
    ev.add_row("events with errors", str(summary["events_with_errors"]))
    ev.add_row("streams / threads", f"{summary['streams']} / {summary['threads']}")
    loop, job = SPANS[summary.get("executor", "")]
    ev.add_row(Text(f"Total loop: {loop}, wall time [s]"), f"{summary['wall_time']:.3f}")
    if summary.get("job_wall_time"):
        ev.add_row(Text(f"Total job: {job}, wall time [s]"), f"{summary['job_wall_time']:.3f}")
    ev.add_row(Text("throughput [events/s]"), f"{summary['throughput']:.2f}")
    for key in ("mean", "p50", "p90", "p99", "max"):
        ev.add_row(Text(f"event latency {key} [ms]"), f"{lat[key] * ms:.2f}")
    return [mods, ev]


def print_summary(job: Job, report: JobReport, console: Console | None = None) -> dict[str, Any]:
    """Print TrigReport, TimeReport and the services' reports; return :func:`summary_dict`."""
    summary = summary_dict(job, report)
    renderables = [r for svc in job.services.services.values() for r in svc.report()]
    renderables += job.source.report()  # e.g. where remote files were opened
    print_summary_dict(summary, console, renderables)
    return summary


def print_summary_dict(
    summary: dict[str, Any], console: Console | None = None, renderables: Iterable[Any] = ()
) -> None:
    """Print a summary (:func:`summary_dict` or :func:`summary_from_record`), then ``renderables``
    (the services' tables)."""
    console = console or Console(stderr=True)
    console.print(
        f"TrigReport Events total = {summary['events']} passed = {summary['passed']} "
        f"failed = {summary['events'] - summary['passed']}"
    )
    for table in _trig_tables(summary) + _time_tables(summary):
        console.print(table)
    for renderable in renderables:
        console.print(renderable)
