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
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np
import trio

from framework.core import NO_METADATA, EventID, Source, SourceEvent
from framework.utilities import ConfigurationError, FileOpenError, FileReadError

from ._chunks import Chunk, EventView, build_collections, common_entry_offsets
from ._files import local_file_problem, one_line, open_input
from ._fileset import expand_file_names
from ._layout import Collection, check_types, resolve_request, scan_tree, unreadable_branch
from ._remote import (
    OpenedFile,
    RemoteAccess,
    close_in_background,
    is_remote,
    is_transient,
    read_with_retries,
    reason,
)
from ._units import WorkUnit

__all__ = ["PoolSource", "SourceStatistics"]

log = logging.getLogger("pysonic.source")

ID_BRANCHES = ("run", "luminosityBlock", "event")
DUPLICATE_MODES = ("checkAllFilesOpened", "noDuplicateCheck")
_MAX_DUPLICATE_WARNINGS = 5  # per job, then one line: a file listed twice gives thousands


class _Input(NamedTuple):
    """Entries [start, stop) of tree ``tree`` in file ``name`` (stop None: to the end);
    ``unit``: the work unit it comes from (None: a config's ``fileNames``)."""

    name: str
    tree: str
    start: int = 0
    stop: int | None = None
    unit: WorkUnit | None = None

    def metadata(self, stop: int) -> Mapping[str, Any]:
        """``event.metadata`` of its events (coffea's keys, then the dataset's metadata)."""
        found: dict[str, Any] = {} if self.unit is None else {"dataset": self.unit.dataset}
        found.update(filename=self.name, treename=self.tree, entrystart=self.start, entrystop=stop)
        if self.unit is not None:
            found.update(self.unit.metadata)
        return MappingProxyType(found)


class _Handle:
    """An open input file: the uproot file and tree (replaced when a remote file is opened
    again after a read error), its layout, and where it was opened."""

    __slots__ = ("file", "tree", "tree_path", "layout", "opened")

    def __init__(self, file: Any, tree: Any, tree_path: str, layout: dict[str, Collection], opened: OpenedFile) -> None:
        self.file, self.tree, self.tree_path, self.layout, self.opened = file, tree, tree_path, layout, opened


@dataclass(frozen=True)
class SourceStatistics:
    """What a :class:`PoolSource` has done so far (``PoolSource.statistics()``).

    Attributes:
        files_opened: input files opened, in order.
        entries_read: tree entries read (skipped files and ranges not included).
        events_sent: events delivered to the scheduler.
        duplicates_skipped: events dropped by ``duplicateCheckMode``.
        branches: branch names of the last read (what the branch request selected).
        inputs: where each file was opened, in order (the summary's input table).
        read_retries: file name -> reads tried again after a transient error.
    """

    files_opened: tuple[str, ...]
    entries_read: int
    events_sent: int
    duplicates_skipped: int
    branches: tuple[str, ...]
    inputs: tuple[OpenedFile, ...] = ()
    read_retries: dict[str, int] = field(default_factory=dict)


class PoolSource(Source):
    """Reads events from NanoAOD-style ROOT files (CMSSW's ``PoolSource``).

    Parameters (all untracked): ``fileNames`` (vstring: local paths, ``file:`` paths,
    any URL uproot reads, e.g. ``root://``, ``https://``, or CMS logical file names
    ``/store/...``, read through ``redirectors``; local glob patterns such as
    ``data/*.root`` are expanded, sorted; may be empty when :meth:`set_units` gives the
    input, as ``cmsrun --dataset`` does),
    ``skipEvents`` (uint32, 0: entries skipped at the start of the input, across files),
    ``treeName`` (string, "Events"), ``duplicateCheckMode`` ("checkAllFilesOpened": an
    event id seen before is skipped with a warning, as in CMSSW; "noDuplicateCheck": the
    same file may be listed several times; it is then opened once and stays open until its
    last listing), ``eventsPerRead`` (uint32, 0 = the file's own clusters; else entries
    per read); for remote files (``_remote``): ``redirectors`` (vstring: URL prefixes tried
    in order for an LFN, as CMSSW's site-local, regional and global redirectors),
    ``openTimeout`` (double, 30 s: per open at one place), ``timeout`` (double, 30 s: per
    read request), ``readRetries`` (uint32, 2: further tries after a transient read error).
    The end-of-job summary lists where each remote file was opened (:meth:`report`).

    Instead of whole files, :meth:`set_units` makes the source read entry ranges of files
    (:class:`~framework.io.WorkUnit`, each with its own tree), as a Dask worker reads one
    unit of a dataset.

    Files without ``run``/``luminosityBlock``/``event`` branches get ids
    ``1:1:<entry + 1>`` and are left out of the duplicate check (with a warning).

    Errors come from :meth:`collections`, :meth:`set_branch_request` and :meth:`run`.

    Raises:
        FileOpenError: a file cannot be opened or has no such tree (names file and trees).
        FileReadError: a requested branch is missing (names the nearest ones), cannot be
            interpreted, or its data cannot be read (names file and entry range; for a
            remote file the server, and the timeout that passed).
        ConfigurationError: a bad redirector or timeout.
    """

    @classmethod
    def fill_descriptions(cls, desc: Any) -> None:
        from .. import config as cms

        desc.add(
            "fileNames",
            cms.untracked.vstring(),
            "input files: paths (globs expanded), file:paths or URLs (root://, https://)",
        )
        desc.add("skipEvents", cms.untracked.uint32(0), "entries to skip at the start of the input, across files")
        desc.add("treeName", cms.untracked.string("Events"), "name of the TTree holding the events")
        desc.add(
            "duplicateCheckMode",
            cms.untracked.string("checkAllFilesOpened"),
            "'checkAllFilesOpened' (skip repeated event ids with a warning) or 'noDuplicateCheck'",
        )
        desc.add(
            "eventsPerRead",
            cms.untracked.uint32(0),
            "entries per read; 0 = the file's own clusters (TTree::GetClusterIterator)",
        )
        desc.add(
            "redirectors",
            cms.untracked.vstring(),
            "URL prefixes tried in order for /store/... names, e.g. root://cms-xrd-global.cern.ch//",
        )
        desc.add(
            "openTimeout",
            cms.untracked.double(30.0),
            "seconds an open of a remote file may take at one place (a URL, each redirector)",
        )
        desc.add("timeout", cms.untracked.double(30.0), "seconds each read request to a remote server may wait")
        desc.add(
            "readRetries",
            cms.untracked.uint32(2),
            "further tries of a remote read after a transient error (not after a timeout)",
        )

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
        self.access = RemoteAccess.from_params(params)
        self._open: list[_Handle] = []  # files still open
        self._first: _Handle | None = None
        self._kept: dict[tuple[str, str], _Handle] = {}
        self._opened: list[OpenedFile] = []
        self._retries: dict[str, int] = {}
        self._request: dict[str, Any] | None = None
        self._metadata: Mapping[str, Any] = NO_METADATA
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
        layout = self._first_file().layout
        return {name: coll.fields for name, coll in layout.items()}

    def set_branch_request(self, request: dict[str, set[str] | None]) -> None:
        """Read only these collections (fields ``None`` = all); run/lumi/event always.

        Raises:
            FileReadError: a requested collection or field is not in the first file, or
                has a type uproot cannot interpret.
        """
        first = self._first_file()
        name = self._inputs[0].name
        resolved = resolve_request(first.layout, dict(request), name)
        check_types(first.tree, first.layout, resolved, name)
        self._request = dict(request)

    def set_units(self, units: Sequence[WorkUnit]) -> None:
        """Read these entry ranges, in this order, instead of ``fileNames`` (from now on).

        Each unit's file and tree are used; ``skipEvents`` still applies (to the first
        entries of the units together); the duplicate check starts afresh, so it covers
        the events of these units only (one dataset, as a CMSSW job covers its input).
        Files still open are closed. Call before :meth:`collections` for the units' first
        file to be the one whose layout output modules see.

        The units' dataset and its metadata become :meth:`metadata`; each event's
        ``metadata`` names its unit (file, tree, entry range) too.

        Raises:
            ConfigurationError: no units, or units of several datasets.
        """
        if not units:
            raise ConfigurationError("PoolSource: no work units to read")
        datasets = sorted({u.dataset for u in units})
        if len(datasets) > 1:
            raise ConfigurationError(
                f"PoolSource: work units of {len(datasets)} datasets ({', '.join(map(repr, datasets))}): "
                "a job reads one dataset"
            )
        self.close()
        self._set_inputs([_Input(u.file, u.tree, u.entry_start, u.entry_stop, u) for u in units])
        self._metadata = MappingProxyType({"dataset": units[0].dataset, **units[0].metadata})

    def metadata(self) -> Mapping[str, Any]:
        """``{"dataset": name, **the fileset's metadata}`` of the units given to
        :meth:`set_units`; empty while the source reads its ``fileNames``."""
        return self._metadata

    def _set_inputs(self, inputs: list[_Input]) -> None:
        self._inputs = inputs
        # A file listed again later (noDuplicateCheck, or a file's next unit) stays open and
        # scanned until its last listing: reading a NanoAOD tree's metadata takes ~1 s, the
        # events of a 10-event file ~0.03 s. (name, tree) -> index of its last listing.
        self._last_listing = {(i.name, i.tree): k for k, i in enumerate(inputs)}
        self._seen: set[tuple[int, int, int]] = set()

    async def run(self, send_channel: trio.MemorySendChannel[SourceEvent], max_events: int) -> None:
        """Send one :class:`~framework.SourceEvent` per event, in input order, then close the channel.

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
        """Close every file still open (also after a failure); remote ones without waiting
        for their server (a stopped job must not hang on a server that does not answer)."""
        for handle in self._open:
            _close(handle.file, handle.opened.name)
        self._open.clear()
        self._first = None
        self._kept.clear()

    def statistics(self) -> SourceStatistics:
        """Counters of what was opened, read and sent so far."""
        return SourceStatistics(
            tuple(self._files_opened),
            self._entries_read,
            self._events_sent,
            self._duplicates,
            self._last_branches,
            tuple(self._opened),
            dict(self._retries),
        )

    def report(self) -> list[Any]:
        """The summary's input table (``_report``): where each remote file was opened, what
        failed first, read retries; nothing if every input was local."""
        from ._report import input_table

        return input_table(self._opened, self._retries)

    # -- reading ----------------------------------------------------------------------

    def _first_file(self) -> _Handle:
        if not self._inputs:
            raise ConfigurationError("PoolSource: fileNames is empty (and no dataset was given)")
        if self._first is None:
            self._first = self._open_file(self._inputs[0])
        return self._first

    def _open_file(self, source: _Input) -> _Handle:
        file, tree, opened = open_input(source.name, source.tree, self.access)
        handle = _Handle(file, tree, source.tree, scan_tree(tree), opened)
        self._open.append(handle)
        self._files_opened.append(source.name)
        self._opened.append(opened)
        served = f" (served by {opened.served_by})" if is_remote(source.name) else ""
        log.info("opened input file %s%s: %d entries in tree '%s'", source.name, served, tree.num_entries, source.tree)
        return handle

    def _close(self, handle: _Handle) -> None:
        _close(handle.file, handle.opened.name)
        self._open = [h for h in self._open if h is not handle]
        if self._first is handle:
            self._first = None
        for key in [k for k, kept in self._kept.items() if kept is handle]:
            del self._kept[key]

    def _reopen(self, handle: _Handle, error: BaseException, where: str, retry: int) -> None:
        """Open a remote file again where it was opened, after a transient read error
        (uproot's XRootD source closes the file on a failed read)."""
        name, opened = handle.opened.name, handle.opened
        self._retries[name] = self._retries.get(name, 0) + 1
        log.warning(
            "input file %s: reading %s from %s failed (%s): trying again (%d of %d)",
            name,
            where,
            opened.served_by,
            reason(error, opened.url),
            retry,
            self.access.read_retries,
        )
        close_in_background(handle.file)
        try:
            handle.file, handle.tree, _ = open_input(opened.url, handle.tree_path, self.access)
        except FileOpenError as exc:
            raise FileReadError(
                f"cannot read {where} of input file '{name}' from {opened.served_by}: "
                f"{reason(error, opened.url)}; opening it again failed: {exc.args[0]}",
                file=name,
            ) from exc

    def _branch_list(self, layout: dict[str, Collection], request: dict[str, Any], tree: Any) -> list[str]:
        names = [b for b in ID_BRANCHES if b in tree]  # not tree.keys(): ~10 ms for NanoAOD
        for coll_name, fields in request.items():
            names += [b for b in layout[coll_name].branches(fields) if b not in names]
        return names

    async def _send_chunk(self, chunk: Chunk, send_channel: trio.MemorySendChannel[SourceEvent]) -> bool:
        for i in chunk.kept:
            event = SourceEvent(
                EventID(*chunk.ids[i]),
                EventView(chunk.collections, i),
                chunk.file_name,
                chunk.start + i,
                chunk.metadata,
            )
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
                # abandon_on_cancel: a read that waits for a server must not hold a stopped
                # job (the thread is a daemon, bounded by the timeouts, and its result dropped).
                handle, request, branches = await trio.to_thread.run_sync(
                    self._prepare_file, index, source, abandon_on_cancel=True
                )
                has_ids = all(b in branches for b in ID_BRANCHES)
                if not has_ids:
                    log.warning(
                        "input file %s has no run/luminosityBlock/event branches: "
                        "event ids are 1:1:<entry+1>, without duplicate check",
                        name,
                    )
                start, stop = self._entry_range(source, handle.tree.num_entries)
                metadata = source.metadata(stop)
                skipped = min(to_skip, stop - start)
                start, to_skip = start + skipped, to_skip - skipped
                for lo, hi in self._ranges(handle.tree, branches, start, stop):
                    while lo < hi and not 0 <= max_events <= planned:
                        # Read only what max_events still needs; if duplicates leave it
                        # short, the rest of the range is read next.
                        stop = hi if max_events < 0 else min(hi, lo + max_events - planned)
                        chunk = await trio.to_thread.run_sync(
                            self._read_chunk,
                            handle,
                            name,
                            request,
                            branches,
                            lo,
                            stop,
                            has_ids,
                            abandon_on_cancel=True,
                        )
                        chunk.metadata = metadata
                        planned += len(chunk.kept)
                        lo = stop
                        await chunk_send.send(chunk)
                if self._last_listing[(name, source.tree)] == index:
                    self._close(handle)
                if 0 <= max_events <= planned:
                    return

    @staticmethod
    def _entry_range(source: _Input, n: int) -> tuple[int, int]:
        stop = n if source.stop is None else source.stop
        if not 0 <= source.start <= stop <= n:
            raise FileReadError(
                f"entries [{source.start}, {stop}) of tree '{source.tree}' in input file '{source.name}' "
                f"are out of range: the tree has {n} entries",
                file=source.name,
                entries=(source.start, stop),
            )
        return source.start, stop

    def _prepare_file(self, index: int, source: _Input) -> tuple[_Handle, dict[str, Any], list[str]]:
        # On a worker thread: opening and scanning a NanoAOD file's ~2,000 branches takes ~1 s.
        name, key = source.name, (source.name, source.tree)
        if index == 0 and self._first is not None:
            handle = self._first
        elif key in self._kept:
            handle = self._kept[key]
        else:
            handle = self._open_file(source)
        if self._last_listing[key] > index:
            self._kept[key] = handle
        request = resolve_request(handle.layout, self._request, name)
        branches = self._branch_list(handle.layout, request, handle.tree)
        check_types(handle.tree, handle.layout, request, name)
        return handle, request, branches

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

    def _read_chunk(
        self, handle: _Handle, name: str, request: dict[str, Any], branches: list[str], lo: int, hi: int, has_ids: bool
    ) -> Chunk:
        # Runs on a worker thread: the read, the decompression and the zip.
        where = f"entries [{lo}, {hi})"
        layout = handle.layout

        def read() -> dict[str, Any]:
            return handle.tree.arrays(branches, entry_start=lo, entry_stop=hi, how=dict)  # type: ignore[no-any-return]

        remote = is_remote(name)
        tries: list[BaseException] = []  # errors retried for this read

        def reopen(error: BaseException) -> None:
            tries.append(error)
            self._reopen(handle, error, where, len(tries))

        try:
            arrays = read_with_retries(read, self.access.read_retries, reopen) if remote else read()
        except FileReadError:
            raise
        except Exception as exc:  # noqa: BLE001 - corrupt or truncated data, or the network
            tree = handle.tree
            if remote and (isinstance(exc, TimeoutError) or is_transient(exc)):
                # The server, not the data: reading each branch again to find a culprit
                # would only wait again.
                server = handle.opened.served_by
                url = handle.opened.url
                if isinstance(exc, TimeoutError):
                    why = f"no answer within timeout = {self.access.timeout:g} s ({reason(exc, url)})"
                else:
                    why = f"{reason(exc, url)} (after {len(tries) + 1} tries)" if tries else reason(exc, url)
                raise FileReadError(
                    f"cannot read {where} of tree '{tree.name}' in input file '{name}' from {server}: {why}",
                    file=name,
                    entries=(lo, hi),
                ) from exc
            culprit = unreadable_branch(tree, branches, lo, hi)
            what = f"branch '{culprit}', " if culprit else ""
            raise FileReadError(
                local_file_problem(name)
                or f"cannot read {what}{where} of tree '{tree.name}' in input file '{name}': {one_line(exc)}",
                file=name,
                branch=culprit,
                entries=(lo, hi),
            ) from exc
        self._entries_read += hi - lo
        self._last_branches = tuple(branches)
        collections = build_collections(layout, request, arrays, hi - lo, name, f"{where} of tree '{handle.tree.name}'")
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
                    log.warning(
                        "duplicate event %s (entry %d of %s) skipped: its id was seen before "
                        "(duplicateCheckMode = 'checkAllFilesOpened')",
                        EventID(*event_id),
                        chunk.start + i,
                        chunk.file_name,
                    )
                elif self._duplicates == _MAX_DUPLICATE_WARNINGS + 1:
                    log.warning("more duplicate events skipped; see statistics().duplicates_skipped")
                continue
            seen.add(event_id)
            kept.append(i)
        return kept


def _close(file: Any, name: str) -> None:
    if is_remote(name):
        close_in_background(file)
    else:
        file.close()
