"""Temporary files of servers whose owner was killed: named by owner, removed by the next start.

A ``LocalTritonServer`` without a work folder or log path of its own makes them in the
system's temporary folder: ``pysonic-tritonserver-<owner>-XXXX/`` (the served repository,
generated models) and ``pysonic-tritonserver-<owner>-XXXX.log``, ``<owner>`` being
``<pid>-<start>-<host>``. Its
``stop`` removes them; a SIGKILL of the owning job cannot. The owner tag
(``framework._owners``) lets the next server start (a job's fallback, ``cmstriton start``)
remove those whose owner is gone, and never those of a job still running.
"""

from __future__ import annotations

import logging
import pathlib
import re
import shutil
import tempfile

from framework._owners import OWNER_PATTERN, owner_alive, owner_tag

__all__ = ["TEMP_PREFIX", "owned_prefix", "remove_stale_server_files"]

log = logging.getLogger("pysonic.serving")

TEMP_PREFIX = "pysonic-tritonserver-"
_OWNED = re.compile(rf"^{re.escape(TEMP_PREFIX)}{OWNER_PATTERN}-")


def owned_prefix() -> str:
    """``pysonic-tritonserver-<pid>-<start>-<host>-``: the prefix of this process's temporary files."""
    return f"{TEMP_PREFIX}{owner_tag()}-"


def remove_stale_server_files(folder: pathlib.Path | None = None) -> list[pathlib.Path]:
    """Remove the server folders and logs in ``folder`` (default: the system's temporary
    folder) whose owner is gone; log one line naming them. Names without an owner tag (made
    by older versions) are left alone: nothing says whose they are.

    Returns:
        What was removed, sorted.
    """
    folder = pathlib.Path(tempfile.gettempdir()) if folder is None else folder
    removed = []
    try:
        entries = sorted(folder.glob(f"{TEMP_PREFIX}*"))
    except OSError:
        return []
    for entry in entries:
        match = _OWNED.match(entry.name)
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
        log.warning(
            "removed %d Triton server folder(s)/log(s) left by jobs that are gone: %s",
            len(removed),
            ", ".join(str(p) for p in removed),
        )
    return removed
