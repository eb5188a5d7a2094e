"""``PoolSource``: NanoAOD-style ``Events`` TTrees read with uproot (CMSSW's ``PoolSource``).

Collections are found as ``_layout`` describes (``Jet_pt`` is field ``pt`` of the jagged
collection ``Jet``, counted by ``nJet``; ``MET_pt`` belongs to the singleton ``MET``;
``run`` is a plain branch). Per event, modules see:

========================  =================================================================
collection kind           ``event.get(name)``
========================  =================================================================
jagged (``Jet``)          ``ak.Array`` of the event's objects (records); a field, ``.pt`` or
                          ``["pt"]``, is a 1-D NumPy view of the chunk's column (float32
                          for ``Jet_pt``), shape (number of jets,)
singleton (``MET``)       ``ak.Record``; a field, ``.pt``, is a NumPy scalar (a NumPy
                          array for a fixed-size or jagged array per event)
plain (``run``)           the value: a NumPy scalar, a 1-D NumPy view for a jagged
                          numeric branch such as ``PSWeight``, else an awkward object
========================  =================================================================

Fields come straight from NumPy arrays of the chunk, read-only (source data are shared
by every module of the event, as CMSSW's products are const: copy to modify); the
awkward objects themselves are built only when a module uses them as such (masks,
``ak.*`` functions, iteration): see ``_views``. A module that needs a field as an
``ak.Array`` wraps it (``ak.Array(jets.pt)``).

Reading (see :meth:`PoolSource.run`): entry ranges (the file's clusters, or
``eventsPerRead`` entries) are read and turned into chunk-wide collections (``_chunks``)
on a worker thread, one range ahead of the events being processed; each event is a lazy
view into its chunk, so nothing is copied per event.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import trio

from .._errors import ConfigurationError, FileReadError
from .._event import EventID
from .._source_base import Source, SourceEvent
from ._chunks import Chunk, EventView, build_collections, common_entry_offsets
from ._files import local_file_problem, one_line, open_tree
from ._fileset import expand_file_names
from ._layout import Collection, check_types, resolve_request, scan_tree, unreadable_branch
from ._units import WorkUnit

__all__ = ["PoolSource", "SourceStatistics"]

log = logging.getLogger("pysonic.source")

ID_BRANCHES = ("run", "luminosityBlock", "event")
DUPLICATE_MODES = ("checkAllFilesOpened", "noDuplicateCheck")
_MAX_DUPLICATE_WARNINGS = 5  # per job, then one line: a file listed twice gives thousands


class _Input(NamedTuple):
    """Entries [start, stop) of tree ``tree`` in file ``name`` (stop None: to the end)."""

    name: str
    tree: str
    start: int = 0
    stop: int | None = None


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

    Parameters (all untracked): ``fileNames`` (vstring: local paths, ``file:`` paths,
    or any URL uproot reads, e.g. ``root://``, ``https://``; local glob patterns such as
    ``data/*.root`` are expanded, sorted; may be empty when :meth:`set_units` gives the
    input, as ``cmsrun --dataset`` does),
    ``skipEvents`` (uint32, 0: entries skipped at the start of the input, across files),
    ``treeName`` (string, "Events"), ``duplicateCheckMode`` ("checkAllFilesOpened": an
    event id seen before is skipped with a warning, as in CMSSW; "noDuplicateCheck": the
    same file may be listed several times; it is then opened once and stays open until its
    last listing), ``eventsPerRead`` (uint32, 0 = the file's own clusters; else entries
    per read).

    Instead of whole files, :meth:`set_units` makes the source read entry ranges of files
    (:class:`~framework.io.WorkUnit`, each with its own tree), as a Dask worker reads one
    unit of a dataset.

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

        desc.add("fileNames", cms.untracked.vstring(),
                 "input files: paths (globs expanded), file:paths or URLs (root://, https://)")
        desc.add("skipEvents", cms.untracked.uint32(0), "entries to skip at the start of the input, across files")
        desc.add("treeName", cms.untracked.string("Events"), "name of the TTree holding the events")
        desc.add("duplicateCheckMode", cms.untracked.string("checkAllFilesOpened"),
                 "'checkAllFilesOpened' (skip repeated event ids with a warning) or 'noDuplicateCheck'")
        desc.add("eventsPerRead", cms.untracked.uint32(0),
                 "entries per read; 0 = the file's own clusters (TTree::GetClusterIterator)")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.file_names = expand_file_names([str(f) for f in params.fileNames], "PoolSource")
        self.skip_events = int(params.skipEvents)
        self.tree_name = str(params.treeName)
        self.events_per_read = int(params.eventsPerRead)
        self.duplicate_check = str(params.duplicateCheckMode)
        if self.duplicate_check not in DUPLICATE_MODES:
            raise ConfigurationError(
                f"PoolSource: duplicateCheckMode '{self.duplicate_check}' is not one of {', '.join(DUPLICATE_MODES)}"
            )
        self._open: list[Any] = []  # uproot files still open
        self._first: tuple[Any, Any, dict[str, Collection]] | None = None
        self._kept: dict[tuple[str, str], tuple[Any, Any, dict[str, Collection]]] = {}
        self._request: dict[str, Any] | None = None
        self._set_inputs([_Input(name, self.tree_name) for name in self.file_names])
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
        name = self._inputs[0].name
        resolved = resolve_request(layout, dict(request), name)
        check_types(tree, layout, resolved, name)
        self._request = dict(request)

    def set_units(self, units: Sequence[WorkUnit]) -> None:
        """Read these entry ranges, in this order, instead of ``fileNames`` (from now on).

        Each unit's file and tree are used; ``skipEvents`` still applies (to the first
        entries of the units together); the duplicate check starts afresh, so it covers
        the events of these units only (one dataset, as a CMSSW job covers its input).
        Files still open are closed. Call before :meth:`collections` for the units' first
        file to be the one whose layout output modules see.

        Raises:
            ConfigurationError: no units.
        """
        if not units:
            raise ConfigurationError("PoolSource: no work units to read")
        self.close()
        self._set_inputs([_Input(u.file, u.tree, u.entry_start, u.entry_stop) for u in units])

    def _set_inputs(self, inputs: list[_Input]) -> None:
        self._inputs = inputs
        # A file listed again later (noDuplicateCheck, or a file's next unit) stays open and
        # scanned until its last listing: reading a NanoAOD tree's metadata takes ~1 s, the
        # events of a 10-event file ~0.03 s. (name, tree) -> index of its last listing.
        self._last_listing = {(i.name, i.tree): k for k, i in enumerate(inputs)}
        self._seen: set[tuple[int, int, int]] = set()

    async def run(self, send_channel: trio.MemorySendChannel[SourceEvent], max_events: int) -> None:
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
        if not self._inputs:
            raise ConfigurationError("PoolSource: fileNames is empty (and no dataset was given)")
        if self._first is None:
            file, tree = self._open_file(self._inputs[0])
            self._first = (file, tree, scan_tree(tree))
        return self._first

    def _open_file(self, source: _Input) -> tuple[Any, Any]:
        file, tree = open_tree(source.name, source.tree)
        self._open.append(file)
        self._files_opened.append(source.name)
        log.info("opened input file %s: %d entries in tree '%s'", source.name, tree.num_entries, source.tree)
        return file, tree

    def _close(self, file: Any) -> None:
        file.close()
        # By identity: uproot directories are Mappings, whose == would read both files' keys.
        self._open = [f for f in self._open if f is not file]
        if self._first is not None and self._first[0] is file:
            self._first = None
        for key in [k for k, kept in self._kept.items() if kept[0] is file]:
            del self._kept[key]

    def _branch_list(self, layout: dict[str, Collection], request: dict[str, Any], tree: Any) -> list[str]:
        names = [b for b in ID_BRANCHES if b in tree]  # not tree.keys(): ~10 ms for NanoAOD
        for coll_name, fields in request.items():
            names += [b for b in layout[coll_name].branches(fields) if b not in names]
        return names

    async def _send_chunk(self, chunk: Chunk, send_channel: trio.MemorySendChannel[SourceEvent]) -> bool:
        for i in chunk.kept:
            event = SourceEvent(EventID(*chunk.ids[i]), EventView(chunk.collections, i),
                                chunk.file_name, chunk.start + i)
            try:
                await send_channel.send(event)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return False
            self._events_sent += 1
        return True

    async def _read_chunks(self, chunk_send: trio.MemorySendChannel[Chunk], max_events: int) -> None:
        with chunk_send:
            to_skip = self.skip_events
            planned = 0  # events that chunks read so far will deliver
            for index, source in enumerate(self._inputs):
                name = source.name
                file, tree, layout, request, branches = await trio.to_thread.run_sync(
                    self._prepare_file, index, source
                )
                has_ids = all(b in branches for b in ID_BRANCHES)
                if not has_ids:
                    log.warning("input file %s has no run/luminosityBlock/event branches: "
                                "event ids are 1:1:<entry+1>, without duplicate check", name)
                start, stop = self._entry_range(source, tree.num_entries)
                skipped = min(to_skip, stop - start)
                start, to_skip = start + skipped, to_skip - skipped
                for lo, hi in self._ranges(tree, branches, start, stop):
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
                if self._last_listing[(name, source.tree)] == index:
                    self._close(file)
                if 0 <= max_events <= planned:
                    return

    @staticmethod
    def _entry_range(source: _Input, n: int) -> tuple[int, int]:
        stop = n if source.stop is None else source.stop
        if not 0 <= source.start <= stop <= n:
            raise FileReadError(
                f"entries [{source.start}, {stop}) of tree '{source.tree}' in input file '{source.name}' "
                f"are out of range: the tree has {n} entries", file=source.name, entries=(source.start, stop),
            )
        return source.start, stop

    def _prepare_file(self, index: int, source: _Input) -> tuple[Any, Any, dict[str, Collection], dict[str, Any], list[str]]:
        # On a worker thread: opening and scanning a NanoAOD file's ~2,000 branches takes ~1 s.
        name, key = source.name, (source.name, source.tree)
        if index == 0 and self._first is not None:
            file, tree, layout = self._first
        elif key in self._kept:
            file, tree, layout = self._kept[key]
        else:
            file, tree = self._open_file(source)
            layout = scan_tree(tree)
        if self._last_listing[key] > index:
            self._kept[key] = (file, tree, layout)
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
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=False):
            if lo >= stop:
                return
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
                local_file_problem(name) or f"cannot read {what}{where} of tree '{tree.name}' in input "
                f"file '{name}': {one_line(exc)}", file=name, branch=culprit, entries=(lo, hi),
            ) from exc
        self._entries_read += hi - lo
        self._last_branches = tuple(branches)
        collections = build_collections(layout, request, arrays, hi - lo, name, f"{where} of tree '{tree.name}'")
        if has_ids:
            ids = list(zip(*(np.asarray(arrays[b]).tolist() for b in ID_BRANCHES), strict=True))
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
