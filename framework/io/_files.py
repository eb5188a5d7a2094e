"""Opening input files: one-line errors for files that are missing, damaged or not ROOT.

Checked before uproot opens a local file (uproot may read what is left of a truncated
file, and its own messages span several lines); what uproot still finds wrong is turned
into one line naming the file (:class:`~framework.FileOpenError`). URLs and logical file
names are opened through ``_remote`` (redirectors, bounded waits).
"""

from __future__ import annotations

import os
from typing import Any

from framework.utilities import FileOpenError

from ._remote import OpenedFile, RemoteAccess, close_in_background, is_remote, open_root_file

__all__ = ["local_path", "one_line", "local_file_problem", "open_tree", "open_input"]


def local_path(name: str) -> str:
    # CMSSW configs write local files as "file:name.root"; uproot wants a plain path.
    return name[len("file:") :] if name.startswith("file:") and not name.startswith("file://") else name


def one_line(exc: BaseException) -> str:
    """``"Type: message"`` on one line: uproot's messages span several (``in file ...``)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def local_file_problem(name: str) -> str | None:
    """What is wrong with a local input file, seen from its first bytes (None: nothing seen).

    Missing, not a ROOT file, or truncated: ROOT's ``TFile`` header (``"root"``, fVersion,
    fBEGIN, fEND, ...) records fEND, the file's length when it was closed (4 bytes, or 8
    for fVersion > 1000000). URLs and logical file names (``/store/...``) are left to uproot.
    """
    path = local_path(name)
    if is_remote(path):
        return None
    try:
        with open(path, "rb") as f:
            header = f.read(20)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return f"input file '{name}' does not exist"
    except OSError:
        return None  # unreadable: uproot's own message says why
    if not header:
        return f"input file '{name}' is empty (0 bytes)"
    if header[:4] != b"root":
        return f"input file '{name}' is not a ROOT file (it starts with {header[:4]!r}, not b'root')"
    if len(header) < 20:
        return f"input file '{name}' is truncated: it has {size:,} bytes, less than a ROOT file header"
    version = int.from_bytes(header[4:8], "big")
    end = int.from_bytes(header[12:20] if version > 1000000 else header[12:16], "big")
    if size < end:
        return f"input file '{name}' is truncated: it has {size:,} bytes, its header says {end:,}"
    return None


def open_tree(name: str, tree_name: str, access: RemoteAccess | None = None) -> tuple[Any, Any]:
    """Open ``name`` and return (file, tree); see :func:`open_input`."""
    file, tree, _ = open_input(name, tree_name, access)
    return file, tree


def open_input(name: str, tree_name: str, access: RemoteAccess | None = None) -> tuple[Any, Any, OpenedFile]:
    """Open ``name`` (a local path, URL or ``/store/...`` LFN) and return (file, tree, where).

    Args:
        access: redirectors, timeouts (None: :class:`RemoteAccess` defaults, no redirectors).

    Raises:
        FileOpenError: one line naming the file (and, for remote files, the servers tried).
    """
    # Checked first: uproot may read what is left of a truncated file, and its messages for
    # the other cases repeat the path on several lines. CMSSW refuses a truncated file too.
    problem = local_file_problem(name)
    if problem:
        raise FileOpenError(problem)
    try:
        file, opened = open_root_file(local_path(name), access or RemoteAccess())
    except FileOpenError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to open is the file's fault
        raise FileOpenError(f"cannot open input file '{name}': {one_line(exc)}") from exc
    close = close_in_background if is_remote(name) else lambda f: f.close()
    try:
        classnames = file.classnames(cycle=False)
        if tree_name not in classnames:
            trees = sorted(k for k, c in classnames.items() if c == "TTree") or ["none"]
            raise FileOpenError(
                f"input file '{name}' has no tree '{tree_name}' (trees in the file: {', '.join(trees)})"
            )
        if classnames[tree_name] != "TTree":
            raise FileOpenError(f"'{tree_name}' in input file '{name}' is a {classnames[tree_name]}, not a TTree")
        tree = file[tree_name]
        tree.num_entries  # noqa: B018 - touch the metadata now, so that damage shows up here
    except FileOpenError:
        close(file)
        raise
    except Exception as exc:  # noqa: BLE001
        close(file)
        where = f" (at {opened.served_by})" if is_remote(name) else ""
        raise FileOpenError(
            local_file_problem(name) or f"cannot read tree '{tree_name}' of input file '{name}'{where}: {one_line(exc)}"
        ) from exc
    return file, tree, opened
