"""SONIC modules against REAL Open Inference Protocol servers that are not Triton: Seldon
MLServer and KServe's Python model server.

Test policy: each server is an optional extra with pins of its own (they clash with each
other and with tritonclient's), installed by ``.ci/run`` into ``.venv-mlserver`` and
``.venv-kserve``; the tests of a server skip with a one-line reason without it. One server
at a time (a module fixture per kind), on a random port, serves our ``facile`` ONNX model
(``data/models``) with onnxruntime: MLServer through the custom runtime
``tests/mlserver_onnx.py``, KServe through ``tests/kserve_onnx.py``. The job runs the
unchanged FACILE SONIC producer against it and the direct producer (onnxruntime
in-process) beside it: the products must agree. Neither server has ``ModelConfig``,
statistics or shared-memory RPCs; MLServer spells READY ``State.READY``; KServe has no
repository index (discovery asks ``ModelReady``).
"""

from __future__ import annotations

import io
import json
import logging
import os
import pathlib
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

import framework
import framework.config as cms
from framework import EDAnalyzer, ExternalFailure
from framework.core import build_job, run_job
from framework.sonic import ServerInfo, TritonClient, client_description, ready_models

from support import free_port

ROOT = pathlib.Path(__file__).resolve().parents[1]
FACILE = ROOT / "data" / "models" / "facile"
COMMANDS = {  # the server's command in its own virtualenv
    "mlserver": pathlib.Path(os.environ.get("PYSONIC_MLSERVER", ROOT / ".venv-mlserver" / "bin" / "mlserver")),
    "kserve": pathlib.Path(os.environ.get("PYSONIC_KSERVE_PYTHON", ROOT / ".venv-kserve" / "bin" / "python")),
}
START_TIMEOUT = 120.0  # seconds for a server to serve the model (they import a lot, on 2 busy cores)
N_CHANNELS = 3000  # rows per event (the FACILE default is 16,000): small, above 64 KiB all the same


HTTP_ADDRESSES: dict[str, str] = {}  # kind -> the running server's HTTP "host:port"


def mlserver_command(folder: pathlib.Path, grpc_port: int, http_port: int) -> list[str]:
    """MLServer's settings and ``facile`` model (our ONNX file, the onnxruntime runtime) in ``folder``."""
    ports = {"http_port": http_port, "grpc_port": grpc_port, "metrics_port": free_port()}
    settings = {"host": "127.0.0.1", "parallel_workers": 0, "metrics_endpoint": None, **ports}
    (folder / "settings.json").write_text(json.dumps(settings))
    shutil.copy(ROOT / "tests" / "mlserver_onnx.py", folder / "mlserver_onnx.py")
    model = folder / "facile"
    model.mkdir()
    shutil.copy(FACILE / "1" / "model.onnx", model / "model.onnx")
    implementation = {"implementation": "mlserver_onnx.OnnxRuntime", "parameters": {"uri": "./model.onnx"}}
    (model / "model-settings.json").write_text(json.dumps({"name": "facile", **implementation}))
    return [str(COMMANDS["mlserver"]), "start", str(folder)]


def kserve_command(folder: pathlib.Path, grpc_port: int, http_port: int) -> list[str]:
    """KServe's model server for ``facile`` (our ONNX file)."""
    script = shutil.copy(ROOT / "tests" / "kserve_onnx.py", folder / "kserve_onnx.py")
    model = shutil.copy(FACILE / "1" / "model.onnx", folder / "model.onnx")
    ports = ["--http_port", str(http_port), "--grpc_port", str(grpc_port)]
    return [str(COMMANDS["kserve"]), str(script), "--model_name", "facile", "--model_path", str(model), *ports]


def wait_ready(process: subprocess.Popen, kind: str, address: str, log: pathlib.Path) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(address)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"{kind} exited ({process.returncode}): {log.read_text()[-2000:]}", pytrace=False)
            try:
                if client.is_model_ready("facile", client_timeout=2.0):
                    return
            except InferenceServerException:
                pass
            time.sleep(0.5)
    finally:
        client.close()
    pytest.fail(f"{kind} did not serve 'facile' in {START_TIMEOUT:.0f} s: {log.read_text()[-2000:]}", pytrace=False)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM its session, SIGKILL what is left after 15 s; nothing of it may remain."""
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(wait)
        except subprocess.TimeoutExpired:
            continue
    process.wait(5.0)
    with pytest.raises(ProcessLookupError):  # no process of its session is left
        os.killpg(process.pid, 0)


@pytest.fixture(scope="module", params=["mlserver", "kserve"])
def server(request, tmp_path_factory):
    """``(kind, "host:port")`` of a real server of that kind serving ``facile``, stopped after its tests."""
    kind = request.param
    if not COMMANDS[kind].is_file():
        pytest.skip(f"{kind} is not installed ({COMMANDS[kind]}; .ci/run installs it, optional)")
    folder = tmp_path_factory.mktemp(kind)
    port, http_port = free_port(), free_port()
    command = {"mlserver": mlserver_command, "kserve": kserve_command}[kind](folder, port, http_port)
    HTTP_ADDRESSES[kind] = f"127.0.0.1:{http_port}"
    log = folder / "server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=folder, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        address = f"127.0.0.1:{port}"
        wait_ready(process, kind, address, log)
        yield kind, address
    finally:
        stop(process)


class FacileMatch(EDAnalyzer):
    """Records, per event, the SONIC product (from the server) and the direct one (in-process)."""

    seen: dict = {}

    def __init__(self, params):
        self.sonic = self.consumes("facileSonic")
        self.direct = self.consumes("facileDirect")

    def analyze(self, event):
        FacileMatch.seen[event.id.event] = (event.get(self.sonic), event.get(self.direct))


framework.register_type("oipFacileMatch", FacileMatch)


def facile_process(
    server: tuple[str, str], model_config: str | pathlib.Path, model: str = "facile", transport: str = "grpc"
) -> cms.Process:
    """The FACILE SONIC producer against ``server`` (named by its kind), and its direct twin
    (the twin only for ``facile`` with our config: it reads the ONNX file beside it);
    ``transport``: ``Client.transport`` (the server's HTTP endpoint declared, ``httpPort``)."""
    kind, address = server
    host, port = address.rsplit(":", 1)
    process = cms.Process("OIP")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = 3
    process.TritonService = cms.Service(
        "TritonService",
        verbose=cms.untracked.bool(True),
        servers=cms.untracked.VPSet(
            cms.PSet(
                name=cms.untracked.string(kind),
                address=cms.untracked.string(host),
                port=cms.untracked.uint32(int(port)),
                httpPort=cms.untracked.uint32(int(HTTP_ADDRESSES[kind].rsplit(":", 1)[1])),
            )
        ),
        fallback=cms.PSet(enable=cms.untracked.bool(False)),
    )
    process.facileInputs = cms.EDProducer("FacileInputProducer", nChannels=cms.uint32(N_CHANNELS))
    client = cms.PSet(
        modelName=cms.string(model),
        modelConfigPath=cms.FileInPath(str(model_config)),
        mode=cms.string("Async"),
        timeout=cms.untracked.uint32(30),
        transport=cms.untracked.string(transport),
    )
    process.facileSonic = cms.EDProducer("FacileSonicProducer", Client=client)
    if model == "facile" and model_config == FACILE / "config.pbtxt":
        process.facileDirect = cms.EDProducer("FacileDirectProducer", Client=client.clone())
        process.match = cms.EDAnalyzer("oipFacileMatch")
        process.p = cms.Path(process.facileInputs + process.facileSonic + process.facileDirect + process.match)
    else:
        process.p = cms.Path(process.facileInputs + process.facileSonic)
    return process


def test_discovery_finds_the_model(server):
    kind, address = server
    # MLServer: its repository index ("State.READY"); KServe: none, each wanted model's ModelReady
    assert ready_models(ServerInfo(kind, address), ["facile", "deepmet"]) == {"facile"}


@pytest.mark.parametrize("transport", ["grpc", "http"])
async def test_the_facile_sonic_module_runs_unchanged(server, caplog, transport):
    """Over gRPC and over HTTP (MLServer has no binary tensor extension: JSON tensors)."""
    from rich.console import Console

    kind, _ = server
    FacileMatch.seen = {}
    process = facile_process(server, FACILE / "config.pbtxt", transport=transport)
    process.validate_()
    job = build_job(process)
    with caplog.at_level(logging.INFO, logger="pysonic.sonic"):
        report = await run_job(job)
    assert report.events == 3 and sorted(FacileMatch.seen) == [1, 2, 3]
    for sonic, direct in FacileMatch.seen.values():
        assert sonic["energy"].shape == (N_CHANNELS,)
        np.testing.assert_allclose(sonic["energy"], direct["energy"], rtol=1e-5, atol=1e-6)
    svc = job.services.services["TritonService"]
    stats = svc.statistics()
    assert svc.assignment == {"facile": kind}
    assert stats["clients"]["facileSonic"]["calls"] == 3 and stats["clients"]["facileSonic"]["errors"] == 0
    assert stats["clients"]["facileSonic"]["http_calls"] == (3 if transport == "http" else 0)
    assert stats["models"]["facile"]["no_statistics"] == [kind] and "requests" not in stats["models"]["facile"]
    console = Console(file=io.StringIO(), width=200, record=True)
    for table in svc.report():
        console.print(table)
    assert "n/a" in console.export_text()
    messages = [r.getMessage() for r in caplog.records]
    assert any("has no model config: max_batch_size 65536" in m for m in messages), messages
    assert any("keeps no statistics" in m for m in messages)
    # no shared-memory RPCs either: one warning, then gRPC payloads
    assert stats["clients"]["facileSonic"]["shm_calls"] == 0
    # (asked once per process and address: the first of the two transports' runs says it)
    assert sum("cannot use our shared memory" in m for m in messages) == (1 if transport == "grpc" else 0)
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)


async def test_a_local_config_that_disagrees_with_the_metadata_is_named(server, tmp_path):
    config = tmp_path / "facile" / "config.pbtxt"
    config.parent.mkdir()
    config.write_text((FACILE / "config.pbtxt").read_text().replace("dims: [ 15 ]", "dims: [ 14 ]"))
    process = facile_process(server, config)
    process.validate_()
    error = r"input 'rechit_inputs' is FP32 \[15\] on the server, FP32 \[14\] in the local config"
    with pytest.raises(ExternalFailure, match=error):
        await run_job(build_job(process))


def test_without_a_local_config_the_shapes_come_from_the_metadata(server, tmp_path):
    kind, address = server
    params = client_description().validate(
        {"modelName": "facile", "modelConfigPath": str(FACILE / "config.pbtxt"), "timeout": 10}, "test client"
    )
    client = TritonClient(params, debug_name="remoteOnly")
    client.model_config_path = tmp_path / "absent" / "config.pbtxt"  # a model known only to the server
    client.connect(ServerInfo(kind, address))
    try:
        assert client.max_batch_size == 0
        assert client.inputs["rechit_inputs"].dims == (-1, 15) and client.outputs["energy"].dims == (-1, 1)
    finally:
        client.close()


async def test_a_model_the_server_does_not_serve_is_named(server):
    kind, _ = server
    process = facile_process(server, FACILE / "config.pbtxt", model="deepmet")
    process.validate_()
    # KServe lists nothing: only the job's models are asked, and it serves none of them
    served = {"mlserver": "facile", "kserve": "nothing"}[kind]
    with pytest.raises(ExternalFailure, match=rf"deepmet .* by no server \(tried '{kind}' at .*: serves {served}\)"):
        await run_job(build_job(process))
