"""The one end-of-run summary of ``cmsrun --executor dask``, from the units' records.

Built on ``framework.cmsrun._summary``: the units' mergeable records (``unit_record``: TrigReport
counts, and every time distribution as a ``TimeSketch``, so percentiles are those of ALL
events, within 0.5 %) are merged (``merge_records``) into the usual summary
(``summary_from_record``: the same TrigReport and TimeReport tables as a plain job), and
the executor adds its own keys and tables:

* ``workers``: per Dask worker, its host, units, events, busy seconds (sum of its tasks'
  durations) and events/s while busy;
* ``units``: how many ran, the units Dask ran again (``retried``: their worker died while
  they ran or were queued on it, or they raised) and those skipped by ``--skip-bad-files``
  with their events; the mean task time, the mean time in the events, the per-unit
  overhead (task time outside the events of units whose job was already built: job lookup,
  ``begin_unit``/``end_unit`` with the part writing, the report), the mean job build time
  (config, ``build_job``, ``begin_job``: once per worker and dataset), the span (first
  unit's start to last unit's end) and the scheduling time per unit (worker time outside
  tasks during the span);
* ``merge``: per output, parts merged, bytes, seconds and seconds per 100 MB;
* ``services``: TritonService's client counters summed over the workers (each worker's
  last report: its job's counters are cumulative), with the requests per server; and
  ``models``: Triton's own server-side counters of the run per model and server
  (``_triton_stats``, taken by the driver).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from framework.core import concurrency
from framework.io import Dataset, WorkUnit

from .._summary import merge_records, print_summary_dict, summary_from_record

__all__ = ["print_run_summary", "run_summary"]


def run_summary(
    process: Any,
    spec: Any,
    plan: list[tuple[Dataset, list[WorkUnit]]],
    outcomes: dict[str, Any],
    skipped: list[Any],
    retried: dict[str, int],  # unit id -> times Dask ran it again
    merges: list[dict[str, Any]],
    wall_time: float,
    workers: dict[str, dict[str, Any]],
    job_wall_time: float = 0.0,
) -> dict[str, Any]:
    """The run's summary as plain data (JSON-ready): ``framework.cmsrun._summary``'s keys plus
    ``executor``, ``datasets``, ``workers``, ``units``, ``merge`` (see the module docstring).

    ``wall_time`` is the run's (preprocessing, units and merge: the throughput's span),
    ``job_wall_time`` the whole run's, from the cluster's start. ``streams`` and ``threads``
    are what the workers' jobs ran with, as ``framework.core.concurrency`` computed them
    on each worker (the largest, should workers differ: ``numberOfThreads`` 0 is each
    worker's own cores); with no unit done, the same rule applied here."""
    done = list(outcomes.values())
    ran = [(o.streams, o.threads) for o in done if o.threads]
    streams, threads = max(ran) if ran else concurrency(process.options_(), spec.streams, spec.threads)
    records = [o.record for o in done if o.record is not None]
    if records:
        summary = summary_from_record(
            merge_records(records),
            process=process.name_(),
            streams=streams,
            threads=threads,
            wall_time=wall_time,
            services=_services(done),
        )
    else:
        summary = {
            "process": process.name_(),
            "streams": streams,
            "threads": threads,
            "events": 0,
            "passed": 0,
            "events_with_errors": 0,
            "wall_time": wall_time,
            "throughput": 0.0,
            "paths": [],
            "endpaths": [],
            "modules": {},
            "services": {},
        }
    summary["executor"] = "dask"
    summary["job_wall_time"] = job_wall_time
    summary["datasets"] = {
        d.name: {
            "files": len(d.files),
            "units": len(units),
            "events": sum(outcomes[u.id].record["events"] for u in units if u.id in outcomes),
            "outputs": [m["output"] for m in merges if m["dataset"] == d.name],
        }
        for d, units in plan
    }
    per_worker: dict[str, dict[str, Any]] = defaultdict(lambda: {"host": "", "units": 0, "events": 0, "busy_s": 0.0})
    for o in done:
        w = per_worker[o.worker]
        w["host"] = o.host
        w["units"] += 1
        w["events"] += o.record["events"]
        w["busy_s"] += o.finished - o.started
    for address, w in per_worker.items():
        w["events_per_s"] = w["events"] / w["busy_s"] if w["busy_s"] > 0 else 0.0
        w["nthreads"] = workers.get(address, {}).get("nthreads", 0)
    summary["workers"] = dict(per_worker)
    ids = {u.id for _, units in plan for u in units}
    task = [o.finished - o.started for o in done]
    events = [o.events_time for o in done]
    # The overhead of a unit that found its job built (the first unit of a worker and
    # dataset also builds and begins the job: reported apart, as build_s).
    steady = [o for o in done if not o.built] or done
    built = [o.finished - o.started - o.events_time for o in done if o.built]
    summary["units"] = {
        "total": sum(len(units) for _, units in plan),
        "done": len(done),
        "jobs_built": sum(o.built for o in done),
        "retried": [{"id": k, "times": n} for k, n in sorted(retried.items()) if k in ids],
        "skipped": [
            {
                "id": o.unit.id,
                "file": o.unit.file,
                "entry_start": o.unit.entry_start,
                "entry_stop": o.unit.entry_stop,
                "events": o.unit.num_entries,
                "error": o.error,
            }
            for o in skipped
        ],
        "mean_task_s": sum(task) / len(task) if task else 0.0,
        "mean_events_s": sum(events) / len(events) if events else 0.0,
        "mean_overhead_s": (
            sum(o.finished - o.started - o.events_time for o in steady) / len(steady) if steady else 0.0
        ),
        "mean_build_s": sum(built) / len(built) if built else 0.0,
        # From the first unit's start to the last one's end: the run without cluster start-up.
        "span_s": max(o.finished for o in done) - min(o.started for o in done) if done else 0.0,
    }
    slots = sum(w["nthreads"] or 1 for w in per_worker.values())
    # Worker time not spent in tasks while units ran, per unit: scheduling and transfers.
    summary["units"]["scheduling_s"] = (summary["units"]["span_s"] * slots - sum(task)) / len(task) if task else 0.0
    for m in merges:
        m["seconds_per_100MB"] = m["seconds"] / (m["bytes"] / 1e8) if m["bytes"] else 0.0
    summary["merge"] = merges
    return summary


def _services(done: list[Any]) -> dict[str, Any]:
    """TritonService's client counters, summed over workers (each worker's latest report)."""
    latest: dict[str, Any] = {}
    for o in sorted(done, key=lambda o: o.finished):
        if "TritonService" in o.services:
            latest[o.worker] = o.services["TritonService"]
    if not latest:
        return {}
    clients: dict[str, dict[str, Any]] = {}
    per_server: dict[str, int] = defaultdict(int)
    for stats in latest.values():
        for label, c in stats.get("clients", {}).items():
            into = clients.setdefault(label, {"model": c.get("model", ""), "mode": c.get("mode", "")})
            for key, value in c.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    into[key] = into.get(key, 0) + value
            for server, calls in c.get("servers", {}).items():
                per_server[server] += calls
    servers = {}
    for stats in latest.values():
        for name, health in stats.get("servers", {}).items():
            servers[name] = {**health, "requests": per_server.get(name, 0)}
    return {"TritonService": {"clients": clients, "servers": servers, "workers": len(latest)}}


def print_run_summary(summary: dict[str, Any], console: Console) -> None:
    """Print the run's summary: TrigReport/TimeReport (``framework.cmsrun._summary``), then the
    executor's tables (workers, units retried/skipped, merge, Triton servers)."""
    print_summary_dict(summary, console, _tables(summary))


def _tables(summary: dict[str, Any]) -> list[Any]:
    tables: list[Any] = []
    workers = Table(title=Text("Dask ---------- Workers ------------"), title_justify="left")
    for col in ("Worker", "Host", "Units", "Events", "Busy [s]", "events/s"):
        workers.add_column(Text(col), justify="left" if col in ("Worker", "Host") else "right")
    for address, w in sorted(summary["workers"].items()):
        workers.add_row(
            Text(address),
            Text(w["host"]),
            str(w["units"]),
            str(w["events"]),
            f"{w['busy_s']:.2f}",
            f"{w['events_per_s']:.1f}",
        )
    tables.append(workers)
    u = summary["units"]
    tables.append(
        Text(
            f"Units: {u['done']} done of {u['total']}, {len(u['retried'])} retried, "
            f"{len(u['skipped'])} skipped; jobs built {u['jobs_built']} ({u['mean_build_s']:.2f} s each); "
            f"per unit: task {u['mean_task_s'] * 1e3:.1f} ms, events {u['mean_events_s'] * 1e3:.1f} ms, "
            f"overhead {u['mean_overhead_s'] * 1e3:.1f} ms, scheduling {u['scheduling_s'] * 1e3:.1f} ms"
        )
    )
    if u["retried"] or u["skipped"] or u.get("skipped_files"):
        units = Table(title=Text("Dask ---------- Units retried or skipped ------------"), title_justify="left")
        for col in ("What", "Events", "Unit"):
            units.add_column(Text(col), justify="right" if col == "Events" else "left")
        for r in u["retried"]:
            units.add_row(f"retried x{r['times']}", "", Text(r["id"]))
        for s in u["skipped"]:
            units.add_row("skipped", str(s["events"]), Text(s["id"]))
        for f in u.get("skipped_files", []):
            units.add_row("file skipped", "?", Text(f"{f['file']} (tree '{f['tree']}'): {f['error']}"))
        tables.append(units)
    if summary["merge"]:
        merge = Table(title=Text("Dask ---------- Merged outputs ------------"), title_justify="left")
        for col in ("Output", "Parts", "Entries", "MB", "Merge [s]", "s per 100 MB"):
            merge.add_column(Text(col), justify="left" if col == "Output" else "right")
        for m in summary["merge"]:
            merge.add_row(
                Text(m["output"]),
                str(m["parts"]),
                str(sum(m["entries"].values())),
                f"{m['bytes'] / 1e6:.2f}",
                f"{m['seconds']:.2f}",
                f"{m['seconds_per_100MB']:.2f}",
            )
        tables.append(merge)
    triton = summary["services"].get("TritonService")
    if triton and triton.get("servers"):
        servers = Table(title=Text("TritonService ---------- Servers (all workers) ------------"), title_justify="left")
        for col in ("Server", "Address", "Requests", "Healthy", "Outages"):
            servers.add_column(Text(col), justify="left" if col in ("Server", "Address") else "right")
        for name, s in sorted(triton["servers"].items()):
            servers.add_row(
                Text(name),
                Text(str(s.get("address", ""))),
                str(s["requests"]),
                str(s.get("healthy", "")),
                str(s.get("outages", "")),
            )
        tables.append(servers)
    if triton and triton.get("models"):
        models = Table(
            title=Text("TritonService ---------- Server-side statistics of the run ------------"), title_justify="left"
        )
        for col in ("Model @ server", "Requests", "Inferences", "Executions", "queue [ms]", "compute [ms]"):
            models.add_column(Text(col), justify="left" if col.startswith("Model") else "right")
        for key, m in sorted(triton["models"].items()):
            models.add_row(
                Text(key),
                str(m["requests"]),
                str(m["inferences"]),
                str(m["executions"]),
                f"{m['queue_ms']:.3f}",
                f"{m['compute_ms']:.3f}",
            )
        tables.append(models)
    return tables
