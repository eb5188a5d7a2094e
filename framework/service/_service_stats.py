"""TritonService's end-of-job numbers: Triton's own per-model counters and the clients'.

Triton's counters (``get_inference_statistics``) are cumulative per server process: the job's
share is the difference between a snapshot at begin_job and one at end_job, per (model,
server) pair, summed over the servers a model was served by (failover spreads a model
over several). A server started during the job (the fallback on demand) counts from zero;
a server that restarted during the job has counters smaller at the end than at the
beginning and counts from its restart; a server that is gone or out of service at the end
gives no numbers (listed as ``unavailable``). A server without statistics (an Open
Inference Protocol server other than Triton: MLServer, KServe) gives none either: "n/a",
never a failure.

Works on what it is given (a function that opens a server's gRPC client, the assignment,
the clients, the servers' health), not on TritonService.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from framework.sonic import unimplemented

if TYPE_CHECKING:
    from framework.sonic import TritonClient

__all__ = ["Snapshot", "report_tables", "settled_snapshot", "snapshot", "statistics"]

logger = logging.getLogger("pysonic.sonic")

STATS_TIMEOUT = 5.0  # seconds per get_inference_statistics call
SETTLE_TIMEOUT = 1.0  # seconds the end-of-job snapshot waits for Triton to count the last requests
SETTLE_INTERVAL = 0.02  # seconds between two snapshots while it waits

# Triton's per-model statistics counters (``get_inference_statistics``, JSON form).
_DURATIONS = ("queue", "compute_input", "compute_infer", "compute_output")
_ZERO = {"requests": 0, "inferences": 0, "executions": 0, "queue_ns": 0, "compute_ns": 0}

Snapshot = dict[tuple[str, str], dict[str, int]]  # (model, server name) -> Triton's counters


def snapshot(
    grpc_client: Callable[[str], Any],
    pairs: list[tuple[str, str]],
    no_statistics: set[tuple[str, str]] | None = None,
) -> Snapshot:
    """Triton's cumulative counters per (model, server) pair (blocking; worker thread).

    Args:
        grpc_client: server name -> its ``InferenceServerClient``.
        no_statistics: gets the pairs whose server has no statistics RPC (absent from the result).
    """
    result = {}
    for model, server_name in pairs:
        try:
            stats = grpc_client(server_name).get_inference_statistics(model, as_json=True, client_timeout=STATS_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the server may be gone
            if unimplemented(exc):
                if no_statistics is not None and (model, server_name) not in no_statistics:
                    no_statistics.add((model, server_name))
                    logger.info("TritonService: server '%s' keeps no statistics: model '%s' n/a", server_name, model)
                continue
            logger.warning(
                "TritonService: statistics of model '%s' on server '%s' unavailable: %s", model, server_name, exc
            )
            continue
        result[(model, server_name)] = _sum_model_stats(stats.get("model_stats", []))
    return result


def settled_snapshot(
    grpc_client: Callable[[str], Any],
    pairs: list[tuple[str, str]],
    begin: Snapshot,
    answered: Mapping[tuple[str, str], int],
    timeout: float = SETTLE_TIMEOUT,
    no_statistics: set[tuple[str, str]] | None = None,
) -> Snapshot:
    """The end-of-job :func:`snapshot`, taken again while Triton lags behind the clients.

    Triton counts a request as successful when it releases it, which can be just after its
    response reached the client: a snapshot taken at once may miss the job's last requests.
    While a (model, server) pair shows fewer successful requests since ``begin`` than the
    job's clients saw answered there (``answered``: gRPC calls), the snapshot is taken again
    every ``SETTLE_INTERVAL`` s, ``timeout`` s at most; then the last one is returned as it is.
    A server whose counters went down (restarted during the job) counts from zero.
    ``no_statistics``: as for :func:`snapshot`.
    """
    deadline = time.monotonic() + timeout
    while True:
        end = snapshot(grpc_client, pairs, no_statistics)
        behind = [
            pair
            for pair, calls in answered.items()
            if pair in end and _job_share(begin.get(pair), end[pair])["requests"] < calls
        ]
        if not behind or time.monotonic() >= deadline:
            return end
        time.sleep(SETTLE_INTERVAL)


def _job_share(begin: dict[str, int] | None, end: dict[str, int]) -> dict[str, int]:
    """One (model, server) pair's counters between begin_job and end_job: ``end - begin``,
    or ``end`` itself where there was no begin (a server started during the job) or the
    counters went down (the server restarted during the job: they began again)."""
    start = begin if begin is not None and end["requests"] >= begin["requests"] else _ZERO
    return {key: end[key] - start[key] for key in _ZERO}


def _sum_model_stats(model_stats: list[dict[str, Any]]) -> dict[str, int]:
    """Triton's JSON statistics of all versions of a model, summed (int64 come as strings)."""
    total = dict(_ZERO)
    for version in model_stats:
        infer = version.get("inference_stats", {})
        total["requests"] += int(infer.get("success", {}).get("count", 0))
        total["inferences"] += int(version.get("inference_count", 0))
        total["executions"] += int(version.get("execution_count", 0))
        total["queue_ns"] += int(infer.get("queue", {}).get("ns", 0))
        total["compute_ns"] += sum(int(infer.get(k, {}).get("ns", 0)) for k in _DURATIONS[1:])
    return total


def _model_entry(
    model: str,
    server_name: str,
    modules: list[str],
    begin_all: Snapshot,
    end_all: Snapshot,
    no_statistics: Collection[tuple[str, str]],
) -> dict[str, Any]:
    entry: dict[str, Any] = {"server": server_name, "modules": modules}
    entry["no_statistics"] = sorted(srv for m, srv in no_statistics if m == model)
    begin = {srv: c for (m, srv), c in begin_all.items() if m == model}
    end = {srv: c for (m, srv), c in end_all.items() if m == model}
    if not end:
        return entry
    total, servers = dict(_ZERO), {}
    for srv, counters in end.items():
        share = _job_share(begin.get(srv), counters)
        for key in total:
            total[key] += share[key]
        servers[srv] = share["requests"]
    requests = total["requests"]
    entry.update(
        servers=servers,
        unavailable=sorted(set(begin) - set(end)),
        requests=requests,
        inferences=total["inferences"],
        executions=total["executions"],
        queue_ms=total["queue_ns"] / requests / 1e6 if requests else 0.0,
        compute_ms=total["compute_ns"] / requests / 1e6 if requests else 0.0,
    )
    return entry


def statistics(
    *,
    assignment: Mapping[str, str],
    users: Mapping[str, list[str]],
    begin: Snapshot,
    end: Snapshot,
    clients: Iterable[TritonClient],
    servers: Mapping[str, dict[str, Any]],
    no_statistics: Collection[tuple[str, str]] = (),
) -> dict[str, Any]:
    """What the job asked of Triton, JSON-ready.

    Args:
        assignment: model -> its server's name (begin_job); users: model -> module labels.
        begin, end: the :func:`snapshot` at begin_job and at end_job.
        clients: the modules' clients.
        servers: per server, its health (``ServerBook.health_report``).
        no_statistics: (model, server) pairs whose server keeps no statistics (:func:`snapshot`).

    Returns:
        ``{"models": {model: {...}}, "clients": {module label: {...}}, "servers": {name: {...}}}``.
        Per model: ``server`` (assigned), ``modules``, and Triton's counters during the job
        (other users of a shared server are counted too): ``requests`` (successful),
        ``inferences`` (batch rows), ``executions`` (model runs: fewer than requests when
        the dynamic batcher merged them), ``queue_ms`` and ``compute_ms`` (mean per
        request, milliseconds; compute = input + infer + output), ``servers`` (requests
        per server), ``unavailable`` (servers that gave no end numbers) and
        ``no_statistics`` (servers that keep none: not Triton; "n/a" in the table). Per client:
        ``model``, ``server``, ``mode``, the :class:`~framework.sonic.ClientStatistics`
        fields (``retries``, ``failovers`` included) and ``servers`` (successful calls per
        server), ``shm_calls`` (calls whose inputs went through shared memory), ``http_calls``
        (calls over HTTP: ``Client.transport``). Per server:
        ``address``, ``healthy``, ``outages`` (times out of service),
        ``failures`` (consecutive, at the end) and ``last_error``.
    """
    models = {
        model: _model_entry(model, server, users[model], begin, end, no_statistics)
        for model, server in assignment.items()
    }
    per_client = {
        client.debug_name: {
            "model": client.model_name,
            "server": client.server.name if client.server else "",
            "mode": client.mode,
            **dataclasses.asdict(client.statistics()),
            "servers": client.calls_by_server(),
            "shm_calls": client.transport.shm_calls,
            "http_calls": client.transport.http_calls,
        }
        for client in clients
    }
    return {"models": models, "clients": per_client, "servers": dict(servers)}


def report_tables(stats: dict[str, Any]) -> list[Any]:
    """Rich tables of :func:`statistics` for the end-of-job summary ([] if no model).

    Models and clients always; a server table only if a server failed during the job. Every
    string is a ``Text``: as markup, rich would drop a ``[ms]`` or an error's ``[...]``.
    """
    from rich.table import Table
    from rich.text import Text

    if not stats["models"]:
        return []
    models = Table(
        title=Text("TritonService ---------- Model Summary (server side) ---[ms per request]----"), title_justify="left"
    )
    for col in ("Model", "Server", "Requests", "Inferences", "Executions", "queue [ms]", "compute [ms]"):
        models.add_column(Text(col), justify="left" if col in ("Model", "Server") else "right")
    for model, s in stats["models"].items():
        numbers = (
            [
                str(s["requests"]),
                str(s["inferences"]),
                str(s["executions"]),
                f"{s['queue_ms']:.3f}",
                f"{s['compute_ms']:.3f}",
            ]
            if "requests" in s
            else ["n/a" if s.get("no_statistics") else "-"] * 5
        )
        used = {name: n for name, n in s.get("servers", {}).items() if n}
        # Several servers (spread or failover): each with its request count.
        where = (
            ", ".join(f"{name} ({n})" for name, n in used.items()) if len(used) > 1 else next(iter(used), s["server"])
        )
        where += "".join(f" (no numbers from {name})" for name in s.get("unavailable", []))
        if "requests" in s:  # served partly by a server without statistics
            where += "".join(f" (n/a from {name})" for name in s.get("no_statistics", []))
        models.add_row(*map(Text, [model, where, *numbers]))
    clients = Table(
        title=Text("TritonService ---------- Client Summary ---[MB of tensor data]----"), title_justify="left"
    )
    for col in (
        "Module",
        "Model",
        "Mode",
        "Calls",
        "Requests",
        "Inferences",
        "sent [MB]",
        "received [MB]",
        "Retries",
        "Failovers",
        "Errors",
    ):
        clients.add_column(Text(col), justify="left" if col in ("Module", "Model", "Mode") else "right")
    for label, c in stats["clients"].items():
        clients.add_row(
            *map(
                Text,
                [
                    label,
                    c["model"],
                    c["mode"],
                    str(c["calls"]),
                    str(c["requests"]),
                    str(c["inferences"]),
                    f"{c['bytes_sent'] / 1e6:.3f}",
                    f"{c['bytes_received'] / 1e6:.3f}",
                    str(c["retries"]),
                    str(c["failovers"]),
                    str(c["errors"]),
                ],
            )
        )
    tables = [models, clients]
    troubled = {name: h for name, h in stats["servers"].items() if h["outages"] or h["failures"]}
    if troubled:
        servers = Table(title=Text("TritonService ---------- Server Health ----"), title_justify="left")
        for col in ("Server", "Address", "In service", "Outages", "Failures", "Last error"):
            servers.add_column(Text(col), justify="right" if col in ("Outages", "Failures") else "left")
        for name, h in troubled.items():
            servers.add_row(
                *map(
                    Text,
                    [
                        name,
                        h["address"],
                        "yes" if h["healthy"] else "no",
                        str(h["outages"]),
                        str(h["failures"]),
                        h["last_error"][:80],
                    ],
                )
            )
        tables.append(servers)
    return tables
