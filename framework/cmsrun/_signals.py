"""Ctrl-C and SIGTERM in ``cmsrun``: a graceful first stop, an immediate second one.

The job's trio loop runs on a thread of its own (the "trio thread"); the main thread only
waits for it and receives the signals: Python runs signal handlers on the main thread, and
since that thread never runs a module's code, its handlers run while a module blocks the
trio thread, a worker thread or an ``end_job`` (in Python, or in C with the GIL released:
a sleep, a lock, a socket, a numerical library).

* The first SIGINT or SIGTERM cancels the job through trio (:func:`run_stoppable`), never
  as an exception raised at a random point of a module or of grpc (a KeyboardInterrupt
  raised while grpc held one of its locks has been seen to hang the cleanup for good): events
  in flight are abandoned, output modules remove their unfinished files, services end (the
  fallback server stops); :class:`JobStopped` is raised and cmsrun exits with 128 + the
  signal number.
* A second one, while that cleanup runs or while a module is stuck, ends the process at
  once, as CMSSW's cmsRun does on a second Ctrl-C: one line names what the job was stuck
  in (:func:`stuck_in`: each module call under way with its event and for how long, else
  the transition: a module's ``end_job``, a service's ``end_job``), then, within
  :data:`CLEANUP_DEADLINE` seconds, this process's temporary outputs are removed and what
  it registered for its exit runs (the Triton servers it started are stopped, SIGKILLed
  after :data:`SERVER_GRACE` seconds, with their ``/dev/shm`` regions; ``atexit``: its
  clients' shared-memory regions unlinked), and the process exits with
  ``os._exit(128 + signum)``: a stuck thread cannot hold it.

Limit: a thread that holds the GIL in C and never releases it stops every Python thread,
the main one included; only SIGKILL ends such a process (the servers it started stop by
their watchdogs, and the next job removes its temporary outputs).
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import outcome
import trio

from framework.core import JobReport, run_job
from framework.serving import stop_owned_servers
from framework.utilities import STOP_SIGNALS, owner_tag, stop_signals_handled

__all__ = ["CLEANUP_DEADLINE", "STOP_SIGNALS", "JobStopped", "run_stoppable", "stuck_in"]

log = logging.getLogger("pysonic")

CLEANUP_DEADLINE = 10.0  # seconds the immediate stop gives its cleanup before it exits regardless
SERVER_GRACE = 3.0  # seconds a server gets between SIGTERM and SIGKILL in an immediate stop
_WAIT_STEP = 0.5  # seconds between the main thread's looks at the trio thread


class JobStopped(KeyboardInterrupt):
    """The job was stopped by a signal (``signum``: SIGINT for Ctrl-C, SIGTERM, or SIGHUP)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class _Stop:
    """What the signal handlers share with the trio thread."""

    job: Any
    folders: list[Path]
    received: list[int] = field(default_factory=list)
    token: trio.lowlevel.TrioToken | None = None
    scope: trio.CancelScope | None = None


def run_stoppable(
    job: Any, on_event: Callable[..., None] | None = None, output_folders: Iterable[Path] = ()
) -> JobReport:
    """``run_job(job)`` in its own ``trio.run``, stopped by SIGINT or SIGTERM as the module
    docstring says (from the main thread; elsewhere no signal reaches Python code, and the
    job runs on the calling thread).

    Args:
        on_event: ``run_job``'s ``on_event`` (called on the trio thread).
        output_folders: where the job writes its outputs: an immediate stop removes this
            process's temporary files there (``<name>.tmp-<owner tag>-<n>``).

    Raises:
        JobStopped: after the first signal, once the job was cancelled and cleaned up.
        FrameworkError: as ``run_job``.
    """
    stop = _Stop(job, [Path(f) for f in output_folders])
    if threading.current_thread() is not threading.main_thread():
        return trio.run(_run, stop, on_event)
    result: list[outcome.Outcome[JobReport]] = []
    done = threading.Event()
    context = contextvars.copy_context()  # a new thread starts empty: output_naming(...) lives here

    def run() -> JobReport:
        return trio.run(_run, stop, on_event)

    def trio_thread() -> None:
        try:
            result.append(outcome.Value(context.run(run)))
        except BaseException as exc:  # noqa: BLE001 - carried to the main thread, raised there
            result.append(outcome.Error(exc))
        finally:
            done.set()

    def handler(signum: int, frame: Any) -> None:
        if stop.received:
            _stop_now(stop, signum)  # never returns
        stop.received.append(signum)
        log.warning(
            "cmsrun: %s received: stopping the job (unfinished outputs are removed, the fallback server "
            "is stopped; press Ctrl-C again to stop at once)",
            signal.Signals(signum).name,
        )
        token, scope = stop.token, stop.scope
        if token is not None and scope is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(scope.cancel)

    with stop_signals_handled(handler):
        # A daemon: an immediate stop exits without it, whatever it is stuck in.
        thread = threading.Thread(target=trio_thread, name="pysonic-trio", daemon=True)
        thread.start()
        while not done.wait(_WAIT_STEP):  # the signal handlers run on this thread meanwhile
            pass
        thread.join()
    return result[0].unwrap()


async def _run(stop: _Stop, on_event: Callable[..., None] | None) -> JobReport:
    with trio.CancelScope() as scope:
        stop.scope = scope
        stop.token = trio.lowlevel.current_trio_token()
        if stop.received:  # a signal before the loop ran: its handler found no token yet
            scope.cancel()
        report = await run_job(stop.job, on_event=on_event)
        # A signal while the job ended (a module's end_job runs without a checkpoint, so the
        # cancellation was not seen): the job counts as stopped, its outputs are not committed.
        if not stop.received:
            return report
    raise JobStopped(stop.received[0] if stop.received else signal.SIGINT)


@contextlib.contextmanager
def signals_stop_the_job() -> Iterator[None]:
    """After :func:`run_stoppable` (the summary, the commit): SIGINT and SIGTERM raise
    :class:`JobStopped`, so that the job's outputs are not committed; restored after. On
    another thread than the main one, no signal reaches Python code: nothing to do."""

    def stop(signum: int, frame: Any) -> None:
        raise JobStopped(signum)

    with stop_signals_handled(stop):
        yield


def stuck_in(job: Any, now: float | None = None) -> str:
    """What ``job`` is doing now, for the immediate stop's line: each module call under way,
    oldest first (module, method, event, seconds), else the job's transition, else
    ``"no module"``. Reads the workers' ``running`` and ``Job.transition`` (other threads
    change them meanwhile: copied first)."""
    now = time.monotonic() if now is None else now
    calls = []
    for worker in list(job.workers.values()):
        for event_id, method, since in list(worker.running.values()):
            doing = "waiting for its external work" if method == "external work" else f"{method}()"
            calls.append((since, f"{worker.describe()} {doing} for event {event_id} ({now - since:.1f} s)"))
    if calls:
        calls.sort(key=lambda c: c[0])
        shown = "; ".join(text for _, text in calls[:3])
        return shown + (f"; and {len(calls) - 3} more module call(s)" if len(calls) > 3 else "")
    transition = job.transition
    if transition is not None:
        what, since = transition
        return f"{what} ({now - since:.1f} s)"
    return "no module (between events)"


def _write(line: str) -> None:
    """One line to stderr, bypassing logging and rich: their locks may be held by the
    thread that is stuck."""
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode(errors="replace"))


def _stop_now(stop: _Stop, signum: int) -> None:
    name = signal.Signals(signum).name
    _write(f"cmsrun: {name} received again: stopping at once; the job was in {stuck_in(stop.job)}")
    cleaner = threading.Thread(target=_clean_up, args=(stop.folders,), name="pysonic-stop", daemon=True)
    cleaner.start()
    cleaner.join(CLEANUP_DEADLINE)
    if cleaner.is_alive():
        _write(
            f"cmsrun: the cleanup did not end within {CLEANUP_DEADLINE:.0f} s: a server left is stopped by its "
            "watchdog, a temporary output by the next job writing there"
        )
    else:
        _write("cmsrun: stopped at once: unfinished outputs removed, servers stopped")
    os._exit(128 + signum)


def _clean_up(folders: list[Path]) -> None:
    """This process's temporary outputs removed, then its exit functions run (``atexit``:
    the servers it started stopped, its shared-memory regions unlinked)."""
    mine = f".tmp-{owner_tag()}-"
    for folder in {f.resolve() for f in folders}:
        with contextlib.suppress(OSError):
            for entry in folder.iterdir():
                if mine in entry.name and entry.is_file():
                    with contextlib.suppress(OSError):
                        entry.unlink()
    stop_owned_servers(SERVER_GRACE)
    atexit._run_exitfuncs()
