"""keep_channel_spinning against a REAL tritonserver: no spin-thread restart per call.

gRPC's synchronous channel starts a thread for the completions of ``future()`` calls when
the first call is in flight and ends it when none is left; the SONIC clients keep an idle
stream open on their channel so that one-at-a-time ``async_infer`` calls do not start a
thread each. Proved by counting grpc's thread starts (its ``_run_channel_spin_thread``),
with a plain channel as the control, and by the threads ending with the client.
"""

from __future__ import annotations

import textwrap
import threading
import time

import grpc._channel
import numpy as np
import pytest
import trio

from framework.sonic import ServerInfo, TritonClient, client_description
from framework.sonic.testing import write_python_model

MODEL_PY = textwrap.dedent("""
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("y", 2 * pb_utils.get_input_tensor_by_name(r, "x").as_numpy())]
                )
                for r in requests
            ]
""")
CALLS = 5


@pytest.fixture(scope="module")
def server(tmp_path_factory, start_server):
    repo = tmp_path_factory.mktemp("models")
    write_python_model(repo, "double", MODEL_PY)
    return start_server(repo, ["double"])


def spin_thread_starts(monkeypatch) -> list[int]:
    """A list that grows by one each time gRPC starts a channel's spin thread."""
    starts: list[int] = []
    original = grpc._channel._run_channel_spin_thread

    def counting(state):
        starts.append(1)
        original(state)

    monkeypatch.setattr(grpc._channel, "_run_channel_spin_thread", counting)
    return starts


async def infer_one_at_a_time(client: TritonClient) -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(CALLS):
        request = client.new_request()
        request.input["x"].to_server(x)
        await request.infer_async()
        np.testing.assert_array_equal(request.output["y"].from_server(), 2 * x)
        await trio.sleep(0.01)  # the call is over on the gRPC side too


def connected(server, grpc_client=None) -> TritonClient:
    params = client_description().validate({"modelName": "double"}, "test client of 'double'")
    client = TritonClient(params, debug_name="spinTest")
    client.connect(ServerInfo("local", server.grpc_address), grpc_client)
    return client


def test_sonic_channel_starts_no_thread_per_call(server, monkeypatch):
    before = set(threading.enumerate())
    client = connected(server)  # its own channel, opened with spin=True
    try:
        trio.run(infer_one_at_a_time, client)  # warm: the stream is open, the thread runs
        starts = spin_thread_starts(monkeypatch)
        trio.run(infer_one_at_a_time, client)
        assert starts == []
    finally:
        client.close()
    deadline = time.monotonic() + 5
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert set(threading.enumerate()) - before == set(), "the idle stream's threads outlived the client"


def test_plain_channel_restarts_its_thread(server, monkeypatch):
    # The control: without the idle stream, calls one at a time restart the thread.
    grpc_client = ServerInfo("local", server.grpc_address).open_client()
    client = connected(server, grpc_client)
    try:
        trio.run(infer_one_at_a_time, client)
        starts = spin_thread_starts(monkeypatch)
        trio.run(infer_one_at_a_time, client)
        assert len(starts) >= 1
    finally:
        client.close()
        grpc_client.close()
