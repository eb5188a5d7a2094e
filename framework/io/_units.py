"""Work units: a dataset's files read once for their entry counts and ROOT clusters, then
split into entry ranges of about ``chunk_size`` events aligned to cluster boundaries.

This is coffea's ``preprocess`` (``step_size``, ``align_clusters=True``) and CMSSW's
``eventsPerJob`` splitting. Three pieces, so that the expensive one can run anywhere:

1. :func:`preprocess_file` ``(path, tree) -> FileInfo``: opens one file and reads its entry
   count, cluster boundaries (uproot's ``TTree.common_entry_offsets()``: entries where
   every branch starts a basket) and UUID. A plain function of picklable arguments and
   result, without trio: it can run on a Dask worker.
2. :class:`PreprocessCache`: the :class:`FileInfo` of files already read, in a JSON file
   (next to the job's output); an entry is reused while the file is unchanged: same size
   and modification time (local files) or same ROOT UUID (URLs, which have no mtime).
3. :func:`split_units` ``(dataset, info, chunk_size) -> [WorkUnit]``: pure arithmetic.

:func:`preprocess` ties them together for a list of datasets; its ``mapper`` argument
(``map`` by default) decides where step 1 runs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from framework.utilities import ConfigurationError, FileOpenError, FileWriteError

from ._files import local_path, one_line, open_tree
from ._fileset import Dataset, FileSpec
from ._remote import RemoteAccess, bounded, close_in_background, is_remote
from ._writer import atomic_write

__all__ = [
    "FileInfo",
    "WorkUnit",
    "preprocess_file",
    "split_units",
    "limit_units",
    "PreprocessCache",
    "preprocess",
    "DEFAULT_CHUNK_SIZE",
]

log = logging.getLogger("pysonic.preprocess")

DEFAULT_CHUNK_SIZE = 100_000  # events per unit: coffea's processor.Runner default chunksize
# A cluster more than (1 + this) x chunk_size is cut into units inside it (coffea warns at
# the same factor, step_size_safety_factor = 0.5, but keeps such a cluster whole).
OVERSIZE_FACTOR = 0.5
CACHE_VERSION = 1


@dataclass(frozen=True)
class FileInfo:
    """What preprocessing learns of one file's tree (picklable, JSON-able).

    Attributes:
        path, tree: the file (path or URL, as in the fileset) and its TTree.
        num_entries: entries in the tree.
        clusters: cluster boundaries, ascending entry numbers from 0 to ``num_entries``
            (both included; ``(0,)`` for an empty tree): cluster k is entries
            [clusters[k], clusters[k + 1]).
        uuid: the ROOT file's UUID (``TFile::GetUUID``), as a string.
        size, mtime_ns: the local file's size in bytes and modification time in ns
            (``os.stat``); None for URLs.
    """

    path: str
    tree: str
    num_entries: int
    clusters: tuple[int, ...]
    uuid: str
    size: int | None = None
    mtime_ns: int | None = None


@dataclass(frozen=True)
class WorkUnit:
    """Entries [entry_start, entry_stop) of one file of one dataset: what one task processes.

    ``id`` is stable across runs (it depends only on these five fields) and ``part_name``
    is its file-system-safe form for part files. ``metadata`` is the dataset's fileset
    ``metadata`` (coffea's ``WorkItem.usermeta``), carried so that a Dask worker's modules
    can read it (``EDModule.metadata``, ``Event.metadata``); it takes no part in ``id``,
    equality or hashing.
    """

    dataset: str
    file: str
    tree: str
    entry_start: int
    entry_stop: int
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_entries(self) -> int:
        return self.entry_stop - self.entry_start

    @property
    def id(self) -> str:
        """``"<dataset>:<file>:<tree>[<start>,<stop>)"``: unique within a run."""
        return f"{self.dataset}:{self.file}:{self.tree}[{self.entry_start},{self.entry_stop})"

    @property
    def part_name(self) -> str:
        """``<file stem>.<start>-<stop>.<10 hex digits of sha1(id)>``: readable, unique, safe
        in file names (the hash tells apart equal stems in different folders or datasets)."""
        stem = os.path.basename(self.file.rstrip("/")).rsplit(".root", 1)[0] or "file"
        digest = hashlib.sha1(self.id.encode()).hexdigest()[:10]
        return f"{stem}.{self.entry_start}-{self.entry_stop}.{digest}"

    def describe(self) -> str:
        """How errors name it: ``entries [0, 40) of tree 'Events' in 'a.root' (dataset 'DY')``."""
        return (
            f"entries [{self.entry_start}, {self.entry_stop}) of tree '{self.tree}' in "
            f"'{self.file}' (dataset '{self.dataset}')"
        )


def _stat(path: str) -> tuple[int | None, int | None]:
    if is_remote(path):
        return None, None
    st = os.stat(local_path(path))
    return st.st_size, st.st_mtime_ns


def preprocess_file(path: str, tree: str, access: RemoteAccess | None = None) -> FileInfo:
    """Open ``path`` and read its tree's entry count, cluster boundaries and UUID.

    Runs anywhere (a thread, a Dask worker): no trio, picklable arguments and result.
    Reads the tree's metadata only (~0.1-1 s for a NanoAOD tree of ~2,000 branches), no
    event data. ``access``: redirectors and timeouts for URLs and ``/store/...`` names
    (None: the defaults, no redirectors).

    Raises:
        FileOpenError: one line naming the file: missing, not ROOT, truncated, no such tree,
            damaged metadata.
    """
    if is_remote(path):
        # On a daemon thread, waited for interruptibly: cmsrun --dataset preprocesses on its
        # main thread, where Ctrl-C must not wait for a server (the reads are bounded anyway).
        return bounded(functools.partial(_preprocess_file, path, tree, access), None, _ignore)
    return _preprocess_file(path, tree, access)


def _ignore(_: object) -> None:
    pass


def _preprocess_file(path: str, tree: str, access: RemoteAccess | None) -> FileInfo:
    try:
        size, mtime_ns = _stat(path)  # before reading: a file changed meanwhile is read again next time
    except OSError:
        size = mtime_ns = None  # open_tree says what is wrong
    file, ttree = open_tree(path, tree, access)
    try:
        n = int(ttree.num_entries)
        try:
            offsets = [int(x) for x in ttree.common_entry_offsets()]
        except Exception as exc:  # noqa: BLE001 - damaged basket metadata
            raise FileOpenError(
                f"cannot read the cluster layout of tree '{tree}' in input file '{path}': {one_line(exc)}"
            ) from exc
        uuid = str(file.file.uuid)
    finally:
        if is_remote(path):
            close_in_background(file)  # a remote close asks the server: not waited for
        else:
            file.close()
    clusters = sorted({0, n, *(x for x in offsets if 0 <= x <= n)})
    return FileInfo(path, tree, n, tuple(clusters), uuid, size, mtime_ns)


def split_units(
    dataset: str,
    info: FileInfo,
    chunk_size: int,
    steps: Sequence[tuple[int, int]] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> list[WorkUnit]:
    """Split one file into units of about ``chunk_size`` entries at cluster boundaries.

    Algorithm (after coffea's ``get_steps`` with ``align_clusters=True``, which starts a
    new unit at the first cluster boundary at least ``chunk_size`` entries after the
    current start): walk the cluster boundaries and end the unit at the boundary nearest
    to ``start + chunk_size`` (at or after it, or before it when that one is nearer); the
    last unit takes what is left. Unlike coffea, a single cluster longer than
    1.5 x ``chunk_size`` is first cut into ``round(length / chunk_size)`` equal ranges, so
    that a file written as one big cluster (small files often are) still gives units of
    about ``chunk_size``; each unit that cuts a cluster decompresses that cluster's baskets
    again (CPU, not a wrong result). Files are never merged into one unit.

    Args:
        dataset: the dataset name the units belong to.
        info: the file's :class:`FileInfo`.
        chunk_size: target entries per unit (>= 1).
        steps: entry ranges to use as they are (a preprocessed coffea fileset's ``steps``);
            None to split the whole file.
        metadata: the dataset's fileset ``metadata``, given to every unit (None: none).

    Returns:
        Units in entry order, covering every entry of the file (or of ``steps``) exactly
        once; an empty tree gives one unit [0, 0) so that the file is still accounted for.

    Raises:
        ValueError: ``chunk_size`` < 1, or ``steps`` beyond the file's entries (names the file).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk size must be >= 1 event, got {chunk_size}")
    meta = dict(metadata or {})
    n = info.num_entries
    if steps is not None:
        bad = [s for s in steps if not 0 <= s[0] <= s[1] <= n]
        if bad:
            raise ValueError(
                f"steps {list(bad[0])} of file '{info.path}' are beyond its {n} entries (tree '{info.tree}')"
            )
        return [WorkUnit(dataset, info.path, info.tree, a, b, meta) for a, b in steps]
    if n == 0:
        return [WorkUnit(dataset, info.path, info.tree, 0, 0, meta)]
    bounds: list[int] = [0]
    for lo, hi in zip(info.clusters, info.clusters[1:], strict=False):
        length = hi - lo
        if length > (1 + OVERSIZE_FACTOR) * chunk_size:
            pieces = max(1, round(length / chunk_size))
            step = math.ceil(length / pieces)
            bounds += list(range(lo + step, hi, step))
        bounds.append(hi)
    starts = [0]
    for b, after in zip(bounds[1:], [*bounds[2:], None], strict=True):
        done = b - starts[-1]
        # Cut at b once the unit is big enough, or when b is nearer the target than the
        # next boundary would be.
        if done >= chunk_size or (after is not None and (after - starts[-1]) - chunk_size > chunk_size - done):
            starts.append(b)
    if starts[-1] != n:
        starts.append(n)
    return [WorkUnit(dataset, info.path, info.tree, a, b, meta) for a, b in zip(starts, starts[1:], strict=False)]


def limit_units(units: Sequence[WorkUnit], skip: int = 0, max_events: int = -1) -> list[WorkUnit]:
    """The units of one dataset cut as one job over them would read them: the first ``skip``
    entries left out, then at most ``max_events`` entries (PoolSource's ``skipEvents`` and
    ``maxEvents``, applied per dataset as ``cmsrun --dataset`` applies them).

    Args:
        units: one dataset's units, in order.
        skip: entries to skip at the start (>= 0).
        max_events: entries to keep after that; -1 = all.

    Returns:
        The units that still hold entries, the first and last ones shortened; ``units``
        unchanged (empty units included) when there is nothing to cut.
    """
    if skip <= 0 and max_events < 0:
        return list(units)
    kept: list[WorkUnit] = []
    left = max_events
    for unit in units:
        if left == 0:
            break
        start, stop = unit.entry_start, unit.entry_stop
        skipped = min(skip, stop - start)
        start, skip = start + skipped, skip - skipped
        if left > 0:
            stop = min(stop, start + left)
            left -= stop - start
        if stop > start:
            kept.append(WorkUnit(unit.dataset, unit.file, unit.tree, start, stop))
    return kept


class PreprocessCache:
    """:class:`FileInfo` of files already preprocessed, kept in a JSON file.

    The file holds ``{"version": 1, "files": [FileInfo as a mapping, ...]}``; it is written
    atomically. An entry is valid for (path, tree) while the local file has the same size
    and mtime (nanoseconds), or, for a URL or LFN, the same UUID (:meth:`lookup` then opens
    the file's header, through ``access``). A missing, unreadable or other-version cache
    file is an empty cache (with a warning for the unreadable one): the cache never fails a job.
    """

    def __init__(self, path: Path | None, access: RemoteAccess | None = None) -> None:
        self.access = access or RemoteAccess()
        self.path = None if path is None else Path(path)
        self.entries: dict[tuple[str, str], FileInfo] = {}
        if self.path is not None and self.path.exists():
            self._load()

    def _load(self) -> None:
        assert self.path is not None  # only called with a cache file
        try:
            data = json.loads(self.path.read_text())
            if data.get("version") != CACHE_VERSION:
                return
            for item in data["files"]:
                info = FileInfo(**{**item, "clusters": tuple(item["clusters"])})
                self.entries[(info.path, info.tree)] = info
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("preprocessing cache %s is unreadable (%s): files are read again", self.path, one_line(exc))
            self.entries.clear()

    def lookup(self, path: str, tree: str) -> FileInfo | None:
        """The cached :class:`FileInfo` if the file is unchanged, else None."""
        info = self.entries.get((path, tree))
        if info is None:
            return None
        try:
            if is_remote(path):
                from ._remote import open_root_file

                f, _ = open_root_file(path, self.access)
                try:
                    return info if str(f.file.uuid) == info.uuid else None
                finally:
                    close_in_background(f)
            return info if _stat(path) == (info.size, info.mtime_ns) else None
        except Exception:  # noqa: BLE001 - gone or unreadable: preprocess_file says why
            return None

    def store(self, infos: Iterable[FileInfo]) -> None:
        """Add ``infos`` and write the cache file (if it has a path)."""
        for info in infos:
            self.entries[(info.path, info.tree)] = info
        if self.path is None:
            return
        data = {"version": CACHE_VERSION, "files": [asdict(i) for i in self.entries.values()]}
        try:
            # Not a job's output: written now, whatever becomes of the job.
            with atomic_write(self.path, "preprocessing cache", commit=False) as temp:
                temp.write_text(json.dumps(data, indent=1))
        except (OSError, FileWriteError) as exc:
            log.warning("cannot write the preprocessing cache %s: %s", self.path, exc)


Mapper = Callable[..., Iterable[FileInfo]]


def preprocess(
    datasets: Sequence[Dataset],
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    *,
    cache: Path | None = None,
    mapper: Mapper = map,
    access: RemoteAccess | None = None,
) -> dict[str, list[WorkUnit]]:
    """The work units of each dataset: cached file facts, :func:`preprocess_file` for the
    rest (each distinct (path, tree) once, even if several datasets list it), then
    :func:`split_units`.

    Args:
        datasets: from :func:`~framework.io.load_fileset`.
        chunk_size: target events per unit.
        cache: the JSON cache file (None: no cache).
        mapper: ``mapper(preprocess_file, paths, trees)`` returns the FileInfo of each pair in
            order; ``map`` runs them here, one after the other; a Dask client would submit
            them (``lambda f, *a: client.gather(client.map(f, *a))``).
        access: redirectors and timeouts for remote files (PoolSource's; picklable).

    Returns:
        dataset name -> units in fileset order (file by file, entry order within a file).

    Raises:
        FileOpenError: a file cannot be read (from ``preprocess_file``: one line naming it).
        ConfigurationError: steps of a preprocessed fileset beyond a file's entries (naming
            dataset and file); the cache is then not written.
    """
    store = PreprocessCache(cache, access)
    wanted: dict[tuple[str, str], FileInfo | None] = {}
    for dataset in datasets:
        for spec in dataset.files:
            key = (spec.path, spec.tree)
            if key not in wanted:
                wanted[key] = store.lookup(*key)
    missing = [key for key, info in wanted.items() if info is None]
    if missing:
        log.info("preprocessing %d file(s): entry counts and cluster boundaries", len(missing))
        reader = functools.partial(preprocess_file, access=access) if access is not None else preprocess_file
        found = list(mapper(reader, [k[0] for k in missing], [k[1] for k in missing]))
        wanted.update(zip(missing, found, strict=True))
    units = {
        d.name: [u for spec in d.files for u in _units_of(d, spec, wanted[(spec.path, spec.tree)], chunk_size)]
        for d in datasets
    }
    if missing:  # once the fileset proved good: a refused fileset leaves no cache file
        store.store(found)
    return units


def _units_of(dataset: Dataset, spec: FileSpec, info: Any, chunk_size: int) -> list[WorkUnit]:
    steps = spec.steps
    if steps is not None and spec.uuid is not None and spec.uuid != info.uuid:
        # coffea recomputes the steps of a file whose UUID changed; so do we.
        log.warning(
            "file %s has UUID %s, not %s as in the fileset: its steps are computed again",
            spec.path,
            info.uuid,
            spec.uuid,
        )
        steps = None
    try:
        return split_units(dataset.name, info, chunk_size, steps, dataset.metadata)
    except ValueError as exc:  # steps beyond the file's entries
        raise ConfigurationError(f"dataset '{dataset.name}': {exc}") from None
