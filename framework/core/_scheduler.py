"""The trio scheduler: streams, Paths, on-demand producers and ExternalWork waits.

Model (CMSSW's, in trio terms):

* ``numberOfStreams`` stream tasks each take the next event from the source and carry it
  through all Paths, then all EndPaths. The source hands events to every idle stream in
  one scheduler tick (:class:`_StreamFeeder`), so that streams reach a module together.
  While one event waits for external work, its stream task is parked in an ``await``
  and the other streams run.
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

import contextlib
import logging
import os
import time
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn, cast

import trio

from framework.utilities import EventProcessingError, FrameworkError, commit_outputs

from ._builder import Job, PathSpec
from ._event import EventPrincipal
from ._source_base import NO_METADATA, SourceEvent
from ._worker import Worker

__all__ = ["JobReport", "run_job", "begin_job", "process_events", "end_job", "abort_job", "first_error", "transition"]

log = logging.getLogger("pysonic")


@dataclass
class JobReport:
    """What a finished (or failed) job measured.

    Attributes:
        events: events that completed all Paths and EndPaths.
        passed: events accepted by at least one Path (all events if there is no Path).
        events_with_errors: events in which a module failed under TryToContinue or
            IgnoreCompletely (``process.options``).
        wall_time: seconds from the first event request to the end (``time.perf_counter``):
            the event loop (CMSSW's "Total loop").
        job_wall_time: seconds from ``build_job``'s start to the end of :func:`end_job`
            (the services' ``end_job`` included): the whole job, its construction, the
            first file's opening and a fallback server's start and stop included (CMSSW's
            "Total job"); 0 until ``end_job`` ran.
        latencies: per-event latency in seconds, source to end of EndPaths, in completion
            order (``trio.current_time`` clock); ``array("d")``, compact for long jobs.
        completion_times: ``trio.current_time()`` at which each event finished.
        cpu_time: CPU seconds of the whole process (user + system, every thread:
            ``os.times``) over the same span as ``wall_time``.
        event_loop_cpu_time: CPU seconds of the thread that ran the events (the trio
            thread: ``time.thread_time``) over that span; ``cpu_time`` minus this is what
            the other threads spent (the source's reads, gRPC's threads, onnxruntime's).
        error: the error that ended the job, if any.
        summary: the end-of-job summary as plain data, computed once by whoever needs it
            first (``framework.cmsrun.summary_dict``) and shared by the others.
    """

    events: int = 0
    passed: int = 0
    events_with_errors: int = 0
    wall_time: float = 0.0
    job_wall_time: float = 0.0
    latencies: array[float] = field(default_factory=lambda: array("d"))
    completion_times: array[float] = field(default_factory=lambda: array("d"))
    cpu_time: float = 0.0
    event_loop_cpu_time: float = 0.0
    error: BaseException | None = None
    summary: dict[str, Any] | None = None


def _process_cpu() -> float:
    """User + system CPU seconds of this process so far, every thread."""
    times = os.times()
    return times.user + times.system


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
            if inverted is not None and decision == inverted:  # a filter said no (or an inverted one yes)
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


class _StreamFeeder:
    """The source's end of the event channel: hands events to every idle stream in one go.

    trio's ``MemorySendChannel.send`` yields after each event it hands over, so N idle
    streams would get their events in N successive scheduler ticks. Here an event that an
    idle stream takes at once (``send_nowait``) costs no checkpoint: the source goes on to
    the next idle stream, and all of them start in the same tick, so that they reach the
    same SONIC model together (cross-event batching merges their requests,
    ``framework/sonic/_batching.py``). The loop is bounded: a stream woken here runs only
    once the source yields, so after at most ``numberOfStreams`` events ``send`` finds no
    idle stream and parks (a checkpoint), as before. Cancellation is unchanged: a
    cancelled stream leaves the channel's waiting list, so ``send`` parks and sees it.
    """

    __slots__ = ("_send",)

    def __init__(self, send: trio.MemorySendChannel[SourceEvent]) -> None:
        self._send = send

    async def send(self, value: SourceEvent) -> None:
        try:
            self._send.send_nowait(value)
        except trio.WouldBlock:
            await self._send.send(value)

    def send_nowait(self, value: SourceEvent) -> None:
        self._send.send_nowait(value)

    def close(self) -> None:
        self._send.close()

    async def aclose(self) -> None:
        await self._send.aclose()

    def __enter__(self) -> _StreamFeeder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._send.close()


class _Scheduler:
    def __init__(self, job: Job, on_event: Callable[[EventPrincipal, float], None] | None, report: JobReport) -> None:
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
            # The feeder has the channel's interface that sources use (send, close, with).
            feeder = cast("trio.MemorySendChannel[SourceEvent]", _StreamFeeder(send))
            nursery.start_soon(self.job.source.run, feeder, self.job.max_events)
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
        principal = EventPrincipal(src.id, stream, index, src.collections, src.metadata)
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


async def begin_job(job: Job) -> None:
    """The job's begin transitions: services' ``begin_job``, :meth:`Job.assemble` (the
    source's first file), the ``begin_job`` of services that start servers
    (``Service.begins_after_source``: a wrong input is found before), every module's
    ``begin_job``. Runs once per job, in any trio run.

    On failure the modules begun get ``abort_job``, the services ``end_job``, the source is
    closed, and the most informative error is raised.

    Raises:
        FrameworkError: configuration, input or service failures (a server that cannot start).
        KeyboardInterrupt: Ctrl-C (after cleanup).
    """
    job.begun = []
    services = list(job.services.services.values())
    try:
        for svc in [s for s in services if not s.begins_after_source]:
            with _transition(job, f"begin_job() of Service '{svc.label}' (type {svc.type_name})"):
                await svc.begin_job()
        # abandon_on_cancel: opening the first file may wait for a remote server; a
        # stopped job must not wait with it (the source bounds that wait on its own).
        with _transition(job, "the source's first file"):
            job.assemble(await trio.to_thread.run_sync(job.source.collections, abandon_on_cancel=True))
        _bind_metadata(job)
        for svc in [s for s in services if s.begins_after_source]:  # a wrong input is found before a server starts
            with _transition(job, f"begin_job() of Service '{svc.label}' (type {svc.type_name})"):
                await svc.begin_job()
        for module in job.modules:
            transition(job, module, "begin_job")
            job.begun.append(module)
    except BaseException as exc:
        await _abort(job, exc)


def transition(job: Job, module: Any, name: str) -> None:
    """Call a module's (or service's) transition (``begin_job``, ``begin_unit``, ``end_unit``,
    ``end_job``), recorded as the job's transition under way while it runs (``Job.transition``:
    what cmsrun's immediate stop names when the job is stuck there).

    Raises:
        FrameworkError: the module's own, unchanged (it names the module already), or any
            other exception of the module as one line naming the module, the transition and
            the exception (category: the exception's type name); the original is the cause.
    """
    try:
        with _transition(job, f"{name}() of {_describe(module)}"):
            getattr(module, name)()
    except FrameworkError:
        raise
    except (Exception, SystemExit) as exc:  # a module's sys.exit() is its failure; KeyboardInterrupt passes
        detail = str(exc).partition("\n")[0]
        raise FrameworkError(
            f"{_describe(module)}: {name}() failed: {type(exc).__name__}" + (f": {detail}" if detail else ""),
            category=type(exc).__name__,
        ) from exc


async def process_events(
    job: Job,
    *,
    on_event: Callable[[EventPrincipal, float], None] | None = None,
    on_start: Callable[[], None] | None = None,
) -> JobReport:
    """Every event of the source's current input through the Paths, between the services'
    and modules' ``begin_unit`` and ``end_unit`` (a work unit's outputs:
    ``framework.io.output_naming``; they are committed by whoever opened the commit:
    :func:`run_job`, cmsrun, the executor's unit task).

    Called once per job by :func:`run_job`, or once per work unit by the scale-out executor
    (each in its own ``trio.run``, the job begun once; call ``job.reset_counters()`` between
    units for per-unit counts). On failure every begun module's ``abort_unit`` runs (its
    unit's outputs are removed) and the services' ``abort_unit``, and the most informative
    error is raised; the job itself stays begun.

    Raises:
        FrameworkError, KeyboardInterrupt: as :func:`run_job`.
    """
    report = JobReport()
    # Built after assemble(): output modules' consumes count as dependencies too.
    scheduler = _Scheduler(job, on_event, report)
    opened: list[Any] = []
    services = list(job.services.services.values())
    try:
        _bind_metadata(job)  # the source's input may have changed since begin_job (set_units)
        for service in services:  # before the modules: they book their objects with a service
            transition(job, service, "begin_unit")
            opened.append(service)
        for module in job.modules:
            transition(job, module, "begin_unit")
            opened.append(module)
        if on_start is not None:
            on_start()
        t0, cpu0, thread0 = time.perf_counter(), _process_cpu(), time.thread_time()
        try:
            await scheduler.run()
        finally:
            report.wall_time = time.perf_counter() - t0
            report.cpu_time = _process_cpu() - cpu0
            report.event_loop_cpu_time = time.thread_time() - thread0
        for module in job.modules:
            transition(job, module, "end_unit")
        for service in services:  # after the modules: what they booked is complete
            transition(job, service, "end_unit")
    except BaseException as exc:
        error = first_error(exc)
        report.error = error
        for opened_one in reversed(opened):
            with contextlib.suppress(Exception):  # cleanup must not hide the real error
                opened_one.abort_unit()
        _raise_leaf(exc, error)
    return report


def _bind_metadata(job: Job) -> None:
    """Give every module the source's dataset metadata (``EDModule.metadata``)."""
    # Duck-typed sources (the builder takes any class with the protocol) may lack metadata().
    metadata = job.source.metadata() if hasattr(job.source, "metadata") else NO_METADATA
    for module in job.modules:
        module._fw_metadata = metadata


async def end_job(job: Job, report: JobReport | None = None) -> None:
    """The job's end transitions: modules' ``end_job``, services' ``end_job`` (a fallback
    server stops), the source closed; then ``post_end_job(job, report)`` if ``report``.

    Raises:
        FrameworkError: a module's ``end_job`` failed (services are still ended).
    """
    try:
        for module in job.modules:
            transition(job, module, "end_job")
    except BaseException as exc:
        await _abort(job, exc)
    await _end_services(job)
    if report is not None:
        report.job_wall_time = time.perf_counter() - job.created
        # After every end_job, so that services' end-of-job numbers are in (CMSSW's postEndJob).
        job.activity.post_end_job(job, report)


async def abort_job(job: Job) -> None:
    """End a begun job that will process no more events: modules' ``abort_job``, services'
    ``end_job``, the source closed. Never raises (but for trio's Cancelled when shielded off)."""
    for module in job.begun:
        with contextlib.suppress(Exception), _transition(job, f"abort_job() of {_describe(module)}"):
            module.abort_job()  # cleanup must not hide the real error
    await _end_services(job)


async def _end_services(job: Job) -> None:
    with trio.CancelScope(shield=True):
        for svc in reversed(list(job.services.services.values())):
            # services must not mask the job's outcome
            with (
                contextlib.suppress(Exception),
                _transition(job, f"end_job() of Service '{svc.label}' (type {svc.type_name})"),
            ):
                await svc.end_job()
        job.source.close()


def _describe(module: Any) -> str:
    return f"{module.kind} '{module.label}' (type {module.type_name})"


@contextlib.contextmanager
def _transition(job: Job, what: str) -> Iterator[None]:
    """Record ``what`` as the job's transition under way (``Job.transition``)."""
    job.transition = (what, time.monotonic())
    try:
        yield
    finally:
        job.transition = None


async def _abort(job: Job, exc: BaseException) -> NoReturn:
    """Abort the job after ``exc`` and raise its most informative leaf."""
    await abort_job(job)
    _raise_leaf(exc, first_error(exc))


def _raise_leaf(exc: BaseException, error: BaseException) -> NoReturn:
    if error is exc:
        raise exc
    # Raise the leaf itself, keeping its __cause__ (the module's own exception); the group
    # around it is noise for the user.
    error.__suppress_context__ = True
    raise error


async def run_job(
    job: Job,
    *,
    on_event: Callable[[EventPrincipal, float], None] | None = None,
    on_start: Callable[[], None] | None = None,
) -> JobReport:
    """Run a built job to the end: :func:`begin_job`, :func:`process_events`, :func:`end_job`,
    then commit its outputs (``framework.utilities._commit``: renamed into place only now, after every
    module's and service's end; inside a commit opened by the caller, the caller commits).

    On failure every module's ``abort_unit`` and ``abort_job`` run instead of ``end_unit``
    and ``end_job``, services' ``end_job`` always runs, no output is renamed into place (the
    temporary files are removed, files of the same names are left as they were), and the
    most informative error is raised (never an exception group).

    Args:
        on_event: called on the trio thread after each event with (principal, latency s).
        on_start: called once the job is set up, right before the first event is read.

    Raises:
        FrameworkError: configuration, input, module or external-work failures; a
            ``FileWriteError`` if an output cannot be written or committed.
        KeyboardInterrupt: Ctrl-C (after cleanup).
    """
    with commit_outputs("the job"):
        await begin_job(job)
        try:
            report = await process_events(job, on_event=on_event, on_start=on_start)
        except BaseException as exc:
            await _abort(job, exc)
        await end_job(job, report)
    return report
