"""Output paths checked before the first event, and temporary files that name their owner.

A job's outputs (event files, histogram files, summaries, traces) are written under a
temporary name beside their final name and renamed once the job succeeded
(``framework.utilities._commit``). Two things can still lose a user's data or time, and both are
caught here, when the job is built: an output that IS one of the inputs (the rename would replace the input), two
outputs with one name (one would replace the other), and a folder that is missing, not a
folder or not writable (found only after every event otherwise). :func:`check_outputs`
raises one :class:`~framework.ConfigurationError` naming the parameter(s) and the path.

Temporary names carry the writer's pid, start time and host (``out.root.tmp-<owner>-<n>``,
``framework.utilities.temporary_name``, re-exported here), so that a file left by a
killed job can be told from one a running job is writing: :func:`remove_stale_temporaries` removes those whose owner is
gone (the pid is not running, or runs a process started at another time: a reused pid).
"""

from __future__ import annotations

import logging
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

from framework.utilities import OWNER_PATTERN, ConfigurationError, remove_orphans, temporary_name

from ._files import local_path
from ._remote import is_remote

__all__ = ["check_outputs", "output_folders", "remove_stale_temporaries", "temporary_name"]

log = logging.getLogger("pysonic.output")

# "<name>.tmp-<pid>-<start>-<host>-<n>" (framework.utilities._owners)
_TEMPORARY = re.compile(rf"^(?P<final>.+)\.tmp-{OWNER_PATTERN}-\d+$")


def remove_stale_temporaries(folders: Iterable[Path]) -> list[Path]:
    """Remove the temporary outputs in ``folders`` whose owner is gone; log one line.

    Returns:
        The files removed (absolute paths), sorted.
    """
    files: list[Path] = []
    for folder in {Path(f).resolve() for f in folders}:
        try:
            files += [entry for entry in folder.iterdir() if entry.is_file()]
        except OSError:
            continue  # missing or unreadable: check_outputs says so
    return remove_orphans(sorted(files), _TEMPORARY, log, "temporary output(s) left by jobs that are gone")


_SPECIAL = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"))


def _folder_problem(path: Path) -> str | None:
    if path.is_dir():
        return "it is a folder"
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):  # /dev/null: the commit's rename would replace the device
        kind = next((name for test, name in _SPECIAL if test(mode)), "not a regular file")
        return f"it is {kind}; outputs are written to a temporary file renamed into place, which would replace it"
    folder = path.parent
    if not folder.exists():
        return f"folder '{folder}' does not exist"
    if not folder.is_dir():
        return f"folder '{folder}' is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"folder '{folder}' is not writable"
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve() or (a.exists() and b.exists() and os.path.samefile(a, b))
    except OSError:
        return False


def check_outputs(
    outputs: Sequence[tuple[str, Path]], inputs: Iterable[str] = (), job_files: Sequence[tuple[str, Path]] = ()
) -> None:
    """Raise if an output could not be written, or would replace an input or another output.

    Args:
        outputs: ``(who, path)`` per output: ``who`` names the parameter the user set
            (``"OutputModule 'out' (type NanoAODOutputModule): parameter 'fileName'"``,
            ``"--summary-json"``); relative paths are relative to the current folder.
        inputs: input file names as configured (``file:`` prefixes allowed; URLs skipped).
        job_files: other files the job reads, ``(what, path)``: ``("config file", cfg.py)``,
            ``("fileset", fs.yaml)``.

    Raises:
        ConfigurationError: one line naming the parameter(s) and the path: the path is an
            input file or one of ``job_files`` (symbolic and hard links included), two
            outputs share a path, the path is a folder or exists and is not a regular file
            (``/dev/null``: the commit's rename would replace it), or its folder is missing,
            not a folder or not writable.
    """
    local_inputs = [Path(local_path(name)) for name in inputs if not is_remote(local_path(name))]
    seen: dict[Path, str] = {}
    for who, path in outputs:
        path = Path(path)
        problem = _folder_problem(path)
        if problem is not None:
            raise ConfigurationError(f"{who}: cannot write '{path}' ({problem})")
        same_input = next((i for i in local_inputs if _same_file(path, i)), None)
        if same_input is not None:
            raise ConfigurationError(
                f"{who}: '{path}' is the input file '{same_input}'; writing it would replace the input "
                f"(choose another output name)"
            )
        same_file = next(((what, f) for what, f in job_files if _same_file(path, Path(f))), None)
        if same_file is not None:
            raise ConfigurationError(
                f"{who}: '{path}' is the {same_file[0]} '{same_file[1]}'; writing it would replace it "
                f"(choose another output name)"
            )
        key = path.resolve()
        if key in seen:
            raise ConfigurationError(f"{seen[key]} and {who} both write '{path}'; each output needs a file of its own")
        seen[key] = who


def output_folders(outputs: Sequence[tuple[str, Path]]) -> list[Path]:
    """The folders of ``outputs`` that exist (where stale temporaries are looked for)."""
    return sorted({Path(p).parent for _, p in outputs if Path(p).parent.is_dir()})
