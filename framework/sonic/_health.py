"""What the job knows of each server: the models it serves, its health, its load (trio thread).

:class:`ServerBook` keeps the records that :class:`~framework.sonic.Routing` decides from; it
chooses nothing itself. It is written by the outcomes of calls and probes (:meth:`ServerBook.record`),
by the start and end of every try (:meth:`ServerBook.begin`, :meth:`ServerBook.end`: requests
outstanding and a moving average of latency), and by the pool's surveys
(:meth:`ServerBook.apply_survey`: what each server serves now, and whether it is saturated).

* health: each server counts its consecutive recoverable failures; at
  ``health.unhealthyAfter`` it is out of service; a success (a call or a probe) brings it
  back. Probes are lazy: :meth:`ServerBook.probe_due` says which out-of-service server a
  request should ask first, at most every ``health.probeInterval`` seconds per server;
* load: ``(outstanding + 1) x latency`` per server (:meth:`ServerBook.least_loaded`);
* saturation: Triton's queue time per execution between two surveys, above
  ``discovery.saturatedAbove`` microseconds (TritonService's ``discovery`` PSet, a pysonic
  extension; :mod:`framework.sonic._pool` asks and computes).

Everything here runs on the trio thread (or the calling thread in ``Sync`` mode, which is the
job's only thread then); the fallback's start replaces its record rather than mutating it
(:meth:`ServerBook.forget`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._pool import Answer, DiscoveryParameters, queue_per_execution
from ._server_info import ServerInfo

__all__ = ["EWMA_WEIGHT", "ServerBook", "ServerHealth"]

logger = logging.getLogger("pysonic.sonic")

EWMA_WEIGHT = 0.2  # weight of each new latency sample in a server's moving average


@dataclasses.dataclass
class ServerHealth:
    """What TritonService knows of one server's health (trio thread only).

    Attributes:
        healthy: in service (requests are sent to it).
        failures: consecutive recoverable failures (reset by any success).
        outages: times it was taken out of service during the job.
        last_error: the reason of the last failure.
        last_probe: the routing clock (``time.monotonic``) at the last probe (or of the outage start).
        probing: a probe is under way (others do not start one).
        outstanding: tries under way on it now.
        latency: moving average of its successful tries' latency, seconds (None: no sample).
        tries: tries started on it during the job.
        queue_us: its queue time per execution at the last survey, microseconds (None: not measured).
        saturated: ``queue_us`` above ``discovery.saturatedAbove`` (last choice while routing).
    """

    healthy: bool = True
    failures: int = 0
    outages: int = 0
    last_error: str = ""
    last_probe: float = 0.0
    probing: bool = False
    outstanding: int = 0
    latency: float | None = None
    tries: int = 0
    queue_us: float | None = None
    saturated: bool = False


class ServerBook:
    """The records of the job's servers: what each serves, its health and its load.

    Args:
        servers: the configured servers, in order of preference.
        health: TritonService's validated ``health`` PSet (``unhealthyAfter``,
            ``probeInterval`` and ``probeTimeout`` in seconds).
        discovery: TritonService's ``discovery`` PSet (saturation, survey interval).
        clock: the clock of probes and surveys, seconds (``time.monotonic``; tests pass a fake).
        address: server name -> ``host:port`` for messages (the fallback's is known to the router).

    Attributes:
        servers: name -> :class:`~framework.sonic.ServerInfo` of the configured servers.
        served: configured server name -> its READY models (begin_job; unreachable ones absent).
        health: server name -> :class:`ServerHealth`.
    """

    def __init__(
        self,
        servers: Mapping[str, ServerInfo],
        health: Any,
        discovery: DiscoveryParameters,
        clock: Callable[[], float],
        address: Callable[[str], str],
    ) -> None:
        self.servers = dict(servers)
        self.discovery = discovery
        self.unhealthy_after = max(1, health.unhealthyAfter)
        self.probe_interval: float = health.probeInterval
        self.probe_timeout: float = health.probeTimeout
        self.served: dict[str, set[str]] = {}
        self.health: dict[str, ServerHealth] = {}
        self._clock = clock
        self._address = address
        self._loads: dict[str, tuple[int, int]] = {}  # server -> its load at the last survey
        self._last_survey: float | None = None  # clock time of the last survey (set by the first request)
        self._surveying = False

    # -- what the servers serve: begin_job and the pool's surveys ----------------------

    def add_served(self, name: str, models: set[str]) -> None:
        """Record that configured server ``name`` answers and serves ``models`` (begin_job)."""
        self.served[name] = models
        self.health[name] = ServerHealth()

    def remember_loads(self, answers: Mapping[str, Answer]) -> None:
        """Keep the servers' loads as a survey read them: the start of the saturation window."""
        self._loads = {name: a.load for name, a in answers.items() if a.load is not None}

    def apply_survey(self, answers: Mapping[str, Answer], at_begin: bool = False) -> None:
        """What the servers answered changes the records (trio thread).

        A server that answers is in service again; its READY models replace what it served
        (a new server joins; models it lost leave it); its queue time per execution since
        the last survey decides whether it is saturated (at begin_job a saturated server is
        skipped). One that does not answer is taken out of service (if it was in it): the
        probes bring it back.
        """
        for name, answer in answers.items():
            health = self.health.get(name)
            if answer.models is None:
                if health is not None and health.healthy and name in self.served:
                    health.last_error = answer.error
                    self._take_out(name, f"(it left the pool: {answer.error})")
                continue
            queue = queue_per_execution(self._loads.get(name), answer.load)
            if answer.load is not None:
                self._loads[name] = answer.load
            threshold = self.discovery.saturated_above
            saturated = threshold > 0 and queue is not None and queue > threshold
            if at_begin and saturated:
                logger.warning(
                    "TritonService: server '%s' (%s) is saturated (%.0f us of queue per execution > "
                    "discovery.saturatedAbove = %g us), skipped",
                    name,
                    self.servers[name].address,
                    queue,
                    threshold,
                )
                continue
            models = set(answer.models)
            if name not in self.served and not at_begin:
                logger.warning(
                    "TritonService: server '%s' (%s) joins: %s", name, self.servers[name].address, answer.describe()
                )
            elif name in self.served and self.served[name] - models:
                logger.warning(
                    "TritonService: server '%s' (%s) no longer serves %s",
                    name,
                    self.servers[name].address,
                    ", ".join(sorted(self.served[name] - models)),
                )
            self.served[name] = models
            health = self.health.setdefault(name, ServerHealth())
            if queue is not None:
                if saturated != health.saturated:
                    logger.warning(
                        "TritonService: server '%s' (%s) is %s (%.0f us of queue per execution)",
                        name,
                        self.servers[name].address,
                        "saturated: last choice" if saturated else "no longer saturated",
                        queue,
                    )
                health.queue_us, health.saturated = queue, saturated
            if not health.healthy:
                self.record(name, True)

    def survey_due(self) -> bool:
        """Whether a request should survey the servers first (marked as surveying until
        :meth:`surveyed`)."""
        interval = self.discovery.interval
        if interval <= 0 or not self.servers or self._surveying:
            return False
        now = self._clock()
        if self._last_survey is None:
            self._last_survey = now  # begin_job asked them just now
        if now - self._last_survey < interval:
            return False
        self._surveying, self._last_survey = True, now
        return True

    def surveyed(self) -> None:
        """The survey :meth:`survey_due` asked for is over (answered or not)."""
        self._surveying = False

    # -- health --------------------------------------------------------------------------

    def record(self, server_name: str, ok: bool, why: str = "") -> None:
        """Record the outcome of a call or probe on ``server_name`` (trio thread)."""
        health = self.health.setdefault(server_name, ServerHealth())
        if ok:
            if not health.healthy:
                logger.warning(
                    "TritonService: server '%s' (%s) is back in service", server_name, self._address(server_name)
                )
            health.healthy, health.failures = True, 0
            return
        health.failures += 1
        health.last_error = why
        if health.healthy and health.failures >= self.unhealthy_after:
            self._take_out(server_name, f"after {health.failures} consecutive failures (last: {why})")

    def _take_out(self, server_name: str, why: str) -> None:
        health = self.health.setdefault(server_name, ServerHealth())
        health.healthy, health.outages, health.last_probe = False, health.outages + 1, self._clock()
        logger.warning(
            "TritonService: server '%s' (%s) is out of service %s; its requests go elsewhere, probe every %g s",
            server_name,
            self._address(server_name),
            why,
            self.probe_interval,
        )

    def healthy(self, name: str) -> bool:
        """Whether ``name`` is in service (a server without record is)."""
        health = self.health.get(name)
        return health is None or health.healthy

    def saturated(self, name: str) -> bool:
        """Whether ``name`` was saturated at the last survey (``discovery.saturatedAbove``)."""
        health = self.health.get(name)
        return health is not None and health.saturated

    def probe_due(self, names: Iterable[str]) -> str | None:
        """The first of ``names`` that is out of service and whose probe is due (marked as
        probing until :meth:`probed`), or None."""
        now = self._clock()
        for name in names:
            health = self.health.get(name)
            if health is None or health.healthy or health.probing or now - health.last_probe < self.probe_interval:
                continue
            health.probing, health.last_probe = True, now
            return name
        return None

    def probed(self, name: str, ok: bool) -> None:
        """The probe :meth:`probe_due` asked for is over: ``ok`` brings ``name`` back."""
        health = self.health[name]
        health.probing = False
        if ok:
            self.record(name, True)
        else:
            logger.debug("TritonService: server '%s' still out of service (probe failed)", name)

    def forget(self, name: str) -> None:
        """A new process serves under ``name`` (the fallback restarted): a fresh record. The
        map is replaced, never mutated (a probe's thread may hold the old one)."""
        self.health = {**self.health, name: ServerHealth()}

    # -- load ----------------------------------------------------------------------------

    def begin(self, server_name: str) -> None:
        """A try starts on ``server_name`` (trio thread)."""
        health = self.health.setdefault(server_name, ServerHealth())
        health.outstanding += 1
        health.tries += 1

    def end(self, server_name: str, latency: float | None) -> None:
        """A try on ``server_name`` ended; ``latency``: its seconds if it succeeded (trio thread)."""
        health = self.health.get(server_name)
        if health is None:
            return
        health.outstanding = max(0, health.outstanding - 1)  # a restarted fallback's record starts at 0
        if latency is not None:
            health.latency = (
                latency if health.latency is None else (health.latency + EWMA_WEIGHT * (latency - health.latency))
            )

    def least_loaded(self, names: list[str]) -> str:
        """The server of least ``(outstanding + 1) x latency`` (the first configured on ties)."""
        records = [self.health.get(name) or ServerHealth() for name in names]
        known = [r.latency for r in records if r.latency is not None]
        default = sum(known) / len(known) if known else 1.0
        costs = [(r.outstanding + 1) * (default if r.latency is None else r.latency) for r in records]
        return names[costs.index(min(costs))]

    # -- for statistics and messages -----------------------------------------------------

    def health_report(self) -> dict[str, dict[str, Any]]:
        """Per server with a health record: ``address``, ``healthy``, ``outages``, ``failures``
        (consecutive, now), ``last_error``, ``tries`` (started during the job) and
        ``latency_ms`` (moving average of successful tries; None without one), ``queue_us``
        and ``saturated`` (the last survey's; None and False without one) (JSON-ready)."""
        return {
            name: {
                "address": self._address(name),
                "healthy": h.healthy,
                "outages": h.outages,
                "failures": h.failures,
                "last_error": h.last_error,
                "tries": h.tries,
                "latency_ms": None if h.latency is None else h.latency * 1e3,
                "queue_us": h.queue_us,
                "saturated": h.saturated,
            }
            for name, h in self.health.items()
        }

    def tried(self) -> str:
        """What each configured server serves, for messages (``"tried 'a' at host:port: serves x"``)."""
        if not self.servers:
            return "no server configured"
        parts = []
        for name, server in self.servers.items():
            served = self.served.get(name)
            what = "unreachable" if served is None else f"serves {', '.join(sorted(served)) or 'nothing'}"
            parts.append(f"'{name}' at {server.address}: {what}")
        return "tried " + "; ".join(parts)
