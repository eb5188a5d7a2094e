"""Workers: the scheduler's handle on one module (CMSSW's ``edm::Worker``).

A worker knows how to call its module for one event (plain, or ExternalWork in three
steps: acquire, the external wait, produce), on which thread, and keeps the counters and
timers that the end-of-job TrigReport and TimeReport print.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from ._bridge import WaitingTaskHolder
from ._errors import EventProcessingError, FrameworkError
from ._event import Event, EventPrincipal
from ._module import EDAnalyzer, EDFilter, EDModule, EDProducer, ExternalWork, OutputModule

__all__ = ["Worker", "WorkerTimes"]


@dataclass
class WorkerTimes:
    """Accumulated wall-clock time of one module, in seconds (``time.perf_counter``).

    ``acquire``/``wait`` are zero for modules without ExternalWork; ``run`` is the time in
    ``produce``/``filter``/``analyze``/``write``.
    """

    calls: int = 0
    acquire: float = 0.0
    wait: float = 0.0
    run: float = 0.0
    per_event: list[float] = field(default_factory=list)  # acquire + produce, no wait

    @property
    def cpu_mean(self) -> float:
        """Mean time per call in the module's own code (acquire + run), seconds."""
        return (self.acquire + self.run) / self.calls if self.calls else 0.0


def _timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - t0


class Worker:
    """Runs one module for events; see the module docstring."""

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

    def describe(self) -> str:
        return f"{self.kind} '{self.label}' (type {self.type_name})"

    async def _call(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
        """Run ``fn(*args)`` on the right thread; return (its result, seconds it took).

        The time is measured where ``fn`` runs, so waiting for a free worker thread is
        not counted as the module's time.
        """
        if self._limiter is None:
            return _timed(fn, *args)
        return await trio.to_thread.run_sync(_timed, fn, *args, limiter=self._limiter)

    async def run(self, principal: EventPrincipal, path: str) -> bool:
        """Run the module for one event; returns the filter decision (True for non-filters).

        Raises:
            EventProcessingError: the module raised; names module, path and event id. The
                category of a FrameworkError raised by the module is kept.
            trio.Cancelled: the job is being cancelled (never wrapped).
        """
        event = Event(principal, self.label, self.produces)
        module = self.module
        times = self.times
        try:
            if self.external:
                holder = WaitingTaskHolder()
                _, t_acquire = await self._call(module._fw_acquire, event, holder)  # type: ignore[attr-defined]
                if not holder.used:
                    raise RuntimeError("acquire() returned without starting external work "
                                       "(call holder.done_waiting or holder.start_soon)")
                t0 = time.perf_counter()
                result = await holder.wait()
                times.wait += time.perf_counter() - t0
                decision, t_run = await self._call(module._fw_complete, event, result)  # type: ignore[attr-defined]
                times.acquire += t_acquire
                times.run += t_run
                times.per_event.append(t_acquire + t_run)
            else:
                decision, t_run = await self._call(self._entry_point(), event)
                times.run += t_run
                times.per_event.append(t_run)
            times.calls += 1
        except trio.Cancelled:
            raise
        except BaseException as exc:
            if isinstance(exc, BaseExceptionGroup) and not isinstance(exc, Exception):
                raise  # KeyboardInterrupt and friends inside a group: not ours to wrap
            if not isinstance(exc, Exception):
                raise
            self.errors += 1
            raise self._wrap(exc, principal, path) from exc
        if isinstance(module, EDFilter):
            if not isinstance(decision, (bool, int)) or decision is None:
                raise self._wrap(
                    TypeError(f"filter() returned {decision!r}, expected bool"), principal, path
                )
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

    def _wrap(self, exc: Exception, principal: EventPrincipal, path: str) -> EventProcessingError:
        category = exc.category if isinstance(exc, FrameworkError) else None
        detail = exc.args[0] if isinstance(exc, FrameworkError) else f"{type(exc).__name__}: {exc}"
        where = f" on path '{path}'" if path else ""
        return EventProcessingError(
            f"{self.describe()}{where} failed for event {principal.id}: {detail}",
            category=category,
        )
