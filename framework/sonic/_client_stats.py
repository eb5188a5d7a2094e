"""A TritonClient's own counters: calls, rows and bytes sent, retries, failures.

Counted from any thread (the trio thread, PseudoAsync worker threads), hence a lock.
Imports no other file of framework.sonic.
"""

from __future__ import annotations

import dataclasses
import threading

__all__ = ["ClientCounters", "ClientStatistics"]


@dataclasses.dataclass(frozen=True)
class ClientStatistics:
    """Client-side counters of one TritonClient (all streams together).

    Attributes:
        calls: gRPC inference calls answered successfully (a batch split in k parts
            counts k; failed tries count in ``retries`` or ``errors``).
        requests: events' requests answered (with cross-event batching, ``Client.batching``,
            several share one call: ``requests / calls`` > 1).
        inferences: batch rows sent (events x rows).
        bytes_sent, bytes_received: tensor payload bytes (not gRPC framing).
        errors: requests that failed for good (after their retries), i.e. events that
            failed in this module.
        retries: tries re-sent after a recoverable failure (see ``Client.retries``).
        failovers: those of the retries that went to a different server.
    """

    calls: int = 0
    requests: int = 0
    inferences: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    errors: int = 0
    retries: int = 0
    failovers: int = 0


class ClientCounters:
    """The running :class:`ClientStatistics` of one client, and its calls per server.

    The request adds its calls (``add_calls``); the retry policy is given
    ``add_retry`` and ``add_error``. Plain integers under a lock (once per call:
    no dataclass copied per event); snapshots are immutable.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, int] = dict.fromkeys((f.name for f in dataclasses.fields(ClientStatistics)), 0)
        self._server_calls: dict[str, int] = {}

    def add_calls(
        self, server_name: str, *, calls: int, inferences: int, sent: int, received: int, requests: int = 1
    ) -> None:
        """Count ``calls`` successful gRPC calls on ``server_name`` answering ``requests``
        events' requests: ``inferences`` rows, ``sent``/``received`` tensor bytes."""
        with self._lock:
            self._server_calls[server_name] = self._server_calls.get(server_name, 0) + calls
            values = self._values
            values["calls"] += calls
            values["requests"] += requests
            values["inferences"] += inferences
            values["bytes_sent"] += sent
            values["bytes_received"] += received

    def add_retry(self, failover: bool) -> None:
        """Count a retry; ``failover``: it goes to a different server."""
        with self._lock:
            self._values["retries"] += 1
            self._values["failovers"] += failover

    def add_error(self) -> None:
        """Count a request that failed for good."""
        with self._lock:
            self._values["errors"] += 1

    def snapshot(self) -> ClientStatistics:
        with self._lock:
            return ClientStatistics(**self._values)

    def calls_by_server(self) -> dict[str, int]:
        """Successful gRPC calls per server name."""
        with self._lock:
            return dict(self._server_calls)
