"""TFileService: histograms and small per-event tables that modules book, written to one ROOT file.

CMSSW's ``TFileService`` (``CommonTools/UtilAlgos``), in Python terms. A module asks the
job's service for its directory and books objects there, usually while it is constructed::

    fs = get_service("TFileService")             # CMSSW: edm::Service<TFileService> fs;
    self.h_pt = fs.make("pt", hist.Hist(...))    # CMSSW: fs->make<TH1F>("pt", ...)
    self.events = fs.make_table("events", {"ht": "float64", "jet_pt": "var * float32"})

and fills them in ``analyze`` (``self.h_pt.fill(...)``, ``self.events.fill(ht=..., jet_pt=...)``).
Every object lands in the directory named after the module's label (``<label>/pt``), as in
CMSSW; :meth:`TFileDirectory.mkdir` makes sub-directories. Objects: ``hist.Hist`` (written
as ``TH1D``/``TH2D``/``TH3D``, with under/overflow: what uproot writes for them) and
:class:`Table` (a ``TTree``: one entry per :meth:`Table.fill`, branches of uproot's types,
a variable-length array with its counter ``n<name>``).

The file is written once per run of events through the job's commit
(``framework.utilities._commit``): renamed into place only if the whole job succeeded. In a job on
its own (and per dataset with ``cmsrun --dataset``) it is written after every module's
``end_job``, as CMSSW writes it when the service ends; under ``--executor dask`` each work
unit writes its part after the unit's last event (what a module books or fills in
``end_job`` is not in it), and the parts are merged into one file per dataset: histograms
summed, tables concatenated in unit order.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np

from framework.core import Service, constructing_module
from framework.utilities import ConfigurationError

from ._parts import in_work_unit, output_path
from ._writer import atomic_write

__all__ = ["TFileService", "TFileDirectory", "Table", "BookedObjects"]

log = logging.getLogger("pysonic.output")


class Table:
    """A small per-event table, written as a ``TTree`` (CMSSW: a TTree booked with
    ``fs->make<TTree>`` and filled once per event).

    Args:
        branches: branch name -> uproot's type: a NumPy dtype or its name for one number
            per entry (``"float64"``, ``np.int32``), ``"var * <dtype>"`` for a
            variable-length array per entry (written with a counter branch ``n<name>``).
        title: the TTree's title.

    Raises:
        ConfigurationError: a type that is neither.
    """

    def __init__(self, branches: Mapping[str, Any], title: str = "") -> None:
        self.title = title
        self.types: dict[str, Any] = {}
        self._jagged: dict[str, np.dtype[Any]] = {}
        for name, kind in branches.items():
            try:
                if isinstance(kind, str) and kind.replace(" ", "").startswith("var*"):
                    self._jagged[name] = np.dtype(kind.split("*", 1)[1].strip())
                    self.types[name] = f"var * {self._jagged[name].name}"
                else:
                    self.types[name] = np.dtype(kind)
            except TypeError as exc:
                raise ConfigurationError(
                    f"Table: branch '{name}': type {kind!r} is neither a NumPy dtype nor 'var * <dtype>'"
                ) from exc
        self._rows: dict[str, list[Any]] = {name: [] for name in self.types}

    def __len__(self) -> int:
        return len(next(iter(self._rows.values()), []))

    def fill(self, **values: Any) -> None:
        """Add one entry: a value for every branch (a number, or a 1-D array for a
        ``var *`` branch).

        Raises:
            TypeError: a branch missing or unknown, an array for a number or the reverse.
        """
        if values.keys() != self._rows.keys():
            missing, unknown = sorted(self._rows.keys() - values.keys()), sorted(values.keys() - self._rows.keys())
            raise TypeError(f"Table.fill: missing branches {missing}, unknown branches {unknown}")
        for name, value in values.items():
            if name in self._jagged:
                array = np.asarray(value, dtype=self._jagged[name])
                if array.ndim != 1:
                    raise TypeError(f"Table.fill: branch '{name}' takes a 1-D array, got shape {array.shape}")
                self._rows[name].append(array)
            else:
                if np.ndim(value) != 0:
                    raise TypeError(f"Table.fill: branch '{name}' takes one number, got shape {np.shape(value)}")
                self._rows[name].append(value)

    def reset(self) -> None:
        """Forget every entry (a new work unit)."""
        for rows in self._rows.values():
            rows.clear()

    def columns(self) -> dict[str, Any]:
        """The entries as the columns uproot's ``TTree.extend`` takes."""
        columns: dict[str, Any] = {}
        for name, rows in self._rows.items():
            if name in self._jagged:
                dtype = self._jagged[name]
                counts = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
                offsets = np.zeros(len(rows) + 1, dtype=np.int64)
                np.cumsum(counts, out=offsets[1:])
                content = np.concatenate(rows).astype(dtype, copy=False) if rows else np.empty(0, dtype)
                columns[name] = ak.Array(
                    ak.contents.ListOffsetArray(ak.index.Index64(offsets), ak.contents.NumpyArray(content))
                )
            else:
                columns[name] = np.asarray(rows, dtype=self.types[name])
        return columns


class BookedObjects:
    """Objects booked for one ROOT file, by path (``"label/pt"``), and how they are written.

    Shared by :class:`TFileService` and modules that write a file of their own
    (``HistogramAnalyzer`` with ``fileName``).
    """

    def __init__(self, who: str) -> None:
        self.who = who
        self.objects: dict[str, Any] = {}

    def book(self, path: str, obj: Any) -> Any:
        if path in self.objects:
            raise ConfigurationError(f"{self.who}: '{path}' is booked twice")
        if not isinstance(obj, Table) and not hasattr(obj, "axes"):
            raise ConfigurationError(
                f"{self.who}: '{path}' is a {type(obj).__name__}; book a hist.Hist or a Table (make_table)"
            )
        self.objects[path] = obj
        return obj

    def reset(self) -> None:
        """Empty every object (a new work unit); the modules keep their references."""
        for obj in self.objects.values():
            obj.reset()

    def fingerprints(self) -> dict[str, str]:
        """Path -> a digest of the object's contents (a histogram's bins with flow, a
        table's entries): what changed since an earlier call."""
        found = {}
        for path, obj in self.objects.items():
            if isinstance(obj, Table):
                data = repr(len(obj)).encode()
            else:
                data = np.ascontiguousarray(obj.view(flow=True)).tobytes()
            found[path] = hashlib.sha1(data).hexdigest()
        return found

    def write(self, path: Path) -> None:
        """Write every object to ``path`` through the job's commit (``atomic_write``).

        Raises:
            FileWriteError: the file cannot be written (names it).
        """
        import uproot  # framework.io is the one package that imports uproot

        with atomic_write(path, self.who) as temp, uproot.recreate(temp) as f:
            for name, obj in self.objects.items():
                if isinstance(obj, Table):
                    tree = f.mktree(name, obj.types, title=obj.title)
                    if len(obj):
                        tree.extend(obj.columns())
                else:
                    f[name] = obj


class TFileDirectory:
    """A directory of the service's file (CMSSW's ``TFileDirectory``): ``make`` books an
    object in it, ``mkdir`` a sub-directory."""

    def __init__(self, booked: BookedObjects, path: str) -> None:
        self._booked = booked
        self.path = path

    def make(self, name: str, obj: Any, *, title: str | None = None) -> Any:
        """Book ``obj`` (a ``hist.Hist`` or a :class:`Table`) as ``<directory>/<name>``;
        returns ``obj``, which the module fills. ``title``: the TH1's title (default: the
        histogram's ``label``, else ``name``).

        Raises:
            ConfigurationError: the name is booked twice, or ``obj`` is neither.
        """
        if title is not None or (not isinstance(obj, Table) and not getattr(obj, "title", None)):
            # uproot takes the TH1 title from a ``title`` attribute (hist has none of its own).
            obj.title = title if title is not None else (getattr(obj, "label", None) or name)
        return self._booked.book(f"{self.path}/{name}" if self.path else name, obj)

    def make_table(self, name: str, branches: Mapping[str, Any], *, title: str = "") -> Table:
        """Book a :class:`Table` (a TTree) ``<directory>/<name>`` with these branches."""
        table: Table = self.make(name, Table(branches, title or name))
        return table

    def mkdir(self, name: str) -> TFileDirectory:
        """A sub-directory ``<directory>/<name>`` (made in the file when something is booked in it)."""
        if not name or "/" in name:
            raise ConfigurationError(f"{self._booked.who}: directory name {name!r} is empty or has a '/'")
        return TFileDirectory(self._booked, f"{self.path}/{name}" if self.path else name)


class TFileService(Service):
    """CMSSW's TFileService: the histograms and tables modules book, one directory per module label.

    See the module docstring for booking and when the file is written.

    Parameters (CMSSW's): ``fileName`` (string, required): the ROOT file; relative to the
    current folder, named per dataset with ``cmsrun --dataset`` like every output.
    ``closeFileFast`` (untracked bool, False): accepted for CMSSW's configs; it has no effect
    here (it keeps ROOT's global file list short when ROOT closes the file).
    """

    outputs_per_unit = True  # written per work unit under Dask: merged per dataset

    @classmethod
    def fill_descriptions(cls, desc: Any) -> None:
        from .. import config as cms

        desc.add("fileName", cms.string, "the ROOT file of the booked histograms and tables")
        desc.add("closeFileFast", cms.untracked.bool(False), "CMSSW's; no effect in pysonic")

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.file_name = Path(params.fileName)
        self.booked = BookedObjects(f"Service '{self.label or 'TFileService'}' (type TFileService)")
        self._per_unit = False
        self._target: Path | None = None
        self._written: dict[str, str] = {}  # fingerprints at the last write of a unit's part

    def declared_outputs(self) -> dict[str, Any]:
        return {"fileName": self.file_name}

    def directory(self, module: Any) -> TFileDirectory:
        """The directory named after ``module``'s label (a module, or its label)."""
        label = module if isinstance(module, str) else module.label
        return TFileDirectory(self.booked, label)

    def _current(self, what: str) -> TFileDirectory:
        label = constructing_module()
        if label is None:
            raise ConfigurationError(
                f"TFileService.{what}: call it while the module is constructed (its __init__), "
                f"or book through fs.directory(self).{what}"
            )
        return self.directory(label)

    def make(self, name: str, obj: Any, *, title: str | None = None) -> Any:
        """:meth:`TFileDirectory.make` in the directory of the module being constructed."""
        return self._current("make").make(name, obj, title=title)

    def make_table(self, name: str, branches: Mapping[str, Any], *, title: str = "") -> Table:
        """:meth:`TFileDirectory.make_table` in the directory of the module being constructed."""
        return self._current("make_table").make_table(name, branches, title=title)

    def mkdir(self, name: str) -> TFileDirectory:
        """:meth:`TFileDirectory.mkdir` in the directory of the module being constructed."""
        return self._current("mkdir").mkdir(name)

    def subscribe(self, activity: Any) -> None:
        activity.post_end_job.connect(self._job_finished)

    def begin_unit(self) -> None:
        self._per_unit = in_work_unit()
        self._target = output_path(self.file_name)
        if self._per_unit:
            self.booked.reset()  # each unit's part holds that unit's events only

    def end_unit(self) -> None:
        if self._per_unit:
            self._write()
            self._written = self.booked.fingerprints()

    def unwritten_outputs(self) -> list[str]:
        if not self._per_unit:
            return []
        now = self.booked.fingerprints()
        return [
            f"TFileService: '{path}' was filled after the last work unit's part was written (in end_job): "
            f"under --executor dask only what modules book and fill per event is merged"
            for path, digest in now.items()
            if self._written.get(path) != digest
        ]

    def _job_finished(self, job: Any, report: Any) -> None:
        # After every module's end_job (CMSSW writes the file when the service ends).
        if not self._per_unit:
            self._write()

    def _write(self) -> None:
        if self._target is None:
            return
        self.booked.write(self._target)
        log.info("TFileService wrote %d object(s) to %s", len(self.booked.objects), self._target)
