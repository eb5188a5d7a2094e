"""Who owns a temporary file or folder: a process id and its start time, in the name.

A job writes its outputs under temporary names, and a fallback Triton server works in a
temporary folder; a job killed with SIGKILL cannot remove them. Their names carry
:func:`owner_tag` (``<pid>-<start>-<host>``), so that a later job can tell a leftover from
the file of a job still running (:func:`owner_alive`): a pid alone could have been reused,
and an output folder on a shared file system is written by jobs of other hosts, whose
processes cannot be seen from here (theirs are never judged).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
import shutil
import socket
from collections.abc import Iterable
from pathlib import Path

import psutil

__all__ = ["OWNER_PATTERN", "host_id", "owner_alive", "owner_tag", "remove_orphans"]

# The regular expression of an owner tag: groups pid, start, host.
OWNER_PATTERN = r"(?P<pid>\d+)-(?P<start>\d+)-(?P<host>[0-9a-f]{8})"


@functools.cache
def host_id() -> str:
    """8 hex digits naming this host (a hash of its name: safe in a file name)."""
    return hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def owner_tag(pid: int | None = None) -> str:
    """``"<pid>-<start>-<host>"``: a process, its start time (whole seconds since the epoch,
    psutil's ``create_time``) and :func:`host_id`, which together never name two processes."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{int(psutil.Process(pid).create_time())}-{host_id()}"


def owner_alive(pid: int, start: int | None, host: str | None = None) -> bool:
    """Whether process ``pid`` runs and (when ``start`` is given) started at ``start``
    (seconds since the epoch, +-1 s for rounding); False for a pid reused since. A process
    of another ``host`` counts as alive: it cannot be seen from here."""
    if host is not None and host != host_id():
        return True
    try:
        created = psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.Error:  # AccessDenied: it exists; a start time we cannot read counts as ours
        return True
    return start is None or abs(int(created) - start) <= 1


def remove_orphans(entries: Iterable[Path], pattern: re.Pattern[str], log: logging.Logger, what: str) -> list[Path]:
    """Remove the files and folders of ``entries`` whose name ``pattern`` matches (its groups
    ``pid``, ``start``, ``host``: ``OWNER_PATTERN``) and whose owner is gone
    (:func:`owner_alive`); log one line, ``removed <n> <what>: <paths>``. Names that do not
    match (no owner tag: older versions, other programs) and entries that another process
    removed meanwhile are left alone. Never raises for a file system error.

    Returns:
        The entries removed, in the order given.
    """
    removed = []
    for entry in entries:
        match = pattern.match(entry.name)
        if match is None or owner_alive(int(match["pid"]), int(match["start"]), match["host"]):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError:
            continue  # removed by another job meanwhile, or not ours to remove
        removed.append(entry)
    if removed:
        log.warning("removed %d %s: %s", len(removed), what, ", ".join(str(p) for p in removed))
    return removed
