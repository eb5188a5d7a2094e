"""Hosts simulated on one machine: a Dask cluster across "hosts" for the tests and ``cmsbench scale``.

Each :class:`SimulatedHost` is a UTS and mount namespace of its own (``unshare -u -m
--propagation private``; root only): its own host name, a private tmpfs on ``/dev/shm``
and on ``/tmp`` (with the folders under ``/tmp`` that every host must see bound back into
it through open descriptors, since the new ``/tmp`` hides their paths: the shared folder,
the cluster's shared file system, and the checkout and virtualenv the workers run from,
when they lie there: :func:`kept_folders`), and a Dask worker
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

__all__ = ["SimulatedHost", "kept_folders", "namespaces_missing", "simulated_cluster", "worker_pids"]

START_TIMEOUT = 90.0  # seconds for the hosts' workers to join the scheduler (a loaded machine)
CLOSE_TIMEOUT = 30.0  # seconds for a worker to close (its nanny's plugins' teardown) after SIGTERM

# The anchor of a host: names it, gives it its own /dev/shm and /tmp, binds the kept folders
# back into the new /tmp (each from a descriptor opened before: mount must not resolve the
# path again, the new /tmp hides it), waits. {open}, {bind}: per kept folder, from _anchor().
ANCHOR = """
set -e
hostname "$PYSONIC_HOST"
mount -t tmpfs -o size=1g pysonic-shm /dev/shm
{open}
mount -t tmpfs pysonic-tmp /tmp
{bind}
echo ready
exec sleep 86400
"""
TMP = pathlib.Path("/tmp")


def kept_folders(*folders: pathlib.Path) -> list[pathlib.Path]:
    """The folders under ``/tmp`` a host must still see: ``folders`` (the shared one), this
    checkout and this Python's environment (``sys.prefix``: a virtualenv), resolved;
    without those nested in another. Folders elsewhere need no binding."""
    candidates = [*folders, pathlib.Path(__file__).resolve().parents[2], pathlib.Path(sys.prefix)]
    under = sorted({p for p in (c.resolve() for c in candidates) if p != TMP and p.is_relative_to(TMP)})
    kept: list[pathlib.Path] = []
    for path in under:  # sorted: a folder comes before what it holds
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return kept


def _anchor(kept: list[pathlib.Path]) -> tuple[str, dict[str, str]]:
    """The anchor's script and environment for ``kept`` (paths go through the environment:
    no quoting of user paths in the script)."""
    env = {f"PYSONIC_KEEP_{i}": str(path) for i, path in enumerate(kept)}
    fd = [i + 3 for i in range(len(kept))]
    opened = "\n".join(f'exec {fd[i]}< "$PYSONIC_KEEP_{i}"' for i in range(len(kept)))
    bind = "\n".join(
        f'mkdir -p "$PYSONIC_KEEP_{i}"\n'
        f'mount --no-canonicalize --bind /proc/self/fd/{fd[i]} "$PYSONIC_KEEP_{i}"\n'
        f"exec {fd[i]}<&-"
        for i in range(len(kept))
    )
    return ANCHOR.format(open=opened, bind=bind), env


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
        keep: more folders every host sees at the same path (the checkout and virtualenv
            are kept anyway: ``kept_folders``).

    Raises:
        RuntimeError: the namespaces could not be made (the anchor's error line).
    """

    def __init__(
        self,
        index: int,
        shared: pathlib.Path,
        environment: dict[str, str] | None = None,
        keep: tuple[pathlib.Path, ...] = (),
    ) -> None:
        self.name = f"pysonic-host{index}"
        self.address = f"127.0.0.{index + 1}"
        self.environment = dict(environment or {})
        self.kept = kept_folders(shared, *keep)
        script, keep_env = _anchor(self.kept)
        env = {**os.environ, **keep_env, "PYSONIC_HOST": self.name}
        self.anchor = subprocess.Popen(
            ["unshare", "-u", "-m", "--propagation", "private", "sh", "-c", script],
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
        own semaphores live as long as its worker), not the folders bound into its /tmp."""
        bound = {f"tmp/{p.relative_to(TMP).parts[0]}" for p in self.kept}
        return sorted(
            name
            for folder in ("dev/shm", "tmp")
            for p in (self.root / folder).iterdir()
            if p.name.startswith("pysonic") and (name := f"{folder}/{p.name}") not in bound
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
