"""``PoolSource``: NanoAOD-style ``Events`` TTrees read with uproot (CMSSW's ``PoolSource``).

Collections are found as ``_layout`` describes (``Jet_pt`` is field ``pt`` of the jagged
collection ``Jet``, counted by ``nJet``; ``MET_pt`` belongs to the singleton ``MET``;
``run`` is a plain branch). Per event, modules see:

========================  =================================================================
collection kind           ``event.get(name)``
========================  =================================================================
jagged (``Jet``)          awkward record array of the event's objects; ``.pt`` is a 1-D
                          ``ak.Array`` (``np.asarray`` of it is a zero-copy view)
singleton (``MET``)       ``ak.Record`` of scalars (``.pt``)
plain (``run``)           the value: a NumPy scalar, or a 1-D ``ak.Array`` for a jagged
                          plain branch such as ``PSWeight``
========================  =================================================================

Reading (see :meth:`PoolSource.run`): entry ranges (the file's clusters, or
``eventsPerRead`` entries) are read and turned into chunk-wide collections (``_chunks``)
on a worker thread, one range ahead of the events being processed; each event is a lazy
view into its chunk, so nothing is copied per event.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import trio

from .._errors import ConfigurationError, FileReadError
from .._event import EventID
from .._source_base import Source, SourceEvent
from ._chunks import Chunk, EventView, build_collections, common_entry_offsets
from ._files import local_file_problem, one_line, open_tree
from ._layout import Collection, check_types, resolve_request, scan_tree, unreadable_branch

__all__ = ["PoolSource", "SourceStatistics"]

log = logging.getLogger("pysonic.source")

ID_BRANCHES = ("run", "luminosityBlock", "event")
DUPLICATE_MODES = ("checkAllFilesOpened", "noDuplicateCheck")
_MAX_DUPLICATE_WARNINGS = 5  # per job, then one line: a file listed twice gives thousands


@dataclass(frozen=True)
class SourceStatistics:
    """What a :class:`PoolSource` has done so far (``PoolSource.statistics()``).

    Attributes:
        files_opened: input files opened, in order.
        entries_read: tree entries read (skipped files and ranges not included).
        events_sent: events delivered to the scheduler.
        duplicates_skipped: events dropped by ``duplicateCheckMode``.
        branches: branch names of the last read (what the branch request selected).
    """

    files_opened: tuple[str, ...]
    entries_read: int
    events_sent: int
    duplicates_skipped: int
    branches: tuple[str, ...]



class PoolSource(Source):
    """Reads events from NanoAOD-style ROOT files (CMSSW's ``PoolSource``).

    Parameters (all untracked): ``fileNames`` (vstring, required: local paths,
    ``file:`` paths, or any URL uproot reads, e.g. ``root://``, ``https://``),
    ``skipEvents`` (uint32, 0: entries skipped at the start of the input, across files),
    ``treeName`` (string, "Events"), ``duplicateCheckMode`` ("checkAllFilesOpened": an
    event id seen before is skipped with a warning, as in CMSSW; "noDuplicateCheck": the
    same file may be listed several times; it is then opened once and stays open until its
    last listing), ``eventsPerRead`` (uint32, 0 = the file's own clusters; else entries
    per read).

    Files without ``run``/``luminosityBlock``/``event`` branches get ids
    ``1:1:<entry + 1>`` and are left out of the duplicate check (with a warning).

    Raises (from :meth:`collections`, :meth:`set_branch_request`, :meth:`run`):
        FileOpenError: a file cannot be opened or has no such tree (names file and trees).
        FileReadError: a requested branch is missing (names the nearest ones), cannot be
            interpreted, or its data cannot be read (names file and entry range).
    """

    @classmethod
    def fill_descriptions(cls, desc: Any) -> None:
        from .. import config as cms

        desc.add("fileNames", cms.untracked.vstring, "input files: paths, file:paths or URLs (root://, https://)")
        desc.add("skipEvents", cms.untracked.uint32(0), "entries to skip at the start of the input, across files")
        desc.add("treeName", cms.untracked.string("Events"), "name of the TTree holding the events")
        desc.add("duplicateCheckMode", cms.untracked.string("checkAllFilesOpened"),
                 "'checkAllFilesOpened' (skip repeated event ids with a warning) or 'noDuplicateCheck'")
        desc.add("eventsPerRead", cms.untracked.uint32(0),
                 "entries per read; 0 = the file's own clusters (TTree::GetClusterIterator)")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.file_names = [str(f) for f in params.fileNames]
        self.skip_events = int(params.skipEvents)
        self.tree_name = str(params.treeName)
        self.events_per_read = int(params.eventsPerRead)
        self.duplicate_check = str(params.duplicateCheckMode)
        if self.duplicate_check not in DUPLICATE_MODES:
            raise ConfigurationError(
                f"PoolSource: duplicateCheckMode '{self.duplicate_check}' is not one of {', '.join(DUPLICATE_MODES)}"
            )
        if not self.file_names:
            raise ConfigurationError("PoolSource: fileNames is empty")
        self._open: list[Any] = []  # uproot files still open
        self._first: tuple[Any, Any, dict[str, Collection]] | None = None
        # A file listed again later (noDuplicateCheck) stays open and scanned until its last
        # listing: reading a NanoAOD tree's metadata takes ~1 s, the events of a 10-event
        # file ~0.03 s. name -> index of its last listing; name -> (file, tree, layout).
        self._last_listing = {n: i for i, n in enumerate(self.file_names)}
        self._kept: dict[str, tuple[Any, Any, dict[str, Collection]]] = {}
        self._request: dict[str, Any] | None = None
        self._seen: set[tuple[int, int, int]] = set()
        self._files_opened: list[str] = []
        self._entries_read = 0
        self._events_sent = 0
        self._duplicates = 0
        self._last_branches: tuple[str, ...] = ()

    # -- protocol -------------------------------------------------------------------

    def collections(self) -> dict[str, tuple[str, ...]]:
        """Collection name -> field names (``()`` for plain branches), from the first file.

        Counter branches (``nJet``) are not listed: they come with their collection.

        Raises:
            FileOpenError: the first file cannot be opened or lacks the tree.
        """
        layout = self._first_file()[2]
        return {name: coll.fields for name, coll in layout.items()}

    def set_branch_request(self, request: dict[str, set[str] | None]) -> None:
        """Read only these collections (fields ``None`` = all); run/lumi/event always.

        Raises:
            FileReadError: a requested collection or field is not in the first file, or
                has a type uproot cannot interpret.
        """
        _, tree, layout = self._first_file()
        name = self.file_names[0]
        resolved = resolve_request(layout, dict(request), name)
        check_types(tree, layout, resolved, name)
        self._request = dict(request)

    async def run(self, send_channel: trio.MemorySendChannel, max_events: int) -> None:
        """Send one :class:`SourceEvent` per event, in input order, then close the channel.

        Args:
            send_channel: where events go; closed when the input ends.
            max_events: events to deliver; -1 = all. Duplicates skipped do not count.

        One range is read ahead: a reader task reads range k+1 on a worker thread while
        the events of range k are handed out. The chunk channel has no buffer, so at most
        two ranges are in memory (the one handed out and the one read ahead), plus the
        ranges that events still in flight refer to. If the scheduler closes its end
        early, reading stops quietly.
        """
        with send_channel:  # sync close: no checkpoint that could mask an error with Cancelled
            if max_events == 0:
                return
            chunk_send, chunk_recv = trio.open_memory_channel[Chunk](0)
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_chunks, chunk_send, max_events)
                    with chunk_recv:
                        async for chunk in chunk_recv:
                            if not await self._send_chunk(chunk, send_channel):
                                nursery.cancel_scope.cancel()
                                return
            except BaseExceptionGroup as group:
                # The reader task is an implementation detail: raise its error as is.
                if len(group.exceptions) == 1 and isinstance(group.exceptions[0], Exception):
                    raise group.exceptions[0] from None
                raise

    def close(self) -> None:
        """Close every file still open (also after a failure)."""
        for file in self._open:
            file.close()
        self._open.clear()
        self._first = None
        self._kept.clear()

    def statistics(self) -> SourceStatistics:
        """Counters of what was opened, read and sent so far."""
        return SourceStatistics(tuple(self._files_opened), self._entries_read, self._events_sent,
                                self._duplicates, self._last_branches)

    # -- reading ----------------------------------------------------------------------

    def _first_file(self) -> tuple[Any, Any, dict[str, Collection]]:
        if self._first is None:
            file, tree = self._open_file(self.file_names[0])
            self._first = (file, tree, scan_tree(tree))
        return self._first

    def _open_file(self, name: str) -> tuple[Any, Any]:
        file, tree = open_tree(name, self.tree_name)
        self._open.append(file)
        self._files_opened.append(name)
        log.info("opened input file %s: %d entries in tree '%s'", name, tree.num_entries, self.tree_name)
        return file, tree

    def _close(self, file: Any) -> None:
        file.close()
        # By identity: uproot directories are Mappings, whose == would read both files' keys.
        self._open = [f for f in self._open if f is not file]
        if self._first is not None and self._first[0] is file:
            self._first = None
        for name in [n for n, kept in self._kept.items() if kept[0] is file]:
            del self._kept[name]

    def _branch_list(self, layout: dict[str, Collection], request: dict[str, Any], tree: Any) -> list[str]:
        names = [b for b in ID_BRANCHES if b in tree]  # not tree.keys(): ~10 ms for NanoAOD
        for coll_name, fields in request.items():
            names += [b for b in layout[coll_name].branches(fields) if b not in names]
        return names

    async def _send_chunk(self, chunk: Chunk, send_channel: trio.MemorySendChannel) -> bool:
        for i in chunk.kept:
            event = SourceEvent(EventID(*chunk.ids[i]), EventView(chunk.collections, i),
                                chunk.file_name, chunk.start + i)
            try:
                await send_channel.send(event)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return False
            self._events_sent += 1
        return True

    async def _read_chunks(self, chunk_send: trio.MemorySendChannel, max_events: int) -> None:
        with chunk_send:
            to_skip = self.skip_events
            planned = 0  # events that chunks read so far will deliver
            for index, name in enumerate(self.file_names):
                file, tree, layout, request, branches = await trio.to_thread.run_sync(
                    self._prepare_file, index, name
                )
                has_ids = all(b in branches for b in ID_BRANCHES)
                if not has_ids:
                    log.warning("input file %s has no run/luminosityBlock/event branches: "
                                "event ids are 1:1:<entry+1>, without duplicate check", name)
                n = tree.num_entries
                start, to_skip = min(to_skip, n), max(0, to_skip - n)
                for lo, hi in self._ranges(tree, branches, start, n):
                    while lo < hi and not 0 <= max_events <= planned:
                        # Read only what max_events still needs; if duplicates leave it
                        # short, the rest of the range is read next.
                        stop = hi if max_events < 0 else min(hi, lo + max_events - planned)
                        chunk = await trio.to_thread.run_sync(
                            self._read_chunk, tree, name, layout, request, branches, lo, stop, has_ids
                        )
                        planned += len(chunk.kept)
                        lo = stop
                        await chunk_send.send(chunk)
                if self._last_listing[name] == index:
                    self._close(file)
                if 0 <= max_events <= planned:
                    return

    def _prepare_file(self, index: int, name: str) -> tuple[Any, Any, dict[str, Collection], dict[str, Any], list[str]]:
        # On a worker thread: opening and scanning a NanoAOD file's ~2,000 branches takes ~1 s.
        if index == 0 and self._first is not None:
            file, tree, layout = self._first
        elif name in self._kept:
            file, tree, layout = self._kept[name]
        else:
            file, tree = self._open_file(name)
            layout = scan_tree(tree)
        if self._last_listing[name] > index:
            self._kept[name] = (file, tree, layout)
        request = resolve_request(layout, self._request, name)
        branches = self._branch_list(layout, request, tree)
        check_types(tree, layout, request, name)
        return file, tree, layout, request, branches

    def _ranges(self, tree: Any, branches: list[str], start: int, stop: int) -> Iterator[tuple[int, int]]:
        if self.events_per_read > 0:
            bounds = list(range(0, stop, self.events_per_read)) + [stop]
        elif branches:
            bounds = common_entry_offsets(tree, branches)
        else:
            bounds = [0, stop]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            if hi > start:
                yield max(lo, start), min(hi, stop)

    def _read_chunk(self, tree: Any, name: str, layout: dict[str, Collection],
                    request: dict[str, Any], branches: list[str], lo: int, hi: int,
                    has_ids: bool) -> Chunk:
        # Runs on a worker thread: the read, the decompression and the zip.
        where = f"entries [{lo}, {hi})"
        try:
            arrays = tree.arrays(branches, entry_start=lo, entry_stop=hi, how=dict)
        except Exception as exc:  # noqa: BLE001 - corrupt or truncated data
            culprit = unreadable_branch(tree, branches, lo, hi)
            what = f"branch '{culprit}', " if culprit else ""
            raise FileReadError(
                local_file_problem(name) or f"cannot read {what}{where} of tree '{self.tree_name}' in input "
                f"file '{name}': {one_line(exc)}"
            ) from exc
        self._entries_read += hi - lo
        self._last_branches = tuple(branches)
        collections = build_collections(layout, request, arrays, hi - lo, name, where)
        if has_ids:
            ids = list(zip(*(np.asarray(arrays[b]).tolist() for b in ID_BRANCHES)))
        else:
            ids = [(1, 1, lo + i + 1) for i in range(hi - lo)]
        chunk = Chunk(name, lo, collections, ids)
        chunk.kept = self._deduplicate(chunk, has_ids)
        return chunk

    def _deduplicate(self, chunk: Chunk, has_ids: bool) -> list[int]:
        if self.duplicate_check == "noDuplicateCheck" or not has_ids:
            return list(range(len(chunk.ids)))
        kept, seen = [], self._seen
        for i, event_id in enumerate(chunk.ids):
            if event_id in seen:
                self._duplicates += 1
                if self._duplicates <= _MAX_DUPLICATE_WARNINGS:
                    log.warning("duplicate event %s (entry %d of %s) skipped: its id was seen before "
                                "(duplicateCheckMode = 'checkAllFilesOpened')",
                                EventID(*event_id), chunk.start + i, chunk.file_name)
                elif self._duplicates == _MAX_DUPLICATE_WARNINGS + 1:
                    log.warning("more duplicate events skipped; see statistics().duplicates_skipped")
                continue
            seen.add(event_id)
            kept.append(i)
        return kept
