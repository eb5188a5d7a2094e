"""Scheduler semantics on a virtual clock (no ROOT files, no server).

Test policy: anything about time uses trio's MockClock through pytest-trio's
``autojump_clock`` fixture, so latencies are exact; ``wait_all_tasks_blocked`` proves
what is parked where. Module types are registered at run time with
``framework.register_type`` and driven through real configs and the real scheduler.
"""

from __future__ import annotations

import threading
import time

import pytest
import trio
import trio.testing

import framework
import framework.config as cms
from framework import EDAnalyzer, EDFilter, EDProducer, EventProcessingError, ExternalWork
from framework.core import build_job, run_job

LATENCY = 1.0  # seconds of virtual time per external call


class Counter:
    """Calls recorded by the test modules below, reset per test."""

    calls: dict[str, list] = {}


@pytest.fixture(autouse=True)
def _reset_counter():
    Counter.calls = {}
    yield


def record(label: str, item) -> None:
    Counter.calls.setdefault(label, []).append(item)


class Sleeper(ExternalWork, EDProducer):
    """ExternalWork with a fixed virtual latency, the result is the event number."""

    def __init__(self, params):
        self.produces()

    def acquire(self, event, holder):
        record(self.label + ".acquire", event.id.event)
        holder.run_async(self._work, event.id.event)

    async def _work(self, n):
        await trio.sleep(LATENCY)
        return n

    def produce(self, event, result):
        record(self.label + ".produce", (event.id.event, trio.current_time()))
        event.put(result)


class Gate:
    """A trio.Event per test for GatedWork to wait on."""

    event: trio.Event | None = None


class GatedWork(ExternalWork, EDProducer):
    def __init__(self, params):
        self.produces()

    def acquire(self, event, holder):
        record("acquire", event.id.event)
        holder.run_async(Gate.event.wait)

    def produce(self, event, result):
        record("produce", event.id.event)
        event.put(1)


class ThreadedWork(ExternalWork, EDProducer):
    """External work completed from a foreign thread via holder.done_waiting."""

    def __init__(self, params):
        self.produces()

    def acquire(self, event, holder):
        n = event.id.event
        threading.Thread(target=lambda: holder.done_waiting(n * 10)).start()

    def produce(self, event, result):
        event.put(result)


class LateWork(ExternalWork, EDProducer):
    """acquire returns first; a thread finishes the work a little later (a pool's task)."""

    def __init__(self, params):
        self.produces()

    def acquire(self, event, holder):
        n = event.id.event

        def later():
            time.sleep(0.05)
            holder.done_waiting(n * 10)

        threading.Thread(target=later).start()

    def produce(self, event, result):
        event.put(result)


class ForgetfulWork(ExternalWork, EDProducer):
    """acquire starts nothing, or a thread that ends without calling done_waiting."""

    thread_safe = False

    def __init__(self, params):
        self.produces()

    def acquire(self, event, holder):
        if event.id.event == 2:
            threading.Thread(target=lambda: holder and None).start()  # holds it, then drops it

    def produce(self, event, result):
        event.put(result)


class OddFilter(EDFilter):
    """Passes events with an odd event number."""

    def filter(self, event):
        return event.id.event % 2 == 1


class Counted(EDProducer):
    @classmethod
    def fill_descriptions(cls, desc):
        desc.add("src", cms.string(""), "product to consume ('' = none)")

    def __init__(self, params):
        self.src = self.consumes(params.src) if params.src else None
        self.produces()

    def produce(self, event):
        value = event.get(self.src) if self.src else 0
        record(self.label, event.id.event)
        event.put(value + 1)


class Reader(EDAnalyzer):
    @classmethod
    def fill_descriptions(cls, desc):
        desc.add("src", cms.string, "product to read")

    def __init__(self, params):
        self.src = self.consumes(params.src)

    def analyze(self, event):
        record(self.label, (event.id.event, event.get(self.src)))


class Boom(EDProducer):
    def __init__(self, params):
        self.produces()
        self.ended = []

    def produce(self, event):
        if event.id.event == 3:
            raise ValueError("bad value in event 3")
        event.put(1)

    def end_job(self):
        record("boom.end_job", True)

    def abort_job(self):
        record("boom.abort_job", True)


class ThreadSafeWork(EDProducer):
    thread_safe = True
    active = 0
    peak = 0
    lock = threading.Lock()
    pair = threading.Barrier(2)

    def __init__(self, params):
        self.produces()

    def produce(self, event):
        cls = type(self)
        with cls.lock:
            cls.active += 1
            cls.peak = max(cls.peak, cls.active)
        record("thread", threading.get_ident())
        # Two calls meet here before either leaves: proof that two threads overlap, whatever
        # the machine's load (a third would show in ``active``; one thread alone times out).
        cls.pair.wait(timeout=30)
        with cls.lock:
            cls.active -= 1
        event.put(1)


for _cls in (
    Sleeper,
    GatedWork,
    ThreadedWork,
    LateWork,
    ForgetfulWork,
    OddFilter,
    Counted,
    Reader,
    Boom,
    ThreadSafeWork,
):
    framework.register_type("test" + _cls.__name__, _cls)


def make_process(n_events: int, streams: int = 1, threads: int = 1) -> cms.Process:
    process = cms.Process("TEST")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = n_events
    process.options.numberOfStreams = streams
    process.options.numberOfThreads = threads
    return process


async def run(process: cms.Process):
    process.validate_()
    job = build_job(process)
    report = await run_job(job)
    return job, report


async def test_external_work_latency_is_hidden_by_streams(autojump_clock):
    """4 streams, latency L: 8 events end at exactly 2L (two waves of four)."""
    process = make_process(8, streams=4)
    process.ext = cms.EDProducer("testSleeper")
    process.p = cms.Path(process.ext)
    _, report = await run(process)
    assert report.events == 8
    assert sorted(report.completion_times) == [LATENCY] * 4 + [2 * LATENCY] * 4
    assert list(report.latencies) == [LATENCY] * 8


async def test_one_stream_serialises_external_work(autojump_clock):
    process = make_process(3, streams=1)
    process.ext = cms.EDProducer("testSleeper")
    process.p = cms.Path(process.ext)
    _, report = await run(process)
    assert list(report.completion_times) == [LATENCY, 2 * LATENCY, 3 * LATENCY]


async def test_produce_never_runs_before_external_work_is_done():
    process = make_process(4, streams=4)
    process.ext = cms.EDProducer("testGatedWork")
    process.p = cms.Path(process.ext)
    process.validate_()
    job = build_job(process)
    Gate.event = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_job, job)
        # Job set-up uses a worker thread (source.collections), during which trio counts
        # tasks as blocked; so wait for the acquires first, then for quiescence.
        with trio.fail_after(30):  # a deadline: a lost acquire fails the test, never hangs it
            while len(Counter.calls.get("acquire", [])) < 4:
                await trio.sleep(0.001)
        await trio.testing.wait_all_tasks_blocked()
        # Every stream is parked in its external wait; no produce has run.
        assert sorted(Counter.calls["acquire"]) == [1, 2, 3, 4]
        assert "produce" not in Counter.calls
        Gate.event.set()
    assert sorted(Counter.calls["produce"]) == [1, 2, 3, 4]


async def test_done_waiting_from_a_foreign_thread():
    process = make_process(6, streams=3)
    process.ext = cms.EDProducer("testThreadedWork")
    process.read = cms.EDAnalyzer("testReader", src=cms.string("ext"))
    process.p = cms.Path(process.ext)
    process.e = cms.EndPath(process.read)
    await run(process)
    assert sorted(Counter.calls["read"]) == [(n, 10 * n) for n in range(1, 7)]


async def test_done_waiting_may_come_after_acquire_returned():
    """The thread that finishes the work keeps the holder: acquire returning first is no error."""
    process = make_process(4, streams=2)
    process.ext = cms.EDProducer("testLateWork")
    process.read = cms.EDAnalyzer("testReader", src=cms.string("ext"))
    process.p = cms.Path(process.ext)
    process.e = cms.EndPath(process.read)
    await run(process)
    assert sorted(Counter.calls["read"]) == [(n, 10 * n) for n in range(1, 5)]


@pytest.mark.parametrize("threads, thread_safe", [(1, False), (2, True)])
async def test_a_holder_dropped_unused_fails_the_event_instead_of_hanging(threads, thread_safe, monkeypatch):
    monkeypatch.setattr(ForgetfulWork, "thread_safe", thread_safe)
    for event in (1, 2):  # nothing started; a thread that held the holder and ended
        process = make_process(1, threads=threads)
        process.source.firstEvent = cms.untracked.uint32(event)
        process.ext = cms.EDProducer("testForgetfulWork")
        process.p = cms.Path(process.ext)
        with trio.fail_after(30), pytest.raises(EventProcessingError) as info:
            await run(process)
        assert f"EDProducer 'ext' (type testForgetfulWork) on path 'p' failed for event 1:1:{event}" in str(info.value)
        assert "holder was dropped without done_waiting or run_async" in str(info.value)


async def test_filter_ends_its_path_and_trigreport_counts(autojump_clock):
    process = make_process(6)
    process.odd = cms.EDFilter("testOddFilter")
    process.after = cms.EDProducer("testCounted")
    process.even = cms.EDProducer("testCounted")
    process.pOdd = cms.Path(process.odd + process.after)
    process.pEven = cms.Path(~process.odd + process.even)
    job, report = await run(process)
    assert sorted(Counter.calls["after"]) == [1, 3, 5]
    assert sorted(Counter.calls["even"]) == [2, 4, 6]
    p_odd, p_even = job.paths
    assert (p_odd.visited, p_odd.passed) == (6, 3)
    assert p_odd.entry_visited == [6, 3] and p_odd.entry_passed == [3, 3]
    assert (p_even.visited, p_even.passed) == (6, 3)
    # The filter module ran once per event although it stands on two Paths.
    assert job.workers["odd"].times.calls == 6
    assert report.passed == 6


async def test_task_producer_runs_on_demand_once_per_event(autojump_clock):
    process = make_process(5, streams=2)
    process.base = cms.EDProducer("testCounted")
    process.derived = cms.EDProducer("testCounted", src=cms.string("base"))
    process.readA = cms.EDAnalyzer("testReader", src=cms.string("derived"))
    process.readB = cms.EDAnalyzer("testReader", src=cms.string("base"))
    process.unused = cms.EDProducer("testCounted")
    process.t = cms.Task(process.base, process.derived, process.unused)
    process.e1 = cms.EndPath(process.readA, process.t)
    process.e2 = cms.EndPath(process.readB)
    await run(process)
    assert sorted(Counter.calls["base"]) == [1, 2, 3, 4, 5]
    assert sorted(Counter.calls["derived"]) == [1, 2, 3, 4, 5]
    assert "unused" not in Counter.calls  # nobody consumes it: it never runs
    assert sorted(Counter.calls["readA"]) == [(n, 2) for n in range(1, 6)]
    assert sorted(Counter.calls["readB"]) == [(n, 1) for n in range(1, 6)]


async def test_module_exception_names_module_path_and_event(autojump_clock):
    process = make_process(5)
    process.boom = cms.EDProducer("testBoom")
    process.p = cms.Path(process.boom)
    with pytest.raises(framework.EventProcessingError) as info:
        await run(process)
    message = str(info.value)
    assert "EDProducer 'boom' (type testBoom)" in message
    assert "path 'p'" in message
    assert "event 1:1:3" in message
    assert "ValueError: bad value in event 3" in message
    assert isinstance(info.value.__cause__, ValueError)
    assert Counter.calls["boom.abort_job"] == [True]
    assert "boom.end_job" not in Counter.calls


async def test_thread_safe_modules_use_at_most_number_of_threads():
    ThreadSafeWork.active = ThreadSafeWork.peak = 0
    ThreadSafeWork.pair = threading.Barrier(2)
    process = make_process(12, streams=6, threads=2)  # an even number of calls: they pair up
    process.a = cms.EDProducer("testThreadSafeWork")
    process.p = cms.Path(process.a)
    await run(process)
    assert ThreadSafeWork.peak == 2  # two threads overlapped, never more
    assert threading.get_ident() not in set(Counter.calls["thread"])


async def test_circular_dependency_is_a_configuration_error():
    process = make_process(1)
    process.a = cms.EDProducer("testCounted", src=cms.string("b"))
    process.b = cms.EDProducer("testCounted", src=cms.string("a"))
    process.p = cms.Path(process.a)
    with pytest.raises(framework.ConfigurationError, match="circular product dependency"):
        build_job(process)


async def test_consuming_an_analyzer_is_a_configuration_error():
    process = make_process(1)
    process.a = cms.EDAnalyzer("testReader", src=cms.string("b"))
    process.b = cms.EDAnalyzer("testReader", src=cms.string("a"))
    process.e = cms.EndPath(process.a + process.b)
    with pytest.raises(framework.ConfigurationError, match="produces nothing"):
        build_job(process)


def policy_process(option: str, categories: list[str], *, ignore: bool = False) -> cms.Process:
    """boom fails in event 3; `dependent` consumes it; `independent` does not."""
    process = make_process(5, streams=2)
    setattr(process.options, option, cms.untracked.vstring(*categories))
    process.boom = cms.EDProducer("testBoom")
    process.dependent = cms.EDProducer("testCounted", src=cms.string("boom"))
    process.independent = cms.EDProducer("testCounted")
    process.readBoom = cms.EDAnalyzer("testReader", src=cms.string("boom"))
    process.readIndependent = cms.EDAnalyzer("testReader", src=cms.string("independent"))
    if ignore:  # the Path goes on past boom
        process.pBoom = cms.Path(process.boom + process.independent)
        process.e = cms.EndPath(process.readIndependent)
        return process
    process.pBoom = cms.Path(process.boom + process.dependent)
    process.pOther = cms.Path(process.independent)
    process.eBoom = cms.EndPath(process.readBoom)
    process.eOther = cms.EndPath(process.readIndependent)
    return process


async def test_try_to_continue_skips_dependents_and_reaches_endpaths(autojump_clock):
    job, report = await run(policy_process("TryToContinue", ["ValueError"]))
    assert report.events == 5 and report.events_with_errors == 1
    assert sorted(Counter.calls["dependent"]) == [1, 2, 4, 5]  # skipped in event 3
    assert sorted(Counter.calls["independent"]) == [1, 2, 3, 4, 5]  # independent: still ran
    assert sorted(e for e, _ in Counter.calls["readIndependent"]) == [1, 2, 3, 4, 5]
    assert sorted(e for e, _ in Counter.calls["readBoom"]) == [1, 2, 4, 5]
    w = job.workers
    assert (w["boom"].errors, w["dependent"].skipped, w["readBoom"].skipped) == (1, 0, 1)
    p_boom, p_other = job.paths
    assert (p_boom.visited, p_boom.passed, p_boom.errors) == (5, 4, 1)
    assert p_boom.entry_errors == [1, 0] and p_other.errors == 0
    e_boom, e_other = job.endpaths
    assert (e_boom.errors, e_boom.entry_errors, e_other.errors) == (1, [1], 0)


async def test_ignore_completely_counts_the_module_as_passed(autojump_clock):
    job, report = await run(policy_process("IgnoreCompletely", ["*"], ignore=True))
    assert report.events == 5 and report.events_with_errors == 1
    assert job.paths[0].passed == 5 and job.paths[0].errors == 0


async def test_rethrow_is_the_default_and_other_categories_still_rethrow(autojump_clock):
    with pytest.raises(framework.EventProcessingError, match="bad value in event 3"):
        await run(policy_process("TryToContinue", ["ExternalFailure"]))


async def test_a_category_under_two_actions_is_a_configuration_error():
    process = policy_process("TryToContinue", ["ValueError"])
    process.options.Rethrow = cms.untracked.vstring("ValueError")
    with pytest.raises(framework.ConfigurationError, match="'ValueError' is listed under both"):
        build_job(process)


async def test_fast_timer_service_writes_summary_and_trace(tmp_path):
    import json

    process = make_process(4, streams=2)
    process.ext = cms.EDProducer("testThreadedWork")
    process.read = cms.EDAnalyzer("testReader", src=cms.string("ext"))
    process.p = cms.Path(process.ext)
    process.e = cms.EndPath(process.read)
    process.FastTimerService = cms.Service(
        "FastTimerService",
        writeJSONSummary=cms.untracked.bool(True),
        jsonFileName=cms.untracked.string(str(tmp_path / "resources.json")),
        traceFile=cms.untracked.string(str(tmp_path / "trace.json")),
    )
    await run(process)
    summary = json.loads((tmp_path / "resources.json").read_text())
    ext = summary["modules"]["ext"]
    assert ext["calls"] == 4 and ext["external_work"] is True
    assert set(ext["wait"]) == {"mean", "p50", "p90", "p99", "max"}
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    spans = [e for e in trace if e["ph"] == "X"]
    names = {(e["args"]["module"], e["args"]["phase"]) for e in spans}
    assert names == {
        ("event", "event"),
        ("ext", "acquire"),
        ("ext", "external wait"),
        ("ext", "produce"),
        ("read", "analyze"),
    }
    assert len([e for e in spans if e["cat"] == "event"]) == 4
    assert {e["tid"] for e in spans} == {0, 1}  # one track per stream
    # Every module span lies inside its event's span on the same stream.
    events = {(e["tid"], e["args"]["event"]): e for e in spans if e["cat"] == "event"}
    for e in spans:
        outer = events[(e["tid"], e["args"]["event"])]
        assert outer["ts"] <= e["ts"] and e["ts"] + e["dur"] <= outer["ts"] + outer["dur"] + 1e-3


async def test_time_report_columns_carry_their_units(autojump_clock):
    from rich.console import Console

    from framework.cmsrun import print_summary

    process = make_process(4, streams=2)
    process.ext = cms.EDProducer("testSleeper")
    process.p = cms.Path(process.ext)
    job, report = await run(process)
    console = Console(record=True, width=250)
    print_summary(job, report, console)
    text = console.export_text()
    for header in (
        "acquire [ms]",
        "ext. wait [ms]",
        "produce [ms]",
        "own mean [ms]",
        "own p50 [ms]",
        "own p99 [ms]",
        "wall time [s]",
        "throughput [events/s]",
        "event latency p99 [ms]",
    ):
        assert header in text
    assert "[ms per call]" in text  # the title's unit too: as rich markup it would vanish
    # 4 events on 2 streams, 1 s of (virtual) external latency each.
    latency_row = next(line for line in text.splitlines() if "event latency p99 [ms]" in line)
    assert "1000.00" in latency_row
