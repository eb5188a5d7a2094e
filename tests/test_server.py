"""Tests of the local Triton server manager and of ``cmstriton``, with a real tritonserver.

Policy: localhost only; a tiny Python-backend model ("doubler", y = 2 * x) written into
a temporary folder, so the tests do not depend on data/models; one server shared by
the module where the test allows it; servers on an empty repository (ready in ~0.1 s)
where no model is needed. Every server pid is recorded and, after the module, no
process of theirs (server or Python backend stub) may remain.
"""

from __future__ import annotations

import importlib.machinery
import ipaddress
import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import textwrap
import time
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from framework.serving import _installation, _server
from framework.serving._cmstriton import main as cmstriton
from framework.serving._server import (
    LocalTritonServer,
    TritonServerError,
    default_model_repository,
    find_tritonserver,
    model_repository_models,
    pid_is_tritonserver,
    prepare_backend_directory,
    server_environment,
)
from framework.serving.testing import TensorConfig, python_model_config, write_python_model
from framework.utilities import ConfigurationError, ExternalFailure

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

# FP32 (batch, 4) -> 2 * x, max batch 8, dynamic batching, 1 instance.
DOUBLER: dict[str, Any] = {
    "inputs": [TensorConfig("x", dims=(4,))],
    "outputs": [TensorConfig("y", dims=(4,))],
    "extra": "dynamic_batching { }",
}
DOUBLER_CONFIG = python_model_config("doubler", **DOUBLER)

DOUBLER_MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            y = pb_utils.Tensor("y", 2 * x)
            responses.append(pb_utils.InferenceResponse(output_tensors=[y]))
        return responses
"""

# ---------------------------------------------------------------------------- fixtures

_started_pids: list[int] = []


def _track(server: LocalTritonServer) -> LocalTritonServer:
    assert server.pid is not None, "a started server has a pid"
    _started_pids.append(server.pid)
    return server


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``, from /proc."""
    members = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(entry.name))
    return members


@pytest.fixture(scope="module", autouse=True)
def no_leftover_servers():
    """After the module: no server we started, nor any of its stubs, is still alive."""
    yield
    deadline = time.monotonic() + 10.0
    while True:
        leftovers = {pid: _group_members(pid) for pid in _started_pids}
        leftovers = {pid: members for pid, members in leftovers.items() if members}
        if not leftovers or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert leftovers == {}


def _write_doubler(repository: pathlib.Path) -> pathlib.Path:
    write_python_model(repository, "doubler", DOUBLER_MODEL, **DOUBLER)
    return repository


@pytest.fixture(scope="module")
def doubler_repository(tmp_path_factory) -> pathlib.Path:
    """A model repository with the "doubler" model (FP32 [-1, 4] -> 2 * x, max batch 8)."""
    return _write_doubler(tmp_path_factory.mktemp("doubler_repository"))


@pytest.fixture(scope="module")
def empty_repository(tmp_path_factory) -> pathlib.Path:
    """A model repository without models: a server on it is ready in ~0.1 s."""
    return tmp_path_factory.mktemp("empty_repository")


@pytest.fixture(scope="module")
def doubler_server(doubler_repository, start_server):
    """One server for the module, with 2 instances of the doubler."""
    return _track(start_server(doubler_repository, instances=2))


def _double(address: str, x: np.ndarray) -> np.ndarray:
    client = grpcclient.InferenceServerClient(address)
    try:
        tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        return client.infer("doubler", [tensor]).as_numpy("y")
    finally:
        client.close()


def _listening_sockets(pid: int) -> set[tuple[str, int]]:
    """(address, port) of the TCP sockets in LISTEN state owned by ``pid``, from /proc."""
    inodes = set()
    for fd in pathlib.Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:
            continue  # closed since the listing (the server opens files now and then)
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    listening = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        lines = pathlib.Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A = TCP_LISTEN
                continue
            address_hex, port_hex = local.split(":")
            # /proc prints the address as host-order 32-bit words
            words = range(0, len(address_hex), 8)
            raw = b"".join(int(address_hex[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in words)
            address = ipaddress.ip_address(socket.inet_ntop(family, raw))
            # gRPC listens on an IPv6 socket bound to the IPv4-mapped ::ffff:127.0.0.1
            address = getattr(address, "ipv4_mapped", None) or address
            listening.add((str(address), int(port_hex, 16)))
    return listening


# ---------------------------------------------------------------------------- the server


def test_infer_returns_doubled_values(doubler_server):
    x = np.random.default_rng(7).normal(size=(3, 4)).astype(np.float32)
    y = _double(doubler_server.grpc_address, x)
    # an empty output is what a misconfigured Python backend stub returns
    assert y.shape == x.shape
    np.testing.assert_array_equal(y, 2 * x)


def test_server_reports_models_ready(doubler_server):
    assert doubler_server.is_running()
    assert doubler_server.ready_models() == ["doubler"]


def test_server_listens_on_localhost_only(doubler_server):
    expected = {("127.0.0.1", port) for port in doubler_server.ports.values()}
    assert _listening_sockets(doubler_server.pid) == expected
    assert doubler_server.metrics_url == f"http://127.0.0.1:{doubler_server.ports['metrics']}/metrics"


def test_instances_override_reaches_served_config(doubler_server, doubler_repository):
    client = grpcclient.InferenceServerClient(doubler_server.grpc_address)
    try:
        groups = client.get_model_config("doubler").config.instance_group
    finally:
        client.close()
    assert [group.count for group in groups] == [2]
    # the user's repository is untouched: the override lives in a temporary copy
    assert (doubler_repository / "doubler" / "config.pbtxt").read_text() == DOUBLER_CONFIG
    assert doubler_server.served_repository != doubler_repository


def test_log_goes_to_file(doubler_server):
    assert doubler_server.log_path.is_file()
    assert f"Started GRPCInferenceService at {doubler_server.grpc_address}" in doubler_server.log_tail(200)


def test_stop_leaves_nothing_behind(doubler_repository):
    server = LocalTritonServer(doubler_repository, models=["doubler"], instances=1)
    with server:
        _track(server)
        pid, served, log = server.pid, server.served_repository, server.log_path
        assert _group_members(pid)  # the server and its stub
        np.testing.assert_array_equal(_double(server.grpc_address, np.ones((1, 4), np.float32)), 2.0)
    assert not server.is_running() and server.pid is None
    assert _group_members(pid) == []
    assert not served.exists() and not log.exists()
    server.stop()  # idempotent


def test_broken_config_is_refused_before_launch(tmp_path):
    _write_doubler(tmp_path)
    (tmp_path / "doubler" / "config.pbtxt").write_text('name: "doubler" backend: "python" input [ {')
    server = LocalTritonServer(tmp_path, work_dir=tmp_path / "work")
    with pytest.raises(TritonServerError, match="invalid model configuration") as info:
        server.start(timeout=30)
    assert isinstance(info.value, ExternalFailure)
    message = str(info.value)
    # one line naming the broken file (read by the repository translation, before any process)
    assert "\n" not in message and str(tmp_path / "doubler" / "config.pbtxt") in message
    assert server.pid is None and not server.is_running()


def test_explicit_busy_port_is_an_error_naming_it(empty_repository):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = LocalTritonServer(empty_repository, grpc_port=port)
        with pytest.raises(TritonServerError, match=f"grpc_port={port} is already in use"):
            server.start()
    assert server.pid is None


def test_automatic_ports_taken_meanwhile_are_chosen_again(empty_repository, monkeypatch):
    real_free_ports, calls = _server._free_ports, []
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]

        def first_one_taken(count):
            calls.append(count)
            ports = real_free_ports(count)
            return [port, *ports[1:]] if len(calls) == 1 else ports

        monkeypatch.setattr(_server, "_free_ports", first_one_taken)
        with LocalTritonServer(empty_repository) as server:
            _track(server)
            assert len(calls) == 2
            assert server.ports["grpc"] != port
            assert server.ready_models() == []


def test_server_survives_its_thread_and_dies_with_its_process(empty_repository):
    """The server outlives the thread that started it (trio's worker threads come and go)
    and is gone within seconds once its process is SIGKILLed (its watchdog, no atexit)."""
    script = textwrap.dedent(
        f"""
        import os, signal, threading, time
        from framework.serving import LocalTritonServer
        from framework.serving._server import query_ready_models
        server = LocalTritonServer({str(empty_repository)!r})
        worker = threading.Thread(target=server.start)
        worker.start()
        worker.join()
        # A server tied to the dead thread (PR_SET_PDEATHSIG) would have had its SIGTERM
        # and turn unready; this one answers ready at every check for 2 s.
        ready = all(query_ready_models(server.grpc_address) is not None and not time.sleep(0.1) for _ in range(20))
        print(server.pid, ready, server.log_path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # no atexit, no stop(): only the watchdog remains
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-c", script]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == -signal.SIGKILL, result.stderr
    pid, ready, log = result.stdout.split()
    _started_pids.append(int(pid))
    pathlib.Path(log).unlink()  # nobody stopped that server to delete it
    assert ready == "True"
    deadline = time.monotonic() + 5
    while _group_members(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_is_tritonserver(int(pid))
    assert _group_members(int(pid)) == []  # nor its watchdog


def test_servers_and_benchmark_jobs_start_without_a_python_fork(doubler_repository, empty_repository):
    """With a live gRPC stream in the process, starting a server (LocalTritonServer) or a
    benchmark job (``start_pinned``) runs no at-fork handler: no fork() that could hang
    in gRPC's fork handlers; CPython's vfork path runs none."""
    script = textwrap.dedent(
        f"""
        import os, queue, subprocess, sys
        forks = []
        os.register_at_fork(before=lambda: forks.append(1))
        child = os.fork()  # the counter counts (no gRPC in this process yet)
        if child == 0:
            os._exit(0)
        os.waitpid(child, 0)
        counted, forks[:] = len(forks), []

        import numpy as np
        import tritonclient.grpc as grpcclient
        from framework.bench._children import start_pinned
        from framework.serving import LocalTritonServer

        def double(client, results):
            x = grpcclient.InferInput("x", [1, 4], "FP32")
            x.set_data_from_numpy(np.ones((1, 4), np.float32))
            client.async_stream_infer("doubler", [x])
            result, error = results.get(timeout=30)
            assert error is None and result.as_numpy("y").tolist() == [[2.0] * 4], error

        core = max(os.sched_getaffinity(0))
        with LocalTritonServer({str(doubler_repository)!r}) as first:
            client = grpcclient.InferenceServerClient(first.grpc_address)
            results = queue.Queue()
            client.start_stream(callback=lambda result, error: results.put((result, error)))
            double(client, results)  # the stream is live
            with LocalTritonServer({str(empty_repository)!r}) as second:
                job = start_pinned(
                    [sys.executable, "-c", "import os; print(*os.sched_getaffinity(0))"],
                    core,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                affinity = job.communicate(timeout=30)[0].split()
                double(client, results)  # still live
                pids = (first.pid, second.pid)
            client.stop_stream()
            client.close()
        print(counted, len(forks), affinity == [str(core)], *pids)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    counted, forks, pinned, *pids = result.stdout.split()
    _started_pids.extend(map(int, pids))
    assert (counted, forks, pinned) == ("1", "0", "True")


@pytest.mark.parametrize(
    ("kwargs", "culprit"),
    [
        ({"device": "gpu"}, "device='gpu'"),
        ({"instances": -1}, "instances=-1"),
        ({"models": ["nope"]}, "model 'nope' is not in"),
    ],
)
def test_invalid_arguments(doubler_repository, kwargs, culprit):
    with pytest.raises(ConfigurationError, match=culprit):
        LocalTritonServer(doubler_repository, **kwargs)


def test_missing_repository(tmp_path):
    with pytest.raises(ConfigurationError, match="not a folder"):
        LocalTritonServer(tmp_path / "missing")


def test_model_repository_models(doubler_repository, tmp_path):
    (tmp_path / "not_a_model").mkdir()
    _write_doubler(tmp_path)
    assert model_repository_models(tmp_path) == ["doubler"]
    assert model_repository_models(tmp_path / "missing") == []


def test_backend_directory_is_idempotent(tmp_path):
    first = prepare_backend_directory(tmp_path)
    assert prepare_backend_directory(tmp_path) == first
    links = sorted(p.name for p in (first / "python").iterdir())
    assert links == ["libtriton_python.so", "triton_python_backend_stub", "triton_python_backend_utils.py"]
    assert all((first / "python" / name).resolve().is_file() for name in links)


def test_server_environment():
    env = server_environment()
    assert env["PATH"].split(os.pathsep)[0] == str(pathlib.Path(sys.prefix) / "bin")
    assert any(part.endswith("nvidia_pytriton.libs") for part in env["LD_LIBRARY_PATH"].split(os.pathsep))


# ---------------------------------------------------------------------------- cmstriton


def test_cmstriton_round_trip(doubler_repository, tmp_path, capsys):
    state_dir = tmp_path / "state"
    args = ["--dir", str(state_dir)]
    assert cmstriton(["stop", *args]) == 0
    assert "no server running" in capsys.readouterr().out

    assert cmstriton(["start", "--repository", str(doubler_repository), "--instances", "1", *args]) == 0
    state = json.loads((state_dir / "state.json").read_text())
    pid = state["pid"]
    _started_pids.append(pid)
    out = capsys.readouterr().out
    assert f"gRPC address: {state['grpc_address']}" in out and "ready models: doubler" in out
    assert f"HTTP address: {state['http_address']}" in out
    assert pid_is_tritonserver(pid)
    np.testing.assert_array_equal(_double(state["grpc_address"], np.full((2, 4), 3, np.float32)), 6.0)

    assert cmstriton(["start", "--repository", str(doubler_repository), *args]) == 1
    assert f"already running from {state_dir} (pid {pid}" in capsys.readouterr().err

    assert cmstriton(["check", *args]) == 0
    assert "ready models: doubler" in capsys.readouterr().out

    assert cmstriton(["stop", *args]) == 0
    assert f"stopped tritonserver pid {pid}" in capsys.readouterr().out
    assert not pid_is_tritonserver(pid)
    assert not (state_dir / "tritonserver.pid").exists() and not (state_dir / "work").exists()

    assert cmstriton(["check", *args]) == 1
    assert "no server was started" in capsys.readouterr().err


def _kill(pid: int) -> None:
    """SIGKILL ``pid``, as the out-of-memory killer would, and wait until it is dead."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid_is_tritonserver(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_killed_cmstriton_server_leaves_nothing_behind(doubler_repository, tmp_path, capsys, left_behind):
    """A killed server's stubs outlive it (see _processes): check names them, stop removes
    them, and so does a start after another kill; the listings of processes and /dev/shm
    show nothing of any of these servers afterwards."""
    args = ["--dir", str(tmp_path / "state")]
    start = ["start", "--repository", str(doubler_repository), "--instances", "2", *args]

    def start_and_kill() -> str:
        assert cmstriton(start) == 0
        state = json.loads((tmp_path / "state" / "state.json").read_text())
        _started_pids.append(state["pid"])
        processes, regions = left_behind(state["region_prefix"])
        assert len(processes) == 3 and len(regions) == 2  # the server and a stub per instance, a region each
        _kill(state["pid"])
        stubs, _ = left_behind(state["region_prefix"])
        assert len(stubs) == 2 and all("triton_python_backend_stub" in p for p in stubs)
        capsys.readouterr()
        return state["region_prefix"]

    prefix = start_and_kill()
    assert cmstriton(["check", *args]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert "is not running" in err and "it left 2 Python-backend stub processes" in err
    assert all(name in err for name in left_behind(prefix)[1])
    assert cmstriton(["stop", *args]) == 0
    assert "was not running; removed 2 Python-backend stub processes" in capsys.readouterr().out
    assert left_behind(prefix) == ([], [])

    prefix = start_and_kill()
    assert cmstriton(start) == 0  # after removing what the dead one left
    assert "removed 2 Python-backend stub processes" in capsys.readouterr().out
    assert left_behind(prefix) == ([], [])
    running = json.loads((tmp_path / "state" / "state.json").read_text())
    _started_pids.append(running["pid"])
    assert cmstriton(["stop", *args]) == 0
    assert left_behind(running["region_prefix"]) == ([], [])


def test_region_prefix_carries_the_tag(empty_repository, monkeypatch):
    monkeypatch.setenv("PYSONIC_SHM_TAG", "job42.a_b")
    prefix = LocalTritonServer(empty_repository).region_prefix
    assert prefix.startswith("triton_python_backend_shm_region_pysonic-job42.a_b-")
    assert prefix != LocalTritonServer(empty_repository).region_prefix  # one per server
    monkeypatch.setenv("PYSONIC_SHM_TAG", "a,b=c")
    with pytest.raises(ConfigurationError, match=r"PYSONIC_SHM_TAG='a,b=c': use 1 to 32 letters"):
        LocalTritonServer(empty_repository)


def test_cmstriton_start_failure_prints_log_tail(tmp_path, capsys):
    (tmp_path / "repo" / "bad" / "1").mkdir(parents=True)
    (tmp_path / "repo" / "bad" / "config.pbtxt").write_text(
        'name: "bad"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [1] }]\noutput [{ name: "y" data_type: TYPE_FP32 dims: [1] }]\n'
    )
    (tmp_path / "repo" / "bad" / "1" / "model.py").write_text(
        "class TritonPythonModel:\n    def initialize(self, args):\n        raise RuntimeError('boom in initialize')\n"
    )
    args = ["--repository", str(tmp_path / "repo"), "--dir", str(tmp_path / "state"), "--wait", "30"]
    assert cmstriton(["start", *args]) == 1
    err = capsys.readouterr().err
    assert "exited with code" in err and "boom in initialize" in err
    assert not (tmp_path / "state").exists(), "the failed start left the state folder it made"


def test_cmstriton_bad_config_is_one_line(tmp_path, capsys):
    (tmp_path / "repo" / "bad").mkdir(parents=True)
    (tmp_path / "repo" / "bad" / "config.pbtxt").write_text("this is not a model config")
    args = ["--repository", str(tmp_path / "repo"), "--dir", str(tmp_path / "state"), "--wait", "30"]
    assert cmstriton(["start", *args]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid model configuration" in err and "bad/config.pbtxt" in err
    assert not (tmp_path / "state").exists(), "the failed start left the state folder it made"


# ---------------------------------------------------------------------------- installation


def _fake_pytriton(monkeypatch, root: pathlib.Path, stub_versions: list[str]) -> None:
    """Make ``find_spec("pytriton")`` find a fake package with stubs for ``stub_versions``."""
    package = root / "pytriton"
    (package / "tritonserver" / "bin").mkdir(parents=True)
    (package / "tritonserver" / "bin" / "tritonserver").touch()
    for version in stub_versions:
        (package / "tritonserver" / "python_backend_stubs" / version).mkdir(parents=True)
    spec = importlib.machinery.ModuleSpec("pytriton", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    monkeypatch.setattr(_installation, "find_spec", lambda name: spec)


def test_no_stub_for_this_python(tmp_path, monkeypatch):
    _fake_pytriton(monkeypatch, tmp_path, ["3.8", "3.9"])
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    expected = rf"no Python backend stub for Python {version} \(it has: 3.8, 3.9\)"
    with pytest.raises(TritonServerError, match=expected):
        find_tritonserver()


def test_no_pytriton(monkeypatch):
    monkeypatch.setattr(_installation, "find_spec", lambda name: None)
    with pytest.raises(TritonServerError, match="nvidia-pytriton is not installed"):
        find_tritonserver()


def test_default_model_repository(monkeypatch, tmp_path):
    monkeypatch.delenv("PYSONIC_MODEL_REPOSITORY", raising=False)
    assert default_model_repository() == REPO_ROOT / "data" / "models"
    monkeypatch.setenv("PYSONIC_MODEL_REPOSITORY", str(tmp_path))
    assert default_model_repository() == tmp_path
