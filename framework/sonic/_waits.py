"""The waits of a request's path, and the three ways of doing them (the client's modes).

The retry loop (``_retry``), the routing's probes (``_routing``) and the fallback server's
start (``framework.service._fallback``) are each written once, as a *generator of steps*:
plain Python that decides, and yields a step whenever it must wait for something. What a
step is waited for with is the mode's business, in a driver:

* :func:`drive` (trio; ``Async`` and ``PseudoAsync``): :class:`Sleep` with ``trio.sleep``,
  :class:`Blocking` on a worker thread (``trio.to_thread``, not abandoned on cancellation;
  callers with the same ``lock`` wait in trio, not in threads), :class:`Attempt` with
  ``await attempt(server, grpc_client)``;
* :func:`drive_blocking` (``Sync``, and blocking callers such as begin_job): the same
  steps on the calling thread (``time.sleep``, the blocking call itself, ``attempt(...)``).

``PseudoAsync`` is :func:`drive` with an attempt that runs the blocking try on a worker
thread. A driver sends each step's result back into the generator, or throws the
exception the wait raised (``trio.Cancelled`` included: the generator's ``finally``
clauses run, then it propagates unchanged), and returns the generator's return value.

Also :func:`grpc_status`: the gRPC status of a failed call, read from tritonclient's
``InferenceServerException`` or from our own ``ExternalFailure`` (never from a message).

The bottom of framework.sonic with ``_server_info``: it imports no other file of the package.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

import trio

from framework.utilities import ExternalFailure

__all__ = ["Attempt", "Blocking", "Sleep", "Step", "Steps", "drive", "drive_blocking", "grpc_status", "ready"]

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Sleep:
    """Wait ``seconds`` (a retry's backoff)."""

    seconds: float


@dataclasses.dataclass(frozen=True)
class Blocking:
    """Call ``function()``, which blocks (a probe, the fallback server's start); its result
    is sent back. Callers with the same ``lock`` (a ``trio.Lock``) run one at a time in trio."""

    function: Callable[[], Any]
    lock: trio.Lock | None = None


@dataclasses.dataclass(frozen=True)
class Attempt:
    """One try of the request on ``server`` through ``grpc_client``; its result is sent back."""

    server: Any  # ServerInfo
    grpc_client: Any


Step = Sleep | Blocking | Attempt
Steps = Generator[Step, Any, T]
"""A generator of steps returning T (``yield from`` composes them)."""


class _Run:
    """The sans-IO half of a driver: feeds the generator each wait's outcome, one at a time."""

    __slots__ = ("error", "result", "steps", "value")

    def __init__(self, steps: Steps[Any]) -> None:
        self.steps = steps
        self.value: Any = None  # the outcome of the last wait: its result ...
        self.error: BaseException | None = None  # ... or what it raised
        self.result: Any = None  # the generator's return value, once it returned

    def next(self) -> Step | None:
        """The next step, or None once the generator returned (its value in ``result``)."""
        value, error, self.value, self.error = self.value, self.error, None, None
        try:
            return self.steps.send(value) if error is None else self.steps.throw(error)
        except StopIteration as stop:
            self.result = stop.value
            return None


async def drive(steps: Steps[T], attempt: Callable[[Any, Any], Awaitable[Any]] | None = None) -> T:
    """Run ``steps`` in trio (``Async``, ``PseudoAsync``); ``attempt(server, grpc_client)``
    does the :class:`Attempt` steps.

    Raises:
        whatever the generator raises; ``trio.Cancelled`` propagates unchanged.
    """
    run = _Run(steps)
    while (step := run.next()) is not None:
        try:
            run.value = await _wait(step, attempt)
        except BaseException as exc:  # noqa: BLE001 - thrown into the generator, which decides
            run.error = exc
    result: T = run.result
    return result


async def _wait(step: Step, attempt: Callable[[Any, Any], Awaitable[Any]] | None) -> Any:
    if type(step) is Attempt:
        assert attempt is not None, "an Attempt step needs an attempt"
        return await attempt(step.server, step.grpc_client)
    if type(step) is Sleep:
        await trio.sleep(step.seconds)
        return None
    assert type(step) is Blocking
    if step.lock is None:
        return await trio.to_thread.run_sync(step.function, abandon_on_cancel=False)
    async with step.lock:
        return await trio.to_thread.run_sync(step.function, abandon_on_cancel=False)


def drive_blocking(steps: Steps[T], attempt: Callable[[Any, Any], Any] | None = None) -> T:
    """:func:`drive` on the calling thread (``Sync`` mode, begin_job): every wait blocks."""
    run = _Run(steps)
    while (step := run.next()) is not None:
        try:
            run.value = _wait_blocking(step, attempt)
        except BaseException as exc:  # noqa: BLE001 - thrown into the generator, which decides
            run.error = exc
    result: T = run.result
    return result


def _wait_blocking(step: Step, attempt: Callable[[Any, Any], Any] | None) -> Any:
    if type(step) is Attempt:
        assert attempt is not None, "an Attempt step needs an attempt"
        return attempt(step.server, step.grpc_client)
    if type(step) is Sleep:
        time.sleep(step.seconds)
        return None
    assert type(step) is Blocking
    return step.function()


def ready(value: T) -> Steps[T]:
    """Steps that wait for nothing and return ``value`` (a router without probes)."""
    return value
    yield  # a generator: unreachable, but it makes one


# tritonclient's status of a gRPC error is str(grpc.StatusCode.X), "StatusCode.X": the
# code's name, without parsing anything but that fixed form.
_PREFIX = "StatusCode."


def grpc_status(exc: BaseException) -> str | None:
    """The gRPC status name of a failed call (``"UNAVAILABLE"``, ``"DEADLINE_EXCEEDED"``, ...):
    an ``InferenceServerException``'s status, an :class:`~framework.ExternalFailure`'s ``status``;
    None for anything else or an error without status."""
    from tritonclient.utils import InferenceServerException

    if isinstance(exc, ExternalFailure):
        return exc.status
    if not isinstance(exc, InferenceServerException):
        return None
    value = exc.status()
    if not value:
        return None
    return value[len(_PREFIX) :] if value.startswith(_PREFIX) else str(value)
