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

import textwrap

import numpy as np
import pytest
import trio

from framework.serving.testing import TensorConfig, write_python_model
from framework.sonic import ServerInfo
from framework.sonic._data import TensorSpec
from framework.sonic._http import HttpEndpoint, HttpPlan, http_status
from framework.sonic._transport import HttpCall, PayloadCall

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


@pytest.fixture(scope="module")
def server(tmp_path_factory, start_server):
    repo = tmp_path_factory.mktemp("models")
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
    return HttpCall.of_arrays(HttpEndpoint(_server_info(server, **extra)), plan, list(arrays.values()), model)


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
    endpoint = HttpEndpoint(_server_info(server))
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
