"""Workers: the scheduler's handle on one module (CMSSW's ``edm::Worker``).

A worker knows how to call its module for one event (plain, or ExternalWork in three
steps: acquire, the external wait, produce), on which thread, and keeps the counters and
timers that the end-of-job TrigReport and TimeReport print.

Timing is always on: every call appends its acquire / external-wait / run times
(``time.perf_counter`` seconds, measured on the thread that runs the code, so waiting for
a free worker thread is not counted) to :class:`WorkerTimes`. When a
:class:`~framework.cmsrun._timing.Tracer` is attached, each phase is also recorded as a span
on the event's stream, for a Perfetto / chrome://tracing timeline.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from framework.utilities import EventProcessingError, FrameworkError

from ._activity import ActivityRegistry
from ._bridge import WaitingTaskHolder
from ._event import Event, EventPrincipal
from ._module import EDAnalyzer, EDFilter, EDModule, EDProducer, ExternalWork, OutputModule

__all__ = ["Worker", "WorkerTimes"]


@dataclass
class WorkerTimes:
    """Per-call wall-clock times of one module, seconds (``time.perf_counter``).

    One entry per completed call, in completion order. ``acquire`` and ``wait`` stay
    empty for modules without ExternalWork; ``run`` is the time in
    ``produce``/``filter``/``analyze``/``write``. Stored as ``array("d")``: 8 bytes a
    call instead of a 32-byte Python float each (the soak benchmark found the lists
    to be the only memory growth of a 50,000-event job).
    """

    acquire: array[float] = field(default_factory=lambda: array("d"))
    wait: array[float] = field(default_factory=lambda: array("d"))
    run: array[float] = field(default_factory=lambda: array("d"))

    @property
    def calls(self) -> int:
        return len(self.run)

    @property
    def own(self) -> array[float]:
        """Per call: time in the module's own code (acquire + run), without the wait."""
        if not self.acquire:
            return self.run
        return array("d", (a + r for a, r in zip(self.acquire, self.run, strict=True)))

    @property
    def cpu_mean(self) -> float:
        """Mean time per call in the module's own code (acquire + run), seconds."""
        return (sum(self.acquire) + sum(self.run)) / self.calls if self.calls else 0.0


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float, float]:
    t0 = time.perf_counter()
    result = fn(*args)
    return result, t0, time.perf_counter()


class Worker:
    """Runs one module for events; see the module docstring.

    Counters: ``errors`` (calls that raised), ``skipped`` (events where the module did
    not run because a module it depends on failed under ``TryToContinue``).
    """

    def __init__(self, module: EDModule, limiter: trio.CapacityLimiter | None) -> None:
        self.module = module
        self.label = module.label
        self.type_name = module.type_name
        self.kind = module.kind
        self.external = isinstance(module, ExternalWork)
        self.consumes = list(module._fw_consumes)
        self.produces = frozenset(getattr(module, "_fw_produces", {}))
        # Only modules that declare themselves thread-safe leave the scheduler's thread.
        self._limiter = limiter if module.thread_safe else None
        self.times = WorkerTimes()
        self.errors = 0
        self.skipped = 0
        # What the module is doing now, per stream: (event id, method, since: time.monotonic
        # seconds). Read by cmsrun's immediate stop (a second Ctrl-C) to name the module and
        # event a job is stuck in; a stream runs one event at a time, and a module once per event.
        self.running: dict[int, tuple[Any, str, float]] = {}
        self.activity = ActivityRegistry()  # the job's, set by the builder
        self._phase = {
            "EDFilter": "filter",
            "EDProducer": "produce",
            "EDAnalyzer": "analyze",
            "OutputModule": "write",
        }.get(self.kind, "run")

    def describe(self) -> str:
        return f"{self.kind} '{self.label}' (type {self.type_name})"

    def reset_counters(self) -> None:
        """Forget the calls timed and counted so far (a new work unit)."""
        self.times = WorkerTimes()
        self.errors = 0
        self.skipped = 0

    async def _call(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, float, float]:
        """Run ``fn(*args)`` on the right thread; return (result, start, end) in perf_counter s."""
        if self._limiter is None:
            return _timed(fn, *args)
        return await trio.to_thread.run_sync(_timed, fn, *args, limiter=self._limiter)

    async def run(self, principal: EventPrincipal, path: str) -> bool:
        """Run the module for one event; returns the filter decision (True for non-filters).

        Raises:
            EventProcessingError: the module raised; names module, path and event id. Its
                category is that of a FrameworkError raised by the module, else the
                exception's type name (``"ValueError"``).
            trio.Cancelled: the job is being cancelled (never wrapped).
        """
        event = Event(principal, self.label, self.produces)
        module = self.module
        times = self.times
        phase_done = self.activity.post_module_phase
        running, stream, event_id = self.running, principal.stream, principal.id
        try:
            if self.external:
                running[stream] = (event_id, "acquire", time.monotonic())
                holder = WaitingTaskHolder()
                completion = holder._completion
                _, a0, a1 = await self._call(module._fw_acquire, event, holder)  # type: ignore[attr-defined]  # ExternalWork's
                # From here the holder lives as long as the module keeps it: dropped unused,
                # it fails the event (WaitingTaskHolder.__del__) instead of a wait forever.
                del holder
                w0 = time.perf_counter()
                running[stream] = (event_id, "external work", time.monotonic())
                result = await completion.wait()
                w1 = time.perf_counter()
                running[stream] = (event_id, self._phase, time.monotonic())
                decision, r0, r1 = await self._call(module._fw_complete, event, result)  # type: ignore[attr-defined]  # ExternalWork's
                times.acquire.append(a1 - a0)
                times.wait.append(w1 - w0)
                if phase_done:
                    phase_done(principal, self.label, "acquire", a0, a1)
                    phase_done(principal, self.label, "external wait", w0, w1)
            else:
                running[stream] = (event_id, self._phase, time.monotonic())
                decision, r0, r1 = await self._call(self._entry_point(), event)
            times.run.append(r1 - r0)
            if phase_done:
                phase_done(principal, self.label, self._phase, r0, r1)
        except trio.Cancelled:
            raise
        except (Exception, SystemExit) as exc:  # a module's sys.exit() is its failure; KeyboardInterrupt passes
            self.errors += 1
            raise self._wrap(exc, principal, path) from exc
        finally:
            running.pop(stream, None)
        if isinstance(module, EDFilter):
            if not isinstance(decision, (bool, int)) or decision is None:
                raise self._wrap(TypeError(f"filter() returned {decision!r}, expected bool"), principal, path)
            return bool(decision)
        return True

    def _entry_point(self) -> Callable[[Event], Any]:
        module = self.module
        if isinstance(module, EDFilter):
            return module.filter
        if isinstance(module, EDProducer):
            return module.produce
        if isinstance(module, OutputModule):
            return self._write
        if isinstance(module, EDAnalyzer):
            return module.analyze
        raise TypeError(f"{self.describe()} is of no known module kind")

    def _write(self, event: Event) -> bool:
        module = self.module
        assert isinstance(module, OutputModule)
        if module.selected(event):
            module.write(event)
        return True

    def _wrap(self, exc: BaseException, principal: EventPrincipal, path: str) -> EventProcessingError:
        if isinstance(exc, FrameworkError):
            category, detail = exc.category, exc.args[0]
        else:
            category, detail = type(exc).__name__, type(exc).__name__ + (f": {exc}" if str(exc) else "")
        where = f" on path '{path}'" if path else ""
        return EventProcessingError(
            f"{self.describe()}{where} failed for event {principal.id}: {detail}",
            category=category,
        )
