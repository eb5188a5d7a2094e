"""TritonClient, TritonService and the SONIC module bases against a REAL tritonserver.

Test policy: one local server per module (a module-scoped fixture), serving tiny
Python-backend models written into a temporary repository, so nothing here depends on
``data/models``; localhost only. Every inference checks output VALUES (a misconfigured
Python backend returns empty tensors without an error). Cancellation is proved by the
gRPC call ending with CANCELLED (it would end with the model's result otherwise), not by
timing.
"""

from __future__ import annotations

import logging
import pathlib
import textwrap
import threading
import time

import numpy as np
import pytest
import trio
from rich.console import Console

import framework
import framework.config as cms
from framework import EDAnalyzer, ExternalFailure
from framework.core import build_job, run_job
from framework.service import TritonService
from framework.serving import LocalTritonServer
from framework.serving.testing import TensorConfig, write_python_model
from framework.sonic import (
    ServerInfo,
    SonicEDFilter,
    SonicEDProducer,
    TritonClient,
    client_description,
)
from framework.utilities import ConfigurationError

from support import free_port

SLOW_SECONDS = 1.0  # the "slow" model's execution time
SERVED = ["double", "nobatch", "slow", "pair", "empty"]  # "spare" is left to the fallback

MODEL_PY = textwrap.dedent("""
    import json, time
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def initialize(self, args):
            params = json.loads(args["model_config"]).get("parameters", {})
            self.mode = params["mode"]["string_value"]
            self.sleep = float(params.get("sleep_s", {}).get("string_value", "0"))

        def execute(self, requests):
            return [pb_utils.InferenceResponse(self.run(r)) for r in requests]

        def run(self, request):
            get = lambda name: pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            time.sleep(self.sleep)
            if self.mode == "pair":
                s = get("a").sum(axis=1, keepdims=True) + get("b").sum(axis=1, keepdims=True)
                return [pb_utils.Tensor("s", s.astype(np.float32))]
            x = get("x")
            if self.mode == "empty":  # what a broken backend does: no error, no data
                return [pb_utils.Tensor("y", np.zeros((x.shape[0], 0), np.float32))]
            return [pb_utils.Tensor("y", (2 * x).astype(np.float32))]
""")


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> pathlib.Path:
    repo = tmp_path_factory.mktemp("models")  # default tensors: x -> y, FP32 (batch, -1), batch <= 8
    REPOSITORY[:] = [repo]  # the models' configs, for client_params
    write_python_model(repo, "double", MODEL_PY, parameters={"mode": "double"})  # y = 2x
    write_python_model(repo, "spare", MODEL_PY, parameters={"mode": "double"})
    write_python_model(repo, "slow", MODEL_PY, parameters={"mode": "double", "sleep_s": str(SLOW_SECONDS)})
    write_python_model(repo, "empty", MODEL_PY, parameters={"mode": "empty"})
    write_python_model(
        repo,
        "nobatch",
        MODEL_PY,
        max_batch_size=0,
        inputs=[TensorConfig("x", dims=(2, 3))],
        outputs=[TensorConfig("y", dims=(2, 3))],
        parameters={"mode": "double"},
    )
    write_python_model(
        repo,
        "pair",
        MODEL_PY,
        inputs=[TensorConfig("a", dims=(3,)), TensorConfig("b", "TYPE_INT32", (2,))],
        outputs=[TensorConfig("s", dims=(1,))],
        parameters={"mode": "pair"},
    )
    return repo


@pytest.fixture(scope="module")
def server(repository, start_server):
    return start_server(repository, SERVED)


REPOSITORY: list[pathlib.Path] = []  # this module's model repository, once written


def client_params(model: str, **params):
    # Required as in CMSSW: modelConfigPath (a FileInPath: the model's config in this module's
    # repository), timeout; these tests mean Async unless they say otherwise (CMSSW's default
    # is PseudoAsync).
    config = str(REPOSITORY[0] / model / "config.pbtxt")
    required = {"modelConfigPath": config, "timeout": 10, "mode": "Async"}
    return client_description().validate({"modelName": model, **required, **params}, f"test client of '{model}'")


@pytest.fixture
def connect(server):
    """``connect(model, grpc_client=None, **Client params)`` -> a connected TritonClient."""
    clients = []

    def make(model: str, grpc_client=None, **params) -> TritonClient:
        client = TritonClient(client_params(model, **params), debug_name="testModule")
        client.connect(ServerInfo("local", server.grpc_address), grpc_client)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def server_requests(server: LocalTritonServer, model: str) -> int:
    """Successful requests the server has counted for ``model``."""
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(server.grpc_address) as c:
        stats = c.get_inference_statistics(model, as_json=True)["model_stats"]
    return sum(int(v["inference_stats"]["success"].get("count", 0)) for v in stats)


def server_requests_reaching(server: LocalTritonServer, model: str, expected: int, timeout: float = 5.0) -> int:
    """:func:`server_requests`, polled until it reaches ``expected`` or ``timeout`` (s) passes:
    Triton counts a request after its response is sent, so a client may see the answer first."""
    deadline = time.monotonic() + timeout
    while (count := server_requests(server, model)) < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return count


# ----------------------------------------------------------------------------------------
# TritonClient


async def test_metadata_strips_the_batch_dimension(connect):
    client = connect("pair")
    assert client.max_batch_size == 8
    assert client.inputs["a"].dims == (3,) and client.inputs["a"].dtype == np.float32
    assert client.inputs["b"].dims == (2,) and client.inputs["b"].dtype == np.int32
    assert client.outputs["s"].dims == (1,)
    nobatch = connect("nobatch")
    assert nobatch.max_batch_size == 0 and nobatch.inputs["x"].dims == (2, 3)


async def test_async_inference_values_and_counters(connect):
    client = connect("double")
    x = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    request = client.new_request()
    request.input["x"].to_server(x)
    assert request.batch_size == 5
    await request.infer_async()
    y = request.output["y"].from_server()
    assert y.shape == (5, 4) and y.dtype == np.float32
    np.testing.assert_array_equal(y, 2 * x)
    stats = client.statistics()
    assert (stats.calls, stats.inferences, stats.bytes_sent, stats.bytes_received, stats.errors) == (1, 5, 80, 80, 0)


async def test_sync_and_pseudo_async_give_the_async_result(connect):
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    results = {}
    for mode in ("Async", "Sync", "PseudoAsync"):
        request = connect("double", mode=mode).new_request()
        request.input["x"].to_server(x)
        await request.infer()
        results[mode] = request.output["y"].from_server()
    np.testing.assert_array_equal(results["Async"], 2 * x)
    np.testing.assert_array_equal(results["Sync"], results["Async"])
    np.testing.assert_array_equal(results["PseudoAsync"], results["Async"])


async def test_model_without_batching(connect):
    client = connect("nobatch")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    request = client.new_request()
    request.input["x"].to_server(x)
    assert request.batch_size == 1
    await request.infer_async()
    np.testing.assert_array_equal(request.output["y"].from_server(), 2 * x)


async def test_batch_zero_sends_no_request(connect, server):
    client = connect("double")
    before = server_requests(server, "double")
    request = client.new_request()
    request.input["x"].to_server(np.zeros((0, 4), np.float32))
    await request.infer_async()
    y = request.output["y"].from_server()
    assert y.shape == (0, 0) and y.dtype == np.float32
    assert server_requests(server, "double") == before
    assert client.statistics().calls == 0


@pytest.mark.parametrize("mode", ["Async", "Sync"])
async def test_batch_above_max_batch_size_is_split_and_joined(connect, server, mode):
    client = connect("double", mode=mode)
    before = server_requests(server, "double")
    x = np.arange(19 * 2, dtype=np.float32).reshape(19, 2)
    request = client.new_request()
    request.input["x"].to_server(x)
    await request.infer()
    np.testing.assert_array_equal(request.output["y"].from_server(), 2 * x)
    assert server_requests_reaching(server, "double", before + 3) == before + 3  # 8 + 8 + 3 rows
    assert (client.statistics().calls, client.statistics().inferences) == (3, 19)


@pytest.mark.parametrize(
    ("model", "name", "array", "fragments"),
    [
        ("double", "x", np.zeros((2, 3), np.float64), ["(batch, -1) float32", "(2, 3) float64"]),
        ("double", "x", np.zeros(4, np.float32), ["(batch, -1) float32", "(4,) float32"]),
        ("nobatch", "x", np.zeros((2, 4), np.float32), ["(2, 3) float32", "(2, 4) float32"]),
        ("pair", "a", np.zeros((2, 4), np.float32), ["(batch, 3) float32", "(2, 4) float32"]),
    ],
)
async def test_input_mismatch_names_model_input_expected_and_actual(connect, model, name, array, fragments):
    request = connect(model).new_request()
    with pytest.raises(ExternalFailure) as info:
        request.input[name].to_server(array)
    message = str(info.value)
    for fragment in [f"model '{model}'", f"input '{name}'", *fragments]:
        assert fragment in message


async def test_unknown_input_name_lists_the_model_inputs(connect):
    request = connect("pair").new_request()
    assert "x" not in request.input
    with pytest.raises(ExternalFailure, match=r"model 'pair'.*no input named 'x'.*a, b"):
        request.input["x"]
    with pytest.raises(ExternalFailure, match="no output named 'y'.*has: s"):
        request.output["y"]


async def test_inputs_must_agree_on_the_batch_size(connect):
    request = connect("pair").new_request()
    request.input["a"].to_server(np.zeros((3, 3), np.float32))
    with pytest.raises(ExternalFailure, match="input 'b' has batch size 2, but input 'a' has 3"):
        request.input["b"].to_server(np.zeros((2, 2), np.int32))


async def test_two_inputs_and_a_missing_one(connect):
    request = connect("pair").new_request()
    request.input["a"].to_server(np.ones((2, 3), np.float32))
    with pytest.raises(ExternalFailure, match=r"input\(s\) b not set"):
        await request.infer_async()
    request.input["b"].to_server(np.array([[1, 2], [3, 4]], np.int32))
    await request.infer_async()
    np.testing.assert_array_equal(request.output["s"].from_server(), [[6.0], [10.0]])


async def test_empty_output_tensor_is_an_error(connect):
    client = connect("empty")
    request = client.new_request()
    request.input["x"].to_server(np.ones((2, 3), np.float32))
    with pytest.raises(ExternalFailure, match=r"model 'empty'.*output 'y' is EMPTY tensor of shape \(2, 0\)"):
        await request.infer_async()
    assert client.statistics().errors == 1


async def test_output_before_inference_is_an_error(connect):
    request = connect("double").new_request()
    with pytest.raises(ExternalFailure, match="output 'y' has no data"):
        request.output["y"].from_server()


async def test_unknown_model_at_connect(server):
    client = TritonClient(client_params("nope", modelConfigPath=str(REPOSITORY[0] / "double" / "config.pbtxt")))
    with pytest.raises(ExternalFailure, match=f"model 'nope' on server 'local' \\({server.grpc_address}\\)"):
        client.connect(ServerInfo("local", server.grpc_address))
    client.close()


async def test_client_configuration_errors(connect):
    with pytest.raises(ConfigurationError, match="mode 'Turbo'"):
        TritonClient(client_params("double", mode="Turbo"))
    with pytest.raises(ConfigurationError, match="timeoutUnit 'hours'"):
        TritonClient(client_params("double", timeoutUnit="hours"))
    with pytest.raises(ConfigurationError, match="Client.outputs names z.*has: y"):
        connect("double", outputs=["z"])


@pytest.mark.parametrize("mode", ["Async", "Sync", "PseudoAsync"])
async def test_timeout_is_an_external_failure(connect, mode):
    client = connect("slow", mode=mode, timeout=100, timeoutUnit="milliseconds")
    request = client.new_request()
    request.input["x"].to_server(np.ones((1, 2), np.float32))
    with pytest.raises(ExternalFailure, match="model 'slow'.*deadline exceeded after 100 milliseconds"):
        await request.infer()
    assert client.statistics().errors == 1


class SpyClient:
    """An InferenceServerClient that records how each async call ended (status or None)."""

    def __init__(self, real) -> None:
        self.real = real
        self.outcomes: list[str | None] = []
        self.finished = threading.Event()

    def async_infer(self, *args, callback, **kwargs):
        def spy(result=None, error=None):
            self.outcomes.append(error.status() if error is not None else None)
            self.finished.set()
            callback(result=result, error=error)

        return self.real.async_infer(*args, callback=spy, **kwargs)

    def __getattr__(self, name):
        return getattr(self.real, name)


async def test_cancelling_the_waiter_cancels_the_call(server, connect):
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(server.grpc_address) as real:
        spy = SpyClient(real)
        request = connect("slow", grpc_client=spy).new_request()
        request.input["x"].to_server(np.ones((1, 2), np.float32))
        with trio.move_on_after(0.1) as scope:
            await request.infer_async()
        assert scope.cancelled_caught
        assert await trio.to_thread.run_sync(spy.finished.wait, 10 * SLOW_SECONDS)
    # CANCELLED, not the model's result: the call was aborted before the server answered
    assert spy.outcomes == ["StatusCode.CANCELLED"]


# ----------------------------------------------------------------------------------------
# TritonService


def service(**params) -> TritonService:
    desc = cms.ParameterSetDescription()
    TritonService.fill_descriptions(desc)
    return TritonService(desc.validate(params, "TritonService"))


def server_entry(name: str, address: str) -> dict:
    host, port = address.rsplit(":", 1)
    return {"name": name, "address": host, "port": int(port)}


async def test_service_discovery_fallback_and_stop(server, repository, caplog):
    dead = server_entry("dead", f"127.0.0.1:{free_port()}")
    svc = service(
        servers=[dead, server_entry("local", server.grpc_address)],
        fallback={"enable": True, "modelRepository": str(repository)},
    )
    svc.add_model("double", "doubler")
    svc.add_model("spare", "spareUser", preferred_server="local")  # local lacks it
    with caplog.at_level(logging.WARNING, logger="pysonic.sonic"):
        await svc.begin_job()
    try:
        assert any("'dead'" in r.getMessage() and "cannot be reached" in r.getMessage() for r in caplog.records)
        assert svc.assignment == {"double": "local", "spare": "fallback"}
        fallback = svc.fallback
        assert fallback is not None and fallback.is_running()
        assert fallback.ready_models() == ["spare"]  # only the missing model is loaded
        for model in ("double", "spare"):
            client = TritonClient(client_params(model), debug_name=f"{model}User")
            svc.connect(client)
            request = client.new_request()
            request.input["x"].to_server(np.full((2, 2), 3.0, np.float32))
            await request.infer_async()
            np.testing.assert_array_equal(request.output["y"].from_server(), np.full((2, 2), 6.0))
        assert svc.routing.route_blocking("spare").address == fallback.grpc_address
    finally:
        await svc.end_job()
    assert not fallback.is_running()
    stats = svc.statistics()
    assert stats["models"]["spare"]["requests"] == 1 and stats["models"]["spare"]["inferences"] == 2
    assert stats["clients"]["doubleUser"]["calls"] == 1
    assert stats["clients"]["spareUser"]["server"] == "fallback"
    assert len(svc.report()) == 2
    console = Console(record=True, width=250)
    for table in svc.report():
        console.print(table)
    text = console.export_text()
    for header in ("[ms per request]", "queue [ms]", "compute [ms]", "sent [MB]", "received [MB]"):
        assert header in text


def test_end_of_job_statistics_wait_for_triton_to_count_the_last_requests(monkeypatch):
    """Triton counts a request when it releases it, possibly just after the client got its
    response: the end snapshot is taken again until the server counts what the clients saw
    answered, and gives up (returning what it has) after SETTLE_TIMEOUT."""
    from framework.service import _service_stats

    monkeypatch.setattr(_service_stats, "SETTLE_INTERVAL", 0.001)
    counts = iter([3, 3, 4])  # the server's success counter at each call: lags by one, then catches up

    class Server:
        calls = 0

        def get_inference_statistics(self, model, as_json, client_timeout):
            Server.calls += 1
            count = next(counts, 4)
            return {"model_stats": [{"inference_stats": {"success": {"count": str(count)}}}]}

    begin = {("double", "local"): {**_service_stats._ZERO, "requests": 1}}
    end = _service_stats.settled_snapshot(lambda name: Server(), [("double", "local")], begin, {("double", "local"): 3})
    assert end[("double", "local")]["requests"] == 4 and Server.calls == 3
    # a server that never catches up: the last snapshot, after the timeout
    Server.calls = 0
    start = time.monotonic()
    end = _service_stats.settled_snapshot(
        lambda name: Server(), [("double", "local")], begin, {("double", "local"): 5}, timeout=0.05
    )
    assert end[("double", "local")]["requests"] == 4 and Server.calls > 1 and time.monotonic() - start < 1.0


async def test_service_with_fallback_disabled_names_the_model(server):
    svc = service(servers=[server_entry("local", server.grpc_address)], fallback={"enable": False})
    svc.add_model("spare", "spareUser")
    with pytest.raises(ExternalFailure, match=r"model\(s\) spare \(modules spareUser\).*'local' at .*serves double"):
        await svc.begin_job()
    assert svc.fallback is None
    await svc.end_job()


async def test_service_rejects_an_unknown_preferred_server():
    svc = service()
    with pytest.raises(ConfigurationError, match="preferredServer 'elsewhere'.*known: fallback"):
        svc.add_model("double", "doubler", preferred_server="elsewhere")


# ----------------------------------------------------------------------------------------
# SONIC modules in a real job


class Record:
    calls: list = []


class SonicDoubler(SonicEDProducer):
    """Sends event.id.event % 4 rows (0 rows for every fourth event) of the event number."""

    def __init__(self, params):
        super().__init__(params)
        self.produces()

    def acquire(self, event, input):
        n = event.id.event
        input["x"].to_server(np.full((n % 4, 2), n, np.float32))

    def produce(self, event, output):
        Record.calls.append(("fallback", self._triton.fallback))
        event.put(output["y"].from_server())


class SonicNonEmpty(SonicEDFilter):
    def acquire(self, event, input):
        input["x"].to_server(np.ones((event.id.event % 4, 1), np.float32))

    def filter(self, event, output):
        return output["y"].from_server().shape[0] > 0


class Collect(EDAnalyzer):
    @classmethod
    def fill_descriptions(cls, desc):
        desc.add("src", cms.string, "product")

    def __init__(self, params):
        self.src = self.consumes(params.src)

    def analyze(self, event):
        Record.calls.append((event.id.event, event.get(self.src)))


for _cls in (SonicDoubler, SonicNonEmpty, Collect):
    framework.register_type("test" + _cls.__name__, _cls)


def sonic_process(mode: str, model_config: str = "") -> cms.Process:
    model_config = model_config or str(REPOSITORY[0] / "double" / "config.pbtxt")
    process = cms.Process("SONIC")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = 8
    process.options.numberOfStreams = 3
    client = cms.PSet(
        modelName=cms.string("double"),
        mode=cms.string(mode),
        modelConfigPath=cms.FileInPath(model_config),
        timeout=cms.untracked.uint32(10),
    )
    process.doubler = cms.EDProducer("testSonicDoubler", Client=client)
    process.nonEmpty = cms.EDFilter("testSonicNonEmpty", Client=client)
    process.collect = cms.EDAnalyzer("testCollect", src=cms.string("doubler"))
    process.p = cms.Path(process.nonEmpty + process.doubler + process.collect)
    return process


async def run_process(process: cms.Process):
    Record.calls = []
    process.validate_()
    job = build_job(process)
    report = await run_job(job)
    return job, report


@pytest.mark.parametrize("mode", ["Async", "Sync", "PseudoAsync"])
async def test_sonic_modules_in_a_job(server, mode):
    process = sonic_process(mode)
    process.TritonService = cms.Service(
        "TritonService",
        servers=cms.untracked.VPSet(
            cms.PSet(
                name=cms.untracked.string("local"),
                address=cms.untracked.string("127.0.0.1"),
                port=cms.untracked.uint32(server.ports["grpc"]),
            )
        ),
        fallback=cms.PSet(enable=cms.untracked.bool(False)),
    )
    job, report = await run_process(process)
    assert report.events == 8
    collected = {n: y for n, y in Record.calls if n != "fallback"}
    assert sorted(collected) == [1, 2, 3, 5, 6, 7]  # events 4 and 8 send 0 rows: filtered
    for n, y in collected.items():
        np.testing.assert_array_equal(y, np.full((n % 4, 2), 2.0 * n))
    stats = job.services.services["TritonService"].statistics()
    assert stats["models"]["double"]["server"] == "local"
    # nonEmpty: 6 non-empty events; doubler: the same 6 (the filter stops the other two)
    assert stats["models"]["double"]["requests"] == 12
    assert stats["clients"]["nonEmpty"]["calls"] == 6 and stats["clients"]["doubler"]["calls"] == 6


async def test_job_without_triton_service_gets_a_fallback_server(repository):
    job, report = await run_process(sonic_process("Async", str(repository / "double" / "config.pbtxt")))
    assert report.events == 8
    fallbacks = {id(s): s for tag, s in Record.calls if tag == "fallback"}
    assert len(fallbacks) == 1
    (fallback,) = fallbacks.values()
    assert fallback is not None and not fallback.is_running()  # stopped by end_job
    assert job.services.services["TritonService"].assignment == {"double": "fallback"}
