"""Request metadata per server (a bearer token, headers) through a REAL authenticating gRPC proxy.

Test policy: a real tritonserver serves a Python-backend ``double`` model; in front of it
an in-process grpcio proxy (a ``grpc.GenericRpcHandler`` relaying the raw bytes of every
unary call with identity serializers, as an Envoy with a JWT filter would) forwards a call
only if it carries ``authorization: Bearer <the token>``, else answers UNAUTHENTICATED; it
records each call's method, whether it was let through, and the ``x-site`` header. The
server is on loopback, so the SONIC client uses shared memory through the proxy too
(registration calls go through it, the tensors do not). Secrets: the token must never reach
a log record, the statistics, the summary tables, a repr or ``--describe``.
"""

from __future__ import annotations

import io
import json
import logging
import textwrap
from concurrent import futures

import grpc  # type: ignore[import-untyped]  # grpcio ships no stubs
import numpy as np
import pytest

import framework
import framework.config as cms
from framework import ConfigurationError, EDAnalyzer, ExternalFailure
from framework.core import build_job, find_type, run_job
from framework.serving.testing import write_python_model
from framework.sonic import ServerInfo, SonicEDProducer, request_metadata
from framework.sonic._server_info import CHANNEL_ARGS

TOKEN = "eyJhbGciOiJIUzI1NiJ9.cHlzb25pYy10ZXN0LXRva2Vu.c2lnbmF0dXJlLW9mLXRoZS10ZXN0"
ROWS, COLUMNS = 2, 8192  # 64 KiB of float32 per call: enough for shared memory (SHM_MIN_BYTES)

MODEL_PY = textwrap.dedent("""
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "y", 2 * pb_utils.get_input_tensor_by_name(r, "x").as_numpy())]) for r in requests]
""")


class AuthProxy(grpc.GenericRpcHandler):
    """Relays every unary call to ``target`` if it carries the bearer token (bytes in, bytes out).

    Attributes:
        calls: (method name, let through, the ``x-site`` header or None), in arrival order.
    """

    def __init__(self, target: str, token: str) -> None:
        self.expected = f"Bearer {token}"
        self.channel = grpc.insecure_channel(target, options=CHANNEL_ARGS)
        self.calls: list[tuple[str, bool, str | None]] = []

    def service(self, details):
        headers = dict(details.invocation_metadata)
        allowed = headers.get("authorization") == self.expected
        self.calls.append((details.method.rsplit("/", 1)[-1], allowed, headers.get("x-site")))
        forward = self.channel.unary_unary(details.method)  # no (de)serializer: raw bytes

        def relay(request: bytes, context: grpc.ServicerContext) -> bytes:
            if not allowed:
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
            try:  # the token is the proxy's business: not forwarded (Envoy's jwt_authn default)
                response: bytes = forward(request, timeout=context.time_remaining())
            except grpc.RpcError as exc:
                context.abort(exc.code(), exc.details())
                raise  # abort raised already
            return response

        return grpc.unary_unary_rpc_method_handler(relay)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, start_server):
    repo = tmp_path_factory.mktemp("models")
    write_python_model(repo, "double", MODEL_PY, instances=None)  # x -> y, FP32 (batch, -1)
    server = start_server(repo)
    handler = AuthProxy(server.grpc_address, TOKEN)
    grpc_server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=CHANNEL_ARGS)
    grpc_server.add_generic_rpc_handlers((handler,))
    handler.port = grpc_server.add_insecure_port("127.0.0.1:0")
    handler.repository = repo
    grpc_server.start()
    yield handler
    grpc_server.stop(grace=None)
    handler.channel.close()


class AuthDoubler(SonicEDProducer):
    def __init__(self, params):
        super().__init__(params)
        self.produces()

    def acquire(self, event, input):
        input["x"].to_server(np.full((ROWS, COLUMNS), event.id.event, np.float32))

    def produce(self, event, output):
        event.put(np.array(output["y"].from_server()))


class AuthRecorder(EDAnalyzer):
    seen: dict = {}

    def __init__(self, params):
        self.src = self.consumes("doubler")

    def analyze(self, event):
        AuthRecorder.seen[event.id.event] = event.get(self.src)


framework.register_type("authDoubler", AuthDoubler)
framework.register_type("authRecorder", AuthRecorder)


def auth_process(proxy: AuthProxy, **server: object) -> cms.Process:
    process = cms.Process("AUTH")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = 3
    process.TritonService = cms.Service(
        "TritonService",
        servers=cms.untracked.VPSet(
            cms.PSet(
                name=cms.untracked.string("guarded"),
                address=cms.untracked.string("127.0.0.1"),
                port=cms.untracked.uint32(proxy.port),
                **server,
            )
        ),
        fallback=cms.PSet(enable=cms.untracked.bool(False)),
    )
    process.doubler = cms.EDProducer(
        "authDoubler",
        Client=cms.PSet(
            modelName=cms.string("double"),
            modelConfigPath=cms.FileInPath(str(proxy.repository / "double" / "config.pbtxt")),
            mode=cms.string("Async"),
            timeout=cms.untracked.uint32(10),
        ),
    )
    process.recorder = cms.EDAnalyzer("authRecorder")
    process.p = cms.Path(process.doubler + process.recorder)
    return process


async def test_the_token_and_headers_reach_every_call_and_no_log(proxy, tmp_path, caplog):
    from rich.console import Console

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    proxy.calls.clear()
    AuthRecorder.seen = {}
    process = auth_process(
        proxy,
        bearerTokenFile=cms.untracked.string(str(token_file)),
        headers=cms.untracked.vstring("X-Site: T2_CH_TEST"),
    )
    process.validate_()
    job = build_job(process)
    with caplog.at_level(logging.DEBUG):
        report = await run_job(job)
    assert report.events == 3
    for n, y in AuthRecorder.seen.items():
        np.testing.assert_array_equal(y, np.full((ROWS, COLUMNS), 2.0 * n))
    svc = job.services.services["TritonService"]
    stats = svc.statistics()
    assert stats["clients"]["doubler"]["server"] == "guarded"
    assert stats["clients"]["doubler"]["shm_calls"] == 3  # the registration went through the proxy
    methods = {method for method, _, _ in proxy.calls}
    # discovery, metadata, shared-memory registration, inference, statistics: all through the proxy
    assert {
        "RepositoryIndex",
        "ModelMetadata",
        "SystemSharedMemoryRegister",
        "ModelInfer",
        "ModelStatistics",
        "SystemSharedMemoryUnregister",
    } <= methods
    assert all(allowed and site == "T2_CH_TEST" for _, allowed, site in proxy.calls), proxy.calls
    console = Console(file=io.StringIO(), width=200, record=True)
    for table in svc.report():
        console.print(table)
    texts = [r.getMessage() for r in caplog.records] + [json.dumps(stats), console.export_text()]
    texts += [repr(svc.routing.book.servers), repr(svc.routing.grpc_client("guarded")._plugin)]
    assert any("guarded" in t for t in texts)
    assert not any(TOKEN in text or TOKEN[:20] in text for text in texts)


async def test_a_wrong_token_from_the_environment_gets_nothing(proxy, monkeypatch, caplog):
    monkeypatch.setenv("PYSONIC_TEST_TOKEN", "not-the-token")
    proxy.calls.clear()
    process = auth_process(proxy, bearerTokenVariable=cms.untracked.string("PYSONIC_TEST_TOKEN"))
    process.validate_()
    job = build_job(process)
    error = r"model\(s\) double .* by no server \(tried 'guarded' at 127.0.0.1:\d+: unreachable\)"
    with caplog.at_level(logging.DEBUG), pytest.raises(ExternalFailure, match=error):
        await run_job(job)
    assert proxy.calls and not any(allowed for _, allowed, _ in proxy.calls)
    refused = [r.getMessage() for r in caplog.records if "cannot be reached" in r.getMessage()]
    assert refused and "UNAUTHENTICATED" in refused[0]
    assert not any("not-the-token" in r.getMessage() for r in caplog.records)


def test_open_client_sends_the_server_metadata_and_only_it(proxy):
    from tritonclient.utils import InferenceServerException

    address = f"127.0.0.1:{proxy.port}"
    for metadata, expected in [((), False), ((("authorization", f"Bearer {TOKEN}"),), True)]:
        client = ServerInfo("guarded", address, metadata=metadata).open_client()
        try:
            if expected:
                assert client.is_server_ready(client_timeout=5.0)
            else:
                with pytest.raises(InferenceServerException, match="UNAUTHENTICATED"):
                    client.is_server_ready(client_timeout=5.0)
        finally:
            client.close()
    assert TOKEN not in repr(ServerInfo("guarded", address, metadata=(("authorization", f"Bearer {TOKEN}"),)))


# -- configuration errors: one line, naming the parameter, never a value -------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"headers": ["x-site T2"]}, r"servers 'g': headers\[0\] is not 'key: value'"),
        ({"headers": ["grpc-timeout: 1"]}, r"headers\[0\] is not 'key: value'"),
        ({"headers": ["x-a: 1", "X-A: 2"]}, r"headers: 'x-a' is given twice"),
        ({"headers": ["x-a: caf\u00e9"]}, r"headers\[0\] \('x-a'\): the value is not printable ASCII"),
        ({"token_file": "/nonexistent/token"}, r"bearerTokenFile '/nonexistent/token' cannot be read"),
        ({"token_variable": "PYSONIC_TEST_ABSENT"}, r"bearerTokenVariable 'PYSONIC_TEST_ABSENT': .* not set"),
        ({"token_file": "t", "token_variable": "v"}, r"both set"),
        ({"headers": ["authorization: Basic x"], "token_variable": "PYSONIC_TEST_SPACED"}, r"'authorization' and"),
    ],
)
def test_bad_metadata_parameters_are_one_line_errors(kwargs, message, monkeypatch):
    monkeypatch.delenv("PYSONIC_TEST_ABSENT", raising=False)
    monkeypatch.setenv("PYSONIC_TEST_SPACED", "abc")
    with pytest.raises(ConfigurationError, match=message) as caught:
        request_metadata("TritonService: servers 'g'", **kwargs)
    assert "\n" not in str(caught.value)


def test_a_token_with_spaces_is_refused_without_being_shown(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("secret part two\n")
    with pytest.raises(ConfigurationError, match="not a bearer token") as caught:
        request_metadata("TritonService: servers 'g'", token_file=str(token_file))
    assert "secret" not in str(caught.value)
    token_file.write_text(f"  {TOKEN}\n")
    assert request_metadata("w", ["X-Site:  T2 "], str(token_file)) == (
        ("x-site", "T2"),
        ("authorization", f"Bearer {TOKEN}"),
    )


def test_describe_marks_the_metadata_parameters_as_extensions():
    desc = cms.ParameterSetDescription()
    find_type("TritonService").fill_descriptions(desc)
    rows = {row.name: row for row in desc.describe()}
    for name in ("servers[].headers", "servers[].bearerTokenFile", "servers[].bearerTokenVariable"):
        assert rows[name].extension, name
    assert not rows["servers[].useSsl"].extension
