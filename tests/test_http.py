"""The SONIC client's HTTP transport (``framework.sonic._http``, ``_transport.HttpCall``).

Policy: a request's body is checked against what ``tritonclient.http`` itself builds for
the same tensors (``generate_request_body``); the answers of one real Triton server (one
per module: an identity model of several datatypes, a slow one, one that raises) are
compared bit for bit with tritonclient.http's and with the gRPC transport's. The
connection behaviour (reuse, a connection the server closed, a cancel mid-response) is
observed on the real server, through a TCP relay in this process where the test must
close connections under the client; TLS through a TLS-terminating relay (Triton 2.51's
HTTP frontend has no TLS of its own).
"""

from __future__ import annotations

import shutil
import textwrap

import numpy as np
import pytest
import trio

from framework import ExternalFailure
from framework.serving.testing import TensorConfig, write_python_model
from framework.sonic import ServerInfo, SslOptions, TensorSpec, close_idle_connections
from framework.sonic._http import HttpEndpoint, HttpPlan, http_status
from framework.sonic._transport import HttpCall, PayloadCall, ShmCall, TensorTransport

from support import Relay

IDENTITY_PY = textwrap.dedent("""
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            out = []
            for request in requests:
                tensors = [pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in ("f", "i", "h", "b")]
                out.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor(n, t.copy()) for n, t in zip(("F", "I", "H", "B"), tensors)]))
            return out
""")

SLOW_PY = textwrap.dedent("""
    import time
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            time.sleep(1.0)
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "y", pb_utils.get_input_tensor_by_name(r, "x").as_numpy())]) for r in requests]
""")

RAISING_PY = textwrap.dedent("""
    class TritonPythonModel:
        def execute(self, requests):
            raise ValueError("this model always fails")
""")

DTYPES = {"f": ("FP32", np.float32), "i": ("INT64", np.int64), "h": ("FP16", np.float16), "b": ("BOOL", np.bool_)}


def _arrays(rows: int, width: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "f": rng.standard_normal((rows, width)).astype(np.float32),
        "i": rng.integers(-(2**40), 2**40, (rows, width)),
        "h": rng.standard_normal((rows, width)).astype(np.float16),
        "b": rng.random((rows, width)) > 0.5,
    }


def _http_inputs(arrays: dict[str, np.ndarray]):
    import tritonclient.http as httpclient

    inputs = []
    for name, array in arrays.items():
        tensor = httpclient.InferInput(name, list(array.shape), DTYPES[name][0])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def _body(call: HttpCall) -> tuple[bytes, bytes]:
    """A call's request head and body."""
    head, *body = call.buffers
    return bytes(head), b"".join(b.tobytes() if isinstance(b, np.ndarray) else bytes(b) for b in body)


def _endpoint(address: str = "127.0.0.1:1", **server) -> HttpEndpoint:
    return HttpEndpoint(ServerInfo("test", "127.0.0.1:2", http_address=address, **server))


@pytest.mark.parametrize("outputs", [None, ["F", "B"]])
@pytest.mark.parametrize(("rows", "width"), [(1, 1), (3, 5), (300, 7), (0, 4)])
def test_request_body_is_what_tritonclient_http_sends(outputs, rows, width):
    import tritonclient.http as httpclient

    arrays = _arrays(rows, width)
    plan = HttpPlan("model_x", "", [(n, DTYPES[n][0]) for n in arrays], outputs or ())
    call = HttpCall.of_arrays(_endpoint(), plan, list(arrays.values()), "model_x")
    requested = None if outputs is None else [httpclient.InferRequestedOutput(n) for n in outputs]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(_http_inputs(arrays), requested)
    head, ours = _body(call)
    assert ours == body  # byte for byte: the JSON header, then each array's bytes
    assert f"Inference-Header-Content-Length: {json_size}\r\n".encode() in head
    assert f"Content-Length: {len(body)}\r\n".encode() in head
    assert head.startswith(b"POST /v2/models/model_x/infer HTTP/1.1\r\nHost: 127.0.0.1:1\r\n")


def test_request_line_names_version_and_escapes_the_model():
    plan = HttpPlan("a b/c", "3", [("x", "FP32")], ())
    call = HttpCall.of_arrays(_endpoint(), plan, [np.ones((1, 2), np.float32)], "a b/c")
    assert _body(call)[0].startswith(b"POST /v2/models/a%20b%2Fc/versions/3/infer HTTP/1.1\r\n")


def test_request_headers_carry_the_servers_metadata():
    call = HttpCall.of_arrays(
        _endpoint(metadata=(("x-site", "T2_XY"), ("authorization", "Bearer abc"))),
        HttpPlan("m", "", [("x", "FP32")], ()),
        [np.ones(2, np.float32)],
        "m",
    )
    head = _body(call)[0]
    assert b"\r\nx-site: T2_XY\r\n" in head and b"\r\nauthorization: Bearer abc\r\n" in head


@pytest.mark.parametrize("outputs_in_region", [True, False])
@pytest.mark.parametrize("offset", [0, 64])
def test_shared_memory_header_is_tritonclient_https(offset, outputs_in_region):
    import json

    import tritonclient.http as httpclient

    arrays = _arrays(3, 20)
    inputs, places, at = [], [], offset
    for name, array in arrays.items():
        tensor = httpclient.InferInput(name, list(array.shape), DTYPES[name][0])
        tensor.set_shared_memory("region_7", array.nbytes, offset=at)
        inputs.append(tensor)
        places.append((array.shape, at, array.nbytes))
        at += array.nbytes
    requested = [httpclient.InferRequestedOutput(n) for n in ("F", "B")]
    out_places = [("F", at, 240), ("B", at + 240, 60)]
    if outputs_in_region:
        for output, (_name, where, nbytes) in zip(requested, out_places, strict=True):
            output.set_shared_memory("region_7", nbytes, offset=where)
    body, _ = httpclient.InferenceServerClient.generate_request_body(inputs, requested)
    plan = HttpPlan("m", "", [(n, DTYPES[n][0]) for n in arrays], ["F", "B"])
    ours = plan.header_shared_memory("region_7", places, out_places if outputs_in_region else None)
    assert json.loads(ours) == json.loads(body)


def test_plans_refuse_tensors_that_are_not_raw_bytes():
    with pytest.raises(ValueError, match=r"s \(BYTES\)"):
        HttpPlan("m", "", [("x", "FP32"), ("s", "BYTES")], ())


def test_http_statuses_map_to_grpc_status_names():
    assert [http_status(c) for c in (400, 404, 500, 501, 503, 502, 418, 599)] == [
        "INVALID_ARGUMENT",
        "NOT_FOUND",
        "INTERNAL",
        "UNIMPLEMENTED",
        "UNAVAILABLE",
        "UNAVAILABLE",
        "UNKNOWN",
        "INTERNAL",
    ]


# ---------------------------------------------------------------------------- a real server

_ENDPOINTS: list[HttpEndpoint] = []
REPOSITORY: list = []  # this module's model repository, once written


def _open(server: ServerInfo) -> HttpEndpoint:
    """A new endpoint (its own connections and counts); its blocking connections are closed
    after the test (trio's close with their run)."""
    _ENDPOINTS.append(HttpEndpoint(server))
    return _ENDPOINTS[-1]


@pytest.fixture(autouse=True)
def _close_endpoints():
    """Triton waits for open HTTP connections up to its exit timeout (30 s) when stopped."""
    yield
    while _ENDPOINTS:
        _ENDPOINTS.pop().close_idle()
    close_idle_connections()  # the transports' (framework.sonic._http.http_endpoint)


@pytest.fixture(scope="module")
def server(tmp_path_factory, start_server):
    repo = tmp_path_factory.mktemp("models")
    REPOSITORY[:] = [repo]
    write_python_model(
        repo,
        "identity",
        IDENTITY_PY,
        inputs=[TensorConfig(n, "TYPE_" + t, (-1,)) for n, (t, _) in DTYPES.items()],
        outputs=[TensorConfig(n.upper(), "TYPE_" + t, (-1,)) for n, (t, _) in DTYPES.items()],
        max_batch_size=512,
    )
    write_python_model(
        repo,
        "identity_fixed",
        IDENTITY_PY,
        inputs=[TensorConfig(n, "TYPE_" + t, (130,)) for n, (t, _) in DTYPES.items()],
        outputs=[TensorConfig(n.upper(), "TYPE_" + t, (130,)) for n, (t, _) in DTYPES.items()],
        max_batch_size=512,
    )
    write_python_model(repo, "slow", SLOW_PY, instances=2)
    write_python_model(repo, "raising", RAISING_PY)
    return start_server(repo, ["identity", "identity_fixed", "slow", "raising"])


def _server_info(server, **extra) -> ServerInfo:
    return ServerInfo("local", server.grpc_address, http_address=server.http_address, **extra)


def _tritonclient_http(server, model: str, arrays: dict[str, np.ndarray]):
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.http_address)
    try:
        return client.infer(model, _http_inputs(arrays))
    finally:
        client.close()


def _call(server, arrays, model="identity", **extra) -> HttpCall:
    plan = HttpPlan(model, "", [(n, DTYPES[n][0]) for n in arrays], ())
    return HttpCall.of_arrays(_open(_server_info(server, **extra)), plan, list(arrays.values()), model)


@pytest.mark.parametrize("blocking", [False, True])
def test_answers_are_tritonclient_https_and_grpcs_bit_for_bit(server, blocking):
    import tritonclient.grpc as grpcclient

    arrays = _arrays(5, 130, seed=3)
    call = _call(server, arrays)
    if blocking:
        response = call.infer(None, "identity", {"client_timeout": 30})
    else:
        response = trio.run(call.exchange, {"client_timeout": 30})
    reference = _tritonclient_http(server, "identity", arrays)
    grpc_client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        payload = PayloadCall(
            {n: TensorSpec(n, t, np.dtype(d), (-1,), True) for n, (t, d) in DTYPES.items()}, arrays, None
        )
        over_grpc = payload.infer(grpc_client, "identity", {"client_timeout": 30})
    finally:
        grpc_client.close()
    for name in ("F", "I", "H", "B"):
        ours = call.as_numpy(response, name)
        assert ours.dtype == reference.as_numpy(name).dtype and ours.shape == (5, 130)
        assert ours.tobytes() == reference.as_numpy(name).tobytes() == payload.as_numpy(over_grpc, name).tobytes()
        assert ours.tobytes() == arrays[name.lower()].tobytes()
        assert not ours.flags.writeable and np.shares_memory(ours, np.frombuffer(response.body, np.uint8))


def test_a_10_mb_tensor(server):
    rng = np.random.default_rng(11)
    arrays = {
        "f": rng.standard_normal((10, 2**18)).astype(np.float32),  # 10 MiB
        "i": np.zeros((10, 1), np.int64),
        "h": np.zeros((10, 1), np.float16),
        "b": np.zeros((10, 1), np.bool_),
    }
    call = _call(server, arrays)
    response = trio.run(call.exchange, {"client_timeout": 60})
    assert call.as_numpy(response, "F").tobytes() == arrays["f"].tobytes()
    blocking = _call(server, arrays).infer(None, "identity", {"client_timeout": 60})
    assert blocking.as_numpy("F").tobytes() == arrays["f"].tobytes()


def test_connections_are_kept_and_reused(server):
    """Eight requests, four in flight at a time: four connections, each used twice."""
    endpoint = _open(_server_info(server))
    plan = HttpPlan("identity", "", [(n, DTYPES[n][0]) for n in DTYPES], ())
    results = []

    async def main():
        async def one(seed):
            arrays = _arrays(2, 3, seed=seed)
            response = await HttpCall.of_arrays(endpoint, plan, list(arrays.values()), "identity").exchange({})
            results.append(response.as_numpy("F").tobytes() == arrays["f"].tobytes())

        for round_ in range(2):
            async with trio.open_nursery() as nursery:
                for seed in range(4):
                    nursery.start_soon(one, 4 * round_ + seed)

    trio.run(main)
    assert results == [True] * 8
    assert endpoint.opened == 4 and endpoint.reopened == 0


def _double(rows: int = 2) -> dict[str, np.ndarray]:
    return {"x": np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)}


def _slow_call(endpoint: HttpEndpoint, rows: int = 2) -> HttpCall:
    arrays = _double(rows)
    return HttpCall.of_arrays(endpoint, HttpPlan("slow", "", [("x", "FP32")], ()), list(arrays.values()), "slow")


def test_a_connection_the_server_closed_while_idle_is_reopened_once(server):
    """A relay in front of the server closes the idle connection: the next request goes on
    a new one within the same call (and the blocking pool does the same)."""
    with Relay(server.http_address) as relay:
        endpoint = _open(ServerInfo("relayed", server.grpc_address, http_address=relay.address))
        arrays = _arrays(2, 3)
        plan = HttpPlan("identity", "", [(n, DTYPES[n][0]) for n in arrays], ())

        async def main():
            for _ in range(3):
                call = HttpCall.of_arrays(endpoint, plan, list(arrays.values()), "identity")
                response = await call.exchange({"client_timeout": 30})
                assert response.as_numpy("F").tobytes() == arrays["f"].tobytes()
                relay.close_connections()
                await trio.sleep(0.1)  # the close reaches the client's idle socket

        trio.run(main)
        assert (endpoint.opened, endpoint.reopened, relay.accepted) == (3, 2, 3)
        for _ in range(2):
            call = HttpCall.of_arrays(endpoint, plan, list(arrays.values()), "identity")
            assert call.infer(None, "identity", {"client_timeout": 30}).as_numpy("F").shape == (2, 3)
            relay.close_connections()
        assert (endpoint.opened, endpoint.reopened) == (5, 3)


def test_a_connection_closed_mid_request_is_an_error_not_a_retry(server):
    """A fresh connection that the server closes before answering: UNAVAILABLE, retryable
    (the retry policy decides), not silently sent again."""
    with Relay(server.http_address) as relay:
        endpoint = _open(ServerInfo("relayed", server.grpc_address, http_address=relay.address))

        async def main():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, _close_after, relay, 0.3)
                with pytest.raises(ExternalFailure) as info:
                    await _slow_call(endpoint).exchange({"client_timeout": 30})
            return info.value

        failure = trio.run(main)
        assert (failure.status, failure.retryable, failure.server) == ("UNAVAILABLE", True, "relayed")
        assert endpoint.opened == 1 and endpoint.reopened == 0


def _close_after(relay: Relay, seconds: float) -> None:
    import time

    time.sleep(seconds)
    relay.close_connections()


def test_a_call_cancelled_mid_response_closes_its_connection(server):
    """Cancelled while the server works on it: the connection is closed, never reused; the
    next call opens a new one and gets its own answer."""
    endpoint = _open(_server_info(server))

    async def main():
        with trio.move_on_after(0.3) as scope:
            await _slow_call(endpoint).exchange({"client_timeout": 30})
        assert scope.cancelled_caught
        response = await _slow_call(endpoint, rows=4).exchange({"client_timeout": 30})
        assert response.as_numpy("y").shape == (4, 3)  # its own answer, not the cancelled call's

    trio.run(main)
    assert endpoint.opened == 2


def test_the_deadline_is_client_timeout(server):
    endpoint = _open(_server_info(server))
    with pytest.raises(ExternalFailure) as info:
        trio.run(_slow_call(endpoint).exchange, {"client_timeout": 0.2})
    assert (info.value.status, info.value.retryable) == ("DEADLINE_EXCEEDED", True)
    with pytest.raises(ExternalFailure) as info:
        _slow_call(endpoint).infer(None, "slow", {"client_timeout": 0.2})
    assert info.value.status == "DEADLINE_EXCEEDED"


@pytest.mark.parametrize(
    ("model", "arrays", "http", "status", "retryable", "message"),
    [
        ("nonexistent", _double(), 404, "NOT_FOUND", False, "nonexistent"),
        ("slow", {"x": np.ones((2, 3), np.int64)}, 400, "INVALID_ARGUMENT", False, "data-type"),
        ("raising", _double(), 500, "INTERNAL", True, "this model always fails"),
    ],
)
def test_server_errors_are_external_failures_with_the_servers_message(
    server, model, arrays, http, status, retryable, message
):
    datatype = "INT64" if arrays["x"].dtype == np.int64 else "FP32"
    plan = HttpPlan(model, "", [("x", datatype)], ())
    endpoint = _open(_server_info(server))
    for blocking in (False, True, True):
        call = HttpCall.of_arrays(endpoint, plan, list(arrays.values()), model)
        with pytest.raises(ExternalFailure) as info:
            if blocking:
                call.infer(None, model, {"client_timeout": 30})
            else:
                trio.run(call.exchange, {"client_timeout": 30})
        failure = info.value
        assert (failure.model, failure.server, failure.status, failure.retryable) == (model, "local", status, retryable)
        assert failure.args[0].startswith(f"HTTP {http}: ") and message in failure.args[0]
    assert endpoint.opened == 2  # a trio and a blocking one: an error answer leaves a connection usable


@pytest.mark.parametrize("model", ["identity", "identity_fixed"])
def test_shared_memory_over_http_answers_as_tritonclient(server, model):
    """A local server: the inputs in a region registered once (gRPC's registration: the
    server has one registry), the call over HTTP; outputs of fixed size come back in the
    region, of open size in the response: bit for bit tritonclient.http's payload answer."""
    import tritonclient.grpc as grpcclient

    fixed = model == "identity_fixed"
    arrays = _arrays(300, 130, seed=5)  # above SHM_MIN_BYTES
    dims = (130,) if fixed else (-1,)
    in_specs = {n: TensorSpec(n, t, np.dtype(d), dims, True) for n, (t, d) in DTYPES.items()}
    out_specs = [TensorSpec(n.upper(), t, np.dtype(d), dims, True) for n, (t, d) in DTYPES.items()]
    transport = TensorTransport(True, "httpShm", 30.0, model, "", "http")
    grpc_client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        for blocking in (False, True):
            call = transport.call(_server_info(server), grpc_client, in_specs, out_specs, arrays, 300, True)
            assert isinstance(call, ShmCall) and call.http is not None and call.request is None
            options = {"client_timeout": 30}
            response = call.infer(None, model, options) if blocking else trio.run(call.http.exchange, options)
            reference = _tritonclient_http(server, model, arrays)
            for name in ("F", "I", "H", "B"):
                ours = call.as_numpy(response, name)
                assert ours.shape == (300, 130)
                assert ours.tobytes() == reference.as_numpy(name).tobytes() == arrays[name.lower()].tobytes()
            assert bool(call._out_places) == fixed  # noqa: SLF001 - where the outputs travelled
            call.done(True)
        assert (transport.shm_calls, transport.http_calls, transport.payload_calls) == (2, 2, 0)
        assert len(next(iter(transport.pools().values())).region_names()) == 1  # one region, reused
    finally:
        transport.close()
        grpc_client.close()


def test_auto_uses_http_where_the_server_has_it_and_http_requires_it(server):
    import tritonclient.grpc as grpcclient

    specs = {"x": TensorSpec("x", "FP32", np.dtype(np.float32), (-1,), True)}
    grpc_only = ServerInfo("grpcOnly", server.grpc_address)
    grpc_client = grpcclient.InferenceServerClient(server.grpc_address)
    try:
        kinds = {}
        for protocol in ("auto", "grpc", "http"):
            transport = TensorTransport(False, "t", 30.0, "slow", "", protocol)
            kinds[protocol] = type(transport.call(_server_info(server), grpc_client, specs, [], _double(), 2, True))
            if protocol == "http":
                with pytest.raises(ExternalFailure, match="no HTTP endpoint"):
                    transport.call(grpc_only, grpc_client, specs, [], _double(), 2, True)
            else:
                assert (
                    type(transport.call(grpc_only, grpc_client, specs, [], _double(), 2, True)).__name__ == "WireCall"
                )
        assert {k: v.__name__ for k, v in kinds.items()} == {"auto": "HttpCall", "grpc": "WireCall", "http": "HttpCall"}
    finally:
        grpc_client.close()


def test_headers_and_bearer_token_go_with_every_request(server):
    metadata = (("x-site", "T2_XY"), ("authorization", "Bearer s3cret-token"))
    with Relay(server.http_address) as relay:
        endpoint = _open(ServerInfo("guarded", server.grpc_address, metadata=metadata, http_address=relay.address))
        response = trio.run(_slow_call(endpoint).exchange, {"client_timeout": 30})
        assert response.as_numpy("y").shape == (2, 3)
    head = bytes(relay.received).split(b"\r\n\r\n", 1)[0]
    assert b"\r\nx-site: T2_XY\r\n" in head and b"\r\nauthorization: Bearer s3cret-token\r\n" in head


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_with_a_client_certificate(server, tmp_path):
    """TLS to a TLS-terminating relay in front of the server (Triton's HTTP frontend has no
    TLS of its own), with CMSSW's certificate parameters: the server verified against
    rootCertificates, a client certificate required (mutual TLS); a stranger CA fails."""
    import ssl

    from test_tls import make_ca, make_signed

    make_ca(tmp_path, "ca")
    make_ca(tmp_path, "other-ca")
    make_signed(tmp_path, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost")
    make_signed(tmp_path, "client", "ca")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tmp_path / "ca.crt"))
    context.load_cert_chain(tmp_path / "server.crt", tmp_path / "server.key")
    context.verify_mode = ssl.CERT_REQUIRED
    client_ssl = SslOptions(str(tmp_path / "ca.crt"), str(tmp_path / "client.key"), str(tmp_path / "client.crt"))
    with Relay(server.http_address, ssl_context=context) as relay:
        secure = ServerInfo("secure", server.grpc_address, client_ssl, http_address=relay.address)
        arrays = _arrays(300, 130, seed=9)  # 0.6 MB: several TLS records each way
        plan = HttpPlan("identity", "", [(n, DTYPES[n][0]) for n in arrays], ())
        for blocking in (False, True):
            call = HttpCall.of_arrays(_open(secure), plan, list(arrays.values()), "identity")
            options = {"client_timeout": 30}
            response = call.infer(None, "identity", options) if blocking else trio.run(call.exchange, options)
            for name in ("F", "I", "H", "B"):
                assert response.as_numpy(name).tobytes() == arrays[name.lower()].tobytes()
        stranger = ServerInfo(
            "stranger", server.grpc_address, SslOptions(str(tmp_path / "other-ca.crt")), http_address=relay.address
        )
        with pytest.raises(ExternalFailure) as info:
            trio.run(_slow_call(_open(stranger)).exchange, {"client_timeout": 30})
        assert info.value.status == "UNAVAILABLE" and "CERTIFICATE_VERIFY_FAILED" in info.value.args[0]


@pytest.mark.parametrize("mode", ["Async", "Sync", "PseudoAsync"])
def test_a_client_over_http_in_each_mode_answers_as_over_grpc(server, mode):
    """TritonClient with Client.transport auto on a server with an HTTP endpoint: every call
    over HTTP (a batch above max_batch_size split into two calls, in flight together in
    Async), the outputs those of the same client over gRPC, bit for bit."""
    from framework.sonic import TritonClient, client_description

    arrays = _arrays(700, 3, seed=13)  # identity's max_batch_size is 512: two calls
    outputs = {}
    for transport in ("auto", "grpc"):
        params = client_description().validate(
            {
                "modelName": "identity",
                "modelConfigPath": str(REPOSITORY[0] / "identity" / "config.pbtxt"),
                "timeout": 30,
                "mode": mode,
                "transport": transport,
                "useSharedMemory": False,
            },
            "test client",
        )
        client = TritonClient(params, debug_name="httpModes")
        client.connect(_server_info(server))
        try:
            request = client.new_request()
            for name, array in arrays.items():
                request.input[name].to_server(array)
            trio.run(request.infer)
            outputs[transport] = {n: request.output[n].from_server() for n in ("F", "I", "H", "B")}
            stats = client.statistics()
            assert (stats.calls, client.transport.http_calls) == (2, 2 if transport == "auto" else 0)
        finally:
            client.close()
    for name in ("F", "I", "H", "B"):
        assert outputs["auto"][name].tobytes() == outputs["grpc"][name].tobytes() == arrays[name.lower()].tobytes()
