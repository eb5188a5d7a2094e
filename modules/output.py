"""``NanoAODOutputModule``: write selected events to a flat NanoAOD-style TTree with uproot.

Branch names follow NanoAOD (see ``framework/_pool_source.py``): a source collection
``Jet`` gives ``nJet`` + ``Jet_<field>``; a module product ``(label, instance)`` is named
``label`` (instance "") or ``label_instance``, and its value decides its branches:

===============================  ==============================================================
product value                    branches
===============================  ==============================================================
number (Python or NumPy scalar)  ``<name>`` (one value per event)
1-D array                        ``n<name>`` (counter) + ``<name>`` (jagged)
dict of equal-length 1-D arrays  ``n<name>`` + ``<name>_<field>`` (a collection, e.g. per jet)
dict of numbers                  ``<name>_<field>`` (a singleton, like ``MET``)
===============================  ==============================================================

``outputCommands`` are CMSSW keep/drop statements applied in order, with ``fnmatch``
globs, to those branch names; the last matching statement decides, and a branch no
statement matches is dropped. Counters are written with any kept field of their
collection (as int32, uproot's choice; NanoAOD's own are uint32); ``run``,
``luminosityBlock`` and ``event`` are always written. A product's fields are only known
at the first written event: it is consumed if a pattern may keep one of its branches,
and its fields are chosen then.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np
import uproot

import framework.config as cms
from framework import ConfigurationError, Event, FileOpenError, OutputModule

__all__ = ["NanoAODOutputModule", "OutputCommands"]

log = logging.getLogger("pysonic.output")

ID_BRANCHES = {"run": np.uint32, "luminosityBlock": np.uint32, "event": np.uint64}  # NanoAOD types
COMPRESSION = {"ZLIB": uproot.ZLIB, "LZMA": uproot.LZMA, "LZ4": uproot.LZ4, "ZSTD": uproot.ZSTD}


class OutputCommands:
    """CMSSW ``outputCommands``: ``"keep <glob>"`` / ``"drop <glob>"``, last match wins.

    Raises:
        ConfigurationError: a statement is not ``keep``/``drop`` followed by one pattern.
    """

    def __init__(self, commands: list[str], context: str) -> None:
        self.rules: list[tuple[bool, str]] = []
        for command in commands:
            parts = command.split()
            if len(parts) != 2 or parts[0] not in ("keep", "drop"):
                raise ConfigurationError(
                    f"{context}: outputCommands entry {command!r} is not 'keep <pattern>' or 'drop <pattern>'"
                )
            self.rules.append((parts[0] == "keep", parts[1]))

    def keep(self, branch: str) -> bool:
        """Whether ``branch`` is written."""
        decision = False
        for keep, pattern in self.rules:
            if fnmatch.fnmatchcase(branch, pattern):
                decision = keep
        return decision

    def may_keep_fields(self, name: str) -> bool:
        """Whether some branch ``<name>_<field>`` (field unknown yet) may be kept.

        True if a keep pattern can match such a name: the pattern's literal start (up to
        its first wildcard) and ``<name>_`` agree. Over-approximates; fields are decided
        for good once the first event shows them.
        """
        prefix = name + "_"
        for keep, pattern in self.rules:
            literal = pattern[: min((pattern.find(c) for c in "*?[" if c in pattern), default=len(pattern))]
            if keep and (prefix.startswith(literal) or literal.startswith(prefix)):
                return True
        return False


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (int, float, bool, np.generic)) or (isinstance(value, np.ndarray) and value.ndim == 0)


def _as_1d(value: Any) -> np.ndarray | None:
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
        self.name, self.dtype, self.values = name, np.asarray(first).dtype, []

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

    def __init__(self, name: str, fields: tuple[str, ...], dtypes: list[np.dtype]) -> None:
        self.name, self.fields, self.dtypes = name, fields, dtypes
        self.counts: list[int] = []
        self.pieces: list[list[np.ndarray]] = [[] for _ in dtypes]

    def add(self, arrays: list[np.ndarray]) -> None:
        self.counts.append(len(arrays[0]) if arrays else 0)
        for pieces, arr in zip(self.pieces, arrays):
            pieces.append(arr)

    def take(self) -> dict[str, Any]:
        offsets = np.zeros(len(self.counts) + 1, dtype=np.int64)
        np.cumsum(self.counts, out=offsets[1:])
        contents = [
            ak.contents.NumpyArray(np.concatenate(p).astype(d, copy=False) if p else np.empty(0, d))
            for p, d in zip(self.pieces, self.dtypes)
        ]
        inner = contents[0] if not self.fields else ak.contents.RecordArray(contents, list(self.fields))
        self.counts = []
        self.pieces = [[] for _ in self.dtypes]
        return {self.name: ak.Array(ak.contents.ListOffsetArray(ak.index.Index64(offsets), inner))}


class _Item:
    """One source collection or product to write; its writers are made at the first event."""

    def __init__(self, name: str, tag: tuple[str, str] | str, what: str, fields: tuple[str, ...] | None) -> None:
        self.name, self.tag, self.what = name, tag, what
        self.fields = fields  # source collections: kept fields; products: None (decided later)
        self.writers: list[_Scalars | _Jagged] | None = None
        self.kind = ""

    def add(self, value: Any, commands: OutputCommands, event: Event) -> None:
        if self.writers is None:
            self._make_writers(value, commands, event)
        if self.kind == "scalar":
            self._add_to(self.writers[0], value, event)  # type: ignore[index]
        elif self.kind == "array":
            self._add_to(self.writers[0], value, event)  # type: ignore[index]
        elif self.kind == "collection":
            self.writers[0].add(self._field_arrays(value, event))  # type: ignore[index, union-attr, arg-type]
        elif self.kind == "singleton":  # fields are scalars (or, rarely, arrays)
            for writer in self.writers:  # type: ignore[union-attr]
                self._add_to(writer, self._field(value, writer.name[len(self.name) + 1:], event), event)

    def _add_to(self, writer: _Scalars | _Jagged, value: Any, event: Event) -> None:
        if isinstance(writer, _Scalars):
            if not _is_scalar(value):
                raise TypeError(f"{self._what(event)}: '{writer.name}' was a number in the first "
                                f"written event, now {type(value).__name__}")
            writer.add(value)
            return
        arr = _as_1d(value)
        if arr is None:
            raise TypeError(f"{self._what(event)}: '{writer.name}' was a 1-D array in the first "
                            f"written event, now {type(value).__name__}")
        writer.add([arr])

    def _what(self, event: Event) -> str:
        return f"{self.what} in event {event.id}"

    def _make_writers(self, value: Any, commands: OutputCommands, event: Event) -> None:
        arr = None if _is_scalar(value) else _as_1d(value)
        if (_is_scalar(value) or arr is not None) and self.fields is None and not commands.keep(self.name):
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
            fields = tuple(f for f in fields if commands.keep(f"{self.name}_{f}"))
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

    def _field_arrays(self, value: Any, event: Event) -> list[np.ndarray]:
        arrays = []
        for f in self.fields:  # type: ignore[union-attr]
            arr = _as_1d(self._field(value, f, event))
            if arr is None or (arrays and len(arr) != len(arrays[0])):
                raise TypeError(f"{self._what(event)}: field '{f}' is not a 1-D array of the same length as the others")
            arrays.append(arr)
        return arrays


class NanoAODOutputModule(OutputModule):
    """Writes the selected events to a NanoAOD-style TTree (CMSSW's ``NanoAODOutputModule``).

    See the module docstring for branch names and ``outputCommands``. The file is written
    as ``<fileName>.tmp-<pid>`` and renamed to ``fileName`` in ``end_job``, so a failed job
    leaves no partial file. Events are written in the order they reach the module (with
    several streams this is not the input order); ``run``/``luminosityBlock``/``event``
    identify them. With zero selected events the file holds an empty tree with the id
    branches only (the other branches' types are known from the first event).

    Not thread-safe (``write`` runs on the scheduler's thread); a flush, every
    ``basketSize`` events, writes on that thread too.

    Raises:
        ConfigurationError: bad ``outputCommands``, an unknown Path in ``SelectEvents``.
        FileOpenError: the output cannot be created (in ``begin_job``, before any event).
        TypeError (wrapped by the framework): a product has a type that cannot be written or
            changes type between events.
    """

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        desc.add("fileName", cms.untracked.string, "output ROOT file")
        desc.add("outputCommands", cms.untracked.vstring("keep *"),
                 "keep/drop <glob> statements over branch names, applied in order")
        select = cms.ParameterSetDescription()
        select.add("SelectEvents", cms.vstring(), "Path names; an event is written if any accepted it (empty: all)")
        desc.add("SelectEvents", select, "which events to write", tracked=False)
        desc.add("treeName", cms.untracked.string("Events"), "name of the output TTree")
        desc.add("basketSize", cms.untracked.uint32(1000), "events per TTree basket (one write per basket)")
        desc.add("compressionAlgorithm", cms.untracked.string("ZLIB"), "ZLIB, LZMA, LZ4 or ZSTD")
        desc.add_optional("compressionLevel", cms.untracked.uint32,
                          "1-9; absent: 1, uproot's default (CMSSW's NanoAOD productions use LZMA 9)")

    def __init__(self, params: cms.ParameterSet) -> None:
        context = f"OutputModule '{self.label}'"
        self.file_name = Path(params.fileName)
        self.commands = OutputCommands(list(params.outputCommands), context)
        self.select_paths = list(params.SelectEvents.SelectEvents)
        self.tree_name = params.treeName
        self.basket_size = max(1, int(params.basketSize))
        algorithm = params.compressionAlgorithm
        if algorithm not in COMPRESSION:
            raise ConfigurationError(f"{context}: compressionAlgorithm '{algorithm}' is not one of {', '.join(COMPRESSION)}")
        level = params.get("compressionLevel")
        self.compression = COMPRESSION[algorithm](1 if level is None else int(level))
        self.items: list[_Item] = []
        self.temp_name = self.file_name.with_name(f"{self.file_name.name}.tmp-{os.getpid()}")
        self._file: Any = None
        self._tree: Any = None
        self._ids: list[tuple[int, int, int]] = []
        self._paths_checked = False
        self.events_written = 0

    def select(self, registry: Any) -> None:
        """Apply ``outputCommands`` to source branches and products; consume what is kept."""
        for name, fields in registry.source_collections.items():
            if name in ID_BRANCHES:
                continue
            if not fields:
                if self.commands.keep(name):
                    self.consumes(name, branches=())
                    self.items.append(_Item(name, name, f"source branch '{name}'", ()))
                continue
            kept = tuple(f for f in fields if self.commands.keep(f"{name}_{f}"))
            if kept:
                self.consumes(name, branches=kept)
                self.items.append(_Item(name, name, f"source collection '{name}'", kept))
        for product in registry.products:
            name = product.label if not product.instance else f"{product.label}_{product.instance}"
            if self.commands.keep(name) or self.commands.may_keep_fields(name):
                clash = next((i for i in self.items if i.name == name), None)
                if clash is not None or name in ID_BRANCHES:
                    raise ConfigurationError(
                        f"OutputModule '{self.label}': product '{name}' of module '{product.label}' "
                        f"would write the branches of {clash.what if clash else 'the event id'}; "
                        f"drop one of them with outputCommands or rename the module"
                    )
                tag = (product.label, product.instance)
                self.consumes(tag)
                self.items.append(_Item(name, tag, f"product '{name}' of module '{product.label}'", None))

    def begin_job(self) -> None:
        """Create the temporary output file. Raises FileOpenError naming the path."""
        try:
            folder = self.file_name.parent
            if not folder.is_dir():  # uproot would create missing folders
                what = "is a file, not a folder" if folder.exists() else "does not exist"
                raise FileNotFoundError(f"folder '{folder}' {what}")
            self._file = uproot.recreate(self.temp_name, compression=self.compression)
        except Exception as exc:  # noqa: BLE001 - missing folder, permissions, full disk ...
            raise FileOpenError(
                f"OutputModule '{self.label}': cannot create output file '{self.file_name}' "
                f"({type(exc).__name__}: {exc})"
            ) from exc

    def selected(self, event: Event) -> bool:
        """``SelectEvents``: whether any listed Path accepted ``event`` (no list: all)."""
        if not self.select_paths:
            return True
        results = event.path_results
        if not self._paths_checked:
            unknown = [p for p in self.select_paths if p not in results]
            if unknown:
                raise ConfigurationError(
                    f"OutputModule '{self.label}': SelectEvents names Path '{unknown[0]}', which is "
                    f"not a Path of this process (Paths: {', '.join(sorted(results)) or 'none'})"
                )
            self._paths_checked = True
        return any(results[p] for p in self.select_paths)

    def write(self, event: Event) -> None:
        """Buffer ``event``'s branches; every ``basketSize`` events, write a basket."""
        self._ids.append(tuple(event.id))
        for item in self.items:
            item.add(event.get(item.tag), self.commands, event)
        if len(self._ids) >= self.basket_size:
            self._flush()

    def _flush(self) -> None:
        ids = np.array(self._ids, dtype=np.uint64).reshape(-1, 3)
        data: dict[str, Any] = {name: ids[:, i].astype(dt) for i, (name, dt) in enumerate(ID_BRANCHES.items())}
        for item in self.items:
            for writer in item.writers or ():
                data.update(writer.take())
        if self._tree is None:
            types = {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in data.items()}
            # uproot builds the TTree metadata in O(branches^2): ~0.2 s for 200 branches,
            # ~11 s for the 1,800 of a full PFNano ("keep *"). Slim outputs are cheap.
            log.info("OutputModule '%s': creating tree '%s' with %d branch groups in %s",
                     self.label, self.tree_name, len(types), self.temp_name)
            self._tree = self._file.mktree(self.tree_name, types)
        if self._ids:
            self._tree.extend(data)
        self.events_written += len(self._ids)
        self._ids = []

    def end_job(self) -> None:
        """Write the last basket, close the file and rename it to ``fileName``."""
        if self._file is None:
            return
        if self._ids or self._tree is None:
            self._flush()
        self._file.close()
        self._file = None
        os.replace(self.temp_name, self.file_name)
        log.info("OutputModule '%s' wrote %d events to %s", self.label, self.events_written, self.file_name)

    def abort_job(self) -> None:
        """Close and delete the temporary file: a failed job leaves no output."""
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None
        self.temp_name.unlink(missing_ok=True)
