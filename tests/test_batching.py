"""Cross-event batching (``Client.batching``, framework/sonic/_batching.py).

Test policy: results and counts against a REAL tritonserver on 127.0.0.1 (Python-backend
models written into tmp_path, server-side dynamic batching off, so that every row count the
model sees is the client's merge); when a call goes (``maxRows`` at once, ``maxDelay`` at
most, at once when nothing else can run) with a stand-in gRPC client that records the trio
time of each call (only bounds implied by the rule are asserted, never a speed). Models, all
``x`` float32 ``(batch, 4)`` -> ``y``:

* ``double``: y = 2x, row by row (the results every event must get, merged or not);
* ``count``: y = x with column 1 replaced by the number of rows of the call that carried
  the row (what the server saw, per event);
* ``solo``: y = 2x, but fails (UNAVAILABLE) any call that carries rows of more than one
  event (column 0 holds the event number): every merged call fails.
"""

from __future__ import annotations

import functools
import logging
import pathlib
import textwrap

import numpy as np
import pytest
import trio

import framework
import framework.config as cms
from framework.core import build_job, run_job
from framework.serving import LocalTritonServer
from framework.serving.testing import TensorConfig, write_python_model
from framework.sonic import ServerInfo, SonicEDProducer, TritonClient, client_description, recommended_retries

MODEL_PY = textwrap.dedent("""
    import json, time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def initialize(self, args):
            self.name = json.loads(args["model_config"])["name"]

        def execute(self, requests):
            return [self.run(pb_utils.get_input_tensor_by_name(r, "x").as_numpy()) for r in requests]

        def run(self, x):
            if self.name == "count":
                y = x.copy()
                y[:, 1] = len(x)
                time.sleep(0.05)  # a call stays in flight long enough to cancel an event meanwhile
            elif self.name == "solo" and len(set(x[:, 0].tolist())) > 1:
                error = pb_utils.TritonError("merged", pb_utils.TritonError.UNAVAILABLE)
                return pb_utils.InferenceResponse(error=error)
            else:
                y = 2 * x
            return pb_utils.InferenceResponse([pb_utils.Tensor("y", y.astype(np.float32))])
""")

REPOSITORY: list[pathlib.Path] = []  # this module's model repository, once written


def required(model: str) -> dict:
    """The Client keys CMSSW requires (modelConfigPath: the model's config in this module's
    repository) and the mode these tests mean (CMSSW's default is PseudoAsync)."""
    # A client never connected (configuration checks) may name any existing config.
    config = str(REPOSITORY[0] / model / "config.pbtxt") if REPOSITORY else "models/facile/config.pbtxt"
    return {"modelConfigPath": config, "timeout": 10, "mode": "Async"}


N_EVENTS = 48
STREAMS = 16
WIDE = 4096  # float32 columns of the "wide" model: one event's row (16 KiB) stays under the
# 64 KiB below which a call keeps gRPC payloads; a merged call of 4 or more goes in shared memory


def write_model(repo: pathlib.Path, name: str, width: int = 4) -> None:
    write_python_model(
        repo,
        name,
        MODEL_PY,
        max_batch_size=64,
        inputs=[TensorConfig("x", dims=(width,))],
        outputs=[TensorConfig("y", dims=(width,))],
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory, left_behind):
    repo = tmp_path_factory.mktemp("batching_models")
    REPOSITORY[:] = [repo]  # the models' configs (Client.modelConfigPath)
    for name in ("double", "count", "solo"):
        write_model(repo, name)
    write_model(repo, "wide", WIDE)  # y = 2x, 16 KiB per row
    triton = LocalTritonServer(repo)
    triton.start(60.0)
    try:
        yield triton
    finally:
        triton.stop(10.0)
    assert left_behind(triton.region_prefix) == ([], [])


# ----------------------------------------------------------------------------------------
# Jobs: the same events with and without batching


class Records:
    products: dict[int, np.ndarray] = {}


class RowsProducer(SonicEDProducer):
    """Sends 1 to 3 rows per event, column 0 the event number; puts the model's answer."""

    def __init__(self, params):
        super().__init__(params)
        self.produces()

    def acquire(self, event, input):
        n = event.id.event
        x = np.arange(4 * (1 + n % 3), dtype=np.float32).reshape(-1, 4) + 0.5
        x[:, 0] = n
        input["x"].to_server(x)

    def produce(self, event, output):
        y = np.array(output["y"].from_server())
        Records.products[event.id.event] = y
        event.put(y)


framework.register_type("batchingRowsProducer", RowsProducer)


def batching_process(
    server: LocalTritonServer,
    model: str,
    max_rows: int,
    max_delay_us: int = 200,
    streams: int = STREAMS,
    events: int = N_EVENTS,
    producer: str = "batchingRowsProducer",
    shared_memory: bool = True,
    transport: str = "grpc",
) -> cms.Process:
    process = cms.Process("BATCHING")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = events
    process.options.numberOfStreams = streams
    process.TritonService = cms.Service(
        "TritonService",
        servers=cms.untracked.VPSet(
            cms.PSet(
                name=cms.untracked.string("local"),
                address=cms.untracked.string("127.0.0.1"),
                port=cms.untracked.uint32(server.ports["grpc"]),
                httpPort=cms.untracked.uint32(server.ports["http"]),
            )
        ),
        fallback=cms.PSet(enable=cms.untracked.bool(False)),
        health=cms.untracked.PSet(unhealthyAfter=cms.untracked.uint32(1000)),
    )
    process.rows = cms.EDProducer(
        producer,
        Client=cms.PSet(
            modelName=cms.string(model),
            modelConfigPath=cms.FileInPath(str(REPOSITORY[0] / model / "config.pbtxt")),
            mode=cms.string("Async"),  # cross-event batching is Async's
            timeout=cms.untracked.uint32(20),
            useSharedMemory=cms.untracked.bool(shared_memory),
            transport=cms.untracked.string(transport),
            batching=cms.untracked.PSet(
                maxRows=cms.untracked.uint32(max_rows), maxDelay=cms.untracked.uint32(max_delay_us)
            ),
        ),
    )
    process.p = cms.Path(process.rows)
    return process


async def run(process: cms.Process) -> tuple[dict[int, np.ndarray], dict]:
    """Run the job; (products by event number, the rows module's client statistics)."""
    Records.products = {}
    process.validate_()
    job = build_job(process)
    with trio.fail_after(60):
        report = await run_job(job)
    assert report.events == len(Records.products)
    stats = job.services.services["TritonService"].statistics()
    return dict(Records.products), stats["clients"]["rows"]


@pytest.mark.parametrize("transport", ["grpc", "http"])
async def test_batched_results_are_identical_event_by_event(server, transport):
    unbatched, plain = await run(batching_process(server, "double", max_rows=0, transport=transport))
    batched, merged = await run(batching_process(server, "double", max_rows=64, transport=transport))
    assert sorted(batched) == sorted(unbatched) == list(range(1, N_EVENTS + 1))
    for number, y in unbatched.items():
        np.testing.assert_array_equal(batched[number], y, err_msg=f"event {number}")
        assert y.shape == (1 + number % 3, 4)
    assert plain["calls"] == plain["requests"] == N_EVENTS
    # Many events in flight: several share a call (counted on the client).
    assert merged["requests"] == N_EVENTS and merged["calls"] < N_EVENTS / 2
    assert merged["inferences"] == plain["inferences"] == sum(1 + n % 3 for n in range(1, N_EVENTS + 1))
    assert merged["errors"] == merged["retries"] == 0
    assert plain["http_calls"] == (plain["calls"] if transport == "http" else 0)
    assert merged["http_calls"] == (merged["calls"] if transport == "http" else 0)


async def test_max_rows_bounds_every_call(server):
    batched, stats = await run(batching_process(server, "count", max_rows=5))
    seen = {int(y[0, 1]) for y in batched.values()}  # rows of the call that carried each event
    assert max(seen) <= 5 and max(seen) > 3  # merged (an event alone has at most 3 rows)
    assert stats["inferences"] / stats["calls"] > 1


async def test_a_failed_merged_call_is_retried_per_event(server, caplog):
    with caplog.at_level(logging.WARNING, logger="pysonic.sonic"):
        process = batching_process(server, "solo", max_rows=64)
        process.rows.Client.retries = recommended_retries()  # CMSSW's default is no retry
        batched, stats = await run(process)
    for number, y in batched.items():
        x = np.arange(4 * (1 + number % 3), dtype=np.float32).reshape(-1, 4) + 0.5
        x[:, 0] = number
        np.testing.assert_array_equal(y, 2 * x, err_msg=f"event {number}")
    assert stats["errors"] == 0 and stats["retries"] >= 2  # each event of a failed merged call retried
    assert stats["calls"] == stats["requests"] == N_EVENTS  # the retries went one event per call
    assert any(
        "retry on the same server" in r.getMessage() and "UNAVAILABLE: merged" in r.getMessage() for r in caplog.records
    )


class WideProducer(SonicEDProducer):
    """One row of WIDE float32 values per event (the event number, then a ramp)."""

    def __init__(self, params):
        super().__init__(params)
        self.produces()

    def acquire(self, event, input):
        x = np.arange(WIDE, dtype=np.float32)[None, :] + 0.25
        x[0, 0] = event.id.event
        input["x"].to_server(x)

    def produce(self, event, output):
        y = np.array(output["y"].from_server())
        Records.products[event.id.event] = y
        event.put(y)


framework.register_type("batchingWideProducer", WideProducer)


@pytest.mark.parametrize(("shared_memory", "transport"), [(True, "grpc"), (False, "grpc"), (True, "http")])
async def test_merged_calls_use_shared_memory_on_this_host(server, shared_memory, transport):
    # The merged call's tensors travel as a single request's would (Client.useSharedMemory).
    process = batching_process(
        server, "wide", max_rows=64, producer="batchingWideProducer", shared_memory=shared_memory, transport=transport
    )
    products, stats = await run(process)
    assert sorted(products) == list(range(1, N_EVENTS + 1))
    for number, y in products.items():
        x = np.arange(WIDE, dtype=np.float32)[None, :] + 0.25
        x[0, 0] = number
        np.testing.assert_array_equal(y, 2 * x, err_msg=f"event {number}")
    assert stats["calls"] < N_EVENTS / 2 and stats["errors"] == 0
    if shared_memory:
        assert stats["shm_calls"] >= 1  # merged calls of >= 4 events (>= 64 KiB of inputs)
    else:
        assert stats["shm_calls"] == 0
    assert stats["http_calls"] == (stats["calls"] if transport == "http" else 0)


# ----------------------------------------------------------------------------------------
# One client, events started by hand: cancellation


def connected(server: LocalTritonServer, model: str, max_rows: int, max_delay_us: int) -> TritonClient:
    params = client_description().validate(
        {"modelName": model, **required(model), "batching": {"maxRows": max_rows, "maxDelay": max_delay_us}},
        "test client",
    )
    client = TritonClient(params, debug_name="batcher")
    client.connect(ServerInfo("local", server.grpc_address))
    assert client.batcher is not None
    return client


async def infer(client: TritonClient, number: int, into: dict[int, np.ndarray]) -> None:
    request = client.new_request(event_id=number)
    request.input["x"].to_server(np.full((1, 4), number, np.float32))
    await request.infer()
    into[number] = request.output["y"].from_server()


async def busy() -> None:
    """Always runnable: trio never idles, so a call waits its full maxDelay."""
    while True:
        await trio.sleep(0)


async def test_a_cancelled_event_drops_its_slice(server):
    client = connected(server, "count", max_rows=8, max_delay_us=10_000_000)
    try:
        results: dict[int, np.ndarray] = {}
        scopes = {number: trio.CancelScope() for number in range(1, 5)}

        async def event(number: int) -> None:
            with scopes[number]:
                await infer(client, number, results)

        with trio.fail_after(5):  # the call must not wait for its 10 s maxDelay
            async with trio.open_nursery() as nursery:
                nursery.start_soon(busy)
                nursery.start_soon(event, 1)
                await trio.sleep(0.05)  # event 1 opened the call and holds it (maxDelay 10 s)
                for number in range(2, 5):
                    nursery.start_soon(event, number)
                await trio.sleep(0.05)  # events 2 to 4 joined it
                scopes[1].cancel()  # leaves before the call goes: the call goes at once, without it
                await trio.sleep(0.02)
                scopes[3].cancel()  # leaves while the call is in flight (the model takes 50 ms)
                while len(results) < 2:
                    await trio.sleep(0.01)
                nursery.cancel_scope.cancel()
        assert sorted(results) == [2, 4]
        for number in (2, 4):  # their own rows, of one call that carried events 2, 3 and 4
            np.testing.assert_array_equal(results[number], [[number, 3, number, number]])
        stats = client.statistics()
        assert (stats.calls, stats.requests, stats.inferences) == (1, 2, 3)
    finally:
        client.close()


# ----------------------------------------------------------------------------------------
# When a call goes (a stand-in gRPC client answers at once)


class InstantClient:
    """``async_infer`` answers at once with zeros; records (trio time, rows) of each call."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, int]] = []

    def async_infer(self, model_name, inputs, callback, **options):
        rows = inputs[0].shape()[0]
        self.calls.append((trio.current_time(), rows))
        callback(result=_Zeros(rows), error=None)


class _Zeros:
    """An InferResult of ``rows`` rows of zeros."""

    def __init__(self, rows: int) -> None:
        self.rows = rows

    def as_numpy(self, name: str) -> np.ndarray:
        return np.zeros((self.rows, 4), np.float32)


def instant(server: LocalTritonServer, max_delay_us: int) -> tuple[TritonClient, InstantClient]:
    client = connected(server, "double", max_rows=4, max_delay_us=max_delay_us)
    stand_in = InstantClient()
    client.retry_policy.router._grpc_client = stand_in  # type: ignore[attr-defined]  # SingleServer's one client
    return client, stand_in


async def test_a_lone_event_does_not_wait_for_max_delay(server):
    client, stand_in = instant(server, max_delay_us=5_000_000)
    try:
        start = trio.current_time()
        with trio.fail_after(4):  # nothing else can run: it goes at once, not after 5 s
            await infer(client, 1, {})
        assert len(stand_in.calls) == 1 and stand_in.calls[0][0] - start < 4
    finally:
        client.close()


async def test_max_rows_at_once_and_max_delay_at_most(server):
    client, stand_in = instant(server, max_delay_us=100_000)
    try:
        async with trio.open_nursery() as outer:
            outer.start_soon(busy)
            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                for number in range(10):
                    nursery.start_soon(functools.partial(infer, client, number, {}))
            outer.cancel_scope.cancel()
        # 10 events in one tick: two full calls of 4 rows at once, the other 2 after maxDelay
        assert [rows for _, rows in stand_in.calls] == [4, 4, 2]
        (full, _), (other, _), (last, _) = stand_in.calls
        assert full - start < 0.1 and other - start < 0.1 and last - start >= 0.1
    finally:
        client.close()


async def test_batching_where_it_cannot_apply(server, caplog):
    from framework.utilities import ConfigurationError

    params = client_description().validate(
        {"modelName": "double", **required("double"), "mode": "Sync", "batching": {"maxRows": 8}}, "c"
    )
    client = TritonClient(params, debug_name="syncUser")
    with caplog.at_level(logging.WARNING, logger="pysonic.sonic"):
        client.connect(ServerInfo("local", server.grpc_address))
    client.close()
    assert client.batcher is None
    assert any("Client.batching is ignored" in r.getMessage() and "mode Sync" in r.getMessage() for r in caplog.records)
    too_long = client_description().validate(
        {"modelName": "double", **required("double"), "batching": {"maxDelay": 20_000_000}}, "c"
    )
    with pytest.raises(
        ConfigurationError,
        match=r"module 'slow'\): Client.batching.maxDelay = 20000000 "
        r"microseconds is above 10 s$",
    ):
        TritonClient(too_long, debug_name="slow")
