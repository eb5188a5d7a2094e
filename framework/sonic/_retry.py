"""Retries and failover of SONIC requests: which failures are retried, where, how often.

CMSSW counterparts: ``allowedTries`` of SonicClientBase (cms-sw/cmssw PR #29503) and the
retry actions of PR #51643 (``RetrySameServerAction``, ``RetryActionDiffServer``,
``RetryFallbackServerAction``). A module's ``Client.retries`` is an ordered list of
actions, tried one after the other when an attempt fails with a *recoverable* error:

* ``sameServer``: the server that just failed, ``maxTries`` times, while TritonService
  still counts it healthy (or nothing else serves the model);
* ``otherServer``: another healthy configured server that serves the model, up to
  ``maxTries`` different ones;
* ``fallback``: the local fallback server, started by TritonService on demand (once, for
  all concurrent requests) if it is not running.

The default is CMSSW's, no retry (``allowedTries = 0``); ``allowedTries = N`` is
``[sameServer x (N - 1)]`` and later CMSSW releases' ``Retry`` VPSet is read as these
actions (:func:`parse_retries`); ``RECOMMENDED_RETRIES`` (``recommended_retries()`` in
a config) is pysonic's policy with failover.

Each action waits ``backoff * backoffFactor**k`` seconds before its k-th try (k from 0),
with ``trio.sleep`` in Async/PseudoAsync mode, so other events keep running; Sync mode
blocks, as it does for the call itself. The loop runs inside the event's external wait
(the framework's trio task), never in a gRPC callback thread (CMSSW issue #46703: retries
outside the framework's context could not reach the service).

Recoverable: gRPC UNAVAILABLE (connection refused, server gone, TLS handshake failed),
DEADLINE_EXCEEDED (``Client.timeout``), server-side INTERNAL/UNKNOWN errors,
RESOURCE_EXHAUSTED, ABORTED and CANCELLED by the server. Not retried: everything else,
i.e. programming errors (INVALID_ARGUMENT, NOT_FOUND for an unknown model or input,
shape/dtype mismatches found by the client, malformed outputs).

tenacity (>= 8.4 detects trio) was considered; its model of one callable retried under one
stop/wait rule does not express an ordered chain of actions each with its own target, and
Sync mode needs the same policy without an event loop, so the policy is kept here, small.

The loop is written once, as a generator of steps (:meth:`RetryPolicy.steps`; the steps
and their drivers are ``framework.sonic._waits``): the modes differ only in how they wait.

Direction: the loop knows servers (:class:`~framework.sonic.ServerInfo`) and the steps, nothing else of the
package.
A :class:`RetryPolicy` is built once per client and hands the loop what it drives: a
:class:`Router` (TritonService's routing, or ``SingleServer`` for a client connected
by hand) and the callables that count and describe failures. The try itself is a callable
``attempt(server, grpc_client)`` given by the request.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import framework.config as cms
from framework.utilities import ConfigurationError, ExternalFailure

from ._server_info import FALLBACK_SERVER, ServerInfo
from ._waits import Attempt, Sleep, Steps, drive, drive_blocking, grpc_status, ready

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = [
    "ACTIONS",
    "DEADLINE_STATUS",
    "CMSSW_RETRY_TYPES",
    "DEFAULT_RETRIES",
    "RECOMMENDED_RETRIES",
    "RECOVERABLE_STATUSES",
    "RetryAction",
    "RetryPolicy",
    "Router",
    "SingleServer",
    "is_recoverable",
    "parse_retries",
    "recommended_retries",
    "retries_pset",
    "reason",
    "retry_description",
]

logger = logging.getLogger("pysonic.sonic")

ACTIONS = ("sameServer", "otherServer", "fallback")
DEADLINE_STATUS = "DEADLINE_EXCEEDED"  # the gRPC status of a client timeout
RECOVERABLE_STATUSES = frozenset(
    ("UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "UNKNOWN", "RESOURCE_EXHAUSTED", "ABORTED", "CANCELLED")
)  # gRPC status names (framework.sonic._waits.grpc_status)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RetryAction:
    """One entry of ``Client.retries``.

    Attributes:
        action: ``"sameServer"``, ``"otherServer"`` or ``"fallback"``.
        max_tries: tries this action may add to a request.
        backoff: seconds before its first try.
        backoff_factor: multiplies the wait before each further try of this action.
    """

    action: str
    max_tries: int = 1
    backoff: float = 0.0
    backoff_factor: float = 2.0

    def describe(self) -> str:
        return f"{self.action} x{self.max_tries}"


# The default, CMSSW's (allowedTries = 0): no retry.
DEFAULT_RETRIES: tuple[RetryAction, ...] = ()

# pysonic's recommended policy (not the default, which is CMSSW's): sameServer twice
# (0.1 s, then 0.2 s later: a glitch or a restart of a few 100 ms), then one other server,
# then the local fallback. Give it as Client.retries = RECOMMENDED_RETRIES_PSET.
RECOMMENDED_RETRIES = (
    RetryAction("sameServer", 2, 0.1, 2.0),
    RetryAction("otherServer", 1, 0.0, 2.0),
    RetryAction("fallback", 1, 0.0, 2.0),
)

# The retry types of CMSSW releases after allowedTries (its Client.Retry VPSet), as actions.
CMSSW_RETRY_TYPES = {
    "RetrySameServerAction": "sameServer",
    "RetryActionDiffServer": "otherServer",
    "TritonRetryActionDifferentServer": "otherServer",
    "RetryFallbackServerAction": "fallback",
    "TritonRetryFallbackServerAction": "fallback",
}


def retry_description() -> cms.ParameterSetDescription:
    """One item of the ``Client.retries`` VPSet."""
    desc = cms.ParameterSetDescription()
    desc.add("action", cms.untracked.string, f"{' | '.join(ACTIONS)}")
    desc.add("maxTries", cms.untracked.uint32(1), "tries this action may add to one request")
    desc.add("backoff", cms.untracked.double(0.0), "seconds to wait before the action's first try")
    desc.add("backoffFactor", cms.untracked.double(2.0), "multiplies the wait before each further try")
    return desc


def retries_pset(actions: Sequence[RetryAction]) -> list[dict[str, Any]]:
    """``actions`` as ``Client.retries`` VPSet items (e.g. of ``RECOMMENDED_RETRIES``)."""
    return [
        {"action": a.action, "maxTries": a.max_tries, "backoff": a.backoff, "backoffFactor": a.backoff_factor}
        for a in actions
    ]


def recommended_retries() -> cms.VPSet:
    """``RECOMMENDED_RETRIES`` as a config's ``Client.retries`` (typed, untracked).

    For example::

        Client = cms.PSet(..., retries = recommended_retries())
    """
    vpset: cms.VPSet = cms.untracked.VPSet(
        *[
            cms.PSet(
                action=cms.untracked.string(a.action),
                maxTries=cms.untracked.uint32(a.max_tries),
                backoff=cms.untracked.double(a.backoff),
                backoffFactor=cms.untracked.double(a.backoff_factor),
            )
            for a in RECOMMENDED_RETRIES
        ]
    )
    return vpset


def cmssw_retry_description() -> cms.ParameterSetDescription:
    """One item of the ``Client.Retry`` VPSet of CMSSW releases after ``allowedTries``."""
    desc = cms.ParameterSetDescription()
    desc.add("retryType", cms.string("RetrySameServerAction"), " | ".join(CMSSW_RETRY_TYPES))
    desc.add("allowedTries", cms.untracked.uint32(0), "RetrySameServerAction: tries in all; 0 or 1 = none")
    return desc


def parse_retries(
    items: Sequence[Any], allowed_tries: int, what: str, cmssw_retry: Sequence[Any] = ()
) -> tuple[RetryAction, ...]:
    """The retry policy of a client from its validated ``Client`` PSet.

    CMSSW's ``allowedTries`` (its current name, default 0) and pysonic's ``retries`` are two
    spellings of one policy: ``allowedTries = N > 1`` is ``retries = [sameServer x (N - 1)]``
    with no wait (what CMSSW does: the call is repeated on its server); ``retries`` also
    fails over to other servers and the fallback, with backoff. Giving both is an error.
    Nothing (CMSSW's default) = no retry. The ``Retry`` VPSet of later CMSSW releases is
    read as the same actions (:data:`CMSSW_RETRY_TYPES`).

    Args:
        items: the ``Client.retries`` VPSet items (``action``, ``maxTries``, ``backoff``,
            ``backoffFactor``).
        allowed_tries: ``Client.allowedTries``: tries in all on the same server.
        what: the client, for messages.
        cmssw_retry: the items of a later CMSSW release's ``Client.Retry`` VPSet
            (``retryType``, ``allowedTries``), if given.

    Raises:
        ConfigurationError: unknown action or retry type, negative backoff, or more than
            one of ``retries``, ``allowedTries`` > 1 and ``Retry`` ask for retries; names the item.
    """
    from_cmssw = _parse_cmssw_retry(cmssw_retry, what)
    given = [
        name
        for name, asked in (("retries", bool(items)), ("allowedTries", allowed_tries > 1), ("Retry", bool(from_cmssw)))
        if asked
    ]
    if len(given) > 1:
        raise ConfigurationError(
            f"{what}: Client.{' and Client.'.join(given)} both ask for retries; give one of them "
            "(allowedTries = N is retries = [sameServer x (N - 1)])"
        )
    if allowed_tries > 1:
        return (RetryAction("sameServer", allowed_tries - 1, 0.0, 1.0),)
    if from_cmssw:
        return from_cmssw
    actions = []
    for index, item in enumerate(items):
        if item.action not in ACTIONS:
            raise ConfigurationError(
                f"{what}: Client.retries[{index}].action '{item.action}' is not one of {', '.join(ACTIONS)}"
            )
        if item.backoff < 0 or item.backoffFactor < 0:
            raise ConfigurationError(f"{what}: Client.retries[{index}]: backoff and backoffFactor must be >= 0")
        actions.append(RetryAction(item.action, item.maxTries, item.backoff, item.backoffFactor))
    return tuple(actions)


def is_recoverable(exc: BaseException) -> bool:
    """Whether another try (here or elsewhere) may succeed after ``exc``: an
    :class:`~framework.ExternalFailure`'s ``retryable``; for tritonclient's ``InferenceServerException``,
    whether its gRPC status is one of ``RECOVERABLE_STATUSES``."""
    if isinstance(exc, ExternalFailure):
        return exc.retryable
    return grpc_status(exc) in RECOVERABLE_STATUSES


def reason(exc: BaseException) -> str:
    """A short cause for logs: ``"StatusCode.UNAVAILABLE: failed to connect..."`` (the
    status as gRPC prints it, then the message)."""
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, InferenceServerException):
        return f"{exc.status() or 'error'}: {exc.message()}"
    if isinstance(exc, ExternalFailure) and exc.status is not None:
        return f"StatusCode.{exc.status}: {exc.args[0]}"
    return str(exc)


class Router(Protocol):
    """What the retry loop asks of the servers: routing, health, load and the fallback.

    ``begin(server)`` / ``end(server, latency)`` frame every try (``latency``: its seconds if
    it succeeded, else None): the router's outstanding requests and recent latency per
    server, which spread requests over several servers of a model.

    Implemented by TritonService's routing (``framework.sonic._routing.Routing``) and, for
    a client connected by hand, by ``SingleServer``.
    """

    def route_steps(self, model: str, preferred: str) -> Steps[ServerInfo]: ...
    def grpc_client(self, server_name: str) -> grpcclient.InferenceServerClient: ...
    def may_retry(self, server_name: str, model: str) -> bool: ...
    def other_server(self, model: str, exclude: set[str]) -> ServerInfo | None: ...
    def fallback_possible(self) -> bool: ...
    def fallback_steps(self, model: str) -> Steps[ServerInfo | None]: ...
    def record(self, server_name: str, ok: bool, why: str = "") -> None: ...
    def begin(self, server_name: str) -> None: ...
    def end(self, server_name: str, latency: float | None) -> None: ...


class SingleServer:
    """The :class:`Router` of a client connected by hand: one server, no health, no fallback.

    Every request goes to ``server``; ``sameServer`` retries go there too, other actions
    have no target.
    """

    def __init__(self, server: ServerInfo, grpc_client: grpcclient.InferenceServerClient) -> None:
        self.server = server
        self._grpc_client = grpc_client

    def route_steps(self, model: str, preferred: str) -> Steps[ServerInfo]:
        return ready(self.server)

    def grpc_client(self, server_name: str) -> grpcclient.InferenceServerClient:
        return self._grpc_client

    def may_retry(self, server_name: str, model: str) -> bool:
        return True

    def other_server(self, model: str, exclude: set[str]) -> ServerInfo | None:
        return None

    def fallback_possible(self) -> bool:
        return False

    def fallback_steps(self, model: str) -> Steps[ServerInfo | None]:
        return ready(None)

    def record(self, server_name: str, ok: bool, why: str = "") -> None:
        pass

    def begin(self, server_name: str) -> None:
        pass

    def end(self, server_name: str, latency: float | None) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """A client's ``Client.retries`` and what the retry loop drives; built once per client.

    Attributes:
        actions: the retry actions, in order.
        router: chooses each try's server, records outcomes, provides the fallback.
        model: the model name; preferred: ``Client.preferredServer`` (asked of the router).
        count_retry: called with ``failover`` (a different server) for every retry.
        count_error: called once for every request that fails for good.
        failure: ``failure(exc, server, what)``: the ExternalFailure for the last error of a
            request (``what`` names model, module and event), its fields set.
    """

    actions: tuple[RetryAction, ...]
    router: Router
    model: str
    preferred: str
    count_retry: Callable[[bool], None]
    count_error: Callable[[], None]
    failure: Callable[[BaseException, ServerInfo, str], ExternalFailure]

    def steps(self, what: str) -> Steps[Any]:
        """The retry loop of one request, as a generator of steps (``framework.sonic._waits``):
        route, then try (an :class:`Attempt` step) until a try succeeds, with the retries'
        backoff (:class:`Sleep`) and the fallback server's start between; returns the
        successful try's result. Written once for the three modes: :meth:`run` and
        :meth:`run_blocking` only drive it.

        Args:
            what: names model, module and event, for logs and errors.

        Raises:
            ExternalFailure: a non-recoverable error, the tries are exhausted, or the fallback
                server needed for a retry cannot start (``tries``, ``retryable`` and the last
                error's ``server`` and ``status`` set).
            trio.Cancelled: thrown in by the driver, propagated unchanged (the try's
                ``end`` is still recorded).
        """
        router = self.router
        retrier: _Retrier | None = None  # made on the first failure only: the fast path needs none
        server = yield from router.route_steps(self.model, self.preferred)
        while True:
            router.begin(server.name)
            started = time.perf_counter()
            latency = None
            try:
                result = yield Attempt(server, router.grpc_client(server.name))
                latency = time.perf_counter() - started
            except Exception as exc:  # noqa: BLE001 - classified: retried or raised as ExternalFailure
                retrier = retrier or _Retrier(self, what)
                step = retrier.failed_on(server, exc)
            else:
                router.record(server.name, True)
                return result
            finally:
                router.end(server.name, latency)
            while step.target is _FALLBACK:
                try:
                    target = yield from router.fallback_steps(self.model)
                except ExternalFailure as err:
                    raise retrier.fallback_failed(err) from None
                step = retrier.skip() if target is None else _Step(step.action, target, step.delay)
            yield Sleep(step.delay)  # also 0: a checkpoint between tries
            server = step.target

    async def run(self, what: str, attempt: Callable[[ServerInfo, Any], Awaitable[T]]) -> T:
        """:meth:`steps` in trio, ``await attempt(server, grpc_client)`` for each try
        (``Async``; ``PseudoAsync`` passes an attempt that runs on a worker thread)."""
        result: T = await drive(self.steps(what), attempt)
        return result

    def run_blocking(self, what: str, attempt: Callable[[ServerInfo, Any], T]) -> T:
        """:meth:`steps` on the calling thread (``Sync``): tries and backoff block."""
        result: T = drive_blocking(self.steps(what), attempt)
        return result


_FALLBACK = object()  # a step whose server the router must provide (maybe start) first


@dataclasses.dataclass
class _Step:
    action: str
    target: Any  # ServerInfo, or _FALLBACK
    delay: float


class _Retrier:
    """The retry state of one request: which action is next and how many tries it has left."""

    def __init__(self, policy: RetryPolicy, what: str) -> None:
        self.policy = policy
        self.what = what
        self.index = 0  # the action in use
        self.used = 0  # tries of that action so far
        self.tries = 0  # failed tries so far
        self.failed: list[str] = []  # servers that failed this request, in order
        self.last: tuple[ServerInfo, BaseException] | None = None  # the last failure

    def failed_on(self, server: ServerInfo, exc: BaseException) -> _Step:
        """Record the failure of a try on ``server``; log and return the next step, or
        raise the final error."""
        self.tries += 1
        self.last = (server, exc)
        recoverable = is_recoverable(exc)
        if recoverable:
            self.policy.router.record(server.name, False, reason(exc))
        self.failed.append(server.name)
        if not recoverable:
            raise self._final(False) from None
        return self.next_step()

    def next_step(self) -> _Step:
        """The next action's step (logged and counted), or raise the final error."""
        assert self.last is not None  # set by the failure that led here
        server, exc = self.last
        actions = self.policy.actions
        while self.index < len(actions):
            action = actions[self.index]
            target = self._target(action, server) if self.used < action.max_tries else None
            if target is None:
                self.index, self.used = self.index + 1, 0
                continue
            step = _Step(action.action, target, action.backoff * action.backoff_factor**self.used)
            self.used += 1
            self._announce(server, exc, step)
            return step
        raise self._final(True) from None

    def skip(self) -> _Step:
        """The current action turned out unusable (the fallback could not be had): the next."""
        self.index, self.used = self.index + 1, 0
        return self.next_step()

    def _target(self, action: RetryAction, server: ServerInfo) -> Any:
        model, router = self.policy.model, self.policy.router
        if action.action == "sameServer":
            return server if router.may_retry(server.name, model) else None
        if action.action == "otherServer":
            return router.other_server(model, set(self.failed))
        return _FALLBACK if router.fallback_possible() else None

    def _announce(self, server: ServerInfo, exc: BaseException, step: _Step) -> None:
        if step.target is _FALLBACK:
            failover, where = server.name != FALLBACK_SERVER, "the fallback server"
        else:
            failover = step.target.name != server.name
            where = step.target.describe() if failover else "the same server"
        self.policy.count_retry(failover)
        logger.warning(
            "%s: try %d on %s failed (%s); retry on %s (%s) in %.3g s",
            self.what,
            self.tries,
            server.describe(),
            reason(exc),
            where,
            step.action,
            step.delay,
        )

    def _final(self, recoverable: bool) -> ExternalFailure:
        assert self.last is not None  # set by the failure that led here
        server, exc = self.last
        self.policy.count_error()
        error = self.policy.failure(exc, server, self.what)
        actions = self.policy.actions
        if not recoverable or self.tries == 1 and not actions:
            error.tries = self.tries
            return error
        servers = ", ".join(dict.fromkeys(self.failed))
        policy = ", ".join(a.describe() for a in actions) or "none"
        return self._error(
            f"{error.args[0]}; gave up after {self.tries} tries (servers: {servers}; Client.retries: {policy})", True
        )

    def fallback_failed(self, err: ExternalFailure) -> ExternalFailure:
        """The final error when the fallback server needed for a retry cannot serve."""
        assert self.last is not None  # set by the failure that led here
        self.policy.count_error()
        return self._error(
            f"{self.what}: failover to the fallback server after {self.tries} "
            f"failed tries (last: {reason(self.last[1])}) is impossible: {err.args[0]}",
            False,
        )

    def _error(self, message: str, retryable: bool) -> ExternalFailure:
        """A final error about the last failure, with its fields."""
        assert self.last is not None  # set by the failure that led here
        server, exc = self.last
        status = grpc_status(exc)
        model = self.policy.model
        return ExternalFailure(
            message, model=model, server=server.name, status=status, tries=self.tries, retryable=retryable
        )


def _parse_cmssw_retry(items: Sequence[Any], what: str) -> tuple[RetryAction, ...]:
    actions = []
    for index, item in enumerate(items):
        action = CMSSW_RETRY_TYPES.get(item.retryType)
        if action is None:
            raise ConfigurationError(
                f"{what}: Client.Retry[{index}].retryType '{item.retryType}' is not one of "
                f"{', '.join(CMSSW_RETRY_TYPES)}"
            )
        tries = item.allowedTries - 1 if action == "sameServer" else max(item.allowedTries, 1)
        if tries > 0:
            actions.append(RetryAction(action, tries, 0.0, 1.0))
    return tuple(actions)
