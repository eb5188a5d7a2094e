"""``cmsrun --executor dask`` across hosts, simulated faithfully on this machine.

Each "host" is a UTS and mount namespace of its own (``unshare -u -m --propagation
private``, as root): its own host name, a private tmpfs on ``/dev/shm`` and on ``/tmp``
(the run's shared folder, pytest's base temp, is bound back into it: the cluster's shared
file system; so are the checkout and its virtualenv when they lie under ``/tmp``), and one
Dask worker (with its nanny) bound to its own ``127.0.0.N``
(``framework/cmsrun/executor/_hosts.py``, which ``cmsbench scale`` uses too). The scheduler and
cmsrun run here, on 127.0.0.1; all traffic is over loopback. The test reads a host's
``/tmp`` and ``/dev/shm`` through ``/proc/<anchor>/root`` and starts processes there with
``nsenter``.

One cluster of 2 hosts is shared by the module's tests (few events each: the suite's time
budget). The real tritonserver, real NanoAOD files, real Dask. Skipped, with the reason,
where namespaces cannot be made (not root, no ``unshare``).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import uuid

import awkward as ak
import pytest
import uproot

from framework.cmsrun import main as cmsrun_main
from framework.cmsrun.executor import namespaces_missing, simulated_cluster
from framework.cmsrun.executor._hosts import START_TIMEOUT, SimulatedHost

from support import kill_once_module, local_sample

distributed = pytest.importorskip("distributed")

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCALE_CFG = ROOT / "framework" / "bench" / "configs" / "scale_cfg.py"
ID = ["run", "luminosityBlock", "event"]
HOSTS = 2


def processes_with(marker: str) -> list[str]:
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker.encode() in (proc / "environ").read_bytes():
                    args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                    found.append(f"{proc.name} {args}")
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """A scheduler on 127.0.0.1 and 2 hosts with one worker each: (scheduler address, hosts)."""
    reason = namespaces_missing()
    if reason:
        pytest.skip(reason)
    marker = f"PYSONIC_TEST_RUN={uuid.uuid4().hex}"
    key, value = marker.split("=")
    with simulated_cluster(HOSTS, tmp_path_factory.getbasetemp(), {key: value}) as cluster:
        yield cluster
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker) == []  # no worker, nanny or server left


def test_a_host_keeps_the_folders_under_tmp_it_needs(tmp_path):
    """A host's /tmp is its own, but a folder under /tmp that it is given (as the checkout
    and virtualenv are when they lie there: a clone in /tmp) stays visible at its path, and
    is not taken for a leftover of pysonic's; the host's Python imports this checkout."""
    reason = namespaces_missing()
    if reason:
        pytest.skip(reason)
    kept = pathlib.Path("/tmp") / f"pysonic-kept-{uuid.uuid4().hex}"
    hidden = pathlib.Path("/tmp") / f"pysonic-hidden-{uuid.uuid4().hex}"
    (kept / "inner").mkdir(parents=True)
    (kept / "inner" / "file.txt").write_text("seen")
    hidden.write_text("this machine's /tmp only")
    host = SimulatedHost(1, tmp_path, keep=(kept / "inner",))
    try:
        assert kept / "inner" in host.kept
        assert (host.root / kept.relative_to("/") / "inner" / "file.txt").read_text() == "seen"
        assert not (host.root / hidden.relative_to("/")).exists()  # the rest of /tmp is not the host's
        assert host.leftovers() == []
        probe = host.popen(
            [sys.executable, "-c", "import framework, os; print(framework.__file__, os.uname().nodename)"],
            stdout=subprocess.PIPE,
            text=True,
        )
        out, _ = probe.communicate(timeout=120)
        assert probe.returncode == 0
        assert out.split() == [str(ROOT / "framework" / "__init__.py"), host.name]
    finally:
        host.close()
        shutil.rmtree(kept)
        hidden.unlink()


@pytest.fixture(scope="module")
def tiny_repository(tmp_path_factory):
    from framework.serving.testing import write_tiny_repository

    return write_tiny_repository(tmp_path_factory.mktemp("repository"))


def wait_for_workers(scheduler: str) -> dict[str, dict]:
    """The workers, once all hosts' are up (a SIGKILLed worker is restarted by its nanny)."""
    with distributed.Client(scheduler, timeout=60) as client:
        client.wait_for_workers(HOSTS, timeout=START_TIMEOUT)
        return client.scheduler_info(n_workers=-1)["workers"]


def run_cmsrun(
    folder: pathlib.Path, scheduler: str, fileset: dict[str, list[str]], *args: str, config: pathlib.Path = SCALE_CFG
) -> dict:
    """cmsrun of ``config`` (scale_cfg) over ``fileset`` on the cluster (in ``folder``); its summary."""
    folder.mkdir(exist_ok=True)
    (folder / "fileset.json").write_text(json.dumps(fileset))
    argv = [str(config), "cpuTime=1", *args, "--dataset", str(folder / "fileset.json"), "--chunk-size", "10"]
    argv += ["--executor", "dask", "--scheduler", scheduler, "--summary-json", "summary.json", "--no-progress"]
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        assert cmsrun_main(argv) == 0
    finally:
        os.chdir(cwd)
    return json.loads((folder / "summary.json").read_text())


def assert_every_event_once(path: pathlib.Path, events: int) -> ak.Array:
    with uproot.open(path) as f:
        out = f["Events"].arrays(library="ak")
    ids = list(zip(*(out[b].to_list() for b in ID), strict=True))
    assert len(ids) == len(set(ids)) == events
    assert ak.all(out.tiny == ak.values_astype(out.event, "float32"))  # every event's request answered
    return out


def assert_hosts_clean(hosts: list[SimulatedHost]) -> None:
    """Nothing of pysonic on any host once the run is over: no region, state file or log."""
    deadline = time.monotonic() + 10
    while any(h.leftovers() for h in hosts) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert {h.name: h.leftovers() for h in hosts} == {h.name: [] for h in hosts}


SERVE = """
import sys
from framework.serving import LocalTritonServer

server = LocalTritonServer(sys.argv[1], host=sys.argv[2]).start(120)
print(server.grpc_address, flush=True)
sys.stdin.read()  # until the test closes our stdin
server.stop()
"""


def transport_on_worker(address: str, config: str, width: int) -> dict:
    """On a worker: one request of ``width`` float32 to the ``tiny`` model at ``address``;
    how its tensors travelled, and whether it probed and what it decided."""
    import numpy as np
    import trio

    from framework.sonic import ServerInfo, TritonClient, _shm, client_description

    params = {"modelName": "tiny", "modelConfigPath": config, "timeout": 30, "mode": "Async"}
    client = TritonClient(client_description().validate(params, "Client"), debug_name="multihost")
    client.connect(ServerInfo("hostOne", address))
    x = np.arange(width, dtype=np.float32).reshape(1, width)

    async def infer():
        request = client.new_request(0)
        request.input["x"].to_server(x)
        await request.infer()
        return request.output["y"].from_server()

    try:
        y = trio.run(infer)
        transport = client.transport
        return {
            "host": os.uname().nodename,
            "echoed": bool(np.array_equal(y, x)),
            "shm_calls": transport.shm_calls,
            "payload_calls": transport.payload_calls,
            "refused_at_a_call": sorted(transport._refused),  # the old way: a failed registration
            "maps_our_shm": _shm._shares.get(address),
        }
    finally:
        client.close()


def test_shared_memory_only_where_client_and_server_share_dev_shm(hosts, tiny_repository):
    """A server on host 1 (listening on 127.0.0.2, a loopback address for every host): the
    client on host 1 uses shared memory, the one on host 2 payloads, decided by a probe
    region (not by a failed call's registration, not by the address)."""
    import cloudpickle  # type: ignore[import-untyped]

    from framework.sonic._transport import SHM_MIN_BYTES

    scheduler, made = hosts
    server = made[0].popen(
        [sys.executable, "-c", SERVE, str(tiny_repository), made[0].address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        address = server.stdout.readline().strip()
        assert address.startswith(made[0].address + ":"), address
        wait_for_workers(scheduler)
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        with distributed.Client(scheduler, timeout=60) as client:
            config = str(tiny_repository / "tiny" / "config.pbtxt")
            found = client.run(transport_on_worker, address, config, 2 * SHM_MIN_BYTES // 4)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        server.stdin.close()
        server.wait(60)
    by_host = {r["host"]: r for r in found.values()}
    assert set(by_host) == {h.name for h in made} and all(r["echoed"] for r in found.values())
    same, other = by_host[made[0].name], by_host[made[1].name]
    assert (same["shm_calls"], same["payload_calls"], same["maps_our_shm"]) == (1, 0, True)
    assert (other["shm_calls"], other["payload_calls"], other["maps_our_shm"]) == (0, 1, False)
    assert other["refused_at_a_call"] == []  # decided before the call, not by its failure
    assert_hosts_clean(made)


def test_one_server_per_host_and_every_event_once_when_a_worker_is_killed(hosts, tiny_repository, tmp_path):
    """Each host's workers share one server, listening on the host's address; a worker
    SIGKILLed in the middle of a unit (its 3rd event) is restarted by its nanny, its units
    run again, and the merged output has every event once; nothing is left on any host."""
    scheduler, made = hosts
    wait_for_workers(scheduler)
    marker = tmp_path / "killed"
    killer = f"killer_{uuid.uuid4().hex}"  # a module the workers have not imported yet
    (tmp_path / f"{killer}.py").write_text(kill_once_module(marker, "os.uname().nodename"))
    config = tmp_path / "kill_cfg.py"
    config.write_text(SCALE_CFG.read_text())  # next to the killer module: "file:Class" importable
    files = [local_sample("nano_dy.root")]
    args = ["sonic=1", f"repository={tiny_repository}", f"extra={killer}:KillOnce"]
    summary = run_cmsrun(tmp_path / "run", scheduler, {"K": files}, *args, config=config)
    assert marker.read_text() in {h.name for h in made}  # a worker of a host did die
    assert summary["units"]["retried"] and summary["events"] == 40
    assert_every_event_once(tmp_path / "run" / "scale_K.root", 40)
    assert not list((tmp_path / "run").rglob("*.parts*"))
    # One server per host, on the host's address, kept when a worker of the host died
    # (its nanny owns it); the workers ran on their hosts (the units' host names).
    workers = wait_for_workers(scheduler)
    servers = summary["host_servers"]
    assert set(servers) == set(workers) and len(set(servers.values())) == HOSTS
    assert all(address.rsplit(":", 1)[0] == workers[worker]["host"] for worker, address in servers.items())
    # The workers that ran units are the hosts' (after a kill, the survivor may run them all).
    assert {w["host"] for w in summary["workers"].values()} <= {h.name for h in made}
    models = summary["services"]["TritonService"]["models"]  # Triton's own counters, per host server
    assert len(models) == HOSTS and sum(m["requests"] for m in models.values()) >= 40  # a rerun unit asks again
    assert_hosts_clean(made)


SERVER_KILLER = '''
import json, os, pathlib, signal, tempfile
from framework import EDAnalyzer

MARKER = pathlib.Path({marker!r})


class KillHostServerOnce(EDAnalyzer):
    """On host {host!r}, at its 3rd event, SIGKILLs the host's Triton server, once."""

    def __init__(self, params):
        self.seen = 0

    def analyze(self, event):
        self.seen += 1
        if self.seen == 3 and os.uname().nodename == {host!r} and not MARKER.exists():
            [state] = pathlib.Path(tempfile.gettempdir()).glob("pysonic-triton-*.json")
            pid = json.loads(state.read_text())["pid"]
            MARKER.write_text(str(pid))
            os.kill(pid, signal.SIGKILL)
'''


def test_every_event_once_when_a_hosts_server_is_killed(hosts, tiny_repository, tmp_path):
    """Host 2's server is SIGKILLed in the middle of a unit there (by an analyzer of the
    job, at its 3rd event on that host); the host's workers fail over to their own fallback
    server (``failover=1``: Client.retries); no unit fails, every event once."""
    scheduler, made = hosts
    wait_for_workers(scheduler)
    marker = tmp_path / "server_killed"
    killer = f"server_killer_{uuid.uuid4().hex}"
    (tmp_path / f"{killer}.py").write_text(SERVER_KILLER.format(marker=str(marker), host=made[1].name))
    config = tmp_path / "kill_cfg.py"
    config.write_text(SCALE_CFG.read_text())
    files = [local_sample("nano_dy.root"), local_sample("nano_dimuon.root")]
    args = ["sonic=1", "failover=1", f"repository={tiny_repository}", f"extra={killer}:KillHostServerOnce"]
    summary = run_cmsrun(tmp_path / "run", scheduler, {"K": files}, *args, config=config)
    assert marker.exists()  # host 2's server was killed while its worker ran a unit
    assert not summary["units"]["skipped"] and summary["units"]["done"] == summary["units"]["total"]
    triton = summary["services"]["TritonService"]
    assert triton["servers"]["hostFallback"]["outages"] == 1  # host 2's worker saw it go
    assert triton["servers"]["fallback"]["requests"] > 0 and triton["clients"]["tiny"]["errors"] == 0
    assert_every_event_once(tmp_path / "run" / "scale_K.root", 80)
    assert_hosts_clean(made)


def test_cmsbench_scale_point_across_hosts(hosts, tiny_repository, tmp_path):
    """``cmsbench scale``'s point across hosts, in test mode (a server per host, 20
    events): events/s, the workers' CPU per event, one server per host; the full table
    (1, 2, 4 hosts, server per host vs shared) is the benchmark's, not the suite's."""
    from framework.bench._exp_scale import _fileset, hosts_point

    scheduler, made = hosts
    fileset = _fileset(tmp_path, local_sample("pfnano.root"), 2)
    options = {"cpuTime": 1.0, "sonic": 1, "repository": str(tiny_repository), "streams": 2}
    point = hosts_point(tmp_path, fileset, scheduler, HOSTS, 10, options)
    assert point["events"] == 20 and point["throughput"] > 0 and point["units"] == 2
    assert point["servers"] == HOSTS and 1 <= point["workers"] <= HOSTS
    assert 1.0 <= point["client_cpu_ms"] < 1000.0  # at least the cpuTime burnt per event
    assert_hosts_clean(made)
