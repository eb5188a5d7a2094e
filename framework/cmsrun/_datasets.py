"""``cmsrun CONFIG --dataset FILESET``: the datasets of a coffea fileset, one after the other.

For each dataset of the fileset, in file order, cmsrun builds the job afresh from the
config (CMSSW: one job per dataset), gives its PoolSource the dataset's work units
(``framework.io.preprocess``: entries and clusters read once per file, cached), and runs
it with ``framework.io.output_naming(dataset=...)``, so every output of the config gets
the dataset's name: ``out.root`` -> ``out_<dataset>.root`` (histograms, FastTimerService
files and ``--summary-json`` too). Each dataset has its own summary; ``maxEvents`` applies
per dataset; the config's own ``fileNames`` are not read.

For the scale-out executor, :func:`run_unit` runs the config over one work unit and
writes its parts (``framework.io.part_path``), which ``framework.io.merge_unit_parts``
combines per dataset.

The preprocessing cache is ``<fileset stem>.preprocessed.json`` in the folder of the
config's first ``OutputModule`` (the current folder if it has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from framework.core import JobReport, build_job, run_job
from framework.io import Dataset, RemoteAccess, WorkUnit, load_fileset, output_naming, preprocess
from framework.utilities import ConfigurationError, FileOpenError, FileReadError, commit_outputs

__all__ = ["plan_datasets", "preprocess_cache_path", "run_unit", "UnitResult"]


def preprocess_cache_path(process: Any, fileset: str | Path) -> Path:
    """Where the preprocessing of ``fileset`` is cached: next to the job's output."""
    folder = Path(".")
    for module in process.outputModules_().values():
        if "fileName" in module:
            folder = Path(str(module.fileName.value())).parent
            break
    return folder / f"{Path(fileset).stem}.preprocessed.json"


def plan_datasets(
    process: Any, fileset: str | Path, chunk_size: int, cache: Path | None = None, mapper: Any = map
) -> list[tuple[Dataset, list[WorkUnit]]]:
    """The datasets of ``fileset`` with their work units, for ``process``.

    Files whose tree the fileset does not name use the PoolSource's ``treeName``
    (default ``Events``). ``mapper`` runs the preprocessing of the files
    (``framework.io.preprocess``: ``map`` here, one task per file on a Dask cluster).

    Raises:
        ConfigurationError: the process's source is not a PoolSource; a bad fileset (one
            line naming file, dataset and key).
        FileOpenError: a fileset file or input file cannot be read (naming it).
    """
    source = getattr(process, "source", None)
    if source is None or source.type_() != "PoolSource":
        what = "has no source" if source is None else f"has source type '{source.type_()}'"
        raise ConfigurationError(f"--dataset needs process.source = cms.Source('PoolSource', ...); the config {what}")
    tree = str(source.treeName.value()) if "treeName" in source else "Events"
    datasets = load_fileset(fileset, default_tree=tree)
    if cache is None:
        cache = preprocess_cache_path(process, fileset)
        if not cache.parent.is_dir():
            cache = None  # the output module names the missing folder when the job starts
    try:
        units = preprocess(datasets, chunk_size, cache=cache, mapper=mapper, access=RemoteAccess.from_config(source))
    except ConfigurationError as exc:  # steps beyond a file's entries: name the fileset too
        raise ConfigurationError(f"fileset '{fileset}': {exc.args[0]}") from None
    return [(d, units[d.name]) for d in datasets]


@dataclass(frozen=True)
class UnitResult:
    """What :func:`~framework.cmsrun.run_unit` did: the unit, the job's report, the part files it wrote
    (one per output file of the config: NanoAOD output, histograms)."""

    unit: WorkUnit
    report: JobReport
    parts: tuple[Path, ...]


def run_unit(process: Any, unit: WorkUnit, *, streams: int | None = None, threads: int | None = None) -> UnitResult:
    """Run ``process`` over ``unit`` alone and write its parts; blocking (its own ``trio.run``).

    The job is built from the config, its PoolSource reads only the unit's entries, and
    every output goes to the unit's part of the dataset's output (``output_naming(unit=)``),
    committed when the unit's job succeeded (``framework.utilities._commit``): a part exists complete
    or not at all, and the unit's parts are every file it committed. Runs in any thread (no
    signal handling: the caller stops it).

    Raises:
        FrameworkError: as ``run_job`` (the error names file and entry range for bad input);
            no part of this unit is left behind then.
    """
    job = build_job(process, max_events=-1, streams=streams, threads=threads)
    job.source.set_units([unit])  # type: ignore[attr-defined]  # a PoolSource: datasets need one
    with output_naming(unit=unit):
        try:
            with commit_outputs(f"work unit {unit.describe()}") as commit:
                report = trio.run(run_job, job)
        except (FileOpenError, FileReadError) as exc:
            message = exc.args[0]
            if "entries [" not in message:  # an open error names the file only
                message += f" (work unit: {unit.describe()})"
            raise type(exc)(message, category=exc.category) from exc
    return UnitResult(unit, report, tuple(commit.committed))
