"""The trio scheduler: streams, Paths, on-demand producers and ExternalWork waits.

Model (CMSSW's, in trio terms):

* ``numberOfStreams`` stream tasks each take the next event from the source and carry it
  through all Paths, then all EndPaths. While one event waits for external work, its
  stream task is parked in an ``await`` and the other streams run.
* Paths of one event run concurrently; along a Path, modules run in order, and a filter
  returning False (True for ``~filter``) ends that Path for that event.
* Every producer runs at most once per event. Before a module runs, the producers of the
  products it ``consumes`` run first (prefetching); this is also how producers in a
  ``Task`` run on demand, the first time one of their products is consumed.
* EndPaths (analyzers, output modules) start once every Path of the event is done, so
  that ``SelectEvents`` sees the complete trigger results.
* A module exception cancels the whole job: the error names module, path and event.

Clocks: event latency uses ``trio.current_time()`` (virtual under a MockClock, so tests
can assert exact times); module timers use ``time.perf_counter()`` (see ``_worker``).
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from ._builder import Job, PathSpec
from ._errors import EventProcessingError, FrameworkError
from ._event import EventPrincipal
from ._source_base import SourceEvent
from ._worker import Worker

__all__ = ["JobReport", "run_job", "first_error"]

log = logging.getLogger("pysonic")


@dataclass
class JobReport:
    """What a finished (or failed) job measured.

    Attributes:
        events: events that completed all Paths and EndPaths.
        passed: events accepted by at least one Path (all events if there is no Path).
        events_with_errors: events in which a module failed under TryToContinue or
            IgnoreCompletely (``process.options``).
        wall_time: seconds from the first event request to the end (``time.perf_counter``).
        latencies: per-event latency in seconds, source to end of EndPaths, in completion
            order (``trio.current_time`` clock); ``array("d")``, compact for long jobs.
        completion_times: ``trio.current_time()`` at which each event finished.
        error: the error that ended the job, if any.
        summary: the end-of-job summary as plain data, computed once by whoever needs it
            first (``framework._summary.summary_dict``) and shared by the others.
    """

    events: int = 0
    passed: int = 0
    events_with_errors: int = 0
    wall_time: float = 0.0
    latencies: array = field(default_factory=lambda: array("d"))
    completion_times: array = field(default_factory=lambda: array("d"))
    error: BaseException | None = None
    summary: dict[str, Any] | None = None


class _Skipped(Exception):
    """Internal: a module did not run (or failed) under TryToContinue for this event.

    Raised to the Path that needed the module, and to every module depending on it,
    which are then skipped too. Never leaves the scheduler.
    """

    def __init__(self, origin: str) -> None:
        super().__init__(origin)
        self.origin = origin  # label of the module whose failure caused the skip


class _EventRun:
    """The state of one event on one stream: which modules ran, with what decision."""

    __slots__ = ("sched", "principal", "done", "decisions", "failed")

    def __init__(self, sched: _Scheduler, principal: EventPrincipal) -> None:
        self.sched = sched
        self.principal = principal
        self.done: dict[str, trio.Event] = {}
        self.decisions: dict[str, bool] = {}
        self.failed: dict[str, str] = {}  # label -> label of the failed module behind it

    async def run_module(self, worker: Worker, path: str) -> bool:
        """Run ``worker`` once for this event (or wait for the run already under way).

        Raises:
            _Skipped: it failed, or something it consumes failed, under TryToContinue.
            EventProcessingError: it failed and the policy is Rethrow (the job ends).
        """
        label = worker.label
        started = self.done.get(label)
        if started is not None:
            # Already running for this event (another Path, or a prefetch): wait for it.
            # If it fails with Rethrow the job is cancelled and this wait ends with Cancelled.
            await started.wait()
            if label in self.failed:
                raise _Skipped(self.failed[label])
            return self.decisions[label]
        finished = self.done[label] = trio.Event()
        try:
            deps = self.sched.deps[label]
            if deps:
                await self._prefetch(deps, path)
            decision = await worker.run(self.principal, path)
        except _Skipped as skipped:
            worker.skipped += 1
            self.failed[label] = skipped.origin
            finished.set()
            raise
        except EventProcessingError as error:
            action = self.sched.job.action_for(error.category)
            if action == "Rethrow":
                raise  # `finished` stays unset: the whole job is being cancelled
            self.principal.errors.append(error)
            log.warning("%s; %s: the event goes on", error.args[0], action)
            if action == "IgnoreCompletely":
                decision = True
            else:
                self.failed[label] = label
                finished.set()
                raise _Skipped(label) from None
        self.decisions[label] = decision
        finished.set()
        return decision

    async def _prefetch(self, deps: list[Worker], path: str) -> None:
        pending = [d for d in deps if d.label not in self.decisions]
        if len(pending) == 1:
            await self.run_module(pending[0], path)
        elif pending:
            # A skipped dependency must not cancel its siblings: other Paths may wait for them.
            skipped: list[_Skipped] = []

            async def one(dep: Worker) -> None:
                try:
                    await self.run_module(dep, path)
                except _Skipped as exc:
                    skipped.append(exc)

            async with trio.open_nursery() as nursery:
                for dep in pending:
                    nursery.start_soon(one, dep)
            if skipped:
                raise skipped[0]

    async def run_path(self, spec: PathSpec) -> None:
        spec.visited += 1
        passed = True
        for i, (worker, inverted) in enumerate(spec.entries):
            spec.entry_visited[i] += 1
            try:
                decision = await self.run_module(worker, spec.name)
            except (FrameworkError, _Skipped) as exc:
                spec.entry_errors[i] += 1
                spec.errors += 1
                if isinstance(exc, FrameworkError):
                    raise
                # TryToContinue: this Path is errored for this event, the others go on.
                self.principal.path_results[spec.name] = False
                return
            if decision == inverted:  # a filter said no (or an inverted one said yes)
                passed = False
                break
            spec.entry_passed[i] += 1
        if passed:
            spec.passed += 1
        self.principal.path_results[spec.name] = passed

    async def run_paths(self, specs: list[PathSpec]) -> None:
        if len(specs) == 1:
            await self.run_path(specs[0])
        elif specs:
            async with trio.open_nursery() as nursery:
                for spec in specs:
                    nursery.start_soon(self.run_path, spec)


class _Scheduler:
    def __init__(self, job: Job, on_event: Callable[[EventPrincipal, float], None] | None,
                 report: JobReport) -> None:
        self.job = job
        self.on_event = on_event
        self.report = report
        self._next_index = 0
        # Module -> the modules whose products it consumes (deduplicated, in order).
        self.deps: dict[str, list[Worker]] = {}
        for label, worker in job.workers.items():
            seen: dict[str, Worker] = {}
            for c in worker.consumes:
                if c.label in job.workers and c.label != label:
                    seen.setdefault(c.label, job.workers[c.label])
            self.deps[label] = list(seen.values())

    async def run(self) -> None:
        send, receive = trio.open_memory_channel[SourceEvent](0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.job.source.run, send, self.job.max_events)
            # Sync close (no checkpoint): an async close could turn a module's error into
            # Cancelled when another task has already failed.
            with receive:
                for stream in range(self.job.streams):
                    nursery.start_soon(self._stream, stream, receive.clone())

    async def _stream(self, stream: int, receive: trio.MemoryReceiveChannel[SourceEvent]) -> None:
        with receive:
            async for src in receive:
                index = self._next_index
                self._next_index += 1
                await self._process(src, stream, index)

    async def _process(self, src: SourceEvent, stream: int, index: int) -> None:
        t0 = trio.current_time()
        p0 = time.perf_counter()
        principal = EventPrincipal(src.id, stream, index, src.collections)
        run = _EventRun(self, principal)
        await run.run_paths(self.job.paths)
        await run.run_paths(self.job.endpaths)
        t1 = trio.current_time()
        if self.job.activity.post_event:
            self.job.activity.post_event(principal, p0, time.perf_counter())
        report = self.report
        report.events += 1
        if principal.errors:
            report.events_with_errors += 1
        results = principal.path_results
        if not self.job.paths or any(results[p.name] for p in self.job.paths):
            report.passed += 1
        report.latencies.append(t1 - t0)
        report.completion_times.append(t1)
        if self.on_event is not None:
            self.on_event(principal, t1 - t0)


def first_error(exc: BaseException) -> BaseException:
    """The most informative leaf of a (possibly nested) exception group.

    Prefers a FrameworkError, then KeyboardInterrupt, then any non-Cancelled exception.
    """
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for sub in e.exceptions:
                walk(sub)
        else:
            leaves.append(e)

    walk(exc)
    for kind in (FrameworkError, KeyboardInterrupt):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    for leaf in leaves:
        if not isinstance(leaf, trio.Cancelled):
            return leaf
    return leaves[0] if leaves else exc


async def run_job(job: Job, *, on_event: Callable[[EventPrincipal, float], None] | None = None,
                  on_start: Callable[[], None] | None = None) -> JobReport:
    """Run a built job to the end: begin_job hooks, all events, end_job hooks.

    On failure every module's ``abort_job`` runs instead of ``end_job`` (output modules
    drop their partial files), services' ``end_job`` always runs, and the most
    informative error is raised (never an exception group).

    Args:
        on_event: called on the trio thread after each event with (principal, latency s).
        on_start: called once the job is set up, right before the first event is read.

    Raises:
        FrameworkError: configuration, input, module or external-work failures.
        KeyboardInterrupt: Ctrl-C (after cleanup).
    """
    report = JobReport()
    modules = job.modules
    started: list[Any] = []
    try:
        try:
            for svc in job.services.services.values():
                await svc.begin_job()
            # abandon_on_cancel: opening the first file may wait for a remote server; a
            # stopped job must not wait with it (the source bounds that wait on its own).
            job.assemble(await trio.to_thread.run_sync(job.source.collections, abandon_on_cancel=True))
            # Built after assemble(): output modules' consumes count as dependencies too.
            scheduler = _Scheduler(job, on_event, report)
            for module in modules:
                module.begin_job()
                started.append(module)
            if on_start is not None:
                on_start()
            t0 = time.perf_counter()
            try:
                await scheduler.run()
            finally:
                report.wall_time = time.perf_counter() - t0
            for module in modules:
                module.end_job()
        except BaseException as exc:
            error = first_error(exc)
            report.error = error
            for module in started:
                try:
                    module.abort_job()
                except Exception:  # noqa: BLE001 - cleanup must not hide the real error
                    pass
            if error is exc:
                raise
            # Raise the leaf itself, keeping its __cause__ (the module's own exception);
            # the group around it is noise for the user.
            error.__suppress_context__ = True
            raise error
    finally:
        with trio.CancelScope(shield=True):
            for svc in reversed(list(job.services.services.values())):
                try:
                    await svc.end_job()
                except Exception:  # noqa: BLE001 - services must not mask the job's outcome
                    pass
            job.source.close()
    # After every end_job, so that services' end-of-job numbers are in (CMSSW's postEndJob).
    job.activity.post_end_job(job, report)
    return report
