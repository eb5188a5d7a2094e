"""TLS between SONIC clients and a Triton server, against a REAL tritonserver.

Test policy: the server runs on 127.0.0.1 with ``--grpc-use-ssl-mutual`` (LocalTritonServer's
``grpc_ssl``); a CA, a server certificate (SAN IP:127.0.0.1) and a client certificate are
made in tmp_path with the ``openssl`` command line (no Python dependency is added for it).
The config keys are CMSSW's: ``useSsl``, ``rootCertificates``, ``privateKey``,
``certificateChain`` in ``TritonService.servers``. Secrets: key *contents* must never reach
a log record, the statistics or the summary tables (paths may).
"""

from __future__ import annotations

import io
import json
import logging
import pathlib
import shutil
import subprocess
import textwrap

import numpy as np
import pytest

import framework
import framework.config as cms
from framework import EDAnalyzer, ExternalFailure
from framework.core import build_job, run_job
from framework.serving import LocalTritonServer
from framework.serving._server import GrpcSsl
from framework.serving.testing import write_python_model
from framework.sonic import ServerInfo, SonicEDProducer, SslOptions

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")

MODEL_PY = textwrap.dedent("""
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "y", 2 * pb_utils.get_input_tensor_by_name(r, "x").as_numpy())]) for r in requests]
""")


def openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(folder: pathlib.Path, name: str) -> None:
    openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.crt",
        "-days",
        "1",
        "-subj",
        f"/CN=pysonic test {name}",
        cwd=folder,
    )


def make_signed(folder: pathlib.Path, name: str, ca: str, extensions: str = "") -> None:
    openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        f"/CN=pysonic {name}",
        cwd=folder,
    )
    extra = []
    if extensions:
        (folder / f"{name}.ext").write_text(extensions + "\n")
        extra = ["-extfile", f"{name}.ext"]
    openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        f"{ca}.crt",
        "-CAkey",
        f"{ca}.key",
        "-CAcreateserial",
        "-out",
        f"{name}.crt",
        "-days",
        "1",
        *extra,
        cwd=folder,
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> pathlib.Path:
    """ca.{crt,key}; server.{crt,key} for 127.0.0.1; client.{crt,key}; other-ca.crt (a stranger)."""
    folder = tmp_path_factory.mktemp("pki")
    make_ca(folder, "ca")
    make_ca(folder, "other-ca")
    make_signed(folder, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    make_signed(folder, "client", "ca")
    return folder


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> pathlib.Path:
    repo = tmp_path_factory.mktemp("models")
    write_python_model(repo, "double", MODEL_PY, instances=None)  # x -> y, FP32 (batch, -1), batch <= 8
    return repo


@pytest.fixture(scope="module")
def tls_server(repository, pki, start_server):
    ssl = GrpcSsl(pki / "server.crt", pki / "server.key", root_cert=pki / "ca.crt", mutual=True)
    return start_server(repository, grpc_ssl=ssl)


def client_ssl(pki: pathlib.Path, ca: str = "ca", with_certificate: bool = True) -> SslOptions:
    if not with_certificate:
        return SslOptions(str(pki / f"{ca}.crt"))
    return SslOptions(str(pki / f"{ca}.crt"), str(pki / "client.key"), str(pki / "client.crt"))


def server_ready(address: str, ssl: SslOptions | None) -> bool | str:
    """True if the server answers; else the gRPC status of the failure."""
    from tritonclient.utils import InferenceServerException

    client = ServerInfo("secure", address, ssl).open_client()
    try:
        return client.is_server_ready(client_timeout=5.0)
    except InferenceServerException as exc:
        return exc.status()
    finally:
        client.close()


def test_only_a_client_with_the_right_ca_and_a_certificate_gets_in(tls_server, pki):
    address = tls_server.grpc_address
    assert server_ready(address, client_ssl(pki)) is True
    assert server_ready(address, None) == "StatusCode.UNAVAILABLE"  # plain text
    assert server_ready(address, client_ssl(pki, with_certificate=False)) == "StatusCode.UNAVAILABLE"  # mutual
    assert server_ready(address, client_ssl(pki, ca="other-ca")) == "StatusCode.UNAVAILABLE"  # unknown server


class TlsDoubler(SonicEDProducer):
    def __init__(self, params):
        super().__init__(params)
        self.produces()

    def acquire(self, event, input):
        input["x"].to_server(np.full((2, 3), event.id.event, np.float32))

    def produce(self, event, output):
        event.put(np.array(output["y"].from_server()))


class TlsRecorder(EDAnalyzer):
    seen: dict = {}

    def __init__(self, params):
        self.src = self.consumes("doubler")

    def analyze(self, event):
        TlsRecorder.seen[event.id.event] = event.get(self.src)


framework.register_type("tlsDoubler", TlsDoubler)
framework.register_type("tlsRecorder", TlsRecorder)


def tls_process(server: LocalTritonServer, pki: pathlib.Path, use_ssl: bool = True) -> cms.Process:
    port = server.ports["grpc"]
    process = cms.Process("TLS")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = 4
    process.TritonService = cms.Service(
        "TritonService",
        verbose=cms.untracked.bool(True),
        servers=cms.untracked.VPSet(
            cms.PSet(
                name=cms.untracked.string("secure"),
                address=cms.untracked.string("127.0.0.1"),
                port=cms.untracked.uint32(port),
                useSsl=cms.untracked.bool(use_ssl),
                rootCertificates=cms.untracked.string(str(pki / "ca.crt")),
                privateKey=cms.untracked.string(str(pki / "client.key")),
                certificateChain=cms.untracked.string(str(pki / "client.crt")),
            )
        ),
        fallback=cms.PSet(enable=cms.untracked.bool(False)),
    )
    process.doubler = cms.EDProducer(
        "tlsDoubler",
        Client=cms.PSet(
            modelName=cms.string("double"),
            modelConfigPath=cms.FileInPath(str(server.repository / "double" / "config.pbtxt")),
            mode=cms.string("Async"),
            timeout=cms.untracked.uint32(10),
            verbose=cms.untracked.bool(True),
        ),
    )
    process.recorder = cms.EDAnalyzer("tlsRecorder")
    process.p = cms.Path(process.doubler + process.recorder)
    return process


def secrets(pki: pathlib.Path) -> list[str]:
    """Lines of the private keys (base64 body, no header), long enough to be unmistakable."""
    lines = []
    for name in ("client.key", "server.key", "ca.key"):
        lines += [line for line in (pki / name).read_text().splitlines() if not line.startswith("-----")]
    return lines


async def test_job_over_mutual_tls_leaks_no_key(tls_server, pki, caplog):
    from rich.console import Console

    TlsRecorder.seen = {}
    process = tls_process(tls_server, pki)
    process.validate_()
    job = build_job(process)
    with caplog.at_level(logging.DEBUG):
        report = await run_job(job)
    assert report.events == 4
    for n, y in TlsRecorder.seen.items():
        np.testing.assert_array_equal(y, np.full((2, 3), 2.0 * n))
    svc = job.services.services["TritonService"]
    assert svc.statistics()["clients"]["doubler"]["server"] == "secure"
    console = Console(file=io.StringIO(), width=200, record=True)
    for table in svc.report():
        console.print(table)
    texts = [r.getMessage() for r in caplog.records] + [json.dumps(svc.statistics()), console.export_text()]
    assert any("server 'secure'" in t for t in texts)  # the logs did talk about the TLS server
    for secret in secrets(pki):
        assert not any(secret in text for text in texts)
    assert not any("PRIVATE KEY" in text for text in texts)


async def test_plain_text_config_cannot_use_a_tls_server(tls_server, pki, caplog):
    process = tls_process(tls_server, pki, use_ssl=False)
    process.validate_()
    job = build_job(process)
    error = r"model\(s\) double .* by no server \(tried 'secure' at 127.0.0.1:\d+: unreachable\)"
    with caplog.at_level(logging.WARNING, logger="pysonic.sonic"), pytest.raises(ExternalFailure, match=error):
        await run_job(job)
    assert any("'secure'" in r.getMessage() and "cannot be reached" in r.getMessage() for r in caplog.records)


def test_certificate_files_without_use_ssl_are_warned_of(tls_server, pki, caplog):
    """CMSSW's TritonService reads the files only with ``useSsl``; given without it they are
    unused here too, and one warning says so (a plain channel where TLS was meant)."""
    with caplog.at_level(logging.WARNING, logger="pysonic.sonic"):
        build_job(tls_process(tls_server, pki, use_ssl=False))  # opens no channel
    warned = [r.getMessage() for r in caplog.records if "useSsl is False" in r.getMessage()]
    assert warned == [
        "TritonService: servers 'secure': rootCertificates, privateKey, certificateChain given but useSsl is False: "
        "not used (the channel is plain gRPC)"
    ]
