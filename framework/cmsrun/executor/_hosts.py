"""Hosts simulated on one machine: a Dask cluster across "hosts" for the tests and ``cmsbench scale``.

Each :class:`SimulatedHost` is a UTS and mount namespace of its own (``unshare -u -m
--propagation private``; root only): its own host name, a private tmpfs on ``/dev/shm``
and on ``/tmp`` (with the shared folder, the cluster's shared file system, bound back into
it through an open descriptor, since the new ``/tmp`` hides its path), and a Dask worker
(with its nanny) bound to its own ``127.0.0.N``. The network namespace is this machine's:
all traffic goes over loopback, and ports are shared by the hosts. A small anchor process
holds a host's namespaces; its files are read through ``/proc/<anchor>/root`` and
processes are started there with ``nsenter``. :func:`simulated_cluster` puts the
scheduler on 127.0.0.1 (this process) and N hosts around it.

What is not simulated: the hosts share this machine's cores, memory and process IDs.
"""

from __future__ import annotations

import logging
import os
import pathlib
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["SimulatedHost", "namespaces_missing", "simulated_cluster", "worker_pids"]

START_TIMEOUT = 90.0  # seconds for the hosts' workers to join the scheduler (a loaded machine)
CLOSE_TIMEOUT = 30.0  # seconds for a worker to close (its nanny's plugins' teardown) after SIGTERM

# The anchor of a host: names it, gives it its own /dev/shm and /tmp, binds the shared folder
# back into the new /tmp (from descriptor 3: mount must not resolve the path again), waits.
ANCHOR = """
set -e
hostname "$PYSONIC_HOST"
mount -t tmpfs -o size=1g pysonic-shm /dev/shm
exec 3< "$PYSONIC_SHARED"
mount -t tmpfs pysonic-tmp /tmp
mkdir -p "$PYSONIC_SHARED"
mount --no-canonicalize --bind /proc/self/fd/3 "$PYSONIC_SHARED"
exec 3<&-
echo ready
exec sleep 86400
"""


def namespaces_missing() -> str:
    """Why hosts cannot be simulated here, in one line ("" if they can)."""
    if os.geteuid() != 0:
        return "simulated hosts need root (unshare -m, mount)"
    for tool in ("unshare", "nsenter", "mount", "hostname"):
        if shutil.which(tool) is None:
            return f"simulated hosts need {tool} (util-linux)"
    probe = subprocess.run(
        ["unshare", "-u", "-m", "--propagation", "private", "sh", "-c", "mount -t tmpfs t /dev/shm && hostname x"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        lines = probe.stderr.strip().splitlines()
        return f"namespaces not permitted here: {lines[-1] if lines else f'exit {probe.returncode}'}"
    return ""


class SimulatedHost:
    """One simulated host: its anchor process (the namespaces), name, address and worker.

    Args:
        index: 1, 2, ...: the host is ``pysonic-host<index>`` at ``127.0.0.<index + 1>``.
        shared: the folder every host sees at the same path (outputs, configs, inputs).
        environment: more environment variables for its processes (a marker to find them).

    Raises:
        RuntimeError: the namespaces could not be made (the anchor's error line).
    """

    def __init__(self, index: int, shared: pathlib.Path, environment: dict[str, str] | None = None) -> None:
        self.name = f"pysonic-host{index}"
        self.address = f"127.0.0.{index + 1}"
        self.environment = dict(environment or {})
        env = {**os.environ, "PYSONIC_HOST": self.name, "PYSONIC_SHARED": str(shared)}
        self.anchor = subprocess.Popen(
            ["unshare", "-u", "-m", "--propagation", "private", "sh", "-c", ANCHOR],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.anchor.stdout is not None and self.anchor.stderr is not None
        if self.anchor.stdout.readline().strip() != "ready":
            self.anchor.wait(10)
            lines = self.anchor.stderr.read().strip().splitlines()
            raise RuntimeError(f"{self.name}: {lines[-1] if lines else 'no namespaces'}")
        self.worker: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> pathlib.Path:
        """The host's file system as its processes see it (its /tmp, its /dev/shm)."""
        return pathlib.Path(f"/proc/{self.anchor.pid}/root")

    def popen(self, args: list[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """A process on this host (its namespaces; this environment plus the host's)."""
        env = {**os.environ, **self.environment, **kwargs.pop("env", {})}
        return subprocess.Popen(["nsenter", "-t", str(self.anchor.pid), "-u", "-m", "--", *args], env=env, **kwargs)

    def start_worker(self, scheduler: str, threads: int = 1) -> None:
        """``dask worker`` (one process, with its nanny) on the host's address."""
        command = [sys.executable, "-m", "distributed.cli.dask_worker", scheduler, "--host", self.address]
        command += ["--name", self.name, "--nworkers", "1", "--nthreads", str(threads), "--no-dashboard"]
        command += ["--death-timeout", "60"]
        self.worker = self.popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def leftovers(self) -> list[str]:
        """pysonic's files in the host's /tmp and /dev/shm (regions, state files, logs; Dask's
        own semaphores live as long as its worker)."""
        return sorted(
            f"{folder}/{p.name}"
            for folder in ("dev/shm", "tmp")
            for p in (self.root / folder).iterdir()
            if p.name.startswith("pysonic")
        )

    def close(self) -> None:
        """Stop the worker (SIGTERM: the nanny closes, its plugins' teardown runs) and the anchor."""
        if self.worker is not None and self.worker.poll() is None:
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(CLOSE_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait(10)
        self.anchor.kill()
        self.anchor.wait(10)


@contextmanager
def simulated_cluster(
    hosts: int, shared: pathlib.Path, environment: dict[str, str] | None = None, threads: int = 1
) -> Iterator[tuple[str, list[SimulatedHost]]]:
    """A Dask scheduler on 127.0.0.1 (in this process) and ``hosts`` simulated hosts with one
    worker each, all joined: yields (the scheduler's address, the hosts). Closed after.

    Raises:
        RuntimeError: namespaces are not permitted (:func:`namespaces_missing`'s line).
        TimeoutError: the workers did not all join within ``START_TIMEOUT`` seconds.
    """
    from distributed import Client, LocalCluster

    reason = namespaces_missing()
    if reason:
        raise RuntimeError(reason)
    made: list[SimulatedHost] = []
    with LocalCluster(
        n_workers=0, host="127.0.0.1", dashboard_address=":0", processes=True, silence_logs=logging.ERROR
    ) as cluster:
        try:
            for index in range(1, hosts + 1):
                made.append(SimulatedHost(index, shared, environment))
                made[-1].start_worker(cluster.scheduler_address, threads)
            with Client(cluster.scheduler_address, timeout=60) as client:
                client.wait_for_workers(hosts, timeout=START_TIMEOUT)
            yield cluster.scheduler_address, made
        finally:
            for host in made:
                host.close()


def worker_pids(scheduler: str, count: int) -> dict[str, int]:
    """Worker address -> its process ID, once ``count`` workers are up (a SIGKILLed worker
    is restarted by its nanny: wait for it)."""
    from distributed import Client

    with Client(scheduler, timeout=60) as client:
        client.wait_for_workers(count, timeout=START_TIMEOUT)
        return {address: int(pid) for address, pid in client.run(os.getpid).items()}
