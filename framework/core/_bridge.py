"""Re-entering trio from other threads: the completion half of ExternalWork.

External work (a gRPC call, a thread, a device) finishes on a thread that trio does not
own. :class:`ThreadSafeFuture` is the one place where such a completion comes back into
the trio run. The rule, from trio's docs on ``TrioToken.run_sync_soon``:

* the foreign thread calls :meth:`ThreadSafeFuture.set_result` /
  :meth:`~ThreadSafeFuture.set_exception`, which only queues the outcome in the run's
  inbox and, if no delivery is pending, schedules one with ``TrioToken.run_sync_soon``;
  the delivery runs on the trio thread, stores each outcome and wakes its waiter, and
  never raises (an exception there would crash the whole run);
* a waiter that was cancelled has gone away: the outcome is stored and nobody reads it;
* after the run has finished, ``run_sync_soon`` raises ``trio.RunFinishedError``: the
  outcome is dropped, because nobody can be waiting any more;
* the completion may also come on the trio thread itself (``async_infer`` calls back in
  the caller's thread when the call is already done): ``run_sync_soon`` is fine there too.

:class:`WaitingTaskHolder` is CMSSW's ``edm::WaitingTaskWithArenaHolder`` built on it: an
ExternalWork module's ``acquire`` gets one and calls ``done_waiting`` when its work is done.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import outcome
import trio

__all__ = ["ThreadSafeFuture", "WaitingTaskHolder"]


class ThreadSafeFuture:
    """A one-shot result that any thread may set and one trio task awaits.

    Must be created inside a trio run (it belongs to that run's ``_Inbox``).
    The first ``set_*`` call wins; later ones return False and are ignored.

    Cost: no ``trio.Event``, lock or task list of its own. The waiting task is parked with
    ``trio.lowlevel.wait_task_rescheduled`` and woken with ``reschedule``; the outcomes
    that other threads set in one burst reach the trio thread through ONE
    ``run_sync_soon`` (the run's inbox), so a burst of gRPC completions costs one wake-up
    of the trio thread, not one per completion (a wake-up per completion was a visible
    part of the client's CPU in the per-stage profile, docs/performance.md).
    """

    __slots__ = ("_inbox", "_outcome", "_task", "_claimed")

    def __init__(self) -> None:
        self._inbox = _run_inbox()
        self._outcome: outcome.Outcome[Any] | None = None
        self._task: trio.lowlevel.Task | None = None  # the waiting task, while parked
        self._claimed = False  # guarded by the inbox's lock (the first set_* wins)

    def set_result(self, value: Any = None) -> bool:
        """Complete with ``value``. Callable from any thread. Returns False if already set."""
        return self._inbox.put(self, outcome.Value(value))

    def set_exception(self, exc: BaseException) -> bool:
        """Complete with an exception. Callable from any thread. Returns False if already set."""
        return self._inbox.put(self, outcome.Error(exc))

    def done(self) -> bool:
        """True once the outcome has reached the trio thread."""
        return self._outcome is not None

    def _deliver(self, result: outcome.Outcome[Any]) -> None:
        # Trio thread (the inbox's drain): store and wake, never raise.
        self._outcome = result
        task, self._task = self._task, None
        if task is not None:
            trio.lowlevel.reschedule(task, result)

    async def wait(self, on_cancel: Callable[[], object] | None = None) -> Any:
        """Wait for the outcome and return it (or raise the stored exception).

        Args:
            on_cancel: called on the trio thread if this wait is cancelled before the
                outcome arrived, e.g. ``CallContext.cancel`` of a gRPC call. Its own
                exceptions are suppressed: cancellation must not be masked.

        Raises:
            trio.Cancelled: the wait was cancelled (propagated unchanged).
            BaseException: whatever the external work reported with ``set_exception``.
        """
        if self._outcome is not None:  # arrived already: still a checkpoint, as trio.Event.wait
            await trio.lowlevel.checkpoint()
            return self._outcome.unwrap()
        self._task = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._task = None  # an outcome arriving later is stored, and nobody reads it
            if on_cancel is not None:
                try:
                    on_cancel()
                except Exception:  # noqa: BLE001 - a failing cancel hook must not mask Cancelled
                    pass
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)


class _Inbox:
    """The outcomes other threads hand to one trio run, delivered in bursts.

    ``put`` (any thread) appends under a lock and schedules ``_drain`` with
    ``run_sync_soon`` only if no drain is pending; ``_drain`` (trio thread) takes every
    pending outcome and delivers each. After the run has finished, ``run_sync_soon``
    raises ``trio.RunFinishedError``: the outcome is dropped, nobody can be waiting.
    """

    __slots__ = ("_token", "_lock", "_items", "_pending")

    def __init__(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._lock = threading.Lock()
        self._items: list[tuple[ThreadSafeFuture, outcome.Outcome[Any]]] = []
        self._pending = False

    def put(self, future: ThreadSafeFuture, result: outcome.Outcome[Any]) -> bool:
        with self._lock:
            if future._claimed:
                return False
            future._claimed = True
            self._items.append((future, result))
            if self._pending:
                return True
            self._pending = True
        try:
            self._token.run_sync_soon(self._drain)
        except trio.RunFinishedError:
            pass  # the trio run is over: nobody can be waiting for this any more
        return True

    def _drain(self) -> None:
        with self._lock:
            items, self._items, self._pending = self._items, [], False
        for future, result in items:
            future._deliver(result)


_INBOX: trio.lowlevel.RunVar[_Inbox] = trio.lowlevel.RunVar("pysonic_inbox")


def _run_inbox() -> _Inbox:
    try:
        return _INBOX.get()
    except LookupError:
        inbox = _Inbox()
        _INBOX.set(inbox)
        return inbox


class _Completion:
    """The framework's side of a :class:`WaitingTaskHolder`: what the event's task awaits.

    Kept apart from the holder so that the framework drops its reference to the holder once
    ``acquire`` has returned: the holder then lives exactly as long as the module keeps it
    (a thread, a pool task, a callback), and when the last reference goes without
    ``done_waiting`` the event fails instead of waiting forever (CMSSW: the
    ``WaitingTaskWithArenaHolder``'s last copy runs the waiting task when it is destroyed).
    """

    __slots__ = ("future", "async_fn", "on_cancel", "used")

    def __init__(self) -> None:
        self.future = ThreadSafeFuture()
        self.async_fn: Callable[[], Awaitable[Any]] | None = None
        self.on_cancel: Callable[[], object] | None = None
        self.used = False

    async def wait(self) -> Any:
        if self.async_fn is not None:
            return await self.async_fn()
        return await self.future.wait(self.on_cancel)


class WaitingTaskHolder:
    """What ``acquire(event, holder)`` of an ExternalWork module receives.

    CMSSW's ``edm::WaitingTaskWithArenaHolder``: the module starts non-blocking work and
    tells the framework when it is done, from any thread, with :meth:`done_waiting`. The
    value given there is passed to the module's ``produce(event, result)``. Work that is
    itself trio-native (or a blocking call to run on a worker thread) is handed to the
    framework with :meth:`run_async` instead: the event's own task awaits it in place of
    the ``done_waiting`` signal, and its return value becomes the result.

    Exactly one of ``done_waiting`` or ``run_async`` must be used per acquire. ``acquire``
    may return before: whatever finishes the work (a thread, a pool's task) keeps the
    holder until it calls ``done_waiting``. A holder dropped without either (``acquire``
    kept no reference, or the task that held it ended without calling) fails its event with
    a RuntimeError naming the module, as CMSSW's holder does when its last copy is destroyed.
    """

    __slots__ = ("_completion",)

    def __init__(self) -> None:
        self._completion = _Completion()

    def done_waiting(self, result: Any = None, exception: BaseException | None = None) -> None:
        """Report that the external work is over (CMSSW ``doneWaiting``). Any thread.

        Args:
            result: handed to the module's ``produce(event, result)``.
            exception: if given, the module fails with it instead (``produce`` does not run).
        """
        self._claim("done_waiting")
        if exception is not None:
            self._completion.future.set_exception(exception)
        else:
            self._completion.future.set_result(result)

    def run_async(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Make ``await async_fn(*args)`` this event's external work; its return is the result.

        Nothing starts here (unlike trio's ``nursery.start_soon``, no task is spawned): the
        function is stored, and the event's own task awaits it once ``acquire`` has
        returned, where it would otherwise wait for ``done_waiting``. Cancelling the event
        cancels it there. Call it from ``acquire``.
        """
        self._claim("run_async")
        self._completion.async_fn = lambda: async_fn(*args)

    def on_cancel(self, fn: Callable[[], object]) -> None:
        """Register ``fn`` to abort the external work if the event is cancelled while waiting."""
        self._completion.on_cancel = fn

    def _claim(self, how: str) -> None:
        if self._completion.used:
            raise RuntimeError(f"WaitingTaskHolder.{how}: the holder was already completed")
        self._completion.used = True

    @property
    def used(self) -> bool:
        """True once ``done_waiting`` or ``run_async`` was called."""
        return self._completion.used

    async def wait(self) -> Any:
        """Framework side: wait for the external work and return its result."""
        return await self._completion.wait()

    def __del__(self) -> None:
        # The last reference is gone (any thread): work that was never finished fails its
        # event now rather than leaving it waiting for good. Never raises.
        completion = self._completion
        if not completion.used:
            completion.used = True
            completion.future.set_exception(
                RuntimeError(
                    "the ExternalWork holder was dropped without done_waiting or run_async (acquire() "
                    "started no work, or what it started ended without calling holder.done_waiting)"
                )
            )
