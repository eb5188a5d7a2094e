"""Temporary files of servers whose owner was killed: named by owner, removed by the next start.

A ``LocalTritonServer`` without a work folder or log path of its own makes them in the
system's temporary folder: ``pysonic-tritonserver-<owner>-XXXX/`` (the served repository,
generated models) and ``pysonic-tritonserver-<owner>-XXXX.log``, ``<owner>`` being
``<pid>-<start>-<host>``. Its
``stop`` removes them; a SIGKILL of the owning job cannot. The owner tag
(``framework.utilities._owners``) lets the next server start (a job's fallback, ``cmstriton start``)
remove those whose owner is gone, and never those of a job still running.
"""

from __future__ import annotations

import logging
import pathlib
import re
import tempfile

from framework.utilities import OWNER_PATTERN, owner_tag, remove_orphans

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
    try:
        entries = sorted(folder.glob(f"{TEMP_PREFIX}*"))
    except OSError:
        return []
    return remove_orphans(entries, _OWNED, log, "Triton server folder(s)/log(s) left by jobs that are gone")
