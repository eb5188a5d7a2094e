"""framework.serving.testing: the model writer's configuration (checked by protobuf's own
parser, as Triton reads it) and the server context manager, with a real tritonserver."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from framework.serving import LocalTritonServer, TritonServerError, testing
from framework.serving._processes import ServerRemains
from framework.serving.testing import TensorConfig, python_model_config, serving, write_python_model
from framework.utilities import ConfigurationError

DOUBLE_PY = """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor(
                "y", 2 * pb_utils.get_input_tensor_by_name(r, "x").as_numpy())]) for r in requests]
"""


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_config_is_what_triton_reads():
    text = python_model_config(
        "pair",
        inputs=[TensorConfig("a", dims=(3,)), TensorConfig("b", "TYPE_INT32", (2, -1))],
        outputs=[TensorConfig("s", "TYPE_FP64", (1,))],
        max_batch_size=16,
        instances=2,
        parameters={"mode": 'say "hi"', "sleep_s": "0.5"},
        extra="dynamic_batching { max_queue_delay_microseconds: 100 }",
    )
    config = parse(text)
    assert (config.name, config.backend, config.max_batch_size) == ("pair", "python", 16)
    assert [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in config.input] == [
        ("a", "TYPE_FP32", [3]),
        ("b", "TYPE_INT32", [2, -1]),
    ]
    assert [(t.name, model_config_pb2.DataType.Name(t.data_type), list(t.dims)) for t in config.output] == [
        ("s", "TYPE_FP64", [1]),
    ]
    assert [(g.count, model_config_pb2.ModelInstanceGroup.Kind.Name(g.kind)) for g in config.instance_group] == [
        (2, "KIND_CPU")
    ]
    assert {k: v.string_value for k, v in config.parameters.items()} == {"mode": 'say "hi"', "sleep_s": "0.5"}
    assert config.dynamic_batching.max_queue_delay_microseconds == 100


def test_defaults_and_no_instance_group():
    config = parse(python_model_config("double", instances=None))
    assert (config.max_batch_size, len(config.instance_group), len(config.parameters)) == (8, 0, 0)
    assert [(t.name, list(t.dims)) for t in (*config.input, *config.output)] == [("x", [-1]), ("y", [-1])]


@pytest.mark.parametrize(
    ("name", "config", "culprit"),
    [
        ("a/b", {}, "name 'a/b' is not a folder name"),
        ("", {}, "name '' is not a folder name"),
        ("m", {"outputs": []}, "'m': no outputs"),
        ("m", {"max_batch_size": -1}, "max_batch_size=-1 must be >= 0"),
        ("m", {"instances": 0}, "instances=0 >= 1"),
        ("m", {"inputs": [TensorConfig("x", "FP32")]}, "tensor 'x' has data_type 'FP32', not one of TYPE_BOOL"),
    ],
)
def test_bad_configuration_names_the_culprit_and_writes_nothing(tmp_path, name, config, culprit):
    with pytest.raises(ConfigurationError, match=r"^\[Configuration\] Python-backend model") as info:
        write_python_model(tmp_path, name, DOUBLE_PY, **config)
    assert culprit in str(info.value) and "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_writer_writes_both_files_and_overwrites(tmp_path):
    folder = write_python_model(tmp_path / "repo", "double", DOUBLE_PY, max_batch_size=4)
    assert folder == tmp_path / "repo" / "double"
    assert parse((folder / "config.pbtxt").read_text()).max_batch_size == 4
    assert (folder / "1" / "model.py").read_text().startswith("\nimport triton_python_backend_utils")  # dedented
    write_python_model(tmp_path / "repo", "double", "# replaced\n", max_batch_size=2)
    assert parse((folder / "config.pbtxt").read_text()).max_batch_size == 2
    assert (folder / "1" / "model.py").read_text() == "# replaced\n"


def test_serving_serves_then_leaves_nothing(tmp_path, left_behind):
    write_python_model(tmp_path, "double", DOUBLE_PY)
    with serving(tmp_path, ["double"]) as server:
        assert server.is_running()
        client = grpcclient.InferenceServerClient(server.grpc_address)
        try:
            x = grpcclient.InferInput("x", [2, 3], "FP32")
            x.set_data_from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
            y = client.infer("double", [x]).as_numpy("y")
        finally:
            client.close()
        prefix = server.region_prefix
        assert left_behind(prefix)[0], "the running server's stub shows the prefix"
    np.testing.assert_array_equal(y, 2 * np.arange(6, dtype=np.float32).reshape(2, 3))
    assert not server.is_running() and server.pid is None
    assert left_behind(prefix) == ([], [])


def test_serving_stops_the_server_when_the_block_fails(tmp_path, left_behind):
    with pytest.raises(KeyError, match="from the block"), serving(tmp_path) as server:  # an empty repository
        assert server.is_running()
        raise KeyError("from the block")
    assert not server.is_running()
    assert left_behind(server.region_prefix) == ([], [])


def test_serving_a_server_that_cannot_start_leaves_nothing(tmp_path, left_behind, monkeypatch):
    made: list[LocalTritonServer] = []  # the server serving() makes: its start fails before the block

    class Recorded(LocalTritonServer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(testing, "LocalTritonServer", Recorded)
    # the server starts, then exits: its model fails to load
    failing = "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('boom')\n"
    write_python_model(tmp_path, "double", failing)
    with pytest.raises(TritonServerError, match="exited with code"), serving(tmp_path, timeout=30.0):
        pytest.fail("the block must not run")
    assert len(made) == 1 and not made[0].is_running()
    assert left_behind(made[0].region_prefix) == ([], [])


def test_serving_fails_naming_what_a_stopped_server_left(tmp_path, monkeypatch):
    # The check itself, on a fake finding: a real leftover would need a broken server.
    calls = []

    def remains(prefix):
        calls.append(prefix)
        return ServerRemains(stubs=(12345,), regions=(f"{prefix}x",))

    monkeypatch.setattr(testing, "server_remains", remains)
    monkeypatch.setattr(testing, "SETTLE", 0.0)
    leftover = r"left 1 Python-backend stub process \(pid 12345\) and 1 "
    with pytest.raises(TritonServerError, match=leftover), serving(tmp_path) as server:
        pass
    assert calls and set(calls) == {server.region_prefix}
