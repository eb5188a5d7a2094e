"""Outputs committed by a job that succeeded, and only then.

Every file a job writes for its user (event files, histograms, a module's declared files,
FastTimerService's summary and trace, ``--summary-json``) is written under a temporary
name beside its final name (:func:`temporary_name`) and handed to the job's
:class:`OutputCommit` (:func:`stage_output`). The commit renames them all into place at
the very end, once every module's ``end_job`` and the services' ends have succeeded; a
failure anywhere before (an exception in any module or service, a full disk, a signal)
removes the temporary files instead, so that a file of the same name that a previous job
wrote is left untouched, and nothing half-written remains.

Who opens the commit (:func:`commit_outputs`; a commit opened inside another joins it):

* ``framework.core.run_job``: a job run on its own;
* ``cmsrun``: the job (per dataset with ``--dataset``), so that ``--summary-json`` is part of it;
* the Dask executor's worker: each work unit, whose files are its parts.

Without an open commit a staged file is renamed as soon as it is complete (a module driven
by hand, a tool writing one file). The renames of one commit run with SIGINT and SIGTERM
held back (re-raised after the last rename), so that a signal never commits half of a job.

Temporary names carry their owner (``framework.utilities._owners``: pid, start time, host), so that a
later job can remove the files of a job that was killed (``framework.io.remove_stale_temporaries``).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._errors import FileWriteError
from ._owners import owner_tag

__all__ = [
    "STOP_SIGNALS",
    "OutputCommit",
    "StagedFile",
    "commit_outputs",
    "current_commit",
    "stage_output",
    "stop_signals_handled",
    "temporary_name",
]

log = logging.getLogger("pysonic.output")

_counter = itertools.count()


def temporary_name(path: Path) -> Path:
    """Where ``path`` is written before it is committed: ``<name>.tmp-<pid>-<start>-<host>-<n>``.

    Same folder, so that the final ``os.replace`` is an atomic rename on one file system;
    the owner tag (``framework.utilities._owners.owner_tag``) keeps two processes apart and lets a later
    job find the files of a killed one; ``n`` (a counter of this process) keeps two writers
    of one process apart.
    """
    path = Path(path)
    return path.with_name(f"{path.name}.tmp-{owner_tag()}-{next(_counter)}")


@dataclass(eq=False)
class StagedFile:
    """One output being written: its final name, the temporary file, who writes it.

    Attributes:
        final: the file's name once committed.
        temp: the temporary file to write (:func:`temporary_name` of ``final``).
        who: the writer, for messages ("OutputModule 'out'", "--summary-json").
        commit: the commit it belongs to; None: renamed by :meth:`done` at once.
        complete: :meth:`done` was called (the writer closed it).
    """

    final: Path
    temp: Path
    who: str
    commit: OutputCommit | None = None
    complete: bool = False

    def done(self) -> None:
        """The writer has closed the temporary file: it is complete. Renamed into place at
        the commit, or now if it belongs to none.

        Raises:
            FileWriteError: the rename failed (no commit only; names the file).
        """
        self.complete = True
        if self.commit is None:
            _rename(self)

    def discard(self) -> None:
        """Remove the temporary file (missing is fine) and forget it: the final name is
        left as it was."""
        self.temp.unlink(missing_ok=True)
        if self.commit is not None:
            self.commit.forget(self)


def _rename(staged: StagedFile) -> None:
    try:
        os.replace(staged.temp, staged.final)
    except OSError as exc:
        staged.temp.unlink(missing_ok=True)
        raise FileWriteError(
            f"{staged.who}: cannot write '{staged.final}' ({type(exc).__name__}: {exc})", file=str(staged.final)
        ) from exc


@dataclass(eq=False)
class OutputCommit:
    """The outputs of one job (or one work unit), renamed into place together by :meth:`commit`.

    Attributes:
        what: what is committed, for messages ("the job", "work unit ...").
        staged: the files staged so far, in staging order.
        committed: the final names renamed into place by :meth:`commit`, in order.
    """

    what: str = "the job"
    staged: list[StagedFile] = field(default_factory=list)
    committed: list[Path] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def stage(self, final: Path, who: str) -> StagedFile:
        """A new temporary file for ``final``, committed with the others."""
        staged = StagedFile(Path(final), temporary_name(Path(final)), who, self)
        with self._lock:
            self.staged.append(staged)
        return staged

    def forget(self, staged: StagedFile) -> None:
        with self._lock, contextlib.suppress(ValueError):
            self.staged.remove(staged)

    def commit(self) -> list[Path]:
        """Rename every staged file into place, in staging order; returns their final names.

        SIGINT and SIGTERM received meanwhile are delivered after the last rename (main
        thread only: elsewhere no Python signal handler runs).

        Raises:
            FileWriteError: a file was staged but never completed (its writer did not close
                it), or a rename failed; the files not yet renamed are removed, and the
                message names the file and its writer.
        """
        with self._lock:
            staged, self.staged = self.staged, []
        incomplete = next((s for s in staged if not s.complete), None)
        if incomplete is not None:
            _remove(staged)
            raise FileWriteError(
                f"{incomplete.who}: '{incomplete.final}' was begun but never completed; nothing of "
                f"{self.what} was written",
                file=str(incomplete.final),
            )
        with _signals_held():
            for i, item in enumerate(staged):
                try:
                    _rename(item)
                except FileWriteError:
                    _remove(staged[i + 1 :])
                    raise
                self.committed.append(item.final)
        return list(self.committed)

    def discard(self) -> list[Path]:
        """Remove every staged temporary file; returns the final names left as they were."""
        with self._lock:
            staged, self.staged = self.staged, []
        _remove(staged)
        return [s.final for s in staged]


def _remove(staged: list[StagedFile]) -> None:
    for item in staged:
        with contextlib.suppress(OSError):
            item.temp.unlink(missing_ok=True)


# The signals that stop a job (cmsrun's exit codes 130, 143, 129); SIGHUP: the terminal that
# started it closed. A commit holds all of them while it renames.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_signals_handled(handler: Callable[[int, Any], Any]) -> Iterator[None]:
    """``handler(signum, frame)`` for every signal of ``STOP_SIGNALS`` inside the block,
    the previous handlers restored after. Only the main thread can set handlers (no signal
    reaches Python code on another): elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, previous_handler in previous.items():
            signal.signal(s, previous_handler if previous_handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """The stop signals recorded, not acted on, inside the block; re-raised after it."""
    received: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        received.append(signum)

    try:
        with stop_signals_handled(hold):
            yield
    finally:
        for signum in dict.fromkeys(received):
            signal.raise_signal(signum)


_current: ContextVar[OutputCommit | None] = ContextVar("pysonic_output_commit", default=None)


def current_commit() -> OutputCommit | None:
    """The commit open in this context (trio tasks and worker threads see their starter's), or None."""
    return _current.get()


def stage_output(final: Path, who: str) -> StagedFile:
    """Begin writing ``final``: a :class:`StagedFile` of the open commit, or of none (then
    :meth:`StagedFile.done` renames it at once). Write ``.temp``, close it, call ``.done()``;
    on failure call ``.discard()``."""
    commit = _current.get()
    if commit is None:
        return StagedFile(Path(final), temporary_name(Path(final)), who)
    return commit.stage(final, who)


@contextlib.contextmanager
def commit_outputs(what: str = "the job") -> Iterator[OutputCommit]:
    """Open a commit for the block: its staged files are renamed when the block ends
    without an exception, removed when it raises (anything, KeyboardInterrupt included).

    Inside an open commit, the block joins it (the outer block commits).

    Raises:
        FileWriteError: from :meth:`OutputCommit.commit`.
    """
    outer = _current.get()
    if outer is not None:
        yield outer
        return
    commit = OutputCommit(what)
    token = _current.set(commit)
    try:
        yield commit
    except BaseException:
        kept = commit.discard()
        if kept:
            log.warning(
                "%s failed: its outputs were not written (%s kept as they were, if they existed)",
                what,
                ", ".join(f"'{p}'" for p in kept),
            )
        raise
    finally:
        _current.reset(token)
    commit.commit()
