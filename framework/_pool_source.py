"""``PoolSource``: NanoAOD-style ``Events`` TTrees read with uproot (CMSSW's ``PoolSource``).

NanoAOD stores every collection flat: branch ``X_y`` is field ``y`` of collection ``X``
(split at the *first* underscore, so ``JetPFCands_pt`` belongs to ``JetPFCands``, not to
``Jet``), and a jagged collection has a counter branch (``nX``, found through uproot's
``TBranch.count_branch``). A collection without counter (``MET_pt``, ``MET_phi``) holds one
object per event, and a branch without underscore (``run``, ``genWeight``) is a collection
of its own. Per event, modules see:

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
``eventsPerRead`` entries) are read and turned into chunk-wide collections on a worker
thread, one range ahead of the events being processed; each event is a lazy view into
its chunk, so nothing is copied per event.
"""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import awkward as ak
import numpy as np
import trio
import uproot

from ._errors import ConfigurationError, FileOpenError, FileReadError
from ._event import EventID
from ._source_base import Source, SourceEvent

__all__ = ["PoolSource", "SourceStatistics", "JaggedChunk", "SingletonChunk"]

log = logging.getLogger("pysonic.source")

ID_BRANCHES = ("run", "luminosityBlock", "event")
DUPLICATE_MODES = ("checkAllFilesOpened", "noDuplicateCheck")
_MAX_DUPLICATE_WARNINGS = 5  # per job, then one line: a file listed twice gives thousands


@dataclass(frozen=True)
class _Collection:
    """One collection of a tree: ``kind`` is "jagged", "singleton" or "plain"."""

    name: str
    kind: str
    fields: tuple[str, ...]
    counter: str | None = None  # jagged only: the counter branch (``nJet``)

    def branches(self, fields: tuple[str, ...] | None = None) -> list[str]:
        if self.kind == "plain":
            return [self.name]
        chosen = self.fields if fields is None else fields
        return ([self.counter] if self.counter else []) + [f"{self.name}_{f}" for f in chosen]


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


@dataclass
class _Chunk:
    """Entries [start, stop) of one file, read and turned into collections."""

    file_name: str
    start: int
    collections: dict[str, Any]
    ids: list[tuple[int, int, int]]  # per entry of the range
    kept: list[int] = field(default_factory=list)  # offsets in the range to deliver


class _EventView(Mapping):
    """The source collections of one event: lazy per-event views into a chunk."""

    __slots__ = ("_collections", "_i")

    def __init__(self, collections: dict[str, Any], i: int) -> None:
        self._collections = collections
        self._i = i

    def __getitem__(self, name: str) -> Any:
        return self._collections[name][self._i]

    def __contains__(self, name: object) -> bool:
        return name in self._collections

    def __iter__(self) -> Iterator[str]:
        return iter(self._collections)

    def __len__(self) -> int:
        return len(self._collections)


def _local_path(name: str) -> str:
    # CMSSW configs write local files as "file:name.root"; uproot wants a plain path.
    return name[len("file:"):] if name.startswith("file:") and not name.startswith("file://") else name


def _one_line(exc: BaseException) -> str:
    """``"Type: message"`` on one line: uproot's messages span several (``in file ...``)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _local_file_problem(name: str) -> str | None:
    """What is wrong with a local input file, seen from its first bytes (None: nothing seen).

    Missing, not a ROOT file, or truncated: ROOT's ``TFile`` header (``"root"``, fVersion,
    fBEGIN, fEND, ...) records fEND, the file's length when it was closed (4 bytes, or 8
    for fVersion > 1000000). URLs are left to uproot.
    """
    path = _local_path(name)
    if "://" in path:
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


def _open_tree(name: str, tree_name: str) -> tuple[Any, Any]:
    """Open ``name`` and return (file, tree). Raises FileOpenError naming the file."""
    # Checked first: uproot may read what is left of a truncated file, and its messages for
    # the other cases repeat the path on several lines. CMSSW refuses a truncated file too.
    problem = _local_file_problem(name)
    if problem:
        raise FileOpenError(problem)
    try:
        file = uproot.open(_local_path(name), array_cache=None)
    except Exception as exc:  # noqa: BLE001 - any failure to open is the file's fault
        raise FileOpenError(f"cannot open input file '{name}': {_one_line(exc)}") from exc
    try:
        classnames = file.classnames(cycle=False)
        if tree_name not in classnames:
            trees = sorted(k for k, c in classnames.items() if c == "TTree") or ["none"]
            raise FileOpenError(
                f"input file '{name}' has no tree '{tree_name}' (trees in the file: {', '.join(trees)})"
            )
        if classnames[tree_name] != "TTree":
            raise FileOpenError(
                f"'{tree_name}' in input file '{name}' is a {classnames[tree_name]}, not a TTree"
            )
        tree = file[tree_name]
        tree.num_entries  # noqa: B018 - touch the metadata now, so that damage shows up here
    except FileOpenError:
        file.close()
        raise
    except Exception as exc:  # noqa: BLE001
        file.close()
        raise FileOpenError(
            _local_file_problem(name) or f"cannot read tree '{tree_name}' of input file '{name}': {_one_line(exc)}"
        ) from exc
    return file, tree


def scan_tree(tree: Any) -> dict[str, _Collection]:
    """The collections of a NanoAOD-style tree (see the module docstring), by name.

    Counter branches are found through uproot's ``count_branch`` and are not collections:
    besides ``nJet``, recent NanoAOD (v15) has one counter per field (``nJet_pt``).
    """
    branches = list(tree.branches)
    counters = {b.count_branch.name for b in branches if b.count_branch is not None}
    names = {b.name for b in branches}
    groups: dict[str, list[Any]] = {}
    plain: list[str] = []
    for branch in branches:
        if branch.name in counters:
            continue
        prefix, sep, _ = branch.name.partition("_")
        if sep and prefix:
            groups.setdefault(prefix, []).append(branch)
        else:
            plain.append(branch.name)
    result: dict[str, _Collection] = {}
    for prefix, members in groups.items():
        fields = tuple(b.name[len(prefix) + 1:] for b in members)
        counts = [b.count_branch.name if b.count_branch is not None else None for b in members]
        own = {f"n{prefix}"} | {f"n{b.name}" for b in members}  # nJet, or nJet_pt per field
        if None not in counts and (len(set(counts)) == 1 or set(counts) <= own):
            counter = f"n{prefix}" if f"n{prefix}" in names else counts[0]
            result[prefix] = _Collection(prefix, "jagged", fields, counter)
        elif f"n{prefix}" in counters:
            # nJet counts some Jet_* fields but not all: still the jagged Jet collection,
            # with broken fields (a Jet_pt of strings) that _check_types names if requested.
            result[prefix] = _Collection(prefix, "jagged", fields, f"n{prefix}")
        else:
            # No counter, or fields with unrelated counters: one record per event, whose
            # fields may themselves be arrays.
            result[prefix] = _Collection(prefix, "singleton", fields)
    counters |= {c.counter for c in result.values() if c.counter}  # nJet beside nJet_pt (v15)
    for name in plain:
        if name in counters:
            continue
        if name in result:
            log.warning("plain branch '%s' has the name of a collection; it is not readable", name)
            continue
        result[name] = _Collection(name, "plain", ())
    return result


_NUMERIC_KINDS = "biuf"  # numpy dtype kinds: bool, signed, unsigned, floating


def _numeric(interpretation: Any, *, scalar: bool) -> bool:
    if not isinstance(interpretation, uproot.interpretation.numerical.AsDtype):
        return False
    dtype = interpretation.to_dtype
    return dtype.kind in _NUMERIC_KINDS and (not scalar or dtype.shape == ())


def _field_problem(coll: _Collection, branch: Any) -> str | None:
    """What a collection field's branch should be but is not (None: fine).

    Jagged collections (``Jet``): one number per object, i.e. a jagged branch of a numeric
    type counted by the collection's counter (or by its own ``nJet_pt``, NanoAOD v15).
    Singletons (``MET``): numbers per event, fixed-size or jagged arrays of numbers allowed.
    """
    interpretation = branch.interpretation
    if coll.kind == "jagged":
        counter = branch.count_branch.name if branch.count_branch is not None else None
        if (isinstance(interpretation, uproot.interpretation.jagged.AsJagged)
                and _numeric(interpretation.content, scalar=True)
                and counter in (coll.counter, f"n{branch.name}")):
            return None
        return f"one number per {coll.name} object (a numeric jagged branch counted by '{coll.counter}')"
    if _numeric(interpretation, scalar=False) or (
            isinstance(interpretation, uproot.interpretation.jagged.AsJagged)
            and _numeric(interpretation.content, scalar=False)):
        return None
    return f"numbers per event (collection '{coll.name}' has no counter branch)"


def _unreadable_branch(tree: Any, branches: list[str], lo: int, hi: int) -> str | None:
    """The first of ``branches`` whose entries [lo, hi) cannot be read (after a failed read)."""
    for name in branches:
        try:
            tree[name].array(entry_start=lo, entry_stop=hi, library="np")
        except Exception:  # noqa: BLE001 - this one is damaged
            return name
    return None


def _check_types(tree: Any, layout: dict[str, _Collection], request: dict[str, tuple[str, ...] | None],
                 file_name: str) -> None:
    """Check that the requested branches hold what the collections promise to modules.

    Raises:
        FileReadError: naming file, branch, what was expected and the branch's ROOT type
            (and uproot's interpretation): a field of strings, of nested vectors, or of a
            type uproot cannot read.
    """
    for name, fields in request.items():
        coll = layout[name]
        branches = coll.branches(fields)
        _check_interpretable(tree, branches, file_name)
        if coll.kind == "plain":
            continue
        for branch_name in branches:
            branch = tree[branch_name]
            expected = None if branch_name == coll.counter else _field_problem(coll, branch)
            if expected is not None:
                raise FileReadError(
                    f"branch '{branch_name}' of input file '{file_name}' is {branch.typename} "
                    f"(uproot {type(branch.interpretation).__name__}), expected {expected}"
                )


def _check_interpretable(tree: Any, branches: list[str], file_name: str) -> None:
    for name in branches:
        interpretation = tree[name].interpretation
        if isinstance(interpretation, uproot.interpretation.identify.UnknownInterpretation):
            raise FileReadError(
                f"branch '{name}' of input file '{file_name}' has a type uproot cannot read "
                f"({tree[name].typename}): {' '.join(str(interpretation).split())}"
            )


def _nearest(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    return ", ".join(repr(c) for c in close) if close else "none close"


def resolve_request(
    layout: dict[str, _Collection], request: dict[str, Any] | None, file_name: str
) -> dict[str, tuple[str, ...] | None]:
    """Check a branch request against a file's collections; None fields = all fields.

    Raises:
        FileReadError: a requested collection or field is not in the file (names the
            file, the branch and the nearest existing names).
    """
    if request is None:
        return {name: None for name in layout}
    resolved: dict[str, tuple[str, ...] | None] = {}
    for name, fields in request.items():
        coll = layout.get(name)
        if coll is None:
            raise FileReadError(
                f"input file '{file_name}' has no collection or branch '{name}' "
                f"(nearest: {_nearest(name, list(layout))})"
            )
        if fields is None or coll.kind == "plain":
            if fields and coll.kind == "plain":
                raise FileReadError(
                    f"branch '{name}' of input file '{file_name}' is a plain branch, it has no "
                    f"fields {sorted(fields)}"
                )
            resolved[name] = None
            continue
        for f in sorted(fields):
            if f not in coll.fields:
                branch = f"{name}_{f}"
                nearest = _nearest(branch, [f"{name}_{x}" for x in coll.fields])
                raise FileReadError(
                    f"input file '{file_name}' has no branch '{branch}' (nearest: {nearest})"
                )
        resolved[name] = tuple(f for f in coll.fields if f in fields)  # file order
    return resolved


class JaggedChunk:
    """A jagged collection over a chunk: ``chunk[i]`` is entry i's objects (a view).

    Built without copying: one record array over the fields' contents (``records``) and
    the offsets from the counter branch (``offsets``, int64, shape (n_entries + 1,)).
    Slicing the layout directly is ~3x faster than indexing a jagged ``ak.Array``.
    """

    __slots__ = ("records", "offsets")

    def __init__(self, records: ak.contents.RecordArray, offsets: np.ndarray) -> None:
        self.records = records
        self.offsets = offsets

    def __getitem__(self, i: int) -> ak.Array:
        return ak.Array(self.records[self.offsets[i]:self.offsets[i + 1]])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def to_array(self) -> ak.Array:
        """The whole chunk as one jagged ``ak.Array`` (no copy)."""
        return ak.Array(ak.contents.ListOffsetArray(ak.index.Index64(self.offsets), self.records))


class SingletonChunk:
    """A collection with one object per entry: ``chunk[i]`` is an ``ak.Record`` (a view)."""

    __slots__ = ("records",)

    def __init__(self, records: ak.contents.RecordArray) -> None:
        self.records = records

    def __getitem__(self, i: int) -> ak.Record:
        return ak.Record(ak.record.Record(self.records, i))

    def __len__(self) -> int:
        return self.records.length


def _build_jagged(coll: _Collection, fields: tuple[str, ...], arrays: dict[str, Any],
                  file_name: str, where: str) -> JaggedChunk:
    counts = np.asarray(arrays[coll.counter]).astype(np.int64, copy=False)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    contents = []
    for f in fields:
        layout = arrays[f"{coll.name}_{f}"].layout.to_ListOffsetArray64(True)
        if not np.array_equal(np.asarray(layout.offsets), offsets):
            raise FileReadError(
                f"branch '{coll.name}_{f}' of input file '{file_name}' {where} has per-entry "
                f"lengths different from its counter '{coll.counter}'"
            )
        contents.append(layout.content)
    # Zero-copy: the record array shares the fields' contents; one offsets array for all.
    records = ak.contents.RecordArray(contents, list(fields), length=int(offsets[-1]))
    return JaggedChunk(records, offsets)


def build_collections(
    layout: dict[str, _Collection], request: dict[str, tuple[str, ...] | None],
    arrays: dict[str, Any], n: int, file_name: str, where: str,
) -> dict[str, Any]:
    """Chunk-wide collections from ``tree.arrays(how=dict)``; ``result[name][i]`` is entry i's view.

    Plain flat branches become 1-D NumPy arrays (``[i]`` is a NumPy scalar), plain jagged
    ones stay ``ak.Array``; collections become :class:`JaggedChunk` / :class:`SingletonChunk`.
    """
    result: dict[str, Any] = {}
    for name, fields in request.items():
        coll = layout[name]
        chosen = coll.fields if fields is None else fields
        if coll.kind == "plain":
            arr = arrays[name]
            is_flat = isinstance(arr.layout, ak.contents.NumpyArray) and arr.ndim == 1
            result[name] = np.asarray(arr) if is_flat else arr
        elif coll.kind == "jagged":
            result[name] = _build_jagged(coll, chosen, arrays, file_name, where)
        else:
            contents = [arrays[f"{name}_{f}"].layout for f in chosen]
            result[name] = SingletonChunk(ak.contents.RecordArray(contents, list(chosen), length=n))
    return result


def _common_entry_offsets(tree: Any, branches: list[str]) -> list[int]:
    """Entry numbers where every branch of ``branches`` starts a basket (cluster bounds).

    uproot's ``tree.common_entry_offsets(filter_name=...)`` gives the same, but matches the
    names against every branch of the tree: ~65 ms per call on a 2,000-branch NanoAOD tree.
    """
    common: set[int] | None = None
    for name in branches:
        branch = tree[name]
        if branch.num_baskets:
            own = {int(x) for x in branch.entry_offsets}
            common = own if common is None else common & own
    return [0] if common is None else sorted(common)


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
        from . import config as cms

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
        self._first: tuple[Any, Any, dict[str, _Collection]] | None = None
        # A file listed again later (noDuplicateCheck) stays open and scanned until its last
        # listing: reading a NanoAOD tree's metadata takes ~1 s, the events of a 10-event
        # file ~0.03 s. name -> index of its last listing; name -> (file, tree, layout).
        self._last_listing = {n: i for i, n in enumerate(self.file_names)}
        self._kept: dict[str, tuple[Any, Any, dict[str, _Collection]]] = {}
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
        _check_types(tree, layout, resolved, name)
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
            chunk_send, chunk_recv = trio.open_memory_channel[_Chunk](0)
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

    def _first_file(self) -> tuple[Any, Any, dict[str, _Collection]]:
        if self._first is None:
            file, tree = self._open_file(self.file_names[0])
            self._first = (file, tree, scan_tree(tree))
        return self._first

    def _open_file(self, name: str) -> tuple[Any, Any]:
        file, tree = _open_tree(name, self.tree_name)
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

    def _branch_list(self, layout: dict[str, _Collection], request: dict[str, Any], tree: Any) -> list[str]:
        names = [b for b in ID_BRANCHES if b in tree]  # not tree.keys(): ~10 ms for NanoAOD
        for coll_name, fields in request.items():
            names += [b for b in layout[coll_name].branches(fields) if b not in names]
        return names

    async def _send_chunk(self, chunk: _Chunk, send_channel: trio.MemorySendChannel) -> bool:
        for i in chunk.kept:
            event = SourceEvent(EventID(*chunk.ids[i]), _EventView(chunk.collections, i),
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

    def _prepare_file(self, index: int, name: str) -> tuple[Any, Any, dict[str, _Collection], dict[str, Any], list[str]]:
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
        _check_types(tree, layout, request, name)
        return file, tree, layout, request, branches

    def _ranges(self, tree: Any, branches: list[str], start: int, stop: int) -> Iterator[tuple[int, int]]:
        if self.events_per_read > 0:
            bounds = list(range(0, stop, self.events_per_read)) + [stop]
        elif branches:
            bounds = _common_entry_offsets(tree, branches)
        else:
            bounds = [0, stop]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            if hi > start:
                yield max(lo, start), min(hi, stop)

    def _read_chunk(self, tree: Any, name: str, layout: dict[str, _Collection],
                    request: dict[str, Any], branches: list[str], lo: int, hi: int,
                    has_ids: bool) -> _Chunk:
        # Runs on a worker thread: the read, the decompression and the zip.
        where = f"entries [{lo}, {hi})"
        try:
            arrays = tree.arrays(branches, entry_start=lo, entry_stop=hi, how=dict)
        except Exception as exc:  # noqa: BLE001 - corrupt or truncated data
            culprit = _unreadable_branch(tree, branches, lo, hi)
            what = f"branch '{culprit}', " if culprit else ""
            raise FileReadError(
                _local_file_problem(name) or f"cannot read {what}{where} of tree '{self.tree_name}' in input "
                f"file '{name}': {_one_line(exc)}"
            ) from exc
        self._entries_read += hi - lo
        self._last_branches = tuple(branches)
        collections = build_collections(layout, request, arrays, hi - lo, name, where)
        if has_ids:
            ids = list(zip(*(np.asarray(arrays[b]).tolist() for b in ID_BRANCHES)))
        else:
            ids = [(1, 1, lo + i + 1) for i in range(hi - lo)]
        chunk = _Chunk(name, lo, collections, ids)
        chunk.kept = self._deduplicate(chunk, has_ids)
        return chunk

    def _deduplicate(self, chunk: _Chunk, has_ids: bool) -> list[int]:
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
