"""SONIC modules against a REAL Seldon MLServer (an Open Inference Protocol server, not Triton).

Test policy: MLServer is an optional extra with pins of its own, installed by ``.ci/run``
into ``.venv-mlserver`` (``$PYSONIC_MLSERVER`` names another ``mlserver`` command); the
tests skip with a one-line reason without it. One MLServer per module, on 127.0.0.1, serves
our ``facile`` ONNX model (``data/models``) through the custom onnxruntime runtime
``tests/mlserver_onnx.py``. The job runs the unchanged FACILE SONIC producer against it and
the direct producer (onnxruntime in-process) beside it: the products must agree. MLServer
has no ``ModelConfig``, statistics or shared-memory RPCs and spells READY ``State.READY``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

import framework
import framework.config as cms
from framework import EDAnalyzer, ExternalFailure
from framework._builder import build_job
from framework._scheduler import run_job
from framework.sonic import ServerInfo, TritonClient
from framework.sonic._client import client_description
from framework.sonic._routing import ready_models

ROOT = pathlib.Path(__file__).resolve().parents[1]
MLSERVER = pathlib.Path(os.environ.get("PYSONIC_MLSERVER", ROOT / ".venv-mlserver" / "bin" / "mlserver"))
FACILE = ROOT / "data" / "models" / "facile"
START_TIMEOUT = 120.0  # seconds for MLServer to serve the model (it imports a lot on 2 busy cores)
N_CHANNELS = 3000  # rows per event (the FACILE default is 16,000): small, above 64 KiB all the same

pytestmark = pytest.mark.skipif(
    not MLSERVER.is_file(), reason=f"MLServer is not installed ({MLSERVER}; .ci/run installs it, optional)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_repository(folder: pathlib.Path) -> dict[str, int]:
    """MLServer's settings and the ``facile`` model (our ONNX file, the onnxruntime runtime); its ports."""
    ports = {"http_port": free_port(), "grpc_port": free_port(), "metrics_port": free_port()}
    settings = {"host": "127.0.0.1", "parallel_workers": 0, "metrics_endpoint": None, **ports}
    (folder / "settings.json").write_text(json.dumps(settings))
    shutil.copy(ROOT / "tests" / "mlserver_onnx.py", folder / "mlserver_onnx.py")
    model = folder / "facile"
    model.mkdir()
    shutil.copy(FACILE / "1" / "model.onnx", model / "model.onnx")
    implementation = {"implementation": "mlserver_onnx.OnnxRuntime", "parameters": {"uri": "./model.onnx"}}
    (model / "model-settings.json").write_text(json.dumps({"name": "facile", **implementation}))
    return ports


def wait_ready(process: subprocess.Popen, address: str, log: pathlib.Path) -> None:
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(address)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"MLServer exited ({process.returncode}): {log.read_text()[-2000:]}", pytrace=False)
            try:
                if client.is_model_ready("facile", client_timeout=2.0):
                    return
            except InferenceServerException:
                pass
            time.sleep(0.5)
    finally:
        client.close()
    pytest.fail(f"MLServer did not serve 'facile' in {START_TIMEOUT:.0f} s: {log.read_text()[-2000:]}", pytrace=False)


@pytest.fixture(scope="module")
def mlserver(tmp_path_factory):
    """``host:port`` of a real MLServer serving ``facile``; stopped (its whole session) after the module."""
    folder = tmp_path_factory.mktemp("mlserver")
    ports = write_repository(folder)
    log = folder / "mlserver.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(MLSERVER), "start", str(folder)],
            cwd=folder,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        address = f"127.0.0.1:{ports['grpc_port']}"
        wait_ready(process, address, log)
        yield address
    finally:
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
        with pytest.raises(ProcessLookupError):  # nothing of its session is left
            os.killpg(process.pid, 0)


class FacileMatch(EDAnalyzer):
    """Records, per event, the SONIC product (from MLServer) and the direct one (in-process)."""

    seen: dict = {}

    def __init__(self, params):
        self.sonic = self.consumes("facileSonic")
        self.direct = self.consumes("facileDirect")

    def analyze(self, event):
        FacileMatch.seen[event.id.event] = (event.get(self.sonic), event.get(self.direct))


framework.register_type("oipFacileMatch", FacileMatch)


def facile_process(address: str, model_config: str) -> cms.Process:
    host, port = address.rsplit(":", 1)
    process = cms.Process("OIP")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = 3
    process.TritonService = cms.Service(
        "TritonService",
        verbose=cms.untracked.bool(True),
        servers=cms.untracked.VPSet(
            cms.PSet(
                name=cms.untracked.string("mlserver"),
                address=cms.untracked.string(host),
                port=cms.untracked.uint32(int(port)),
            )
        ),
        fallback=cms.PSet(enable=cms.untracked.bool(False)),
    )
    process.facileInputs = cms.EDProducer("FacileInputProducer", nChannels=cms.uint32(N_CHANNELS))
    client = cms.PSet(
        modelName=cms.string("facile"),
        modelConfigPath=cms.FileInPath(model_config),
        mode=cms.string("Async"),
        timeout=cms.untracked.uint32(30),
    )
    process.facileSonic = cms.EDProducer("FacileSonicProducer", Client=client)
    process.facileDirect = cms.EDProducer("FacileDirectProducer", Client=client.clone())
    process.match = cms.EDAnalyzer("oipFacileMatch")
    process.p = cms.Path(process.facileInputs + process.facileSonic + process.facileDirect + process.match)
    return process


def test_discovery_finds_the_model_in_mlservers_index(mlserver):
    assert ready_models(ServerInfo("mlserver", mlserver)) == {"facile"}


async def test_the_facile_sonic_module_runs_unchanged_against_mlserver(mlserver, caplog):
    from rich.console import Console

    FacileMatch.seen = {}
    process = facile_process(mlserver, str(FACILE / "config.pbtxt"))
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
    assert svc.assignment == {"facile": "mlserver"}
    assert stats["clients"]["facileSonic"]["calls"] == 3 and stats["clients"]["facileSonic"]["errors"] == 0
    assert stats["models"]["facile"]["no_statistics"] == ["mlserver"] and "requests" not in stats["models"]["facile"]
    console = Console(file=io.StringIO(), width=200, record=True)
    for table in svc.report():
        console.print(table)
    assert "n/a" in console.export_text()
    messages = [r.getMessage() for r in caplog.records]
    assert any("has no model config: max_batch_size 65536" in m for m in messages), messages
    assert any("keeps no statistics" in m for m in messages)
    assert not any(r.levelno >= logging.ERROR for r in caplog.records)


async def test_a_local_config_that_disagrees_with_the_metadata_is_named(mlserver, tmp_path):
    config = tmp_path / "facile" / "config.pbtxt"
    config.parent.mkdir()
    config.write_text((FACILE / "config.pbtxt").read_text().replace("dims: [ 15 ]", "dims: [ 14 ]"))
    process = facile_process(mlserver, str(config))
    del process.facileDirect  # the direct twin would refuse the edited config itself
    process.p = cms.Path(process.facileInputs + process.facileSonic)
    process.validate_()
    error = r"input 'rechit_inputs' is FP32 \[15\] on the server, FP32 \[14\] in the local config"
    with pytest.raises(ExternalFailure, match=error):
        await run_job(build_job(process))


def test_without_a_local_config_the_shapes_come_from_the_metadata(mlserver, tmp_path):
    params = client_description().validate(
        {"modelName": "facile", "modelConfigPath": str(FACILE / "config.pbtxt"), "timeout": 10}, "test client"
    )
    client = TritonClient(params, debug_name="remoteOnly")
    client.model_config_path = tmp_path / "absent" / "config.pbtxt"  # a model known only to the server
    client.connect(ServerInfo("mlserver", mlserver))
    try:
        assert client.max_batch_size == 0
        assert client.inputs["rechit_inputs"].dims == (-1, 15) and client.outputs["energy"].dims == (-1, 1)
    finally:
        client.close()


async def test_a_model_mlserver_does_not_serve_is_named(mlserver, tmp_path):
    process = facile_process(mlserver, str(FACILE / "config.pbtxt"))
    process.facileSonic.Client.modelName = "deepmet"
    del process.facileDirect
    process.p = cms.Path(process.facileInputs + process.facileSonic)
    process.validate_()
    with pytest.raises(ExternalFailure, match=r"deepmet .* by no server \(tried 'mlserver' at .*: serves facile\)"):
        await run_job(build_job(process))
