"""Who owns a temporary file or folder: a process id and its start time, in the name.

A job writes its outputs under temporary names, and a fallback Triton server works in a
temporary folder; a job killed with SIGKILL cannot remove them. Their names carry
:func:`owner_tag` (``<pid>-<start>``), so that a later job can tell a leftover from the
file of a job still running (:func:`owner_alive`): a pid alone could have been reused.
"""

from __future__ import annotations

import os

import psutil

__all__ = ["owner_alive", "owner_tag"]


def owner_tag(pid: int | None = None) -> str:
    """``"<pid>-<start>"``: a process and its start time (whole seconds since the epoch,
    psutil's ``create_time``), which together never name two processes."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{int(psutil.Process(pid).create_time())}"


def owner_alive(pid: int, start: int | None) -> bool:
    """Whether process ``pid`` runs and (when ``start`` is given) started at ``start``
    (seconds since the epoch, +-1 s for rounding); False for a pid reused since."""
    try:
        created = psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.Error:  # AccessDenied: it exists; a start time we cannot read counts as ours
        return True
    return start is None or abs(int(created) - start) <= 1
