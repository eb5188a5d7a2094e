"""The benchmarks' child processes: a ``cmsrun`` job (or another command) run and its summary read, written once.

Every experiment that measures a whole job runs it as a child process, as a user would:
``python -m framework.cmsrun CONFIG name=value ... --no-progress --summary-json FILE``,
with the repository on ``PYTHONPATH``, stdin and stdout closed, stderr kept in a file for
the error message. Its CPU comes from the OS (``os.wait4``: user + system of all its
threads, this child's and nothing else's), its wall time from the start to its exit.

No Python code runs between fork and exec (no pre-exec callback: it would force a fork()
that runs at-fork handlers, which can hang under live gRPC threads); a child
is pinned to a core after its start (:func:`start_pinned`). Every wait has a deadline;
a child past it is killed and reaped, and none is left running when a caller fails.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ._harness import REPO, config_args

POLL = 0.01  # seconds between two os.wait4(WNOHANG) of a running child


def child_env() -> dict[str, str]:
    """This process's environment with the repository first on ``PYTHONPATH`` (the
    benchmarks' configs import ``framework`` and ``modules`` from it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def cmsrun_command(
    config: pathlib.Path,
    options: Mapping[str, Any] | None = None,
    *,
    summary: pathlib.Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command of a ``cmsrun`` child: ``config`` with its VarParsing ``options``
    (:func:`~framework.bench._harness.config_args`), then ``extra`` flags, no progress bar,
    and ``--summary-json summary`` when given."""
    command = [sys.executable, "-m", "framework.cmsrun", str(config), *config_args(**(options or {})), *extra]
    return [*command, "--no-progress", *(["--summary-json", str(summary)] if summary else [])]


def start_pinned(command: Sequence[str], core: int, **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """Popen ``command`` and pin it to ``core``.

    No Python code runs between fork and exec (CPython's vfork path: a pre-exec callback
    would force a fork() that runs at-fork handlers, which can hang under live gRPC
    threads). The process is pinned after its start, every thread it already
    has (``/proc/<pid>/task``; the threads it starts later inherit the affinity).
    """
    process = subprocess.Popen(command, close_fds=True, **popen_kwargs)
    try:
        threads = [int(t) for t in os.listdir(f"/proc/{process.pid}/task")]
    except FileNotFoundError:  # gone already: nothing to pin
        threads = []
    for thread in threads:
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(thread, {core})
    return process


@dataclasses.dataclass
class Child:
    """A started child: its process, where its stderr goes, what it is (for messages)."""

    process: subprocess.Popen[Any]
    stderr: pathlib.Path
    what: str
    started: float  # time.perf_counter() at the start

    def stderr_tail(self) -> str:
        """The end of its stderr, on one line."""
        return " | ".join(self.stderr.read_text(errors="replace").strip()[-800:].splitlines())

    def kill(self) -> None:
        """Kill and reap it if it still runs (a caller's failure leaves no child behind)."""
        if self.process.returncode is None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def start_child(
    command: Sequence[str], folder: pathlib.Path, what: str, *, stderr: pathlib.Path, core: int | None = None
) -> Child:
    """Start ``command`` in ``folder`` (stdin and stdout closed, stderr into ``stderr``,
    :func:`child_env`), pinned to ``core`` if given."""
    kwargs: dict[str, Any] = dict(cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=child_env())
    with stderr.open("wb") as err:
        start = time.perf_counter()
        if core is None:
            process = subprocess.Popen(command, stderr=err, **kwargs)
        else:
            process = start_pinned(command, core, stderr=err, **kwargs)
    return Child(process, stderr, what, start)


def wait_child(child: Child, deadline: float) -> tuple[float, float]:
    """Wait for ``child`` until ``deadline`` (``time.monotonic()``); its (CPU seconds: user +
    system of all its threads, wall seconds since its start).

    Raises:
        RuntimeError: it exited with a non-zero status (with the end of its stderr), or ran
            past the deadline (then it is killed).
    """
    process = child.process
    while True:  # os.wait4: this child's own resource usage, nothing else's
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            process.kill()
            os.wait4(process.pid, 0)
            process.returncode = -9
            raise RuntimeError(f"{child.what} ran past its deadline")
        time.sleep(POLL)
    wall = time.perf_counter() - child.started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{child.what} failed ({process.returncode}): {child.stderr_tail()}")
    return usage.ru_utime + usage.ru_stime, wall


def run_child(
    command: Sequence[str], folder: pathlib.Path, what: str, timeout: float = 900.0, core: int | None = None
) -> tuple[float, float]:
    """Run ``command`` in ``folder`` (stderr in ``folder/stderr.txt``, pinned to ``core`` if
    given); its (CPU, wall) seconds.

    Raises:
        RuntimeError: see :func:`wait_child`.
    """
    child = start_child(command, folder, what, stderr=folder / "stderr.txt", core=core)
    try:
        return wait_child(child, time.monotonic() + timeout)
    finally:
        child.kill()


def read_summary(child: Child, summary: pathlib.Path, cpu: float, wall: float) -> dict[str, Any]:
    """A finished job's ``--summary-json`` with its ``cpu_s`` and ``wall_s`` added."""
    return {**json.loads(summary.read_text()), "cpu_s": cpu, "wall_s": wall}


def run_cmsrun(
    config: pathlib.Path,
    options: Mapping[str, Any],
    folder: pathlib.Path,
    what: str,
    *,
    summary: pathlib.Path,
    timeout: float = 900.0,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """Run one ``cmsrun`` child (:func:`cmsrun_command`) in ``folder`` and read its summary
    (:func:`read_summary`: ``cpu_s``, ``wall_s`` added).

    Raises:
        RuntimeError: see :func:`wait_child`.
    """
    child = start_child(
        cmsrun_command(config, options, summary=summary, extra=extra), folder, what, stderr=summary.with_suffix(".err")
    )
    try:
        return read_summary(child, summary, *wait_child(child, time.monotonic() + timeout))
    finally:
        child.kill()


def run_cmsruns_together(
    config: pathlib.Path,
    options: Mapping[str, Any],
    n: int,
    folder: pathlib.Path,
    what: str,
    *,
    timeout: float,
    cores: Sequence[int] = (),
) -> list[dict[str, Any]]:
    """``n`` ``cmsrun`` children of ``config`` started together: each waits at the config's
    start barrier (its ``barrier`` option: it writes ``ready.<pid>`` and waits for ``go``)
    until all are ready; then their summaries (:func:`read_summary`), in order. Child ``i``
    is pinned to ``cores[i % len(cores)]`` when ``cores`` is given.

    Raises:
        RuntimeError: a child failed, or they were not all ready within ``timeout`` seconds,
            or not all done within ``timeout`` seconds of the start (with the first
            failure's stderr).
    """
    barrier = folder / f"barrier-{time.monotonic_ns()}"
    barrier.mkdir()
    children = []
    try:
        for i in range(n):
            summary = barrier / f"job{i}.json"
            command = cmsrun_command(config, {**options, "barrier": barrier}, summary=summary)
            core = cores[i % len(cores)] if cores else None
            child = start_child(command, barrier, f"{what}, job {i}", stderr=barrier / f"job{i}.err", core=core)
            children.append((child, summary))
        deadline = time.monotonic() + timeout
        while len(list(barrier.glob("ready.*"))) < n:
            failed = [child for child, _ in children if child.process.poll() is not None]
            if failed or time.monotonic() > deadline:
                tail = failed[0].stderr_tail() if failed else "(timeout)"
                raise RuntimeError(f"{what}: {len(failed)} of {n} jobs exited before the start: {tail}")
            time.sleep(0.05)
        (barrier / "go").touch()
        deadline = time.monotonic() + timeout  # the run's own: the start may have taken most of the first
        return [read_summary(child, summary, *wait_child(child, deadline)) for child, summary in children]
    finally:
        for child, _ in children:
            child.kill()
