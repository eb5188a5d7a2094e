"""The end-of-job summary: CMSSW's TrigReport and TimeReport, and a JSON form of both.

TrigReport: events visited/passed per Path and per module in each Path (CMSSW's
``Trig Bit#  Executed  Passed  Failed  Error  Name`` tables). TimeReport: per-module mean
time in the module's own code and, for ExternalWork modules, the mean external wait; the
per-event latency percentiles and the throughput. Services (TritonService) add their own
tables (server-side statistics per model).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from array import array

import numpy as np
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ._builder import Job, PathSpec
from ._scheduler import JobReport

__all__ = ["summary_dict", "print_summary"]


def _percentiles(values: Sequence[float]) -> dict[str, float]:
    if not len(values):
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}
    a = np.frombuffer(values, dtype=np.float64) if isinstance(values, array) else np.asarray(values)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return {"mean": float(a.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
            "max": float(a.max())}


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
                "inverted": inverted,
                "visited": spec.entry_visited[i],
                "passed": spec.entry_passed[i],
                "failed": spec.entry_visited[i] - spec.entry_passed[i] - spec.entry_errors[i],
                "errors": spec.entry_errors[i],
            }
            for i, (w, inverted) in enumerate(spec.entries)
        ],
    }


def summary_dict(job: Job, report: JobReport) -> dict[str, Any]:
    """The summary as plain data (JSON-ready), computed once per report (``report.summary``). Times in seconds.

    Keys: ``events``, ``passed``, ``events_with_errors``, ``wall_time``, ``throughput``
    (events/s), ``latency`` (mean/p50/p90/p99/max of per-event latency), ``paths``,
    ``endpaths`` (TrigReport counters), ``modules`` (label -> calls, errors, skipped,
    mean_cpu, mean_acquire, mean_wait, mean_run, and percentiles of ``own`` (acquire +
    produce), ``acquire``, ``wait`` (ExternalWork) and ``run`` (produce/filter/...)),
    ``streams``, ``threads``, ``services`` (type name ->
    the service's ``statistics()``, e.g. Triton's per-model server-side numbers), ``source``
    (the source's ``statistics()``: files opened and where, entries read, read retries).
    """
    if report.summary is None:
        report.summary = _summary(job, report)
    return report.summary


def _summary(job: Job, report: JobReport) -> dict[str, Any]:
    modules = {}
    for w in job.workers.values():
        t = w.times
        modules[w.label] = {
            "type": w.type_name,
            "kind": w.kind,
            "external_work": w.external,
            "calls": t.calls,
            "errors": w.errors,
            "skipped": w.skipped,
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
        "throughput": report.events / report.wall_time if report.wall_time > 0 else 0.0,
        "latency": _percentiles(report.latencies),
        "paths": [_path_dict(p) for p in job.paths],
        "endpaths": [_path_dict(p) for p in job.endpaths],
        "modules": modules,
        "services": {name: stats for name, svc in job.services.services.items()
                     if (stats := svc.statistics())},
        "source": _source_statistics(job.source),
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
        paths.add_row(str(bit), str(p["visited"]), str(p["passed"]), str(p["failed"]), str(p["errors"]),
                      Text(f"{p['name']} ({kind})"))
    tables.append(paths)
    for p in summary["paths"] + summary["endpaths"]:
        t = Table(title=Text(f"TrigReport ---------- Modules in Path: {p['name']} ------------"),
                  title_justify="left")
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
    for col in ("Calls", "acquire [ms]", "ext. wait [ms]", "produce [ms]", "own mean [ms]", "own p50 [ms]",
                "own p99 [ms]", "Errors", "Skipped", "Name"):
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
    ev.add_row(Text("wall time [s]"), f"{summary['wall_time']:.3f}")
    ev.add_row(Text("throughput [events/s]"), f"{summary['throughput']:.2f}")
    for key in ("mean", "p50", "p90", "p99", "max"):
        ev.add_row(Text(f"event latency {key} [ms]"), f"{lat[key] * ms:.2f}")
    return [mods, ev]


def print_summary(job: Job, report: JobReport, console: Console | None = None) -> dict[str, Any]:
    """Print TrigReport, TimeReport and the services' reports; return :func:`summary_dict`."""
    console = console or Console(stderr=True)
    summary = summary_dict(job, report)
    console.print(
        f"TrigReport Events total = {summary['events']} passed = {summary['passed']} "
        f"failed = {summary['events'] - summary['passed']}"
    )
    for table in _trig_tables(summary) + _time_tables(summary):
        console.print(table)
    for svc in job.services.services.values():
        for renderable in svc.report():
            console.print(renderable)
    for renderable in job.source.report():
        console.print(renderable)
    return summary
