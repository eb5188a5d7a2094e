"""The SONIC client's wire path (``framework.sonic._wire``, ``_transport.WireCall``).

Policy: the request bytes are checked against what tritonclient itself builds for the same
tensors (its ``_get_inference_request``), parsed back with tritonclient's own protobuf
classes; responses are real Triton responses (one local server per module, an identity
model of several datatypes) decoded both ways, and the SONIC results are compared bit for
bit with tritonclient's path on the same server.
"""

from __future__ import annotations

import os
import pathlib
import textwrap

import numpy as np
import pytest

from framework.serving.testing import TensorConfig, write_python_model
from framework.sonic import TensorSpec
from framework.sonic._transport import PayloadCall, TensorTransport, WireCall
from framework.sonic._wire import RequestPlan, StackedRows, decode_response

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

DTYPES = {"f": ("FP32", np.float32), "i": ("INT64", np.int64), "h": ("FP16", np.float16), "b": ("BOOL", np.bool_)}


def _arrays(rows: int, width: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "f": rng.standard_normal((rows, width)).astype(np.float32),
        "i": rng.integers(-(2**40), 2**40, (rows, width)),
        "h": rng.standard_normal((rows, width)).astype(np.float16),
        "b": rng.random((rows, width)) > 0.5,
    }


def _specs(batched: bool = True) -> dict[str, TensorSpec]:
    return {n: TensorSpec(n, t, np.dtype(d), (-1,), batched) for n, (t, d) in DTYPES.items()}


def _tritonclient_request(model: str, version: str, arrays: dict[str, np.ndarray], outputs):
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc._utils import _get_inference_request

    inputs = []
    for name, array in arrays.items():
        tensor = grpcclient.InferInput(name, list(array.shape), DTYPES[name][0])
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    requested = None if outputs is None else [grpcclient.InferRequestedOutput(n) for n in outputs]
    return _get_inference_request(model, inputs, version, "", requested, 0, False, False, 0, None, None)


@pytest.mark.parametrize("version", ["", "3"])
@pytest.mark.parametrize("outputs", [None, ["F", "B"]])
@pytest.mark.parametrize(("rows", "width"), [(1, 1), (3, 5), (2, 200), (300, 7), (0, 4)])
def test_request_bytes_are_what_tritonclient_sends(version, outputs, rows, width):
    """Shapes with dims >= 128 and messages >= 128 bytes need multi-byte varints."""
    from tritonclient.grpc import service_pb2

    arrays = _arrays(rows, width)
    plan = RequestPlan("model_x", version, [(n, DTYPES[n][0]) for n in arrays], outputs or ())
    data = plan.encode(list(arrays.values()))
    parsed = service_pb2.ModelInferRequest.FromString(data)
    expected = _tritonclient_request("model_x", version, arrays, outputs)
    assert parsed == expected
    # and byte for byte: the same fields in the same order as protobuf writes them
    assert data == expected.SerializeToString()


@pytest.mark.parametrize("rows", [(1, 2), (3, 0, 4), (200, 1, 1)])
def test_merged_rows_are_written_as_the_joined_tensor(rows):
    """A merged call's parts (cross-event batching) go into the request one after the
    other: the bytes are those of the joined arrays, as tritonclient sends them."""
    from tritonclient.grpc import service_pb2

    events = [_arrays(n, 3, seed=i) for i, n in enumerate(rows)]
    joined = {n: np.concatenate([e[n] for e in events]) for n in DTYPES}
    stacked = [StackedRows([e[n] for e in events]) for n in DTYPES]
    assert [s.shape for s in stacked] == [a.shape for a in joined.values()]
    assert [s.nbytes for s in stacked] == [a.nbytes for a in joined.values()]
    plan = RequestPlan("model_x", "", [(n, DTYPES[n][0]) for n in DTYPES], ())
    data = plan.encode(stacked)
    assert data == plan.encode(list(joined.values()))
    assert service_pb2.ModelInferRequest.FromString(data) == _tritonclient_request("model_x", "", joined, None)
    assert all(np.array_equal(s.join(), a) for s, a in zip(stacked, joined.values(), strict=True))


@pytest.mark.parametrize("outputs_in_region", [True, False])
@pytest.mark.parametrize("offset", [0, 64, 300_000])
def test_shared_memory_requests_are_what_tritonclient_sends(offset, outputs_in_region):
    """A shared-memory call's request: Triton's shared_memory_* parameters on every tensor
    (no offset parameter at 0, as tritonclient's set_shared_memory), nothing raw."""
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc import service_pb2
    from tritonclient.grpc._utils import _get_inference_request

    arrays = _arrays(3, 200)
    inputs, places, at = [], [], offset
    for name, array in arrays.items():
        tensor = grpcclient.InferInput(name, list(array.shape), DTYPES[name][0])
        tensor.set_shared_memory("pysonic_region_7", array.nbytes, offset=at)
        inputs.append(tensor)
        places.append((array.shape, at, array.nbytes))
        at += array.nbytes
    requested = [grpcclient.InferRequestedOutput(n) for n in ("F", "B")]
    out_places = [("F", at, 2400), ("B", at + 2400, 600)]
    if outputs_in_region:
        for output, (_name, where, nbytes) in zip(requested, out_places, strict=True):
            output.set_shared_memory("pysonic_region_7", nbytes, offset=where)
    expected = _get_inference_request("model_x", inputs, "3", "", requested, 0, False, False, 0, None, None)
    plan = RequestPlan("model_x", "3", [(n, DTYPES[n][0]) for n in arrays], ["F", "B"])
    data = plan.encode_shared_memory("pysonic_region_7", places, out_places if outputs_in_region else None)
    assert service_pb2.ModelInferRequest.FromString(data) == expected


def test_request_plan_refuses_tensors_that_are_not_raw_bytes():
    with pytest.raises(ValueError, match=r"s \(BYTES\)"):
        RequestPlan("m", "", [("x", "FP32"), ("s", "BYTES")], ())


def _response(arrays: dict[str, np.ndarray], names=("F", "I", "H", "B")):
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse(model_name="m", model_version="1")
    for (key, array), name in zip(arrays.items(), names, strict=True):
        response.outputs.add(name=name, datatype=DTYPES[key][0], shape=array.shape)
        response.raw_output_contents.append(array.tobytes())
    return response


def test_decoded_outputs_are_tritonclients_as_views_of_the_response():
    from tritonclient.grpc import InferResult

    arrays = _arrays(4, 9)
    response = _response(arrays)
    data = response.SerializeToString()
    decoded = decode_response(data)
    result = InferResult(response)
    for name in ("F", "I", "H", "B"):
        expected = result.as_numpy(name)
        assert decoded[name].dtype == expected.dtype and decoded[name].shape == expected.shape
        assert np.array_equal(decoded[name], expected)
        assert np.shares_memory(decoded[name], np.frombuffer(data, np.uint8))  # no copy
        assert not decoded[name].flags.writeable  # as tritonclient's


def test_bytes_outputs_are_left_to_tritonclient():
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse(model_name="m")
    response.outputs.add(name="s", datatype="BYTES", shape=[1])
    response.raw_output_contents.append(b"\x02\x00\x00\x00ab")
    assert decode_response(response.SerializeToString()) == {"s": None}


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda d: d[:-3], "truncated|past the end"),
        (lambda d: d + b"\x0f", "wire type 7"),
    ],
)
def test_malformed_responses_raise_value_error(mangle, message):
    data = _response({"f": np.ones((2, 3), np.float32)}, names=("F",)).SerializeToString()
    with pytest.raises(ValueError, match=message):
        decode_response(mangle(data))


def test_contents_that_do_not_fill_the_shape_raise_value_error():
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelInferResponse(model_name="m")
    response.outputs.add(name="F", datatype="FP32", shape=[2, 3])
    response.raw_output_contents.append(np.ones(5, np.float32).tobytes())
    with pytest.raises(ValueError, match=r"output 'F': 20 bytes of contents for shape \[2, 3\] of FP32"):
        decode_response(response.SerializeToString())


def test_the_transport_sends_bytes_tensors_through_tritonclient():
    """BYTES inputs keep tritonclient's length-prefixed serialization (its async_infer)."""
    import tritonclient.grpc as grpcclient

    transport = TensorTransport(False, "test", None, "m")
    grpc_client = grpcclient.InferenceServerClient("127.0.0.1:1")  # never connects
    try:
        server = _local("127.0.0.1:1")
        strings = {"s": TensorSpec("s", "BYTES", np.dtype(object), (-1,), True)}
        call = transport.call(server, grpc_client, strings, [], {"s": np.array([[b"ab"]], dtype=object)}, 1, True)
        assert type(call) is PayloadCall
        floats = {"x": TensorSpec("x", "FP32", np.dtype(np.float32), (-1,), True)}
        call = transport.call(server, grpc_client, floats, [], {"x": np.ones((1, 2), np.float32)}, 1, True)
        assert type(call) is WireCall
    finally:
        grpc_client.close()


def _local(address: str):
    from framework.sonic import ServerInfo

    return ServerInfo("test", address)


# ---------------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def server(tmp_path_factory, start_server):
    repo = tmp_path_factory.mktemp("models")
    write_python_model(
        repo,
        "identity",
        IDENTITY_PY,
        inputs=[TensorConfig(n, "TYPE_" + ("BOOL" if t == "BOOL" else t), (-1,)) for n, (t, _) in DTYPES.items()],
        outputs=[TensorConfig(n.upper(), "TYPE_" + t, (-1,)) for n, (t, _) in DTYPES.items()],
        max_batch_size=512,
    )
    write_python_model(  # fixed sizes: the outputs of a shared-memory call go into the region
        repo,
        "identity_fixed",
        IDENTITY_PY,
        inputs=[TensorConfig(n, "TYPE_" + t, (130,)) for n, (t, _) in DTYPES.items()],
        outputs=[TensorConfig(n.upper(), "TYPE_" + t, (130,)) for n, (t, _) in DTYPES.items()],
        max_batch_size=512,
    )
    return start_server(repo, ["identity", "identity_fixed"])


@pytest.fixture
def grpc_client(server):
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.grpc_address)
    yield client
    client.close()


def test_a_real_server_answers_the_wire_call_as_tritonclients(server, grpc_client):
    """The same tensors through WireCall and through tritonclient's infer: identical outputs."""
    arrays = _arrays(5, 130, seed=3)
    plan = RequestPlan("identity", "", [(n, DTYPES[n][0]) for n in arrays], ())
    call = WireCall(plan, list(arrays.values()))
    response = call.infer(grpc_client, "identity", {"client_timeout": 30})
    payload = PayloadCall(_specs(), arrays, None)
    reference = payload.infer(grpc_client, "identity", {"client_timeout": 30})
    for name in ("F", "I", "H", "B"):
        ours, theirs = call.as_numpy(response, name), payload.as_numpy(reference, name)
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape == (5, 130)
        assert ours.tobytes() == theirs.tobytes()  # bit for bit
        assert ours.tobytes() == arrays[name.lower()].tobytes()  # the identity model


@pytest.mark.parametrize("model", ["identity", "identity_fixed"])
def test_a_shared_memory_call_is_written_on_the_wire_and_answers_as_tritonclients(server, grpc_client, model):
    """A local server: the call's inputs go into a region, its request is written by the
    plan (no tritonclient InferInput); outputs of fixed size come back in the region
    (identity_fixed), of open size in the response (identity): bit for bit tritonclient's."""
    from framework.sonic import ServerInfo
    from framework.sonic._transport import ShmCall

    fixed = model == "identity_fixed"
    arrays = _arrays(300, 130, seed=5)  # 300 x 130 x 15 B: above SHM_MIN_BYTES
    dims = (130,) if fixed else (-1,)
    in_specs = {n: TensorSpec(n, t, np.dtype(d), dims, True) for n, (t, d) in DTYPES.items()}
    out_specs = [TensorSpec(n.upper(), t, np.dtype(d), dims, True) for n, (t, d) in DTYPES.items()]
    transport = TensorTransport(True, "wireShm", 30.0, model, "")
    try:
        call = transport.call(
            ServerInfo("local", server.grpc_address), grpc_client, in_specs, out_specs, arrays, 300, True
        )
        assert isinstance(call, ShmCall) and call.request is not None and not call.inputs
        response = call.infer(grpc_client, model, {"client_timeout": 30})
        payload = PayloadCall(_specs(), arrays, None)
        reference = payload.infer(grpc_client, model, {"client_timeout": 30})
        for name in ("F", "I", "H", "B"):
            ours, theirs = call.as_numpy(response, name), payload.as_numpy(reference, name)
            assert ours.dtype == theirs.dtype and ours.shape == theirs.shape == (300, 130)
            assert ours.tobytes() == theirs.tobytes() == arrays[name.lower()].tobytes()
        assert bool(call._out_places) == fixed  # noqa: SLF001 - where the outputs travelled
        call.done(True)
        assert transport.shm_calls == 1 and transport.payload_calls == 0
    finally:
        transport.close()


def test_wire_call_errors_are_tritonclients(server, grpc_client):
    """A model the server lacks: InferenceServerException with the gRPC status, as async_infer gives."""
    from tritonclient.utils import InferenceServerException

    arrays = _arrays(1, 2)
    call = WireCall(RequestPlan("nonexistent", "", [(n, DTYPES[n][0]) for n in arrays], ()), list(arrays.values()))
    with pytest.raises(InferenceServerException) as info:
        call.infer(grpc_client, "nonexistent", {"client_timeout": 30})
    assert info.value.status() == "StatusCode.NOT_FOUND"


def _resident_mb() -> float:
    """This process's resident memory now (not its peak), MB, from /proc."""
    pages = int(pathlib.Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_resident_memory_stays_flat_over_many_1_mb_calls(server, grpc_client):
    """200 calls of 1 MB (and 1 MB back) to a real server: nothing per call outlives it."""
    rng = np.random.default_rng(7)
    plan = RequestPlan("identity", "", [(n, DTYPES[n][0]) for n in DTYPES], ())

    def calls(n: int) -> None:
        for _ in range(n):
            arrays = _arrays(1, 2**16, seed=int(rng.integers(1 << 30)))  # 1.1 MB in all, new contents
            call = WireCall(plan, list(arrays.values()))
            response = call.infer(grpc_client, "identity", {"client_timeout": 30})
            output = call.as_numpy(response, "F")
            assert output is not None and output.shape == (1, 2**16)

    calls(20)  # allocators and gRPC's buffers warmed up
    before = _resident_mb()
    calls(200)
    growth = _resident_mb() - before
    assert growth < 60, f"resident memory grew by {growth:.0f} MB over 200 calls of 1.1 MB"
