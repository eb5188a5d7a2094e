"""``cmsbench scale``: ``cmsrun --executor dask`` on 1 and 2 workers, CPU-bound and SONIC, and across hosts.

Each point is one ``cmsrun framework/bench/configs/scale_cfg.py --dataset FILESET --executor dask
--workers N`` in a subprocess (its own LocalCluster), over a fileset of the real
``pfnano.root`` listed ``copies`` times (symbolic links: a file is listed once per
dataset). Two configs:

* ``cpu``: ``BenchCPUProducer`` burns ``cpuTime`` ms per event (SHA-256 hashing), plus
  the jets' HT and a NanoAOD output keeping the PF candidates (so that the merge has
  megabytes to merge);
* ``sonic``: the same with less CPU and one ``tiny`` request per event to ONE local
  Triton server shared by all workers (``server=``, the benchmarks' tiny server).

Across hosts (root only; skipped with the reason elsewhere): 1, 2 and 4 hosts simulated on
this machine (``framework.cmsrun.executor._hosts``: a UTS and mount namespace each, one worker
each on its own 127.0.0.N; ``cmsrun --scheduler``), the ``sonic`` config with one
``tiny`` server per host (the executor's host server, on the host's address) or ONE server
shared by all (on 127.0.0.1, outside the hosts: payloads, as to a remote server). The
hosts share this machine's cores: the rows show the framework's and client's costs as
hosts are added, not more hardware. Client CPU: the worker processes' CPU time (user +
system, ``/proc``) over the run per event, with ``cpuTime`` of it burnt on purpose.

From the run's ``--summary-json``: events/s over the span of the units (first unit
started to last unit finished: cluster start-up and preprocessing excluded), the ratio
to linear (``rate(N) / (N x rate(1))``; target for ``cpu`` at 2 workers >= 0.85), the
per-unit overhead (task time outside the events: job lookup, ``begin_unit``/``end_unit``
with the part writing), the scheduling time per unit (worker time outside tasks while
units ran), and the merge time per 100 MB of merged output.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
from typing import Any

from ._children import run_cmsrun
from ._harness import CONFIGS, SERVERS, local_server, median_of, temporary_folder

CONFIG = CONFIGS / "scale_cfg.py"


def _fileset(folder: pathlib.Path, sample: str, copies: int) -> pathlib.Path:
    files = []
    for i in range(copies):
        link = folder / f"pfnano_{i}.root"
        if not link.exists():
            link.symlink_to(sample)
        files.append(str(link))
    path = folder / "fileset.json"
    path.write_text(json.dumps({"PFNano": files}))
    return path


def _cmsrun(
    folder: pathlib.Path, fileset: pathlib.Path, chunk: int, options: dict[str, Any], cluster: list[str], name: str
) -> dict[str, Any]:
    """One ``cmsrun --executor dask`` child (``cluster``: ``--workers N`` or ``--scheduler
    ADDRESS``); its ``--summary-json``."""
    extra = ["--dataset", str(fileset), "--chunk-size", str(chunk), "--executor", "dask", *cluster]
    what = f"cmsrun --executor dask {' '.join(cluster)}"
    return run_cmsrun(CONFIG, options, folder, what, summary=folder / f"summary-{name}.json", timeout=3600, extra=extra)


def _run(
    folder: pathlib.Path, fileset: pathlib.Path, workers: int, chunk: int, options: dict[str, Any]
) -> dict[str, Any]:
    summary = _cmsrun(folder, fileset, chunk, options, ["--workers", str(workers)], str(workers))
    merged = [m for m in summary["merge"] if m["dataset"] == "PFNano"]
    merge_s = sum(m["seconds"] for m in merged)
    merge_bytes = sum(m["bytes"] for m in merged)
    return {
        **_rate(summary),
        "merge_s": merge_s,
        "merge_mb": merge_bytes / 1e6,
        "merge_s_per_100mb": merge_s / (merge_bytes / 1e8) if merge_bytes else 0.0,
    }


def _rate(summary: dict[str, Any]) -> dict[str, Any]:
    units = summary["units"]
    return {
        "events": summary["events"],
        "span_s": units["span_s"],
        "throughput": summary["events"] / units["span_s"] if units["span_s"] > 0 else 0.0,
        "units": units["done"],
        "overhead_ms": units["mean_overhead_s"] * 1e3,
        "scheduling_ms": units["scheduling_s"] * 1e3,
        "p50_ms": summary["latency"]["p50"] * 1e3,
        "p99_ms": summary["latency"]["p99"] * 1e3,
    }


def hosts_point(
    folder: pathlib.Path, fileset: pathlib.Path, scheduler: str, hosts: int, chunk: int, options: dict[str, Any]
) -> dict[str, Any]:
    """One run on the simulated cluster at ``scheduler`` (``hosts`` workers): events/s, the
    workers' CPU per event (ms) and the number of Triton servers that served the run."""
    from framework.cmsrun.executor import worker_pids

    from ._exp_cpu import _tree_cpu

    pids = list(worker_pids(scheduler, hosts).values())
    before = {pid: _tree_cpu(pid) for pid in pids}
    summary = _cmsrun(folder, fileset, chunk, options, ["--scheduler", scheduler], f"hosts-{hosts}")
    cpu = sum(_tree_cpu(pid) - before[pid] for pid in pids)  # a worker that died takes its CPU along
    host_servers = set((summary.get("host_servers") or {}).values())
    return {
        **_rate(summary),
        "client_cpu_ms": cpu / summary["events"] * 1e3 if summary["events"] else 0.0,
        "servers": len(host_servers) or 1,
        "workers": len(summary["workers"]),
    }


def _hosts_rows(
    quick: bool, repeat: int, sample: str, counts: tuple[int, ...] = (1, 2, 4), copies: int = 40
) -> tuple[list[dict[str, Any]], list[str], dict[str, Any]]:
    """The rows across simulated hosts (see the module docstring), notes, settings
    (``counts``: the numbers of hosts; ``copies`` of ``sample`` in the fileset)."""
    from framework.cmsrun.executor import namespaces_missing, simulated_cluster
    from framework.serving.testing import write_tiny_repository

    chunk = 10
    settings: dict[str, Any] = {"hosts": list(counts), "copies": copies, "chunk_size": chunk}
    if quick:  # minutes of cluster and server starts; tests/test_multihost.py runs one point on its hosts
        return [], ["--quick: no rows across hosts (tests/test_multihost.py checks one point)"], settings
    reason = namespaces_missing()
    if reason:
        return [], [f"no rows across hosts: {reason}"], settings
    rows = []
    with temporary_folder("scale-hosts") as folder:  # the hosts' shared file system
        fileset = _fileset(folder, sample, copies)
        repository = write_tiny_repository(folder / "repository")
        common = {"cpuTime": 1.0, "sonic": 1, "repository": str(repository), "streams": 4}
        settings["options"] = common
        with local_server(repository) as shared:
            modes = {"server per host": {}, "shared server": {"server": shared.grpc_address}}
            for hosts in counts:
                with simulated_cluster(hosts, folder) as (scheduler, _made):
                    for mode, extra in modes.items():
                        point = median_of(
                            repeat,
                            functools.partial(
                                hosts_point, folder, fileset, scheduler, hosts, chunk, {**common, **extra}
                            ),
                        )
                        rows.append({"config": f"sonic, {mode}", "hosts": hosts, **point})
    notes = [
        "hosts: UTS and mount namespaces on this machine (own host name, /dev/shm, /tmp; worker on 127.0.0.N); "
        "they share its cores",
        "client CPU: the workers' CPU time per event (cpuTime = 1 ms of it on purpose, and each worker's job "
        "build once per run, amortized over the events); the servers' not included",
    ]
    return rows, notes, settings


def scale(quick: bool, repeat: int) -> dict[str, Any]:
    """The experiment (see the module docstring)."""
    from framework.io.samples import locate_sample

    sample = str(locate_sample("pfnano.root"))
    copies, chunk = (2, 10) if quick else (40, 10)
    cpu_ms = 2.0 if quick else 50.0  # full: 500 ms of CPU per 10-event unit
    rows, targets = [], []
    with temporary_folder("scale") as folder:
        fileset = _fileset(folder, sample, copies)
        server = SERVERS.tiny_server()
        configs = {
            "cpu": {"cpuTime": cpu_ms, "keep": "PFCands_*"},
            "sonic": {
                "cpuTime": cpu_ms / 4,
                "sonic": 1,
                "server": server.grpc_address,
                "repository": str(server.repository),  # the tiny model's config (Client.modelConfigPath)
                "streams": 4,
            },
        }
        for name, options in configs.items():
            base = None
            # --quick: the SONIC config at 2 workers only (it proves the path; seconds count in the tests).
            for workers in (2,) if quick and name == "sonic" else (1, 2):
                point = median_of(
                    repeat,
                    functools.partial(_run, folder, fileset, workers, chunk, options),
                )
                base = point["throughput"] if workers == 1 else base
                ratio = point["throughput"] / (workers * base) if base else None
                rows.append({"config": name, "workers": workers, **point, "linear_ratio": ratio})
                if workers == 2 and ratio is not None:
                    wanted = 0.85 if name == "cpu" else None
                    targets.append(
                        {
                            "name": f"{name}: 2 workers / (2 x 1 worker)",
                            "value": ratio,
                            "target": wanted,
                            "met": ratio >= 0.85 if wanted else None,
                            "note": f"{os.cpu_count()} cores; {copies} x pfnano.root, {chunk} events/unit",
                        }
                    )
    host_rows, host_notes, host_settings = _hosts_rows(quick, repeat, sample)
    rows += host_rows
    return {
        "experiment": "scale",
        "title": "Scale-out on Dask: events/s on 1 and 2 workers, CPU-bound and SONIC; SONIC on 1, 2, 4 hosts",
        "settings": {
            "copies": copies,
            "chunk_size": chunk,
            "cpu_ms": cpu_ms,
            "quick": quick,
            "repeat": repeat,
            "configs": configs,
            "across_hosts": host_settings,
        },
        "rows": rows,
        "columns": [
            ("config", "config", "s"),
            ("workers", "workers", "d"),
            ("hosts", "hosts", "d"),
            ("servers", "servers", "d"),
            ("events", "events", "d"),
            ("throughput", "events/s", ".1f"),
            ("linear_ratio", "/ linear", ".2f"),
            ("overhead_ms", "overhead/unit [ms]", ".1f"),
            ("scheduling_ms", "scheduling/unit [ms]", ".1f"),
            ("merge_mb", "merged [MB]", ".2f"),
            ("merge_s_per_100mb", "merge [s/100 MB]", ".2f"),
            ("p50_ms", "p50 [ms]", ".2f"),
            ("client_cpu_ms", "client CPU/event [ms]", ".2f"),
        ],
        "targets": targets,
        "notes": [
            "events/s over the span of the units (cluster start-up and preprocessing excluded)",
            "overhead/unit: task time outside the events (job lookup, begin_unit/end_unit with the part "
            "writing); scheduling/unit: worker time outside tasks while units ran",
            "sonic: one local tiny-model server shared by every worker",
            "each unit opens its file again (PoolSource per unit): ~10 events per unit makes that visible",
            *host_notes,
        ],
    }
