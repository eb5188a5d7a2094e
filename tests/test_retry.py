"""Faults: retries, failover, timeouts and server health, against REAL tritonserver processes.

Test policy: every server runs on 127.0.0.1 (LocalTritonServer) and is stopped by a fixture,
also after SIGKILL or SIGSTOP; once stopped, no process and no /dev/shm region of it may
remain (``left_behind``, tests/conftest.py). The models are tiny Python-backend models
written into tmp_path: ``double`` (y = 2x, 20 ms per call, so a job has calls in flight)
and ``flaky`` (fails the first N calls of a request id with a chosen gRPC status, so
retries are exact).

The fault tests run real jobs (build_job/run_job, EmptySource) with a configured
``primary`` server and the fallback server, break the primary at a known point and
compare the products with a fault-free run: every event exactly once, identical arrays.
The point is set by gates, not by sleeping: a test ExternalWork filter (``Gate``, with
``Doubler`` and ``Recorder`` in tests/support.py) holds the events after the k-th until
the test's trigger task has done the damage (``run_job``'s ``on_event`` counts the
completed events).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import signal
import textwrap
import time

import numpy as np
import pytest
import trio

import framework
import framework.config as cms
from framework import ExternalFailure, FrameworkError
from framework.core import build_job, run_job
from framework.serving import LocalTritonServer
from framework.serving.testing import serving, write_python_model
from framework.sonic import (
    DEFAULT_RETRIES,
    RECOMMENDED_RETRIES,
    RetryAction,
    ServerInfo,
    TritonClient,
    client_description,
    is_recoverable,
    recommended_retries,
    retries_pset,
)
from framework.utilities import ConfigurationError

from support import JobState

N_EVENTS = 24
STREAMS = 4
K = 6  # the fault comes after K completed events
JOB_LIMIT = 60.0  # seconds: a hung job fails the test instead of the suite

MODEL_PY = textwrap.dedent("""
    import json, time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def initialize(self, args):
            self.flaky = json.loads(args["model_config"])["name"] == "flaky"
            self.calls = {}  # flaky: request id -> calls so far
            error = pb_utils.TritonError  # complete only once the stub is up, not at import
            self.codes = {0: error.UNAVAILABLE, 1: error.INVALID_ARG, 2: error.INTERNAL}

        def execute(self, requests):
            return [self.run(pb_utils.get_input_tensor_by_name(r, "x").as_numpy()) for r in requests]

        def run(self, x):
            if self.flaky:  # x[0] = (request id, failures wanted, status code index, ...)
                key, fail, code = (int(v) for v in x[0, :3])
                self.calls[key] = self.calls.get(key, 0) + 1
                if self.calls[key] <= fail:
                    return pb_utils.InferenceResponse(error=pb_utils.TritonError("flaky", self.codes[code]))
            else:
                time.sleep(0.02)
            return pb_utils.InferenceResponse([pb_utils.Tensor("y", (2 * x).astype(np.float32))])
""")


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> pathlib.Path:
    repo = tmp_path_factory.mktemp("models")  # x -> y, FP32 (batch, -1), batch <= 8
    REPOSITORY[:] = [repo]  # the models' configs, for client_params
    write_python_model(repo, "double", MODEL_PY)
    write_python_model(repo, "flaky", MODEL_PY)
    return repo


@contextlib.contextmanager
def running(repository: pathlib.Path, left_behind, models: list[str] | None = None):
    """A started server (:func:`serving`); at the end SIGCONT it (it may be stopped), stop
    it, and check that nothing of it remains (it may have been killed)."""
    with serving(repository, models) as server:
        try:
            yield server
        finally:
            if server.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(server.pid, signal.SIGCONT)
            # A server a test hung still holds the connections of the job's service (alive in
            # the test): Triton would wait its 30-s exit timeout for them before exiting.
            server.stop(5.0)
    assert left_behind(server.region_prefix) == ([], [])


@pytest.fixture(scope="module")
def steady(repository, left_behind):
    """A server nobody breaks (unit tests and the fault-free reference job)."""
    with running(repository, left_behind) as server:
        yield server


@pytest.fixture
def primary(repository, left_behind):
    """A server for one fault test to break."""
    with running(repository, left_behind, ["double"]) as server:
        yield server


# ----------------------------------------------------------------------------------------
# The retry policy on one server (the flaky model: exact counts, no timing)


REPOSITORY: list[pathlib.Path] = []  # this module's model repository, once written
UNUSED_CONFIG = "models/facile/config.pbtxt"  # a FileInPath that exists (data/), for clients never connected


def client_params(model: str, **params):
    # Required as in CMSSW: modelConfigPath (unused by a client connected by hand), timeout;
    # these tests mean Async and pysonic's recommended retries unless they say otherwise
    # (CMSSW's defaults: PseudoAsync, no retry).
    required = {
        "modelConfigPath": str(REPOSITORY[0] / model / "config.pbtxt") if REPOSITORY else UNUSED_CONFIG,
        "timeout": 10,
        "mode": "Async",
        "retries": retries_pset(RECOMMENDED_RETRIES),
    }
    return client_description().validate({"modelName": model, **required, **params}, f"test client of '{model}'")


@pytest.fixture
def connect(steady):
    clients = []

    def make(model: str = "flaky", **params) -> TritonClient:
        client = TritonClient(client_params(model, **params), debug_name="flakyUser")
        client.connect(ServerInfo("steady", steady.grpc_address))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


_keys = iter(range(1, 1_000_000))


async def flaky_infer(client: TritonClient, fail: int, code: int = 0):
    """One request that fails ``fail`` times with status ``code`` (0 UNAVAILABLE, 1 INVALID_ARG,
    2 INTERNAL) before succeeding; returns (request, x)."""
    x = np.array([[next(_keys), fail, code, 1.5]], np.float32)
    request = client.new_request(event_id=framework.EventID(1, 1, 7))
    request.input["x"].to_server(x)
    await request.infer()
    return request, x


@pytest.mark.parametrize("mode", ["Async", "Sync", "PseudoAsync"])
async def test_recoverable_failures_are_retried_on_the_same_server(connect, mode, caplog):
    client = connect(mode=mode)
    with caplog.at_level(logging.WARNING, logger="pysonic.sonic"):
        request, x = await flaky_infer(client, fail=2)  # default policy: sameServer x2 first
    np.testing.assert_array_equal(request.output["y"].from_server(), 2 * x)
    assert request.tries == 3 and request.server.name == "steady"
    stats = client.statistics()
    assert (stats.calls, stats.retries, stats.failovers, stats.errors) == (1, 2, 0, 0)
    retries = [r.getMessage() for r in caplog.records if "retry on" in r.getMessage()]
    assert len(retries) == 2
    for message in retries:  # module label, event id, server and reason
        for fragment in (
            "module 'flakyUser'",
            "event 1:1:7",
            "'steady'",
            "StatusCode.UNAVAILABLE: flaky",
            "(sameServer)",
        ):
            assert fragment in message


async def test_server_side_internal_errors_are_retried(connect):
    client = connect()
    request, x = await flaky_infer(client, fail=1, code=2)
    np.testing.assert_array_equal(request.output["y"].from_server(), 2 * x)
    assert (client.statistics().retries, request.tries) == (1, 2)


async def test_programming_errors_are_not_retried(connect):
    client = connect()
    with pytest.raises(
        ExternalFailure,
        match=r"model 'flaky' \(module 'flakyUser'\), event 1:1:7 on server "
        r"'steady'.*StatusCode.INVALID_ARGUMENT: flaky$",
    ) as info:
        await flaky_infer(client, fail=1, code=1)
    error = info.value  # the same facts as fields: nobody parses the message
    assert (error.model, error.server, error.status, error.tries, error.retryable) == (
        "flaky",
        "steady",
        "INVALID_ARGUMENT",
        1,
        False,
    )
    stats = client.statistics()
    assert (stats.retries, stats.errors) == (0, 1)


async def test_exhausted_retries_name_the_tries_servers_and_policy(connect):
    retries = [{"action": "sameServer", "maxTries": 1, "backoff": 0.01}]
    client = connect(retries=retries)
    with pytest.raises(
        ExternalFailure,
        match=r"UNAVAILABLE: flaky; gave up after 2 tries "
        r"\(servers: steady; Client.retries: sameServer x1\)",
    ) as info:
        await flaky_infer(client, fail=5)
    error = info.value
    assert (error.model, error.server, error.status, error.tries, error.retryable) == (
        "flaky",
        "steady",
        "UNAVAILABLE",
        2,
        True,
    )
    assert (client.statistics().retries, client.statistics().errors) == (1, 1)


async def test_no_retries_and_cmssw_allowed_tries(connect, caplog):
    client = connect(retries=[])
    with pytest.raises(ExternalFailure, match="UNAVAILABLE: flaky$"):
        await flaky_infer(client, fail=1)
    with caplog.at_level(logging.WARNING, logger="pysonic.sonic"):
        client = connect(allowedTries=3, retries=[])
    assert not caplog.records  # CMSSW's current name: not deprecated
    assert client.retries == (RetryAction("sameServer", 2, 0.0, 1.0),)
    request, x = await flaky_infer(client, fail=2)
    np.testing.assert_array_equal(request.output["y"].from_server(), 2 * x)


class SilentClient:
    """An InferenceServerClient whose inference calls never answer; records cancellations."""

    def __init__(self, real) -> None:
        self.real = real
        self.cancelled = 0

    def async_infer(self, *args, **kwargs):
        spy = self

        class Context:
            def cancel(self) -> None:
                spy.cancelled += 1

        return Context()

    def __getattr__(self, name):
        return getattr(self.real, name)


async def test_a_call_that_never_answers_is_cancelled_by_the_client(steady, autojump_clock):
    import tritonclient.grpc as grpcclient

    params = client_params(
        "flaky", timeout=100, timeoutUnit="milliseconds", retries=[{"action": "sameServer", "maxTries": 1}]
    )
    client = TritonClient(params, debug_name="flakyUser")
    with grpcclient.InferenceServerClient(steady.grpc_address) as real:
        silent = SilentClient(real)
        client.connect(ServerInfo("steady", steady.grpc_address), silent)
        request = client.new_request()
        request.input["x"].to_server(np.ones((1, 3), np.float32))
        with (
            trio.fail_after(60),
            pytest.raises(
                ExternalFailure,
                match=r"deadline exceeded after 100 "
                r"milliseconds .*gave up after 2",
            ),
        ):
            await request.infer_async()  # the virtual clock jumps over Client.timeout + TIMEOUT_GRACE
    assert silent.cancelled == 2  # each try's call was cancelled on the client (CallContext.cancel)


def test_retry_configuration():
    required = {"modelName": "m", "modelConfigPath": UNUSED_CONFIG, "timeout": 1}
    assert TritonClient(client_description().validate(required, "c")).retries == DEFAULT_RETRIES == ()  # CMSSW's
    with pytest.raises(ConfigurationError, match="Client.retries and Client.allowedTries both ask for retries"):
        TritonClient(client_params("m", modelConfigPath=UNUSED_CONFIG, allowedTries=2))
    # Later CMSSW releases' Retry VPSet reads as the same actions.
    later = [{"retryType": "RetrySameServerAction", "allowedTries": 3}, {"retryType": "RetryActionDiffServer"}]
    assert TritonClient(client_description().validate({**required, "Retry": later}, "c")).retries == (
        RetryAction("sameServer", 2, 0.0, 1.0),
        RetryAction("otherServer", 1, 0.0, 1.0),
    )
    with pytest.raises(
        ConfigurationError,
        match=r"Client.retries\[1\].action 'elsewhere' is not one of "
        "sameServer, otherServer, fallback",
    ):
        TritonClient(
            client_params(
                "m", modelConfigPath=UNUSED_CONFIG, retries=[{"action": "sameServer"}, {"action": "elsewhere"}]
            )
        )


def test_which_statuses_are_recoverable():
    from tritonclient.utils import InferenceServerException

    def status(name: str) -> InferenceServerException:
        return InferenceServerException("x", status=f"StatusCode.{name}")

    for name in ("UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "CANCELLED"):
        assert is_recoverable(status(name)), name
    for name in ("INVALID_ARGUMENT", "NOT_FOUND", "UNIMPLEMENTED", "UNAUTHENTICATED"):
        assert not is_recoverable(status(name)), name
    assert not is_recoverable(ExternalFailure("output 'y' is an EMPTY tensor"))
    # our own failures say so by a field, not by their message
    assert is_recoverable(ExternalFailure("no answer", status="DEADLINE_EXCEEDED", retryable=True))


# ----------------------------------------------------------------------------------------
# Jobs with a fault in the middle


def fault_process(
    repository: pathlib.Path,
    primary_port: int | None,
    *,
    timeout_s: int = 10,
    fallback_repository: pathlib.Path | None = None,
) -> cms.Process:
    """The job: gate + doubler + recorder; ``primary_port`` None = no configured server."""
    process = cms.Process("FAULTS")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = N_EVENTS
    process.options.numberOfStreams = STREAMS
    servers = (
        []
        if primary_port is None
        else [
            cms.PSet(
                name=cms.untracked.string("primary"),
                address=cms.untracked.string("127.0.0.1"),
                port=cms.untracked.uint32(primary_port),
            )
        ]
    )
    process.TritonService = cms.Service(
        "TritonService",
        servers=cms.untracked.VPSet(*servers),
        fallback=cms.PSet(
            enable=cms.untracked.bool(True),
            modelRepository=cms.untracked.string(str(fallback_repository or repository)),
            wait=cms.untracked.int32(60),
        ),
        health=cms.untracked.PSet(probeInterval=cms.untracked.double(0.2)),
    )
    client = cms.PSet(
        modelName=cms.string("double"),
        timeout=cms.untracked.uint32(timeout_s),
        modelConfigPath=cms.FileInPath(str(repository / "double" / "config.pbtxt")),
        mode=cms.string("Async"),
        retries=recommended_retries(),  # failover is the point
    )
    process.gate = cms.EDFilter("testGate")
    process.doubler = cms.EDProducer("testDoubler", Client=client)
    process.recorder = cms.EDAnalyzer("testRecorder")
    process.p = cms.Path(process.gate + process.doubler + process.recorder)
    return process


class Progress:
    """Completed events, counted by run_job's on_event hook; tasks wait for a count."""

    def __init__(self) -> None:
        self.done = 0
        self._waiters: list[tuple[int, trio.Event]] = []

    def on_event(self, principal, latency) -> None:
        self.done += 1
        for count, reached in self._waiters:
            if self.done >= count:
                reached.set()

    async def reached(self, count: int) -> None:
        reached = trio.Event()
        self._waiters.append((count, reached))
        if self.done >= count:
            reached.set()
        await reached.wait()


async def run_faulty(process: cms.Process, holds: list[int], fault=None):
    """Run the job; ``fault(progress, gates, svc)`` does the damage and opens the gates
    (one per number in ``holds``). Returns (TritonService, records by event number)."""
    JobState.records = []
    JobState.holds = [(after, trio.Event()) for after in holds]
    gates = [opened for _, opened in JobState.holds]
    process.validate_()
    job = build_job(process)
    svc = job.services.services["TritonService"]
    progress = Progress()
    try:
        with trio.fail_after(JOB_LIMIT):
            async with trio.open_nursery() as nursery:
                if fault is not None:
                    nursery.start_soon(fault, progress, gates, svc)
                else:
                    for gate in gates:
                        gate.set()
                report = await run_job(job, on_event=progress.on_event)
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # the job's own error, not trio's wrapping of it
        while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
            group = group.exceptions[0]
        raise group from None
    numbers = [n for n, _ in JobState.records]
    assert sorted(numbers) == list(range(1, N_EVENTS + 1)), "an event is missing or duplicated"
    assert report.events == N_EVENTS
    return svc, dict(JobState.records)


_reference: dict[int, np.ndarray] = {}


async def reference(repository: pathlib.Path, steady: LocalTritonServer) -> dict[int, np.ndarray]:
    """The products of the fault-free job (computed once)."""
    if not _reference:
        svc, records = await run_faulty(fault_process(repository, steady.ports["grpc"]), [])
        assert svc.fallback is None and svc.statistics()["clients"]["doubler"]["retries"] == 0
        _reference.update(records)
    return _reference


def assert_same_products(records: dict[int, np.ndarray], expected: dict[int, np.ndarray]) -> None:
    assert records.keys() == expected.keys()
    for number, y in expected.items():
        np.testing.assert_array_equal(records[number], y, err_msg=f"event {number}")


def retry_messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retry on" in r.getMessage()]


async def test_killed_primary_fails_over_to_the_fallback(repository, steady, primary, caplog):
    expected = await reference(repository, steady)

    async def kill(progress, gates, svc):
        await progress.reached(K)
        os.kill(primary.pid, signal.SIGKILL)
        gates[0].set()

    with caplog.at_level(logging.INFO, logger="pysonic.sonic"):
        svc, records = await run_faulty(fault_process(repository, primary.ports["grpc"]), [K + 2], kill)
    assert_same_products(records, expected)
    stats = svc.statistics()
    client = stats["clients"]["doubler"]
    assert client["errors"] == 0 and client["failovers"] >= 1 and client["servers"]["fallback"] >= 1
    assert stats["servers"]["primary"]["outages"] == 1 and not stats["servers"]["primary"]["healthy"]
    assert stats["models"]["double"]["unavailable"] == ["primary"]  # gone: no end numbers
    messages = retry_messages(caplog)
    assert any(
        "module 'doubler'" in m and "event 1:1:" in m and "server 'primary'" in m and "StatusCode.UNAVAILABLE" in m
        for m in messages
    )
    assert any("(fallback)" in m for m in messages)
    starts = [r for r in caplog.records if "starting the fallback server" in r.getMessage()]
    assert len(starts) == 1  # however many events needed it at the same time
    assert any("'primary'" in r.getMessage() and "out of service" in r.getMessage() for r in caplog.records)
    assert len(svc.report()) == 3  # models, clients, server health


async def test_hung_primary_times_out_and_fails_over(repository, steady, primary, caplog):
    expected = await reference(repository, steady)

    async def hang(progress, gates, svc):
        await progress.reached(K)
        os.kill(primary.pid, signal.SIGSTOP)  # the fixture sends SIGCONT before stopping it
        gates[0].set()

    with caplog.at_level(logging.WARNING, logger="pysonic.sonic"):
        svc, records = await run_faulty(fault_process(repository, primary.ports["grpc"], timeout_s=1), [K + 2], hang)
    assert_same_products(records, expected)
    stats = svc.statistics()
    assert stats["clients"]["doubler"]["errors"] == 0 and stats["clients"]["doubler"]["failovers"] >= 1
    assert not stats["servers"]["primary"]["healthy"]
    assert any("deadline exceeded" in m.lower() and "server 'primary'" in m for m in retry_messages(caplog))


async def test_restarted_primary_is_probed_back_into_service(repository, steady, primary, caplog):
    expected = await reference(repository, steady)
    down_until = K + 2 + STREAMS  # events sent while the primary is down
    ports = primary.ports
    restarted = LocalTritonServer(
        repository, models=["double"], grpc_port=ports["grpc"], http_port=ports["http"], metrics_port=ports["metrics"]
    )

    async def restart(progress, gates, svc):
        await progress.reached(K)
        await trio.to_thread.run_sync(primary.stop, 10.0)
        gates[0].set()
        await progress.reached(down_until)
        await trio.to_thread.run_sync(restarted.start, 60.0)
        # New requests find the primary out of service and probe it through the shared
        # client, which must have reconnected by itself.
        while (await svc.routing.route("double")).name != "primary":
            await trio.sleep(0.1)
        gates[1].set()

    try:
        with caplog.at_level(logging.WARNING, logger="pysonic.sonic"):
            svc, records = await run_faulty(fault_process(repository, ports["grpc"]), [K + 2, down_until], restart)
        after_restart = server_requests(restarted, "double", expected=N_EVENTS - down_until)
    finally:
        restarted.stop(10.0)
    assert_same_products(records, expected)
    assert after_restart == N_EVENTS - down_until  # the later events went to the new process
    client = svc.statistics()["clients"]["doubler"]
    assert client["errors"] == 0 and client["retries"] >= 1
    assert any("'primary'" in r.getMessage() and "back in service" in r.getMessage() for r in caplog.records)


async def test_killed_fallback_server_is_started_again(repository, steady, caplog, left_behind):
    expected = await reference(repository, steady)
    restarted_by = K + 2 + STREAMS  # the events after K + 2 find the fallback dead and restart it
    servers, before_kill = [], {}

    async def kill(progress, gates, svc):
        await progress.reached(K)
        servers.append(svc.fallback)
        before_kill.update(zip(("processes", "regions"), left_behind(svc.fallback.region_prefix), strict=True))
        os.kill(svc.fallback.pid, signal.SIGKILL)
        gates[0].set()
        while svc.fallback is servers[0]:
            await trio.sleep(0.01)
        servers.append(svc.fallback)
        gates[1].set()

    with caplog.at_level(logging.WARNING, logger="pysonic.sonic"):
        svc, records = await run_faulty(fault_process(repository, None), [K + 2, restarted_by], kill)
    assert_same_products(records, expected)
    assert not servers[0].is_running() and svc.fallback is None  # the new one is stopped too
    assert svc.statistics()["clients"]["doubler"]["errors"] == 0
    assert any(
        "fallback server" in r.getMessage() and "is gone, restarting it" in r.getMessage() for r in caplog.records
    )
    # the killed server had a stub and its region; neither it nor the new one left anything
    assert len(before_kill["processes"]) == 2 and len(before_kill["regions"]) == 1, before_kill
    for server in servers:
        assert left_behind(server.region_prefix) == ([], [])


def server_requests(server: LocalTritonServer, model: str, expected: int = 0, timeout: float = 5.0) -> int:
    """Successful requests the server process has counted for ``model``, polled until they
    reach ``expected`` or ``timeout`` (s) passes: Triton counts a request after sending its
    response, so the client may have the answer first."""
    import tritonclient.grpc as grpcclient

    deadline = time.monotonic() + timeout
    with grpcclient.InferenceServerClient(server.grpc_address) as c:
        while True:
            stats = c.get_inference_statistics(model, as_json=True)["model_stats"]
            count = sum(int(v["inference_stats"]["success"].get("count", 0)) for v in stats)
            if count >= expected or time.monotonic() > deadline:
                return count
            time.sleep(0.02)


async def test_fallback_that_fails_to_start_shows_its_log(repository, primary, tmp_path):
    broken = tmp_path / "broken"
    # a model that fails to load: the server starts, then exits (a broken config.pbtxt is
    # refused before any server starts, by the repository translation)
    failing = (
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('boom: cannot load')\n"
    )
    write_python_model(broken, "double", failing)

    async def kill(progress, gates, svc):
        await progress.reached(K)
        os.kill(primary.pid, signal.SIGKILL)
        gates[0].set()

    process = fault_process(repository, primary.ports["grpc"], fallback_repository=broken)
    with pytest.raises(FrameworkError) as failure:
        await run_faulty(process, [K + 2], kill)
    message = str(failure.value)
    assert "module 'doubler'" in message and "failover to the fallback server" in message
    assert "did not start" in message and "last lines" in message
    assert "boom: cannot load" in message  # from the server's log
    # Events before the fault were complete; none of the later ones was half-done silently.
    assert all(n <= K + 2 for n, _ in JobState.records)
