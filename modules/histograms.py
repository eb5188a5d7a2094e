"""``HistogramAnalyzer``: fill 1-D histograms (``hist``) and write them as ROOT ``TH1D``.

One histogram per item of the ``histograms`` VPSet. Every element of the value is filled:
a number fills once, an array (all jets' pt) fills each entry. Out-of-range values go to
the under/overflow bins, which are written too. The histograms go to ``fileName`` (at its
top), or, without ``fileName``, to the job's TFileService (in the folder named after the
module's label, as a CMSSW analyzer's).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import awkward as ak
import hist
import numpy as np

import framework.config as cms
from framework import ConfigurationError, EDAnalyzer, Event, FileOpenError, get_service
from framework.io import BookedObjects, TFileDirectory, output_path

__all__ = ["HistogramAnalyzer"]

log = logging.getLogger("pysonic.histograms")


def _values(value: Any, field: str, what: str) -> np.ndarray:
    """The numbers to fill, flattened to 1-D float64 (awkward: all nesting levels)."""
    if field:
        if not isinstance(value, (Mapping, ak.Array, ak.Record)):
            raise TypeError(f"{what}: field '{field}' asked, but the value is a {type(value).__name__}")
        try:
            value = value[field]
        except (KeyError, ak.errors.FieldNotFoundError):
            fields = list(value.keys() if isinstance(value, Mapping) else value.fields)
            raise TypeError(f"{what} has no field '{field}' (fields: {', '.join(fields)})") from None
    if isinstance(value, (ak.Array, ak.Record)):
        if value.fields:
            raise TypeError(f"{what} is a collection: set 'field' to one of {', '.join(value.fields)}")
        value = ak.flatten(value, axis=None)
    return np.asarray(value, dtype=np.float64).reshape(-1)


MAX_BINS = 2**27  # bins of one histogram at most: 1 GiB of float64 counts


class _Histogram:
    def __init__(self, p: Any, module: EDAnalyzer) -> None:
        context = f"EDAnalyzer '{module.label}': histogram '{p.name}'"
        if p.nbins < 1 or not p.min < p.max:
            raise ConfigurationError(
                f"{context}: needs nbins >= 1 and min < max, got nbins={p.nbins}, min={p.min}, max={p.max}"
            )
        if p.nbins > MAX_BINS:
            raise ConfigurationError(
                f"{context}: nbins={p.nbins} is more than {MAX_BINS} (its counts alone would take "
                f"{(p.nbins + 2) * 8 / 2**30:.0f} GiB)"
            )
        self.name, self.field = p.name, p.field
        self.token = module.consumes(p.src, branches=[p.field] if p.field else None)
        self.what = f"{context}: source '{p.src}'" + (f" field '{p.field}'" if p.field else "")
        self.title = p.title or p.name
        self.hist: hist.Hist[Any] = hist.Hist(
            hist.axis.Regular(p.nbins, p.min, p.max, label=p.xlabel or p.name), name=p.name
        )

    def fill(self, event: Event) -> None:
        self.hist.fill(_values(event.get(self.token), self.field, f"{self.what} in event {event.id}"))


class HistogramAnalyzer(EDAnalyzer):
    """Fills the configured 1-D histograms and writes them to ``fileName``, or to TFileService's file.

    Parameters: ``fileName`` (untracked string, "": the histograms go to the job's
    TFileService, as ``<label>/<name>``), ``histograms`` (VPSet; each: ``name``, ``src``
    InputTag, ``field`` ("" for a number or array product; for a collection, which field),
    ``nbins``, ``min``, ``max``, ``title``, ``xlabel``).

    Histograms are ``hist.Hist`` with one ``Regular`` axis and double storage (unweighted
    counts), written as ``TH1D`` named ``name`` with under/overflow: at the top of
    ``fileName`` at the end of each run of events (the job; a work unit's part under Dask),
    or booked with TFileService, which writes them. Either file is written under a
    temporary name and renamed when the job succeeded (``framework.utilities._commit``); a failed job
    writes nothing.

    Not thread-safe (``thread_safe = False``): ``hist.fill`` is not safe to call on one
    histogram from several threads, so ``analyze`` runs on the scheduler's thread, one
    event at a time.

    Raises:
        ConfigurationError: nbins < 1, min >= max, two histograms with one name, or no
            ``fileName`` and no TFileService configured.
        FileOpenError: the output folder is missing (``begin_unit``).
        FileWriteError: the file cannot be written (``end_unit``: a full disk).
        TypeError: (wrapped by the framework) the value has no such field, or is a
            collection and no field was given.
    """

    thread_safe = False

    @classmethod
    def fill_descriptions(cls, desc: cms.ParameterSetDescription) -> None:
        item = cms.ParameterSetDescription()
        item.add("name", cms.string, "histogram name (the key in the output file)")
        item.add("src", cms.InputTag, "product or source collection to histogram")
        item.add("field", cms.string(""), "field of a collection (e.g. 'pt'); '' for numbers and arrays")
        item.add("nbins", cms.uint32, "number of bins")
        item.add("min", cms.double, "lower edge of the first bin (inclusive)")
        item.add("max", cms.double, "upper edge of the last bin (exclusive)")
        item.add("title", cms.string(""), "histogram title ('' = name)")
        item.add("xlabel", cms.string(""), "x-axis label, with units ('' = name)")
        desc.add(
            "fileName",
            cms.untracked.string(""),
            "output ROOT file for the histograms ('' = TFileService's file, folder '<label>/')",
        )
        desc.add_vpset("histograms", item, "one PSet per histogram", default=[])

    def __init__(self, params: cms.ParameterSet) -> None:
        self.file_name = Path(params.fileName) if params.fileName else None
        self.target = self.file_name  # output_path(fileName), set in begin_unit
        self.histograms = [_Histogram(p, self) for p in params.histograms]
        names = [h.name for h in self.histograms]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigurationError(f"EDAnalyzer '{self.label}': histogram name '{duplicates[0]}' is used twice")
        # A file of its own (its histograms at the top), or TFileService's folder '<label>/'.
        self.own_file = BookedObjects(f"EDAnalyzer '{self.label}': histogram file") if self.file_name else None
        directory = TFileDirectory(self.own_file, "") if self.own_file else get_service("TFileService").directory(self)
        for h in self.histograms:
            directory.make(h.name, h.hist, title=h.title)

    def declared_outputs(self) -> dict[str, Any]:
        return {"fileName": self.file_name} if self.file_name else {}

    def begin_unit(self) -> None:
        """Empty histograms for this run (a job, or one work unit: a part); fail before the
        first event if ``fileName``'s folder is missing or not writable. (With TFileService,
        the service empties them per work unit.)"""
        if self.own_file is None or self.file_name is None:
            return
        self.own_file.reset()
        self.target = output_path(self.file_name)  # per dataset / unit when cmsrun runs those
        folder = self.target.parent
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            problem = (
                "is not writable"
                if folder.is_dir()
                else "is a file, not a folder"
                if folder.exists()
                else "does not exist"
            )
            raise FileOpenError(
                f"EDAnalyzer '{self.label}': cannot write histogram file '{self.target}' (folder '{folder}' {problem})"
            )

    def analyze(self, event: Event) -> None:
        for h in self.histograms:
            h.fill(event)

    def end_unit(self) -> None:
        """Write every histogram to ``fileName``: a temporary file, renamed when the job's
        outputs are committed (``framework.utilities._commit``). With TFileService: nothing (the
        service writes)."""
        if self.own_file is None or self.target is None:
            return
        self.own_file.write(self.target)
        log.info("EDAnalyzer '%s' wrote %d histograms to %s", self.label, len(self.histograms), self.target)

    @property
    def hists(self) -> dict[str, hist.Hist]:
        """The histograms by name (filled so far)."""
        return {h.name: h.hist for h in self.histograms}
