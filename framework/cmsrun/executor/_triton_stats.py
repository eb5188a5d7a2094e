"""Triton's own per-server statistics for a whole Dask run, taken by the driver.

Each worker's TritonService only sees its own requests; Triton's server-side counters
(``get_inference_statistics``: requests, batch rows, model executions, queue and compute
time) belong to the server, shared by every worker. So the driver snapshots them itself
(:func:`framework.service.snapshot`) for each (model, server) pair: the
configured servers before the units start and after they end (the difference is the run's,
plus any other user of a shared server), the host servers started for this run at the end
only (their counters began with the run).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["ServerCounters"]


class ServerCounters:
    """Begin/end snapshots of Triton's counters per (model, server name).

    Args:
        servers: server name -> ``framework.sonic.ServerInfo``; more can be added later.
        pairs: (model, server name) to count.
    """

    def __init__(self, servers: dict[str, Any], pairs: list[tuple[str, str]]) -> None:
        self.servers = dict(servers)
        self.pairs = list(pairs)
        self.begin: dict[tuple[str, str], dict[str, int]] = {}
        self.models_on_host: list[str] = []  # the models the host servers serve

    def add_server(self, info: Any, models: list[str]) -> None:
        """Count ``models`` on one more server (a host server: no begin snapshot)."""
        self.servers[info.name] = info
        self.pairs += [(m, info.name) for m in models]

    @contextlib.contextmanager
    def _clients(self) -> Iterator[Any]:
        opened: dict[str, Any] = {}

        def client(name: str) -> Any:
            if name not in opened:
                opened[name] = self.servers[name].open_client()
            return opened[name]

        try:
            yield client
        finally:
            for c in opened.values():
                with contextlib.suppress(Exception):
                    c.close()

    def take_begin(self) -> None:
        from framework.service import snapshot

        with self._clients() as client:
            self.begin = snapshot(client, self.pairs)

    def statistics(self) -> dict[str, dict[str, Any]]:
        """``"<model> @ <server>"`` -> address, requests, inferences, executions, and mean
        queue_ms and compute_ms per request (milliseconds) during the run."""
        from framework.service import snapshot

        with self._clients() as client:
            end = snapshot(client, self.pairs)
        result = {}
        for (model, name), counters in end.items():
            start = self.begin.get((model, name))
            if start is None or counters["requests"] < start["requests"]:
                start = dict.fromkeys(counters, 0)  # a host server, or one that restarted
            delta = {k: counters[k] - start[k] for k in counters}
            n = delta["requests"]
            result[f"{model} @ {name}"] = {
                "address": self.servers[name].address,
                "requests": n,
                "inferences": delta["inferences"],
                "executions": delta["executions"],
                "queue_ms": delta["queue_ns"] / n / 1e6 if n else 0.0,
                "compute_ms": delta["compute_ns"] / n / 1e6 if n else 0.0,
            }
        return result
