"""Several servers per model (framework/sonic/_routing.py): the spread, a server killed mid-job,
and a pool that changes during the job (framework/sonic/_pool.py: servers that appear and
go away, saturation, begin_job waiting for a pool that scales from zero).

Test policy: the rules (least ``(outstanding + 1) x latency EWMA``; saturation; surveys
on the routing clock) on the router alone, with a fake clock or trio's autojump clock and
fake repository answers; the
spread and the fault against two REAL tritonserver processes on 127.0.0.1 serving the same
``double`` model (y = 2x, 20 ms per call, so requests are in flight together). The fault
job is compared with a fault-free run as in tests/test_retry.py: every event exactly
once, identical products. The fault point is set by a gate, not by sleeping.
"""

from __future__ import annotations

import os
import pathlib
import signal
import textwrap
from functools import partial
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import trio

import framework.config as cms
from framework.core import build_job, run_job
from framework.service._fallback import FallbackServer
from framework.serving import LocalTritonServer
from framework.sonic import DiscoveryParameters, Routing, ServerInfo, _routing, recommended_retries
from framework.sonic._pool import Answer, queue_per_execution

from support import JobState, free_port

N_EVENTS = 32
STREAMS = 8
K = 8  # the fault comes after K completed events

MODEL_PY = textwrap.dedent("""
    import time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            time.sleep(0.02)
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "y", (2 * pb_utils.get_input_tensor_by_name(r, "x").as_numpy()).astype(np.float32))])
                for r in requests]
""")


# ----------------------------------------------------------------------------------------
# The rule


def two_server_routing(discovery: DiscoveryParameters | None = None, clock=None, served=("a", "b")) -> Routing:
    servers = {name: ServerInfo(name, f"127.0.0.1:{port}") for name, port in (("a", 1), ("b", 2))}
    health = SimpleNamespace(unhealthyAfter=3, probeInterval=2.0, probeTimeout=1.0)
    fallback = partial(FallbackServer, SimpleNamespace(enable=False), {})
    routing = Routing(servers, health, fallback, discovery, **({"clock": clock} if clock else {}))
    for name in served:
        routing.book.add_served(name, {"m"})
    if served:
        routing.assign("m", "")
    return routing


def test_least_outstanding_requests_weighted_by_latency():
    routing = two_server_routing()

    def route(preferred: str = "") -> str:
        return routing.route_nowait("m", preferred).name

    assert route() == "a"  # no load, no latency known: the first configured
    routing.begin("a")
    assert route() == "b"  # fewer outstanding
    routing.begin("b")
    assert route() == "a"  # a tie again
    routing.end("a", 0.030)  # a answers in 30 ms, b in 10 ms
    routing.end("b", 0.010)
    assert route() == "b"
    routing.begin("b")
    routing.begin("b")
    assert route() == "a"  # b: (2 + 1) x 10 ms = 30 ms = a's (0 + 1) x 30 ms: a tie goes to a
    routing.begin("b")
    assert route() == "a"
    routing.end("b", 0.050)  # EWMA: 10 + 0.2 x (50 - 10) = 18 ms
    assert routing.book.health["b"].latency == pytest.approx(0.018)
    assert route("b") == "b"  # preferredServer pins the model to its server
    for _ in range(3):
        routing.record("a", False, "down")
    assert route() == "b"  # out of service: not a candidate


def test_queue_per_execution_between_two_reads():
    assert queue_per_execution((1_000, 10), (501_000, 15)) == 100.0  # 500 us over 5 executions
    assert queue_per_execution((1_000, 10), (9_000, 10)) is None  # nothing executed in between
    assert queue_per_execution((9_000, 10), (1_000, 2)) is None  # counters went down: a restart
    assert queue_per_execution(None, (1_000, 2)) is None


def test_a_saturated_server_is_the_last_choice():
    routing = two_server_routing(DiscoveryParameters(saturated_above=100.0))
    loads = {"a": (0, 0), "b": (0, 0)}
    routing.book.apply_survey({n: Answer(frozenset({"m"}), load=loads[n]) for n in loads})
    routing.book.apply_survey(  # a: 400 us per execution since the last survey; b: 50 us
        {"a": Answer(frozenset({"m"}), load=(4_000_000, 10)), "b": Answer(frozenset({"m"}), load=(500_000, 10))}
    )
    assert (
        routing.book.saturated("a") and not routing.book.saturated("b") and routing.book.health["a"].queue_us == 400.0
    )
    for _ in range(3):
        routing.begin("b")  # b far more loaded: a would win the spread if it were not saturated
    assert routing.route_nowait("m").name == "b"
    assert routing.route_nowait("m", "a").name == "a"  # preferredServer still pins it
    for _ in range(3):
        routing.record("b", False, "down")
    assert routing.route_nowait("m").name == "a"  # saturated, but the only one in service
    routing.book.apply_survey({"a": Answer(frozenset({"m"}), load=(4_000_000 + 500_000, 20))})
    assert not routing.book.saturated("a") and routing.book.health_report()["a"]["queue_us"] == 50.0


def test_surveys_on_the_routing_clock_let_servers_join_and_leave(monkeypatch):
    """b cannot be reached at begin_job; every 10 s (routing clock) a request first asks the
    servers again: b joins when it answers and leaves when it stops answering."""
    now = [0.0]
    answers = {"a": {"m"}, "b": "StatusCode.UNAVAILABLE: connection refused"}
    asked = []

    def ready(server, wanted=()):
        asked.append((now[0], server.name))
        return answers[server.name]

    monkeypatch.setattr(_routing, "ready_models", ready)
    routing = two_server_routing(DiscoveryParameters(interval=10.0), clock=lambda: now[0], served=("a",))

    def route() -> str:
        return routing.route_blocking("m").name

    assert route() == "a" and asked == []  # the first route only starts the routing clock
    now[0] = 9.9
    assert route() == "a" and asked == []
    answers["b"] = {"m"}
    now[0] = 10.0
    assert route() == "a" and asked == [(10.0, "a"), (10.0, "b")]  # b joined: a tie goes to a
    routing.begin("a")
    assert route() == "b" and routing.book.served["b"] == {"m"}
    answers["b"] = "StatusCode.UNAVAILABLE: connection refused"
    now[0] = 20.0
    assert route() == "a" and not routing.book.healthy("b") and routing.book.health["b"].outages == 1
    answers["a"] = set()  # a no longer serves m: it leaves the model's spread
    answers["b"] = {"m"}  # b is back
    now[0] = 30.0
    assert route() == "b" and routing.book.healthy("b") and routing.book.served["a"] == set()


async def test_begin_job_waits_for_a_pool_scaling_from_zero(monkeypatch, autojump_clock, caplog):
    """The server answers from t = 5 s: begin_job's rounds at 0, 2, 4 s find nothing (one
    progress line each, naming the model and what answered), the one at 6 s finds it."""
    import logging

    caplog.set_level(logging.INFO, logger="pysonic.sonic")
    monkeypatch.setattr(
        _routing,
        "ready_models",
        lambda server, wanted=(): (
            {"m"} if trio.from_thread.run_sync(trio.current_time) >= 5 else "StatusCode.UNAVAILABLE: refused"
        ),
    )
    routing = two_server_routing(DiscoveryParameters(wait=30.0), clock=trio.current_time, served=())
    await routing.discover({"m"})
    assert trio.current_time() == 6.0 and routing.book.served == {"a": {"m"}, "b": {"m"}}
    waits = [r.getMessage() for r in caplog.records if "waiting for a server" in r.getMessage()]
    assert len(waits) == 3 and all("model(s) m (" in w and "'a' at 127.0.0.1:1 unreachable" in w for w in waits)
    assert "(4 s of 30 s, discovery.wait)" in waits[-1]
    # A wait that runs out: begin_job goes on (fallback or error) after 3 s, naming the servers.
    caplog.clear()
    routing = two_server_routing(DiscoveryParameters(wait=3.0), clock=trio.current_time, served=())
    start = trio.current_time()
    refused = "StatusCode.UNAVAILABLE: connection refused"
    monkeypatch.setattr(_routing, "ready_models", lambda server, wanted=(): refused)
    await routing.discover({"m"})
    assert trio.current_time() - start == 3.0 and routing.book.served == {}
    assert sum("cannot be reached, skipped" in r.getMessage() for r in caplog.records) == 2
    # No server configured: nothing can appear, no wait (the fallback's or the error's turn).
    fallback = partial(FallbackServer, SimpleNamespace(enable=False), {})
    health = SimpleNamespace(unhealthyAfter=3, probeInterval=2.0, probeTimeout=1.0)
    start = trio.current_time()
    await Routing({}, health, fallback, DiscoveryParameters(wait=30.0), clock=trio.current_time).discover({"m"})
    assert trio.current_time() == start


# ----------------------------------------------------------------------------------------
# Jobs on two real servers


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> pathlib.Path:
    repo = tmp_path_factory.mktemp("balancing_models")
    (repo / "double" / "1").mkdir(parents=True)
    (repo / "double" / "1" / "model.py").write_text(MODEL_PY)
    (repo / "double" / "config.pbtxt").write_text(
        'name: "double"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )
    return repo


def started(repository: pathlib.Path) -> LocalTritonServer:
    server = LocalTritonServer(repository)
    server.start(60.0)
    return server


@pytest.fixture(scope="module")
def pair(repository, left_behind):
    servers = [started(repository), started(repository)]
    try:
        yield servers
    finally:
        for server in servers:
            server.stop(10.0)
    for server in servers:
        assert left_behind(server.region_prefix) == ([], [])


class Shared:
    """The fault job's hold (events after K + 2 wait for it), for the test to open."""

    hold: trio.Event | None = None


def balancing_process(
    servers: list[LocalTritonServer], ports: list[int] | None = None, **discovery: float
) -> cms.Process:
    """The job on ``servers`` (their gRPC ports, or ``ports``: a server may not run yet),
    with TritonService's ``discovery`` parameters."""
    ports = ports or [server.ports["grpc"] for server in servers]
    process = cms.Process("BALANCING")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = N_EVENTS
    process.options.numberOfStreams = STREAMS
    process.TritonService = cms.Service(
        "TritonService",
        servers=cms.untracked.VPSet(
            *[
                cms.PSet(
                    name=cms.untracked.string(f"s{i}"),
                    address=cms.untracked.string("127.0.0.1"),
                    port=cms.untracked.uint32(port),
                )
                for i, port in enumerate(ports)
            ]
        ),
        fallback=cms.PSet(enable=cms.untracked.bool(False)),
        discovery=cms.untracked.PSet(**{k: cms.untracked.double(v) for k, v in discovery.items()}),
    )
    process.gate = cms.EDFilter("testGate")
    process.doubler = cms.EDProducer(
        "testDoubler",
        Client=cms.PSet(
            modelName=cms.string("double"),
            modelConfigPath=cms.FileInPath(str(servers[0].repository / "double" / "config.pbtxt")),
            mode=cms.string("Async"),
            timeout=cms.untracked.uint32(10),
            retries=recommended_retries(),  # a killed server's requests fail over (CMSSW's default: no retry)
        ),
    )
    process.recorder = cms.EDAnalyzer("testRecorder")
    process.p = cms.Path(process.gate + process.doubler + process.recorder)
    return process


async def run(process: cms.Process, fault=None) -> tuple[Any, dict[int, np.ndarray]]:
    """Run the job (``fault(done)`` in a task beside it, ``done``: a function that waits
    for a count of completed events); (the TritonService, products by event)."""
    JobState.records = []
    Shared.hold = trio.Event() if fault is not None else None
    JobState.holds = [(K + 2, Shared.hold)] if Shared.hold is not None else []
    process.validate_()
    job = build_job(process)
    completed = [0]

    async def done(count: int) -> None:
        while completed[0] < count:
            await trio.sleep(0.005)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            if fault is not None:
                nursery.start_soon(fault, done)
            report = await run_job(job, on_event=lambda principal, latency: completed.__setitem__(0, completed[0] + 1))
            nursery.cancel_scope.cancel()
    numbers = [n for n, _ in JobState.records]
    assert report.events == N_EVENTS and sorted(numbers) == list(range(1, N_EVENTS + 1)), "an event missing or twice"
    return job.services.services["TritonService"], dict(JobState.records)


_reference: dict[int, np.ndarray] = {}


def assert_fault_free_on_both(records: dict[int, np.ndarray], stats: dict) -> dict:
    """Every event's product as in the fault-free run (:data:`_reference`), no error, and
    both servers served requests; the doubler's client statistics."""
    assert records.keys() == _reference.keys()
    for number, y in _reference.items():
        np.testing.assert_array_equal(records[number], y, err_msg=f"event {number}")
    client = stats["clients"]["doubler"]
    assert client["errors"] == 0 and client["servers"]["s0"] > 0 and client["servers"].get("s1", 0) > 0
    return client


async def test_two_servers_of_one_model_both_serve(pair):
    svc, records = await run(balancing_process(pair))
    _reference.update(records)
    for number, y in records.items():
        np.testing.assert_array_equal(y, np.full((1 + number % 3, 4), 2 * number, np.float32))
    stats = svc.statistics()
    per_server = stats["models"]["double"]["servers"]  # Triton's own request counts
    assert per_server["s0"] > 0 and per_server["s1"] > 0 and sum(per_server.values()) == N_EVENTS
    assert stats["clients"]["doubler"]["servers"] == per_server  # the client counted the same
    assert all(stats["servers"][name]["latency_ms"] > 0 for name in ("s0", "s1"))
    from rich.console import Console

    console = Console(width=200, record=True)
    for table in svc.report():
        console.print(table)
    assert f"s0 ({per_server['s0']}), s1 ({per_server['s1']})" in console.export_text()


async def test_one_of_two_servers_killed_mid_job(repository, pair, left_behind):
    if not _reference:
        await test_two_servers_of_one_model_both_serve(pair)
    victim = started(repository)
    try:

        async def kill(done) -> None:
            await done(K)
            os.kill(victim.pid, signal.SIGKILL)
            assert Shared.hold is not None
            Shared.hold.set()

        svc, records = await run(balancing_process([pair[0], victim]), kill)
    finally:
        victim.stop(10.0)
    assert left_behind(victim.region_prefix) == ([], [])
    stats = svc.statistics()
    client = assert_fault_free_on_both(records, stats)
    assert client["failovers"] >= 1 and stats["servers"]["s1"]["outages"] == 1  # its requests went to s0


# ----------------------------------------------------------------------------------------
# A pool that changes during the job, on real servers


async def test_begin_job_waits_for_the_server_of_its_model(repository, left_behind, caplog):
    """The job's only server starts 1 s after begin_job asked it: begin_job waits for it
    (discovery.wait), says so, and every event is served there."""
    import logging
    import threading

    caplog.set_level(logging.INFO, logger="pysonic.sonic")
    port = free_port()
    late = LocalTritonServer(repository, grpc_port=port)
    starter = threading.Timer(1.0, late.start, (60.0,))
    starter.start()
    try:
        svc, records = await run(balancing_process([late], [port], wait=60.0))
    finally:
        starter.join()
        late.stop(10.0)
    assert left_behind(late.region_prefix) == ([], [])
    waits = [r.getMessage() for r in caplog.records if "waiting for a server of model(s) double" in r.getMessage()]
    assert waits and f"'s0' at 127.0.0.1:{port} unreachable" in waits[0]
    assert svc.statistics()["clients"]["doubler"]["servers"] == {"s0": N_EVENTS}


async def test_a_server_that_appears_mid_job_joins_and_leaves_without_a_failed_event(repository, pair, caplog):
    """s1 does not run at begin_job; it starts mid-job, joins at the next survey and takes
    requests, then is SIGKILLed: its requests fail over to s0 (Client.retries), the survey
    takes it out; every event once, products as in the fault-free run."""
    import logging

    caplog.set_level(logging.INFO, logger="pysonic.sonic")
    if not _reference:
        await test_two_servers_of_one_model_both_serve(pair)
    port = free_port()
    late = LocalTritonServer(repository, grpc_port=port)
    try:

        async def appear_then_go(done) -> None:
            await done(K)
            await trio.to_thread.run_sync(late.start, 60.0)
            assert Shared.hold is not None
            Shared.hold.set()
            await done(K + 12)
            assert late.pid is not None
            os.kill(late.pid, signal.SIGKILL)

        process = balancing_process([pair[0], late], [pair[0].ports["grpc"], port], interval=0.2)
        svc, records = await run(process, appear_then_go)
    finally:
        late.stop(10.0)
    stats = svc.statistics()
    assert_fault_free_on_both(records, stats)
    assert any("'s1'" in r.getMessage() and "joins: serves double" in r.getMessage() for r in caplog.records)
    assert stats["servers"]["s1"]["outages"] >= 1  # it left


def flood(address: str, stop) -> None:
    """Keep 8 requests in flight on ``double`` at ``address`` until ``stop`` is set (a thread)."""
    import threading

    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(address)
    x = grpcclient.InferInput("x", [1, 4], "FP32")
    x.set_data_from_numpy(np.ones((1, 4), np.float32))
    slots = threading.BoundedSemaphore(8)
    try:
        while not stop.is_set():
            if slots.acquire(timeout=0.1):
                client.async_infer("double", [x], callback=lambda result, error: slots.release())
        for _ in range(8):
            slots.acquire(timeout=5)
    finally:
        client.close()


async def test_a_saturated_server_is_skipped_at_begin_job(pair, caplog):
    """s0 is kept busy by someone else (8 requests in flight, 20 ms each: ~140 ms of queue
    per execution); with discovery.saturatedAbove = 1000 us begin_job skips it and the job
    runs on s1 alone."""
    import logging
    import threading

    caplog.set_level(logging.INFO, logger="pysonic.sonic")
    stop = threading.Event()
    flooder = threading.Thread(target=flood, args=(pair[0].grpc_address, stop))
    flooder.start()
    try:
        svc, _records = await run(balancing_process(pair, saturatedAbove=1000.0))
    finally:
        stop.set()
        flooder.join(30)
    skipped = [r.getMessage() for r in caplog.records if "saturated" in r.getMessage()]
    assert len(skipped) == 1 and "'s0'" in skipped[0] and "skipped" in skipped[0]
    stats = svc.statistics()
    assert stats["clients"]["doubler"]["servers"] == {"s1": N_EVENTS}
    assert stats["servers"]["s1"]["saturated"] is False
