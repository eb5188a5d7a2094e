"""Processes of local servers: liveness, termination, spawning tied to our lifetime, and
what a server leaves behind (its Python backend's stub processes and /dev/shm regions).

Synchronous, Linux-specific (``/proc``, ``/dev/shm``); used by ``_server`` and
``cmstriton``.

Why a killed server leaves something behind (Triton 2.51's Python backend, checked on
this machine): every model instance runs in a ``triton_python_backend_stub`` process,
started by the server in the server's process group, and shares with it a region
``/dev/shm/<prefix><uuid>`` (1 MiB and more) named on the stub's command line. A stub
catches SIGTERM and SIGINT and does nothing with them. An idle stub notices that its
server died by polling ``kill(server_pid, 0)`` every 300 ms (python_backend's
pb_stub.cc), which succeeds for a zombie: while nobody reaps the dead server (a parent
that does not wait, a PID 1 that does not reap) it lives on; once it notices, it
removes its region and exits. A stub that was serving a request when the server died
never exits: all its threads wait on futexes that the dead server would have released.
SIGKILL ends any stub, but then its region stays until reboot. So
:func:`end_server_remains` SIGKILLs the stubs (with their process group) and removes the
regions itself. A region belongs to a server through its name: every server we start
gets its own prefix (:func:`new_region_prefix`), so no region or stub of another server
is ever touched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from framework.utilities import ConfigurationError

POLL_INTERVAL = 0.1  # seconds between checks that a process is gone
KILL_WAIT = 5.0  # seconds to wait for the process after SIGKILL
SHM_DIR = pathlib.Path("/dev/shm")
# The Python backend's own region prefix (its "shm-region-prefix-name" backend option):
# ours start with it too, so that `ls /dev/shm/triton_python_backend_shm_region_*` finds them.
REGION_PREFIX = "triton_python_backend_shm_region_"
TAG_VARIABLE = "PYSONIC_SHM_TAG"  # a tag put into our region names (a batch job id, a test session)
_TAG = re.compile(r"[A-Za-z0-9_.]{1,32}")  # what survives tritonserver's --backend-config=k=v,k=v parsing
_STUB = b"triton_python_backend_stub"


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state first); None: no such process."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rsplit(")", 1)[1].split()


def _proc_state(pid: int) -> str | None:
    """The state letter of ``/proc/<pid>/stat`` (``"Z"`` for a zombie), None if no such process."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def process_start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat`` field 22).

    None if there is no such process. Pids are reused; a (pid, start time) pair names one
    process for the whole boot.
    """
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def pid_is_tritonserver(pid: int, start_time: int | None = None) -> bool:
    """True if ``pid`` is a live (not zombie) process running a ``tritonserver`` binary.

    ``start_time`` (clock ticks after boot, :func:`process_start_time`): also require that
    it started then, so that a reused pid is not taken for the server.
    """
    if _proc_state(pid) in (None, "Z"):
        return False
    if start_time is not None and process_start_time(pid) != start_time:
        return False
    try:
        argv0 = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return False
    return os.path.basename(argv0) == b"tritonserver"


def _wait_gone(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` is gone or a zombie; never reaps it (the caller's child keeps its pid)."""
    deadline = time.monotonic() + timeout
    while _proc_state(pid) not in (None, "Z"):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_INTERVAL)
    return True


# ----------------------------------------------------------------------------------------
# What a server leaves behind: its Python-backend stubs and /dev/shm regions


def new_region_prefix() -> str:
    """A name prefix for the /dev/shm regions of one new server, used by no other server.

    ``triton_python_backend_shm_region_pysonic-[TAG-]RANDOM-``: RANDOM is 12 hex digits,
    TAG is ``$PYSONIC_SHM_TAG`` when set (1 to 32 letters, digits, ``_`` or ``.``). The
    Python backend appends a UUID per model instance (tritonserver
    ``--backend-config=python,shm-region-prefix-name=``, Triton's python_backend README).

    Raises:
        ConfigurationError: ``$PYSONIC_SHM_TAG`` is not such a tag.
    """
    tag = os.environ.get(TAG_VARIABLE, "")
    if tag and not _TAG.fullmatch(tag):
        raise ConfigurationError(f"{TAG_VARIABLE}={tag!r}: use 1 to 32 letters, digits, '_' or '.'")
    return f"{REGION_PREFIX}pysonic-{tag + '-' if tag else ''}{secrets.token_hex(6)}-"


@dataclasses.dataclass(frozen=True)
class ServerRemains:
    """What is left of a Triton server that is gone.

    Attributes:
        stubs: process ids of its live ``triton_python_backend_stub`` processes.
        regions: names of its Python-backend regions in ``/dev/shm`` (without the folder).
    """

    stubs: tuple[int, ...] = ()
    regions: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.stubs or self.regions)

    def __str__(self) -> str:
        """E.g. ``2 Python-backend stub processes (pids 12, 13) and 1 /dev/shm region (NAME)``."""
        parts = []
        if self.stubs:
            parts.append(
                f"{len(self.stubs)} Python-backend stub process{'es' * (len(self.stubs) > 1)} "
                f"(pid{'s' * (len(self.stubs) > 1)} {', '.join(map(str, self.stubs))})"
            )
        if self.regions:
            parts.append(
                f"{len(self.regions)} {SHM_DIR} region{'s' * (len(self.regions) > 1)} ({', '.join(self.regions)})"
            )
        return " and ".join(parts) or "nothing"


def _backend_stubs(region_prefix: str | None, pgid: int | None) -> dict[int, tuple[int, str]]:
    """Live stubs whose region starts with ``region_prefix``, or that are in process group
    ``pgid``: pid -> (process group, region name)."""
    stubs = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")  # empty for a zombie
        except OSError:
            continue
        if os.path.basename(args[0]) != _STUB:
            continue
        region = next((a.decode() for a in args if a.startswith(REGION_PREFIX.encode())), "")
        fields = _stat_fields(int(entry.name))
        if fields is None or fields[0] == "Z":
            continue
        group = int(fields[2])
        if (region_prefix and region.startswith(region_prefix)) or group == pgid:
            stubs[int(entry.name)] = (group, region)
    return stubs


def _existing_regions(region_prefix: str | None, named: set[str]) -> tuple[str, ...]:
    found = {name for name in named if name and "/" not in name and (SHM_DIR / name).exists()}
    if region_prefix:
        found.update(path.name for path in SHM_DIR.glob(f"{region_prefix}*"))
    return tuple(sorted(found))


def server_remains(region_prefix: str | None, pgid: int | None = None) -> ServerRemains:
    """The live stubs and the /dev/shm regions of a server, found by the region prefix it was given.

    Meant for a server that is gone: while it runs, its stubs and regions are its own.

    Args:
        region_prefix: the server's prefix (:func:`new_region_prefix`); None for a server
            started without one.
        pgid: also count the stubs in this process group (the server's pid: it leads its
            own session), and the regions they name. Only for a server without a prefix.
    """
    stubs = _backend_stubs(region_prefix, pgid)
    regions = _existing_regions(region_prefix, {region for _, region in stubs.values()})
    return ServerRemains(tuple(sorted(stubs)), regions)


def end_server_remains(region_prefix: str | None, pgid: int | None = None) -> ServerRemains:
    """SIGKILL the stubs of a server that is gone, with their process groups; remove its regions.

    The stubs ignore SIGTERM, hence SIGKILL; a stub's process group is the server's (a group
    id is not reused while a member lives), so processes that model code forked die too.
    Arguments as :func:`server_remains`.

    Returns:
        What was there (and is now gone; a stub that does not die within ``KILL_WAIT``
        seconds is left, its region removed all the same).
    """
    stubs = _backend_stubs(region_prefix, pgid)
    regions = _existing_regions(region_prefix, {region for _, region in stubs.values()})
    for group in {group for group, _ in stubs.values()}:
        try:
            os.killpg(group, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + KILL_WAIT
    for pid in stubs:
        try:
            os.kill(pid, signal.SIGKILL)  # had it left the group
        except ProcessLookupError:
            pass
        _wait_gone(pid, max(0.0, deadline - time.monotonic()))
    for name in regions:
        (SHM_DIR / name).unlink(missing_ok=True)
    return ServerRemains(tuple(sorted(stubs)), regions)


def terminate_server(pid: int, timeout: float = 30.0, *, region_prefix: str | None = None) -> ServerRemains:
    """SIGTERM the server ``pid``; SIGKILL it after ``timeout`` seconds; then end what it left.

    The caller vouches that ``pid`` is the server (a live ``tritonserver``, or an unreaped
    child of the caller); it is not reaped here. After SIGTERM the server unloads its models
    and its stubs exit and remove their regions; after SIGKILL they stay, and
    ``end_server_remains`` ends them. Last, the server's process group gets SIGKILL: the
    server leads its own session, so the group holds everything it started. Works for
    processes that are not our children.

    Args:
        region_prefix: the server's region prefix (``new_region_prefix``); None: its
            stubs are found by process group.

    Returns:
        What the server left behind (empty after a clean exit).
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
    remains = end_server_remains(region_prefix, None if region_prefix else pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return remains


# "Dies with its parent" without a parent-death signal and without Python in a forked
# child. A Python callback run before exec (prctl(PR_SET_PDEATHSIG) was one) makes CPython
# fork() instead of vfork() and run the at-fork handlers, which can deadlock in a process
# with live gRPC threads (a server start once hung the suite that way); PR_SET_PDEATHSIG
# also fires when the forking *thread* exits. So the server is started, on the vfork path,
# through /bin/sh: the shell starts the watchdog (``_WATCHDOG``, a separate ``python -I
# -S``) in the background, then execs the server in its own place (the Popen pid, session
# and process group are the server's; the watchdog is in them). The watchdog waits for
# either of two things: EOF on its stdin, a pipe whose only write end this process holds
# (close-on-exec, and closed in children forked from this process), meaning that this
# process is gone however it ended (SIGKILL included) and whichever thread started the
# server; or the server's exit (a pidfd; a zombie counts as gone), after which it exits
# too. On EOF it SIGTERMs the server (as CMSSW's ``cmsTriton -p PID`` watchdog) and, if it
# has not exited after ``_WATCHDOG_GRACE`` seconds, SIGKILLs the process group, itself
# included (a SIGKILL after the server's exit would kill stubs before they remove their
# /dev/shm regions). While it lives, the group id (the server's pid) cannot be reused.
# stop() SIGKILLs the group, the watchdog with it.
_WATCHDOG_GRACE = 60.0  # seconds between the watchdog's SIGTERM and its SIGKILL of the group
_WATCHDOG = """
import os, select, signal, sys, time
server, grace = int(sys.argv[1]), float(sys.argv[2])
def gone():
    try:
        with open(f"/proc/{server}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
try:
    pidfd = os.pidfd_open(server)
except ProcessLookupError:
    sys.exit()
except OSError:
    pidfd = None  # a kernel before 5.3: poll the server's state every second
poller = select.poll()
poller.register(0, select.POLLIN)
if pidfd is not None:
    poller.register(pidfd, select.POLLIN)
while True:
    ready = dict(poller.poll(None if pidfd is not None else 1000))
    if (pidfd is not None and pidfd in ready) or gone():
        sys.exit()
    if 0 in ready and not os.read(0, 1):
        break
os.kill(server, signal.SIGTERM)
deadline = time.monotonic() + grace
while not gone() and time.monotonic() < deadline:
    time.sleep(0.1)
if not gone():  # after a clean exit the stubs remove their regions and exit: no SIGKILL
    os.killpg(server, signal.SIGKILL)
"""
# sh -c _LAUNCHER NAME PYTHON WATCHDOG GRACE SERVER ARGS...; its stdin: the lifeline's read end
_LAUNCHER = (
    "py=$1 code=$2 grace=$3; shift 3; exec 3<&0 </dev/null; "
    '"$py" -I -S -c "$code" "$$" "$grace" <&3 3<&- >/dev/null 2>&1 & '
    'exec "$@" 3<&-'
)
_lifeline_lock = threading.Lock()
_lifeline: tuple[int, int] | None = None  # (read end, write end): the write end lives with this process


def _forget_lifeline() -> None:
    """In a child forked from this process: its servers' watchdogs must not wait for it."""
    global _lifeline, _lifeline_lock
    _lifeline_lock = threading.Lock()  # another thread may have held it at the fork
    if _lifeline is not None:
        for fd in _lifeline:
            with contextlib.suppress(OSError):
                os.close(fd)
        _lifeline = None


os.register_at_fork(after_in_child=_forget_lifeline)


def _lifeline_fd() -> int:
    """The read end of this process's lifeline pipe (created on first use, never closed)."""
    global _lifeline
    with _lifeline_lock:
        if _lifeline is None:
            _lifeline = os.pipe()  # both ends non-inheritable (PEP 446)
        return _lifeline[0]


def _spawn(args: Sequence[str], *, die_with_parent: bool, **popen_kwargs: Any) -> subprocess.Popen[Any]:
    """Popen ``args`` in a new session (close_fds, no pre-exec callback: CPython's vfork path,
    no Python code nor at-fork handler runs in the child); with ``die_with_parent``, behind
    the watchdog above, which SIGTERMs it when this process is gone.

    The returned Popen's pid is the process running ``args[0]`` from its exec on (before,
    for a moment, /bin/sh). With ``die_with_parent`` its stdin is /dev/null (``stdin``
    may not be given).
    """
    if not die_with_parent:
        return subprocess.Popen(args, start_new_session=True, close_fds=True, **popen_kwargs)
    if popen_kwargs.pop("stdin", subprocess.DEVNULL) != subprocess.DEVNULL:
        raise ValueError("_spawn: a server that dies with its parent reads nothing (stdin is /dev/null)")
    watchdog = [sys.executable, _WATCHDOG, str(_WATCHDOG_GRACE)]
    command = ["/bin/sh", "-c", _LAUNCHER, "pysonic-server", *watchdog, *args]
    return subprocess.Popen(command, start_new_session=True, close_fds=True, stdin=_lifeline_fd(), **popen_kwargs)
