"""Shared memory, the Ragged batch mode and gRPC compression against a REAL tritonserver.

Test policy (as tests/test_sonic_client.py): local servers on 127.0.0.1 serving tiny
Python-backend models written into a temporary repository; every inference checks output
VALUES against the gRPC-payload path and against the model's formula. Which regions exist
is read from the server's shared-memory status API and from ``/dev/shm`` itself, not from
the code under test alone.
"""

from __future__ import annotations

import logging
import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import trio

import framework
import framework.config as cms
from framework import EDAnalyzer
from framework.core import build_job, run_job
from framework.service import TritonService
from framework.serving import LocalTritonServer
from framework.sonic import (
    ServerInfo,
    SonicEDProducer,
    TritonClient,
    _shm,
    _transport,
    client_description,
)
from framework.utilities import ConfigurationError

MODEL_PY = textwrap.dedent("""
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def initialize(self, args):
            self.mode = json.loads(args["model_config"])["parameters"]["mode"]["string_value"]

        def execute(self, requests):
            out = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
                if self.mode == "total":  # per row: the sum and the length of x
                    y = np.stack([x.sum(axis=1), np.full(len(x), x.shape[1])], axis=1)
                else:
                    y = 2 * x + 1
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", y.astype(np.float32))]))
            return out
""")

REPOSITORY: list[pathlib.Path] = []  # this module's model repository, once written


def required(model: str) -> dict:
    """The Client keys CMSSW requires (modelConfigPath: the model's config in this module's
    repository) and the mode these tests mean (CMSSW's default is PseudoAsync)."""
    # A client never connected (configuration checks) may name any existing config.
    config = str(REPOSITORY[0] / model / "config.pbtxt") if REPOSITORY else "models/facile/config.pbtxt"
    return {"modelConfigPath": config, "timeout": 10, "mode": "Async"}


OWN = f"{_shm.PREFIX}{os.getpid()}_"  # the regions of this process


def write_model(repo: pathlib.Path, name: str, x_dims: str, y_dims: str, mode: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(MODEL_PY)
    (repo / name / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 64\n'
        f'input [ {{ name: "x" data_type: TYPE_FP32 dims: [ {x_dims} ] }} ]\n'
        f'output [ {{ name: "y" data_type: TYPE_FP32 dims: [ {y_dims} ] }} ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
        f'parameters {{ key: "mode" value: {{ string_value: "{mode}" }} }}\n'
    )


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> pathlib.Path:
    repo = tmp_path_factory.mktemp("models")
    REPOSITORY[:] = [repo]  # the models' configs (Client.modelConfigPath)
    write_model(repo, "affine", "300", "300", "affine")  # fixed sizes: inputs AND outputs in shared memory
    write_model(repo, "vaffine", "-1", "-1", "affine")  # output size open: inputs only
    write_model(repo, "total", "-1", "2", "total")  # variable input, fixed output
    return repo


@pytest.fixture(scope="module")
def server(repository, left_behind):
    local = LocalTritonServer(repository)
    local.start(60.0)
    yield local
    local.stop()
    assert left_behind(local.region_prefix) == ([], [])


def own_regions() -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(OWN))


def registered(server: LocalTritonServer) -> dict[str, int]:
    """Region name -> byte size, as the server reports them."""
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(server.grpc_address) as c:
        status = c.get_system_shared_memory_status(as_json=True)
    return {name: int(r["byte_size"]) for name, r in status.get("regions", {}).items()}


@pytest.fixture(autouse=True)
def nothing_of_ours_left(monkeypatch):
    # The tiny models' calls are small: through shared memory whatever their size, except
    # in the test of the threshold itself.
    monkeypatch.setattr(_transport, "SHM_MIN_BYTES", 0)
    yield
    assert own_regions() == [], "regions left in /dev/shm"


@pytest.fixture
def connect(server):
    clients = []

    def make(model: str, address: str | None = None, **params) -> TritonClient:
        client = TritonClient(
            client_description().validate({"modelName": model, **required(model), **params}, "Client"),
            debug_name="shmTest",
        )
        client.connect(ServerInfo("local", address or server.grpc_address))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


async def infer(client: TritonClient, x, event: int = 0):
    request = client.new_request(event)
    request.input["x"].to_server(x)
    await request.infer()
    return request.output["y"].from_server()


def batches(rows: list[int], width: int = 300) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.normal(size=(n, width)).astype(np.float32) for n in rows]


# ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["Async", "Sync", "PseudoAsync"])
async def test_shared_memory_results_equal_payload_results_event_by_event(connect, server, mode):
    shm, payload = connect("affine", mode=mode), connect("affine", mode=mode, useSharedMemory=False)
    for event, x in enumerate(batches([3, 3, 1, 3, 2])):
        via_shm, via_payload = await infer(shm, x, event), await infer(payload, x, event)
        np.testing.assert_array_equal(via_shm, 2 * x + 1)
        np.testing.assert_array_equal(via_shm, via_payload)
    (pool,) = shm.transport.pools().values()
    assert (pool.created, pool.registrations) == (1, 1)  # one region, registered once, reused 5 times
    assert registered(server) == {pool.region_names()[0]: 1 << 16}
    assert payload.transport.pools() == {}
    assert len(own_regions()) == 1
    shm.close()
    assert registered(server) == {} and own_regions() == []  # unregistered and unlinked


async def test_a_larger_request_grows_the_region(connect, server):
    client = connect("affine")
    small, large = batches([2, 60])
    await infer(client, small)
    (pool,) = client.transport.pools().values()
    (first,) = pool.region_names()
    np.testing.assert_array_equal(await infer(client, large), 2 * large + 1)
    (second,) = pool.region_names()
    assert second != first and registered(server) == {second: 1 << 18}  # 144,000 B: the next power of two
    assert own_regions() == [second]


async def test_small_calls_use_payloads(connect, monkeypatch):
    monkeypatch.setattr(_transport, "SHM_MIN_BYTES", 64 * 1024)
    client = connect("affine")
    small, large = batches([2, 60])  # 2,400 B and 72,000 B of input
    for x in (small, large):
        np.testing.assert_array_equal(await infer(client, x), 2 * x + 1)
    assert (client.transport.payload_calls, client.transport.shm_calls) == (1, 1)


async def test_outputs_of_open_size_travel_as_payload(connect):
    shm, payload = connect("vaffine"), connect("vaffine", useSharedMemory=False)
    for x in batches([4, 1], width=37):
        np.testing.assert_array_equal(await infer(shm, x), await infer(payload, x))
    assert shm.transport.pools()["local"].created == 1


async def test_concurrent_requests_use_one_region_each(connect, server):
    client = connect("affine")
    xs = batches([2] * 6)
    results: dict[int, np.ndarray] = {}

    async def one(event: int) -> None:
        results[event] = await infer(client, xs[event], event)

    async with trio.open_nursery() as nursery:
        for event in range(len(xs)):
            nursery.start_soon(one, event)
    for event, x in enumerate(xs):
        np.testing.assert_array_equal(results[event], 2 * x + 1)
    pool = client.transport.pools()["local"]
    assert 1 <= pool.created <= len(xs) and pool.registrations == pool.created
    assert set(registered(server)) == set(pool.region_names())


async def test_a_server_that_forgot_the_regions_gets_them_again(connect, server):
    import tritonclient.grpc as grpcclient

    client = connect("affine", retries=[{"action": "sameServer"}])  # the retry re-registers
    x, y = batches([2, 2])
    await infer(client, x)
    with grpcclient.InferenceServerClient(server.grpc_address) as c:
        c.unregister_system_shared_memory()  # what a restart on the same port does
    np.testing.assert_array_equal(await infer(client, y, 1), 2 * y + 1)
    assert client.statistics().retries == 1 and client.transport.pools()["local"].registrations == 2


async def test_shared_memory_is_decided_by_what_the_server_maps_not_by_its_address(connect, server, caplog):
    """A non-loopback address that reaches a server sharing our /dev/shm gets shared
    memory (the probe region is registered, then removed); a server that cannot open our
    regions is asked once per process and gets payloads (a server on another host may be
    reached through any address)."""
    port = server.grpc_address.rsplit(":", 1)[1]
    client = connect("affine", address=f"0.0.0.0:{port}")  # reaches the local server, but not loopback
    (x,) = batches([2])
    np.testing.assert_array_equal(await infer(client, x), 2 * x + 1)
    assert client.transport.shm_calls == 1 and list(client.transport.pools()) == ["local"]
    assert not [name for name in [*registered(server), *own_regions()] if "probe" in name]  # the probe is gone

    import tritonclient.grpc as grpcclient

    caplog.set_level(logging.INFO, logger="pysonic.sonic")
    with grpcclient.InferenceServerClient(server.grpc_address) as real:
        refusing = RefusingClient(real)
        elsewhere = ServerInfo("elsewhere", f"localhost:{port}")  # an address not probed yet
        assert not _shm.shares_dev_shm(elsewhere, refusing) and not _shm.shares_dev_shm(elsewhere, refusing)
        assert refusing.refusals == 1 and "cannot use our shared memory" in caplog.text
        assert not [name for name in own_regions() if "probe" in name]
        assert _shm.shares_dev_shm(ServerInfo("fallback", "10.0.0.1:1"), refusing)  # our child: never asked
        assert refusing.refusals == 1


def test_stale_regions_of_dead_jobs_are_removed_at_the_next_start(monkeypatch):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True, check=True
    )
    stale = pathlib.Path("/dev/shm") / f"{_shm.PREFIX}{int(dead.stdout)}_oldJob_0"
    live = pathlib.Path("/dev/shm") / f"{OWN}liveJob_0"  # this process is alive: kept
    stale.write_bytes(b"\0" * 64)
    live.write_bytes(b"\0" * 64)
    try:
        monkeypatch.setattr(_shm, "_stale_checked", False)
        TritonClient(
            client_description().validate({"modelName": "affine", **required("affine")}, "Client"), debug_name="next"
        )
        assert not stale.exists() and live.exists()
    finally:
        stale.unlink(missing_ok=True)
        live.unlink(missing_ok=True)


# ----------------------------------------------------------------------------------------
# Failover and a cancelled job (Ctrl-C): regions released


def service_with(*servers: tuple[str, str], **params) -> TritonService:
    desc = cms.ParameterSetDescription()
    TritonService.fill_descriptions(desc)
    entries = [{"name": n, "address": a.rsplit(":", 1)[0], "port": int(a.rsplit(":", 1)[1])} for n, a in servers]
    return TritonService(desc.validate({"servers": entries, "fallback": {"enable": False}, **params}, "TritonService"))


async def test_failover_releases_the_regions_on_the_old_server(repository, server, left_behind):
    doomed = LocalTritonServer(repository, models=["affine"])
    doomed.start(60.0)
    try:
        svc = service_with(("doomed", doomed.grpc_address), ("local", server.grpc_address))
        svc.add_model("affine", "failoverUser", preferred_server="doomed")
        await svc.begin_job()
        try:
            client = TritonClient(
                client_description().validate(
                    {
                        "modelName": "affine",
                        **required("affine"),
                        "preferredServer": "doomed",
                        "retries": [{"action": "otherServer"}],
                    },
                    "Client",
                ),
                debug_name="failoverUser",
            )
            svc.connect(client)
            x, y = batches([2, 2])
            await infer(client, x)
            old = client.transport.pools()["doomed"].region_names()
            assert own_regions() == old
            os.kill(doomed.pid, signal.SIGKILL)
            np.testing.assert_array_equal(await infer(client, y, 1), 2 * y + 1)
            assert client.statistics().failovers == 1
            assert list(client.transport.pools()) == ["local"]
            new = client.transport.pools()["local"].region_names()
            assert own_regions() == new and not set(old) & set(new)
            assert set(new) <= set(registered(server))
        finally:
            await svc.end_job()
        assert own_regions() == [] and registered(server) == {}
    finally:
        doomed.stop(10.0)
    assert left_behind(doomed.region_prefix) == ([], [])


class Stop:
    scope: trio.CancelScope | None = None
    seen: list[int] = []


class ShmAffine(SonicEDProducer):
    def __init__(self, params):
        super().__init__(params)
        self.produces()

    def acquire(self, event, input):
        input["x"].to_server(np.full((2, 300), event.id.event, np.float32))

    def produce(self, event, output):
        event.put(output["y"].from_server())


class StopAfter(EDAnalyzer):
    """Cancels the job at its 3rd event, as cmsrun does on Ctrl-C, with other events in flight."""

    @classmethod
    def fill_descriptions(cls, desc):
        desc.add("src", cms.string, "product")

    def __init__(self, params):
        self.src = self.consumes(params.src)

    def analyze(self, event):
        y = event.get(self.src)
        assert np.array_equal(y, np.full((2, 300), 2 * event.id.event + 1, np.float32))
        Stop.seen.append(event.id.event)
        if len(Stop.seen) == 3:
            assert own_regions(), "the job uses no shared memory"
            Stop.scope.cancel()


for _cls in (ShmAffine, StopAfter):
    framework.register_type("test" + _cls.__name__, _cls)


async def test_a_cancelled_job_leaves_no_region(server):
    process = cms.Process("SHM")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = 1000
    process.options.numberOfStreams = 4
    process.affine = cms.EDProducer(
        "testShmAffine",
        Client=cms.PSet(
            modelName=cms.string("affine"),
            modelConfigPath=cms.FileInPath(str(REPOSITORY[0] / "affine" / "config.pbtxt")),
            mode=cms.string("Async"),
            timeout=cms.untracked.uint32(10),
        ),
    )
    process.stop = cms.EDAnalyzer("testStopAfter", src=cms.string("affine"))
    process.p = cms.Path(process.affine + process.stop)
    host, port = server.grpc_address.rsplit(":", 1)
    process.TritonService = cms.Service(
        "TritonService",
        servers=cms.untracked.VPSet(
            cms.PSet(
                name=cms.untracked.string("local"),
                address=cms.untracked.string(host),
                port=cms.untracked.uint32(int(port)),
            )
        ),
        fallback=cms.PSet(enable=cms.untracked.bool(False)),
    )
    process.validate_()
    Stop.seen = []
    job = build_job(process)
    with trio.CancelScope() as Stop.scope:
        await run_job(job)
    assert Stop.scope.cancelled_caught and 3 <= len(Stop.seen) < 1000  # events already answered may finish
    assert own_regions() == [] and registered(server) == {}


# ----------------------------------------------------------------------------------------
# Ragged batch mode and compression


@pytest.mark.parametrize("model", ["total", "vaffine"])
@pytest.mark.parametrize("shared_memory", [True, False])
async def test_ragged_entries_equal_separate_calls(connect, model, shared_memory):
    ragged = connect(model, batchMode="Ragged", useSharedMemory=shared_memory)
    rect = connect(model, useSharedMemory=shared_memory)
    entries = [x[0] for x in batches([1, 1, 1, 1], width=300)]
    entries = [entries[0][:5], entries[1][:1], entries[2][:300], entries[3][:42]]
    request = ragged.new_request(1)
    request.input["x"].to_server(entries)
    await request.infer()
    out = request.output["y"].from_server()
    assert isinstance(out, list) and len(out) == 4
    for entry, got in zip(entries, out, strict=True):
        np.testing.assert_array_equal(got, (await infer(rect, entry[None]))[0])
        if model == "total":
            np.testing.assert_allclose(got, [entry.sum(), len(entry)], rtol=1e-5)
    assert ragged.statistics().calls == 4  # one call per entry, issued together
    empty = ragged.new_request(2)
    empty.input["x"].to_server([])
    await empty.infer()
    assert empty.output["y"].from_server() == []


async def test_ragged_entry_of_the_wrong_shape_names_it(connect):
    request = connect("affine", batchMode="Ragged").new_request(3)
    with pytest.raises(framework.ExternalFailure, match=r"input 'x' entry 1 expects \(300,\) float32.*got \(2,\)"):
        request.input["x"].to_server([np.zeros(300, np.float32), np.zeros(2, np.float32)])


@pytest.mark.parametrize("compression", ["gzip", "deflate"])
async def test_compression_gives_identical_results(connect, compression):
    plain = connect("vaffine", useSharedMemory=False)
    packed = connect("vaffine", useSharedMemory=False, compression=compression)
    assert packed.call_options()["compression_algorithm"] == compression
    for x in batches([3, 1], width=1000):
        np.testing.assert_array_equal(await infer(packed, x), await infer(plain, x))


@pytest.mark.parametrize(("key", "value"), [("compression", "zstd"), ("batchMode", "Jagged")])
def test_bad_values_are_one_line_configuration_errors(key, value):
    with pytest.raises(ConfigurationError) as info:
        TritonClient(
            client_description().validate({"modelName": "affine", **required("affine"), key: value}, "Client"),
            debug_name="badModule",
        )
    message = str(info.value)
    assert "\n" not in message and "badModule" in message and f"Client.{key} '{value}'" in message


class RefusingClient:
    """An InferenceServerClient whose server refuses our regions (e.g. it runs in a container)."""

    def __init__(self, real) -> None:
        self._real = real
        self.refusals = 0

    def register_system_shared_memory(self, *args, **kwargs):
        from tritonclient.utils import InferenceServerException

        self.refusals += 1
        raise InferenceServerException("Unable to open shared memory region: '/x'", status="StatusCode.INTERNAL")

    def __getattr__(self, name):
        return getattr(self._real, name)


async def test_a_server_that_refuses_the_regions_gets_payloads(connect, server, caplog):
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(server.grpc_address) as real:
        refusing = RefusingClient(real)
        client = connect("affine")
        client.connect(ServerInfo("local", server.grpc_address), refusing)
        for event, x in enumerate(batches([2, 3])):
            np.testing.assert_array_equal(await infer(client, x, event), 2 * x + 1)
        assert refusing.refusals == 1 and client.transport.shm_calls == 0 and client.transport.payload_calls == 2
        assert "cannot use our shared memory" in caplog.text and own_regions() == []
        client.close()
