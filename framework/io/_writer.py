"""Writing NanoAOD-style trees: per-event values to flat branches, files written atomically.

Branch names follow NanoAOD (as ``_layout`` reads them): a source collection ``Jet``
gives ``nJet`` + ``Jet_<field>``; a module product ``(label, instance)`` is named
``label`` (instance "") or ``label_instance``, and its value decides its branches:

===============================  ==============================================================
product value                    branches
===============================  ==============================================================
number (Python or NumPy scalar)  ``<name>`` (one value per event)
1-D array                        ``n<name>`` (counter) + ``<name>`` (jagged)
dict of equal-length 1-D arrays  ``n<name>`` + ``<name>_<field>`` (a collection, e.g. per jet)
dict of numbers                  ``<name>_<field>`` (a singleton, like ``MET``)
===============================  ==============================================================

Counters are written as int32 (uproot's choice; NanoAOD's own are uint32); ``run``,
``luminosityBlock`` and ``event`` are always written, as NanoAOD types them.

Files are written under a temporary name in their final folder
(``<name>.tmp-<pid>-<start>-<host>-<n>``) and renamed into place when the job that writes
them has succeeded (:func:`atomic_write`, :class:`TreeWriter`; both stage their file with
the job's commit, ``framework.utilities._commit``), so that a reader never sees a half-written file,
and a failed job leaves none behind and replaces no earlier one.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np
import uproot

from framework.core import Event
from framework.utilities import (
    ConfigurationError,
    FileOpenError,
    FileWriteError,
    StagedFile,
    stage_output,
    temporary_name,
)

from ._views import JaggedView, SingletonView

__all__ = [
    "ID_BRANCHES",
    "COMPRESSION",
    "compression",
    "BranchBuffer",
    "TreeWriter",
    "atomic_write",
    "id_columns",
    "write_objects",
]

log = logging.getLogger("pysonic.output")

ID_BRANCHES = {"run": np.uint32, "luminosityBlock": np.uint32, "event": np.uint64}  # NanoAOD types
COMPRESSION = {"ZLIB": uproot.ZLIB, "LZMA": uproot.LZMA, "LZ4": uproot.LZ4, "ZSTD": uproot.ZSTD}


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float, bool, np.generic)) or (isinstance(value, np.ndarray) and value.ndim == 0)


def _as_1d(value: Any) -> np.ndarray[Any, Any] | None:
    """A 1-D NumPy view of ``value`` if it is a flat 1-D array, else None."""
    if isinstance(value, ak.Array):
        if value.ndim != 1 or value.fields:
            return None
        value = np.asarray(value)
    elif isinstance(value, (list, tuple)):
        value = np.asarray(value)
    return value if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype != object else None


class _Scalars:
    """One number per event -> branch ``name``."""

    def __init__(self, name: str, first: Any) -> None:
        self.name, self.dtype = name, np.asarray(first).dtype
        self.values: list[Any] = []

    def add(self, value: Any) -> None:
        self.values.append(value)

    def take(self) -> dict[str, Any]:
        out = {self.name: np.asarray(self.values, dtype=self.dtype)}
        self.values = []
        return out


class _Jagged:
    """Per event, ``fields`` -> 1-D arrays of one length -> ``n<name>`` + ``<name>_<field>``.

    With ``fields == ()`` the per-event value is one 1-D array -> ``n<name>`` + ``<name>``.
    Pieces are kept per event and concatenated at flush (one copy, no per-event growth).
    """

    def __init__(self, name: str, fields: tuple[str, ...], dtypes: list[np.dtype[Any]]) -> None:
        self.name, self.fields, self.dtypes = name, fields, dtypes
        self.counts: list[int] = []
        self.pieces: list[list[np.ndarray[Any, Any]]] = [[] for _ in dtypes]

    def add(self, arrays: list[np.ndarray[Any, Any]]) -> None:
        self.counts.append(len(arrays[0]) if arrays else 0)
        for pieces, arr in zip(self.pieces, arrays, strict=True):
            pieces.append(arr)

    def take(self) -> dict[str, Any]:
        offsets = np.zeros(len(self.counts) + 1, dtype=np.int64)
        np.cumsum(self.counts, out=offsets[1:])
        contents = [
            ak.contents.NumpyArray(np.concatenate(p).astype(d, copy=False) if p else np.empty(0, d))
            for p, d in zip(self.pieces, self.dtypes, strict=True)
        ]
        inner = contents[0] if not self.fields else ak.contents.RecordArray(contents, list(self.fields))
        self.counts = []
        self.pieces = [[] for _ in self.dtypes]
        return {self.name: ak.Array(ak.contents.ListOffsetArray(ak.index.Index64(offsets), inner))}


class BranchBuffer:
    """The branches of one source collection or product, buffered event by event.

    Args:
        name: the branch name (prefix): ``Jet``, ``deepMET`` or ``label_instance``.
        tag: what to ``event.get`` (a collection name or a ``(label, instance)`` product).
        what: how errors call it ("product 'x' of module 'y'").
        fields: a source collection's kept fields; None for a product, whose fields (if
            it has any) are chosen at the first event with ``keep``.

    :meth:`add` takes one event's value, :meth:`take` hands out the buffered events as
    chunk-wide columns for :meth:`TreeWriter.extend`. The branch layout is fixed by the
    first event (see the module docstring); a later value of another kind raises
    TypeError naming the event.
    """

    def __init__(self, name: str, tag: tuple[str, str] | str, what: str, fields: tuple[str, ...] | None) -> None:
        self.name, self.tag, self.what = name, tag, what
        self.fields = fields  # source collections: kept fields; products: None (decided later)
        self.writers: list[_Scalars | _Jagged] | None = None
        self.kind = ""

    def add(self, value: Any, keep: Callable[[str], bool], event: Event) -> None:
        """Buffer ``event``'s value; ``keep(branch_name)`` chooses a product's fields."""
        if self.writers is None:
            self._make_writers(value, keep, event)
        writers = self.writers
        assert writers is not None  # set by _make_writers
        if self.kind == "scalar" or self.kind == "array":
            self._add_to(writers[0], value, event)
        elif self.kind == "collection":
            writers[0].add(self._field_arrays(value, event))
        elif self.kind == "singleton":  # fields are scalars (or, rarely, arrays)
            for writer in writers:
                self._add_to(writer, self._field(value, writer.name[len(self.name) + 1 :], event), event)

    def _add_to(self, writer: _Scalars | _Jagged, value: Any, event: Event) -> None:
        if isinstance(writer, _Scalars):
            if not _is_scalar(value):
                raise TypeError(
                    f"{self._what(event)}: '{writer.name}' was a number in the first "
                    f"written event, now {type(value).__name__}"
                )
            writer.add(value)
            return
        arr = _as_1d(value)
        if arr is None:
            raise TypeError(
                f"{self._what(event)}: '{writer.name}' was a 1-D array in the first "
                f"written event, now {type(value).__name__}"
            )
        writer.add([arr])

    def _what(self, event: Event) -> str:
        return f"{self.what} in event {event.id}"

    def _make_writers(self, value: Any, keep: Callable[[str], bool], event: Event) -> None:
        arr = None if _is_scalar(value) else _as_1d(value)
        if (_is_scalar(value) or arr is not None) and self.fields is None and not keep(self.name):
            # A product consumed because some "<name>_*" pattern might keep its fields,
            # but it has no fields: its one branch, <name>, is dropped.
            self.kind, self.writers = "skip", []
            return
        if _is_scalar(value):
            self.kind, self.writers = "scalar", [_Scalars(self.name, value)]
            return
        if arr is not None:
            self.kind, self.writers = "array", [_Jagged(self.name, (), [arr.dtype])]
            return
        if not isinstance(value, (Mapping, ak.Array, ak.Record)):
            raise TypeError(
                f"{self._what(event)} cannot be written: {type(value).__name__} is not a number, a 1-D array, "
                f"or a dict of numbers or of equal-length 1-D arrays"
            )
        fields = tuple(value.keys() if isinstance(value, Mapping) else value.fields)
        if self.fields is None:  # a product: choose its fields now
            fields = tuple(f for f in fields if keep(f"{self.name}_{f}"))
        else:
            fields = tuple(f for f in fields if f in self.fields)
        self.fields = fields
        if not fields:
            self.kind, self.writers = "skip", []
        elif isinstance(value, ak.Record) or (isinstance(value, Mapping) and all(_is_scalar(value[f]) for f in fields)):
            self.kind = "singleton"
            self.writers = []
            for f in fields:
                v = self._field(value, f, event)
                name = f"{self.name}_{f}"
                arr = None if _is_scalar(v) else _as_1d(v)
                if arr is None and not _is_scalar(v):
                    raise TypeError(f"{self._what(event)}: field '{f}' is neither a number nor a 1-D array")
                self.writers.append(_Scalars(name, v) if arr is None else _Jagged(name, (), [arr.dtype]))
        else:
            self.kind = "collection"
            self.writers = [_Jagged(self.name, fields, [a.dtype for a in self._field_arrays(value, event)])]

    def _field(self, value: Any, field: str, event: Event) -> Any:
        try:
            # Fast paths for the source's views (~1 us instead of ~20 us through ak's
            # __getitem__; a NanoAOD event has hundreds of such fields, HLT_* alone ~600).
            if isinstance(value, (JaggedView, SingletonView)):
                return value[field]  # NumPy, without building the awkward layout
            if isinstance(value, ak.Record):
                content = value.layout.array.content(field)
                if isinstance(content, ak.contents.NumpyArray):
                    return content.data[value.layout.at]
            elif isinstance(value, ak.Array) and isinstance(value.layout, ak.contents.RecordArray):
                content = value.layout.content(field)
                if isinstance(content, ak.contents.NumpyArray):
                    return content.data
            return value[field]
        except (LookupError, ValueError):  # KeyError, ak's FieldNotFoundError
            raise TypeError(f"{self._what(event)} has no field '{field}' (it had in the first written event)") from None

    def _field_arrays(self, value: Any, event: Event) -> list[np.ndarray[Any, Any]]:
        arrays: list[np.ndarray[Any, Any]] = []
        assert self.fields is not None  # chosen by _make_writers before the first call
        for f in self.fields:
            arr = _as_1d(self._field(value, f, event))
            if arr is None or (arrays and len(arr) != len(arrays[0])):
                raise TypeError(f"{self._what(event)}: field '{f}' is not a 1-D array of the same length as the others")
            arrays.append(arr)
        return arrays

    def take(self) -> dict[str, Any]:
        """The buffered events as columns (branch group name -> array); empties the buffer."""
        data: dict[str, Any] = {}
        for writer in self.writers or ():
            data.update(writer.take())
        return data


def compression(algorithm: str, level: int | None, context: str) -> Any:
    """uproot's compression object for CMSSW's ``compressionAlgorithm`` / ``compressionLevel``.

    Args:
        algorithm: ZLIB, LZMA, LZ4 or ZSTD.
        level: 1-9; None for 1 (uproot's default; CMSSW's NanoAOD productions use LZMA 9).

    Raises:
        ConfigurationError: an unknown algorithm (names ``context`` and the known ones).
    """
    if algorithm not in COMPRESSION:
        raise ConfigurationError(
            f"{context}: compressionAlgorithm '{algorithm}' is not one of {', '.join(COMPRESSION)}"
        )
    return COMPRESSION[algorithm](1 if level is None else int(level))


def write_objects(path: Path, objects: Mapping[str, Any], who: str = "") -> None:
    """Write ``objects`` (name -> ``hist.Hist`` or anything uproot writes) to a new ROOT file.

    Through :func:`atomic_write`: ``path`` appears complete, when the job's outputs are
    committed, or not at all. A ``hist.Hist`` with one axis is written as a ``TH1D`` with
    under/overflow; uproot takes the TH1 title from a ``title`` attribute. A name with
    ``/`` is written in that directory (``"hists/pt"``).

    Raises:
        FileWriteError: the file cannot be written (a full disk: names the file and ``who``);
            nothing is left behind.
    """
    with atomic_write(Path(path), who) as temp, uproot.recreate(temp) as f:
        for name, obj in objects.items():
            f[name] = obj


@contextlib.contextmanager
def atomic_write(path: Path, who: str = "", *, commit: bool = True) -> Iterator[Path]:
    """Yield a temporary path to write; if the block succeeds, ``path`` gets it when the
    job's outputs are committed (``framework.utilities._commit``: at once outside a job, or with
    ``commit=False``: a file that is no output of the job, such as a cache).

    The file is flushed to disk (``fsync``) before it counts as complete: a full disk shows
    up here, not as a truncated file after the rename. If the block raises, the temporary
    file is removed and ``path`` is left as it was.

    Raises:
        FileWriteError: the block raised an OSError (a full disk, a folder removed),
            naming ``path`` and ``who``; other exceptions pass unchanged.
    """
    staged = stage_output(Path(path), who or "output") if commit else StagedFile(Path(path), temporary_name(path), who)
    try:
        yield staged.temp
        _sync(staged)
    except OSError as exc:
        staged.discard()
        raise _write_error(staged, exc) from exc
    except BaseException:
        staged.discard()
        raise
    staged.done()


def _sync(staged: StagedFile) -> None:
    """fsync the temporary file: a write the kernel accepted but cannot store (ENOSPC on
    some file systems, a quota) fails here."""
    fd = os.open(staged.temp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_error(staged: StagedFile, exc: OSError) -> FileWriteError:
    reason = exc.strerror or str(exc) or type(exc).__name__
    return FileWriteError(f"{staged.who}: cannot write '{staged.final}' ({reason})", file=str(staged.final))


class TreeWriter:
    """One new ROOT file with one NanoAOD-style TTree, written atomically.

    The file is created under a temporary name by ``open()`` (staged with the job's commit,
    ``framework.utilities._commit``), receives chunks of columns through :meth:`extend` (each call one
    basket per branch), is closed by :meth:`close` and renamed to ``path`` when the job's
    outputs are committed (at once outside a job); :meth:`abort` removes it. The tree is created at the first
    :meth:`extend`, from the types of its columns: ``{name: 1-D NumPy array}`` gives a
    flat branch, ``{name: jagged ak.Array}`` a counter ``n<name>`` and the jagged branch
    (or ``<name>_<field>`` for a record array), as uproot's ``mktree`` writes them.

    Args:
        path: the final file name.
        tree_name: the TTree's name (``Events``).
        compression: an uproot compression object (see :func:`compression`).
        context: who writes, for errors and logs ("OutputModule 'out'").

    Raises:
        FileOpenError: from ``open()``, the file cannot be created (names path and why).
    """

    def __init__(self, path: Path, tree_name: str = "Events", compression: Any = None, context: str = "") -> None:
        self.path = Path(path)
        self._staged: StagedFile | None = None
        self.tree_name = tree_name
        self.compression = uproot.ZLIB(1) if compression is None else compression
        self.context = context or f"writer of '{self.path}'"
        self.entries = 0
        self._file: Any = None
        self._tree: Any = None

    @property
    def temp_name(self) -> Path | None:
        """The temporary file being written (None before ``open()``, and after :meth:`abort`)."""
        return None if self._staged is None else self._staged.temp

    def open(self) -> TreeWriter:
        try:
            folder = self.path.parent
            if not folder.is_dir():  # uproot would create missing folders; CMSSW does not
                what = "is a file, not a folder" if folder.exists() else "does not exist"
                raise FileNotFoundError(f"folder '{folder}' {what}")
            self._staged = stage_output(self.path, self.context)
            self._file = uproot.recreate(self._staged.temp, compression=self.compression)
        except Exception as exc:  # noqa: BLE001 - permissions, full disk ...
            if self._staged is not None:
                self._staged.discard()
                self._staged = None
            raise FileOpenError(
                f"{self.context}: cannot create output file '{self.path}' ({type(exc).__name__}: {exc})"
            ) from exc
        return self

    @property
    def is_open(self) -> bool:
        return self._file is not None

    def extend(self, columns: dict[str, Any]) -> None:
        """Append entries: every column has the same length (the number of entries).

        Raises:
            FileWriteError: the file cannot be written (a full disk), naming it.
        """
        try:
            self._extend(columns)
        except OSError as exc:
            raise self._error(exc) from exc

    def _extend(self, columns: dict[str, Any]) -> None:
        if self._tree is None:
            types = {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in columns.items()}
            # uproot builds the TTree metadata in O(branches^2): ~0.2 s for 200 branches,
            # ~11 s for the 1,800 of a full PFNano ("keep *"). Slim outputs are cheap.
            log.info(
                "%s: creating tree '%s' with %d branch groups in %s",
                self.context,
                self.tree_name,
                len(types),
                self.temp_name,
            )
            self._tree = self._file.mktree(self.tree_name, types)
        n = len(next(iter(columns.values()))) if columns else 0
        if n:
            self._tree.extend(columns)
            self.entries += n

    def _error(self, exc: OSError) -> FileWriteError:
        assert self._staged is not None  # open
        return _write_error(self._staged, exc)

    def write_object(self, name: str, obj: Any) -> None:
        """Store another object (a ``hist.Hist`` as TH1, ...) under ``name``.

        Raises:
            FileWriteError: the file cannot be written (a full disk), naming it.
        """
        try:
            self._file[name] = obj
        except OSError as exc:
            raise self._error(exc) from exc

    def close(self) -> None:
        """Close the file: complete, it is renamed to ``path`` when the job's outputs are
        committed (at once outside a job).

        Raises:
            FileWriteError: the last writes failed (a full disk); the file is removed.
        """
        if self._file is None:
            return
        staged = self._staged
        assert staged is not None  # set by open()
        try:
            self._file.close()
            self._file = None
            _sync(staged)
        except OSError as exc:
            self.abort()
            raise _write_error(staged, exc) from exc
        staged.done()

    def abort(self) -> None:
        """Close and delete the temporary file: nothing is left behind."""
        try:
            if self._file is not None:
                self._file.close()
        except OSError:
            pass  # a full disk: the file is removed anyway
        finally:
            self._file = None
            if self._staged is not None:
                self._staged.discard()
                self._staged = None


def id_columns(ids: list[tuple[int, int, int]]) -> dict[str, np.ndarray[Any, Any]]:
    """``run``, ``luminosityBlock``, ``event`` columns (NanoAOD's dtypes) from event ids."""
    array = np.array(ids, dtype=np.uint64).reshape(-1, 3)
    return {name: array[:, i].astype(dt) for i, (name, dt) in enumerate(ID_BRANCHES.items())}
