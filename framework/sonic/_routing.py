"""Routing and health: which server each request goes to (TritonService's part during the job).

CMSSW counterpart: the server choice of ``TritonService`` (HeterogeneousCore/SonicTriton).
:class:`Routing` is the clients' :class:`~framework.sonic._retry.Router`; its one verb
is **route**: :meth:`Routing.route_steps` (the steps of ``framework.sonic._waits``: a due
probe is a :class:`~framework.sonic._waits.Blocking` step), driven by :meth:`Routing.route`
(trio) or :meth:`Routing.route_blocking` (``Sync`` mode, begin_job), and
:meth:`Routing.route_nowait` (no probe, never blocks). A model's *home* server
(:meth:`Routing.home`) is its module's ``preferredServer`` if that serves the model, else
the one assigned at begin_job (the first configured server that serves it, else the
fallback). A request goes to its home server while it is in service, else to another in
service that serves the model.

* health: each server counts its consecutive recoverable failures; at
  ``health.unhealthyAfter`` it is out of service and new requests go to another healthy
  server that serves the model, or to the fallback server once it runs;
* probes, lazily (no background task): when a request would go to an out-of-service
  server, at most every ``health.probeInterval`` seconds one request first asks it
  ``is_server_ready``/``is_model_ready`` through the shared client; a success (or any
  successful call) puts it back in service. gRPC reconnects the shared channel by itself
  after a restart on the same address (short reconnect backoff: ``CHANNEL_ARGS``);
* the pool (:mod:`framework.sonic._pool`, TritonService's ``discovery`` PSet, a pysonic
  extension): :meth:`Routing.discover` at begin_job asks every configured server what it
  serves, skips a saturated one, and waits up to ``discovery.wait`` s for a server of
  every model (a pool scaling from zero), with a progress line; during the job, every
  ``discovery.interval`` s one request first surveys the servers again (a
  :class:`~framework.sonic._waits.Blocking` step): a server that appears joins the
  routing, one that went away or no longer serves a model leaves it, a saturated one
  (queue time per execution above ``discovery.saturatedAbove`` us) is the last choice;
* the fallback server (a :class:`Fallback`, made by the factory TritonService passes:
  ``framework.service._fallback.FallbackServer``, owned here) is asked for when a
  ``fallback`` retry needs it. The client side never imports the server side
  (``framework.serving``): the fallback comes in through this interface.

Threads: the trio thread, except the blocking probes (worker thread in trio, the calling
thread in Sync mode) and the fallback's start (see ``_fallback``), whose ``on_start``
replaces the health map and the shared clients rather than mutating them.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import trio

from framework.utilities import ExternalFailure

from ._oip import READY_STATES, ready_by_model, unimplemented
from ._pool import SATURATION_WINDOW, Answer, DiscoveryParameters, queue_per_execution, survey
from ._server_info import FALLBACK_SERVER, ServerInfo
from ._waits import Blocking, Steps, drive, drive_blocking

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = ["PROBE_TIMEOUT", "Fallback", "Routing", "ServerHealth", "ready_models"]

logger = logging.getLogger("pysonic.sonic")

PROBE_TIMEOUT = 5.0  # seconds per gRPC call when asking a configured server what it serves
EWMA_WEIGHT = 0.2  # weight of each new latency sample in a server's moving average
BEGIN_POLL = 2.0  # seconds between two surveys while begin_job waits for servers (at most)


class Fallback(Protocol):
    """The local fallback server as the router sees it (the server side implements it).

    Attributes:
        enabled: TritonService's ``fallback.enable``.
        error: why it cannot start; non-empty once a start failed.
        models: the models it was made to serve.
    """

    enabled: bool
    error: str
    models: frozenset[str]

    def info(self) -> ServerInfo | None:
        """Its current address as a :class:`~framework.sonic.ServerInfo`, or None if never started."""

    def is_running(self) -> bool:
        """Whether its process runs."""

    def serves(self, model: str) -> bool:
        """Whether it runs and serves ``model``."""

    def serve_steps(self, model: str) -> Steps[None]:
        """The steps that make it serve ``model`` (start, restart or load on demand: a
        :class:`~framework.sonic._waits.Blocking` step); none if it does already."""


FallbackFactory = Callable[[Callable[[], None]], Fallback]
"""Makes the job's :class:`Fallback` given its ``on_start`` callback (called once a new
server process serves: health and channels of the old one are then stale)."""


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


class Routing:
    """The job's servers as the clients see them: models served, assignment, health, channels.

    Args:
        servers: the configured servers, in order of preference.
        health: TritonService's validated ``health`` PSet (``unhealthyAfter``,
            ``probeInterval`` and ``probeTimeout`` in seconds).
        fallback: makes the job's :class:`~framework.sonic._routing.Fallback` (TritonService passes one that makes a
            ``framework.service._fallback.FallbackServer``), given the callback it
            must call when a new server process serves.
        discovery: TritonService's ``discovery`` PSet
            (:class:`~framework.sonic.DiscoveryParameters`); None: CMSSW's behaviour (ask
            once, no wait, no survey).
        clock: the clock of probes and surveys, seconds (``time.monotonic``; tests pass a fake).

    Attributes:
        servers: name -> :class:`~framework.sonic.ServerInfo` of the configured servers.
        served: configured server name -> its READY models (begin_job; unreachable ones absent).
        assignment: model -> the name of its server at begin_job.
        health: server name -> :class:`ServerHealth`.
        fallback: the job's :class:`~framework.sonic._routing.Fallback`.
    """

    def __init__(
        self,
        servers: Mapping[str, ServerInfo],
        health: Any,
        fallback: FallbackFactory,
        discovery: DiscoveryParameters | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.servers = dict(servers)
        self.discovery = discovery or DiscoveryParameters()
        self._clock = clock
        self._loads: dict[str, tuple[int, int]] = {}  # server -> its load at the last survey
        self._wanted: tuple[str, ...] = ()  # the job's models (discover), for servers without an index
        self._last_survey: float | None = None  # clock time of the last survey (set by the first route)
        self._surveying = False
        self.unhealthy_after = max(1, health.unhealthyAfter)
        self.probe_interval: float = health.probeInterval
        self.probe_timeout: float = health.probeTimeout
        self.served: dict[str, set[str]] = {}
        self.assignment: dict[str, str] = {}
        self.health: dict[str, ServerHealth] = {}
        self.fallback = fallback(self._fallback_started)
        self._grpc_clients: dict[str, grpcclient.InferenceServerClient] = {}

    # -- begin_job ---------------------------------------------------------------------

    def add_served(self, name: str, models: set[str]) -> None:
        """Record that configured server ``name`` answers and serves ``models`` (begin_job)."""
        self.served[name] = models
        self.health[name] = ServerHealth()

    def assign(self, model: str, preferred: str) -> str:
        """Fix the server of ``model`` for the job (begin_job): its home for ``preferred``.

        Raises:
            ExternalFailure: no server serves it.
        """
        self.assignment[model] = name = self.home(model, preferred)
        return name

    async def discover(self, models: Collection[str]) -> None:
        """Ask every configured server what it serves (begin_job, worker threads).

        With ``discovery.saturatedAbove``, the load is read twice, ``SATURATION_WINDOW``
        (``framework/sonic/_pool.py``) seconds apart, and a saturated server is skipped (a
        later survey lets it join). With ``discovery.wait``, while a model of ``models`` is
        served by no server, the servers are asked again every ``BEGIN_POLL`` s (at most) for up to
        that many seconds, with one progress line per round naming the models and what each
        server answered. A server that cannot be reached is skipped with a warning.
        """
        params = self.discovery
        self._wanted = tuple(models)  # asked of a server without a repository index (KServe's)
        start = self._clock()
        while True:
            answers = await self._survey_now()
            if params.saturated_above > 0:
                self._loads = {name: a.load for name, a in answers.items() if a.load is not None}
                await trio.sleep(SATURATION_WINDOW)
                answers = await self._survey_now()
            self.apply_survey(answers, at_begin=True)
            missing = sorted(m for m in models if not any(m in served for served in self.served.values()))
            waited = self._clock() - start
            if not missing or waited >= params.wait or not self.servers:  # no server: none can appear
                break
            logger.info(
                "TritonService: waiting for a server of model(s) %s (%.0f s of %g s, discovery.wait): %s",
                ", ".join(missing),
                waited,
                params.wait,
                "; ".join(f"'{name}' at {self.servers[name].address} {a.describe()}" for name, a in answers.items())
                or "no server configured",
            )
            await trio.sleep(min(BEGIN_POLL, params.wait - waited))
        for name, answer in answers.items():
            if answer.models is None:
                logger.warning(
                    "TritonService: server '%s' (%s) cannot be reached, skipped: %s",
                    name,
                    self.servers[name].address,
                    answer.error,
                )

    async def _survey_now(self) -> dict[str, Answer]:
        load = self._load_reader()
        servers = list(self.servers.values())
        ready = functools.partial(ready_models, wanted=self._wanted)
        answers: dict[str, Answer] = await trio.to_thread.run_sync(survey, servers, ready, load)
        return answers

    def _load_reader(self) -> Callable[[str], Any] | None:
        """server name -> its shared gRPC client, made here (trio thread) for the survey's
        thread; None when saturation is not measured."""
        if self.discovery.saturated_above <= 0:
            return None
        clients = {name: self.grpc_client(name) for name in self.servers}
        return clients.__getitem__

    def apply_survey(self, answers: Mapping[str, Answer], at_begin: bool = False) -> None:
        """What the servers answered changes the routing (trio thread).

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

    def _survey_due(self) -> bool:
        """Whether a request should survey the servers first (marked as surveying)."""
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

    # -- the one verb: route -----------------------------------------------------------

    def home(self, model: str, preferred: str = "") -> str:
        """Name of the model's own server: ``preferred`` if that serves it, else its assigned
        server, else the first that serves it (configured servers first, the fallback last).

        Raises:
            ExternalFailure: no server serves it (names the servers tried).
        """
        if preferred and model in self._served(preferred):
            return preferred
        if model in self.assignment:
            return self.assignment[model]
        for name in [*self.served, FALLBACK_SERVER]:
            if model in self._served(name):
                return name
        raise ExternalFailure(f"TritonService: model '{model}' is served by no server ({self.tried()})", model=model)

    def route_nowait(self, model: str, preferred: str = "") -> ServerInfo:
        """The server for a new request of ``model``, from what is known now (no probe): its
        ``preferredServer`` while in service; else the least loaded of the configured servers
        in service that serve it and are not saturated; else its home if in service; else
        the least loaded saturated one; else another in service; else its home (the retries
        decide)."""
        home = self.home(model, preferred)
        if preferred and home == preferred and self.healthy(home):
            return self.server(home)
        spread = [name for name in self.servers if model in self.served.get(name, ()) and self.healthy(name)]
        calm = [name for name in spread if not self.saturated(name)]
        if calm:
            return self.server(self._least_loaded(calm) if len(calm) > 1 else calm[0])
        if self.healthy(home):
            return self.server(home)
        if spread:
            return self.server(self._least_loaded(spread))
        for name in self.candidates(model):
            if name != home and self.healthy(name):
                return self.server(name)
        return self.server(home)

    def route_steps(self, model: str, preferred: str = "") -> Steps[ServerInfo]:
        """:meth:`route_nowait`, after probing an out-of-service server whose probe is due
        (a :class:`~framework.sonic._waits.Blocking` step; see the module docstring)."""
        if self._survey_due():
            load = self._load_reader()
            answers: dict[str, Answer] = {}
            try:
                answers = yield Blocking(functools.partial(survey, list(self.servers.values()), ready_models, load))
            finally:
                self._surveying = False
            self.apply_survey(answers)
        probe = self._probe_due(model, preferred)
        if probe is not None:
            ok = False
            try:
                ok = yield Blocking(functools.partial(_probe, self.grpc_client(probe), model, self.probe_timeout))
            finally:
                self._probed(probe, ok)
        return self.route_nowait(model, preferred)

    async def route(self, model: str, preferred: str = "") -> ServerInfo:
        """:meth:`route_steps` in trio (a probe on a worker thread)."""
        server: ServerInfo = await drive(self.route_steps(model, preferred))
        return server

    def route_blocking(self, model: str, preferred: str = "") -> ServerInfo:
        """:meth:`route_steps` on the calling thread (a probe blocks it)."""
        return drive_blocking(self.route_steps(model, preferred))

    def candidates(self, model: str) -> list[str]:
        """Servers that serve ``model``: configured ones in order, then a running fallback."""
        names = [name for name in self.servers if model in self.served.get(name, ())]
        if self.fallback.serves(model):
            names.append(FALLBACK_SERVER)
        return names

    def _served(self, name: str) -> frozenset[str] | set[str]:
        return self.fallback.models if name == FALLBACK_SERVER else self.served.get(name, set())

    # -- servers and channels ----------------------------------------------------------

    def server(self, name: str) -> ServerInfo:
        """The :class:`~framework.sonic.ServerInfo` of a configured server or of the fallback.

        Raises:
            ExternalFailure: ``name`` is the fallback and it is not running.
        """
        if name == FALLBACK_SERVER:
            info = self.fallback.info()
            if info is None:
                raise ExternalFailure("TritonService: the fallback server is not running", server=FALLBACK_SERVER)
            return info
        return self.servers[name]

    def address(self, name: str) -> str:
        """``host:port`` of a server, or ``"not running"`` (a fallback never started)."""
        try:
            return self.server(name).address
        except ExternalFailure:
            return "not running"

    def grpc_client(self, server_name: str) -> grpcclient.InferenceServerClient:
        """The shared ``InferenceServerClient`` of a server (its methods are thread-safe)."""
        client = self._grpc_clients.get(server_name)
        if client is None:
            client = self._grpc_clients[server_name] = self.server(server_name).open_client()
        return client

    def close(self) -> None:
        """Close the shared clients. Never raises."""
        for grpc_client in self._grpc_clients.values():
            try:
                grpc_client.close()
            except Exception:  # noqa: BLE001
                pass
        self._grpc_clients = {}

    # -- retries (the rest of the Router of framework.sonic._retry) --------------------

    def may_retry(self, server_name: str, model: str) -> bool:
        """Whether a ``sameServer`` retry may go to ``server_name``: in service, or nothing else."""
        if self.healthy(server_name):
            return True
        others = [n for n in self.candidates(model) if n != server_name and self.healthy(n)]
        fallback_possible = server_name != FALLBACK_SERVER and self.fallback.enabled and not self.fallback.error
        return not others and not fallback_possible

    def other_server(self, model: str, exclude: set[str]) -> ServerInfo | None:
        """A configured server in service that serves ``model`` and is not in ``exclude``."""
        for name in self.servers:
            if name not in exclude and model in self.served.get(name, ()) and self.healthy(name):
                return self.server(name)
        return None

    def fallback_possible(self) -> bool:
        """Whether a ``fallback`` retry may be tried: enabled, not failed to start, not hung."""
        fallback = self.fallback
        if not fallback.enabled or fallback.error:
            return False
        return not fallback.is_running() or self.healthy(FALLBACK_SERVER)

    def fallback_steps(self, model: str) -> Steps[ServerInfo | None]:
        """The steps that give the fallback server, made to serve ``model`` (started or
        loaded on demand).

        Concurrent callers wait for one start. Returns None if the fallback is disabled or
        running but out of service (hung).

        Raises:
            ExternalFailure: it cannot start (with its log tail); the same at every call.
        """
        if not self.fallback.enabled:
            return None
        yield from self.fallback.serve_steps(model)
        return self.server(FALLBACK_SERVER) if self.healthy(FALLBACK_SERVER) else None

    def _fallback_started(self) -> None:
        # A new fallback process: its old channel and health are stale. Replace, never mutate.
        self._grpc_clients = {k: v for k, v in self._grpc_clients.items() if k != FALLBACK_SERVER}
        self.health = {**self.health, FALLBACK_SERVER: ServerHealth()}

    # -- health ------------------------------------------------------------------------

    def record(self, server_name: str, ok: bool, why: str = "") -> None:
        """Record the outcome of a call or probe on ``server_name`` (trio thread)."""
        health = self.health.setdefault(server_name, ServerHealth())
        if ok:
            if not health.healthy:
                logger.warning(
                    "TritonService: server '%s' (%s) is back in service", server_name, self.address(server_name)
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
            self.address(server_name),
            why,
            self.probe_interval,
        )

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

    def _least_loaded(self, names: list[str]) -> str:
        """The server of least ``(outstanding + 1) x latency`` (the first configured on ties)."""
        records = [self.health.get(name) or ServerHealth() for name in names]
        known = [r.latency for r in records if r.latency is not None]
        default = sum(known) / len(known) if known else 1.0
        costs = [(r.outstanding + 1) * (default if r.latency is None else r.latency) for r in records]
        return names[costs.index(min(costs))]

    def saturated(self, name: str) -> bool:
        """Whether ``name`` was saturated at the last survey (``discovery.saturatedAbove``)."""
        health = self.health.get(name)
        return health is not None and health.saturated

    def healthy(self, name: str) -> bool:
        """Whether ``name`` is in service (a server without record is)."""
        health = self.health.get(name)
        return health is None or health.healthy

    def _probe_due(self, model: str, preferred: str) -> str | None:
        """An out-of-service server of ``model`` whose probe is due (marked as probing), or None."""
        now = self._clock()
        home = self.home(model, preferred)
        for name in [home, *self.candidates(model)]:
            health = self.health.get(name)
            if health is None or health.healthy or health.probing or now - health.last_probe < self.probe_interval:
                continue
            if name == FALLBACK_SERVER and not self.fallback.serves(model):
                continue  # a dead fallback is restarted by the fallback action, not probed
            health.probing, health.last_probe = True, now
            return name
        return None

    def _probed(self, name: str, ok: bool) -> None:
        health = self.health[name]
        health.probing = False
        if ok:
            self.record(name, True)
        else:
            logger.debug("TritonService: server '%s' still out of service (probe failed)", name)

    # -- for statistics and messages ---------------------------------------------------

    def health_report(self) -> dict[str, dict[str, Any]]:
        """Per server with a health record: ``address``, ``healthy``, ``outages``, ``failures``
        (consecutive, now), ``last_error``, ``tries`` (started during the job) and
        ``latency_ms`` (moving average of successful tries; None without one), ``queue_us``
        and ``saturated`` (the last survey's; None and False without one) (JSON-ready)."""
        return {
            name: {
                "address": self.address(name),
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


def ready_models(server: ServerInfo, wanted: Iterable[str] = ()) -> set[str] | str:
    """The READY models of ``server`` (blocking), or the reason it cannot be asked.

    Its repository index (Triton's, MLServer's); a server without one (KServe's) is asked
    whether each of ``wanted`` is ready (``framework.sonic._oip``).
    """
    from tritonclient.utils import InferenceServerException

    try:
        client = server.open_client()
    except Exception as exc:  # noqa: BLE001 - e.g. unreadable certificate files
        return f"{type(exc).__name__}: {exc}"
    try:
        index = client.get_model_repository_index(as_json=True, client_timeout=PROBE_TIMEOUT)
    except InferenceServerException as exc:
        if unimplemented(exc):
            return ready_by_model(client, wanted, PROBE_TIMEOUT)
        return f"{exc.status()}: {exc.message()}"
    finally:
        client.close()
    return {m["name"] for m in index.get("models", []) if m.get("state") in READY_STATES}


def _probe(client: grpcclient.InferenceServerClient, model: str, timeout: float) -> bool:
    """Blocking: is the server ready and ``model`` on it ready? (False if it does not answer)."""
    from tritonclient.utils import InferenceServerException

    try:
        return bool(
            client.is_server_ready(client_timeout=timeout) and client.is_model_ready(model, client_timeout=timeout)
        )
    except InferenceServerException:
        return False
