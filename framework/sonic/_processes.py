"""Processes of local servers: liveness, termination, and spawning tied to our lifetime.

Synchronous, Linux-specific (``/proc``, ``prctl``); used by ``_server`` and ``cmstriton``.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence


POLL_INTERVAL = 0.1  # seconds between checks that a process is gone
KILL_WAIT = 5.0  # seconds to wait for the process after SIGKILL


def _proc_state(pid: int) -> str | None:
    """The state letter of ``/proc/<pid>/stat`` (``"Z"`` for a zombie), None if no such process."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def pid_is_tritonserver(pid: int) -> bool:
    """True if ``pid`` is a live (not zombie) process running a ``tritonserver`` binary."""
    if _proc_state(pid) in (None, "Z"):
        return False
    try:
        argv0 = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(argv0) == b"tritonserver"


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is our child, so that it does not stay a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        _reap(pid)
        if _proc_state(pid) in (None, "Z"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL)


def terminate_server(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM ``pid``; SIGKILL it after ``timeout`` seconds; then kill its process group.

    The server is started as leader of its own session, so its process group holds the
    Python backend stubs too: killing the group leaves nothing behind even when the
    server had to be SIGKILLed. Works for processes that are not our children.
    """
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    if not _wait_gone(pid, timeout):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _wait_gone(pid, KILL_WAIT)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, not the process
# (prctl(2)). trio's worker threads come and go, so every such child is forked from this
# one long-lived thread instead; it ends only with the interpreter.
_spawner: concurrent.futures.ThreadPoolExecutor | None = None
_spawner_lock = threading.Lock()
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _reset_spawner() -> None:
    global _spawner
    _spawner = None


os.register_at_fork(after_in_child=_reset_spawner)


def _spawn(args: Sequence[str], *, die_with_parent: bool, **popen_kwargs) -> subprocess.Popen:
    """Popen in a new session; with ``die_with_parent``, SIGTERM it when this process dies."""
    global _spawner
    if not (die_with_parent and sys.platform.startswith("linux")):
        return subprocess.Popen(args, start_new_session=True, **popen_kwargs)
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before fork, not in the child
    parent, sigterm = os.getpid(), int(signal.SIGTERM)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sigterm)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    with _spawner_lock:
        if _spawner is None:
            _spawner = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pysonic-spawner")
        spawner = _spawner
    future = spawner.submit(
        subprocess.Popen, args, start_new_session=True, preexec_fn=preexec, **popen_kwargs
    )
    return future.result()
