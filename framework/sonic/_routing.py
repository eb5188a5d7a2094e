"""Routing: which server each request goes to (TritonService's part during the job).

CMSSW counterpart: the server choice of ``TritonService`` (HeterogeneousCore/SonicTriton).
:class:`Routing` is the clients' :class:`~framework.sonic._retry.Router`; it decides from
the records of a :class:`~framework.sonic._health.ServerBook` (``Routing.book``: what each
server serves, its health and load, which ``_health`` keeps), and its one verb is
**route**: :meth:`Routing.route_steps` (the steps of ``framework.sonic._waits``: a due
survey or probe is a :class:`~framework.sonic._waits.Blocking` step), driven by
:meth:`Routing.route` (trio) or :meth:`Routing.route_blocking` (``Sync`` mode, begin_job),
and :meth:`Routing.route_nowait` (no probe, never blocks). A model's *home* server
(:meth:`Routing.home`) is its module's ``preferredServer`` if that serves the model, else
the one assigned at begin_job (the first configured server that serves it, else the
fallback). A request goes to its ``preferredServer`` while in service; else to the least
loaded of the configured servers in service that serve the model and are not saturated;
else to its home if in service; else to another in service.

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

Threads: the trio thread, except the blocking probes and surveys (worker thread in trio,
the calling thread in Sync mode) and the fallback's start (see ``_fallback``), whose
``on_start`` replaces the fallback's record and the shared clients rather than mutating them.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import trio

from framework.utilities import ExternalFailure

from ._health import ServerBook
from ._oip import READY_STATES, ready_by_model, unimplemented
from ._pool import SATURATION_WINDOW, Answer, DiscoveryParameters, survey
from ._server_info import FALLBACK_SERVER, ServerInfo
from ._waits import Blocking, Steps, drive, drive_blocking

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = ["PROBE_TIMEOUT", "Fallback", "Routing", "ready_models"]

logger = logging.getLogger("pysonic.sonic")

PROBE_TIMEOUT = 5.0  # seconds per gRPC call when asking a configured server what it serves
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


class Routing:
    """The clients' router: which server a request goes to, and the shared gRPC clients.

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
        book: the :class:`~framework.sonic._health.ServerBook`: the configured servers, what
            each serves, its health and load (the records the choices are made from).
        assignment: model -> the name of its server at begin_job.
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
        self.discovery = discovery or DiscoveryParameters()
        self.book = ServerBook(servers, health, self.discovery, clock, self.address)
        self._clock = clock
        self._wanted: tuple[str, ...] = ()  # the job's models (discover), for servers without an index
        self.assignment: dict[str, str] = {}
        self.fallback = fallback(self._fallback_started)
        self._grpc_clients: dict[str, grpcclient.InferenceServerClient] = {}

    # -- begin_job ---------------------------------------------------------------------

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
        params, book = self.discovery, self.book
        self._wanted = tuple(models)  # asked of a server without a repository index (KServe's)
        start = self._clock()
        while True:
            answers = await self._survey_now()
            if params.saturated_above > 0:
                book.remember_loads(answers)
                await trio.sleep(SATURATION_WINDOW)
                answers = await self._survey_now()
            book.apply_survey(answers, at_begin=True)
            missing = sorted(m for m in models if not any(m in served for served in book.served.values()))
            waited = self._clock() - start
            if not missing or waited >= params.wait or not book.servers:  # no server: none can appear
                break
            logger.info(
                "TritonService: waiting for a server of model(s) %s (%.0f s of %g s, discovery.wait): %s",
                ", ".join(missing),
                waited,
                params.wait,
                "; ".join(f"'{name}' at {book.servers[name].address} {a.describe()}" for name, a in answers.items())
                or "no server configured",
            )
            await trio.sleep(min(BEGIN_POLL, params.wait - waited))
        for name, answer in answers.items():
            if answer.models is None:
                logger.warning(
                    "TritonService: server '%s' (%s) cannot be reached, skipped: %s",
                    name,
                    book.servers[name].address,
                    answer.error,
                )

    async def _survey_now(self) -> dict[str, Answer]:
        load = self._load_reader()
        servers = list(self.book.servers.values())
        ready = functools.partial(ready_models, wanted=self._wanted)
        answers: dict[str, Answer] = await trio.to_thread.run_sync(survey, servers, ready, load)
        return answers

    def _load_reader(self) -> Callable[[str], Any] | None:
        """server name -> its shared gRPC client, made here (trio thread) for the survey's
        thread; None when saturation is not measured."""
        if self.discovery.saturated_above <= 0:
            return None
        clients = {name: self.grpc_client(name) for name in self.book.servers}
        return clients.__getitem__

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
        for name in [*self.book.served, FALLBACK_SERVER]:
            if model in self._served(name):
                return name
        raise ExternalFailure(
            f"TritonService: model '{model}' is served by no server ({self.book.tried()})", model=model
        )

    def route_nowait(self, model: str, preferred: str = "") -> ServerInfo:
        """The server for a new request of ``model``, from what is known now (no probe): its
        ``preferredServer`` while in service; else the least loaded of the configured servers
        in service that serve it and are not saturated; else its home if in service; else
        the least loaded saturated one; else another in service; else its home (the retries
        decide)."""
        book = self.book
        home = self.home(model, preferred)
        if preferred and home == preferred and book.healthy(home):
            return self.server(home)
        spread = [name for name in book.servers if model in book.served.get(name, ()) and book.healthy(name)]
        calm = [name for name in spread if not book.saturated(name)]
        if calm:
            return self.server(book.least_loaded(calm) if len(calm) > 1 else calm[0])
        if book.healthy(home):
            return self.server(home)
        if spread:
            return self.server(book.least_loaded(spread))
        for name in self.candidates(model):
            if name != home and book.healthy(name):
                return self.server(name)
        return self.server(home)

    def route_steps(self, model: str, preferred: str = "") -> Steps[ServerInfo]:
        """:meth:`route_nowait`, after a survey of the pool or a probe of an out-of-service
        server when one is due (a :class:`~framework.sonic._waits.Blocking` step; see the
        module docstring)."""
        book = self.book
        if book.survey_due():
            load = self._load_reader()
            answers: dict[str, Answer] = {}
            try:
                answers = yield Blocking(functools.partial(survey, list(book.servers.values()), ready_models, load))
            finally:
                book.surveyed()
            book.apply_survey(answers)
        # A dead fallback is restarted by the fallback retry action, not probed.
        names = [self.home(model, preferred), *self.candidates(model)]
        probe = book.probe_due(n for n in names if n != FALLBACK_SERVER or self.fallback.serves(model))
        if probe is not None:
            ok = False
            try:
                ok = yield Blocking(functools.partial(_probe, self.grpc_client(probe), model, book.probe_timeout))
            finally:
                book.probed(probe, ok)
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
        names = [name for name in self.book.servers if model in self.book.served.get(name, ())]
        if self.fallback.serves(model):
            names.append(FALLBACK_SERVER)
        return names

    def _served(self, name: str) -> frozenset[str] | set[str]:
        return self.fallback.models if name == FALLBACK_SERVER else self.book.served.get(name, set())

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
        return self.book.servers[name]

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
        if self.book.healthy(server_name):
            return True
        others = [n for n in self.candidates(model) if n != server_name and self.book.healthy(n)]
        fallback_possible = server_name != FALLBACK_SERVER and self.fallback.enabled and not self.fallback.error
        return not others and not fallback_possible

    def other_server(self, model: str, exclude: set[str]) -> ServerInfo | None:
        """A configured server in service that serves ``model`` and is not in ``exclude``."""
        book = self.book
        for name in book.servers:
            if name not in exclude and model in book.served.get(name, ()) and book.healthy(name):
                return self.server(name)
        return None

    def fallback_possible(self) -> bool:
        """Whether a ``fallback`` retry may be tried: enabled, not failed to start, not hung."""
        fallback = self.fallback
        if not fallback.enabled or fallback.error:
            return False
        return not fallback.is_running() or self.book.healthy(FALLBACK_SERVER)

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
        return self.server(FALLBACK_SERVER) if self.book.healthy(FALLBACK_SERVER) else None

    def _fallback_started(self) -> None:
        # A new fallback process: its old channel and health are stale. Replace, never mutate.
        self._grpc_clients = {k: v for k, v in self._grpc_clients.items() if k != FALLBACK_SERVER}
        self.book.forget(FALLBACK_SERVER)

    # The records of each try, for the retry loop (the Router interface): kept by the book.

    def record(self, server_name: str, ok: bool, why: str = "") -> None:
        """Record the outcome of a call or probe on ``server_name`` (trio thread)."""
        self.book.record(server_name, ok, why)

    def begin(self, server_name: str) -> None:
        """A try starts on ``server_name`` (trio thread)."""
        self.book.begin(server_name)

    def end(self, server_name: str, latency: float | None) -> None:
        """A try on ``server_name`` ended; ``latency``: its seconds if it succeeded (trio thread)."""
        self.book.end(server_name, latency)


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
