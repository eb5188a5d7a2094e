"""Output file names per dataset and per work unit, and the merge of unit parts.

A config names its outputs once (``fileName = "out.root"``). Where a module really
writes is :func:`output_path` of that name, which depends on what is being run:

* a plain job: ``out.root`` itself;
* a dataset (``with output_naming(dataset="DY")``): ``out_DY.root``
  (:func:`dataset_output_path`; the dataset name made safe by ``dataset_file_tag``);
* one work unit (``with output_naming(unit=u)``): the unit's *part* of the dataset's
  output, ``out_DY.root.parts/<u.part_name>.root`` (:func:`part_path`), written
  atomically like every output (temporary name, then rename), so that a part that
  exists is complete, and a unit run again (a worker lost) rewrites the same name;
* one work unit of a distributed run (``with output_naming(unit=u, run=r)``): the same
  in the run's own folder, ``out_DY.root.parts/<r>/<u.part_name>.root``
  (:func:`run_parts_folder`), which the driver creates before the units run and removes
  after the merge. Nothing here creates it: a unit that runs late (Dask recomputes a
  result lost with a worker after the merge) finds it gone and its writes fail, so no
  part appears after the merge.

:func:`merge_parts` then combines the parts of one output, in unit order, into the
dataset's file: TTrees concatenated (rows in part order; within a part, in the order the
output module wrote them), histograms summed with ``hist``; other objects are an error.
The naming is a ``contextvars`` variable: trio tasks and ``trio.to_thread`` threads see
the value of the code that started them.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import awkward as ak
import numpy as np
import uproot

from framework.utilities import OWNER_PATTERN, FileOpenError, FileReadError, owner_tag, remove_orphans

from ._files import one_line
from ._fileset import dataset_file_tag
from ._units import WorkUnit
from ._writer import atomic_write

__all__ = [
    "output_naming",
    "output_path",
    "in_work_unit",
    "dataset_output_path",
    "parts_folder",
    "run_parts_folder",
    "part_path",
    "final_path",
    "merge_parts",
    "merge_unit_parts",
    "MergeReport",
]

log = logging.getLogger("pysonic.merge")


@dataclass(frozen=True)
class _Naming:
    dataset: str | None = None
    unit: WorkUnit | None = None
    run: str | None = None


_naming: contextvars.ContextVar[_Naming] = contextvars.ContextVar("pysonic_output_naming", default=_Naming())  # noqa: B039 - frozen


@contextlib.contextmanager
def output_naming(
    *, dataset: str | None = None, unit: WorkUnit | None = None, run: str | None = None
) -> Iterator[None]:
    """Within the block, :func:`output_path` names files for ``dataset``, or for ``unit``'s
    part (the unit's own dataset then), in run ``run``'s folder if given (see the module
    docstring)."""
    token = _naming.set(_Naming(unit.dataset if unit is not None else dataset, unit, run))
    try:
        yield
    finally:
        _naming.reset(token)


def in_work_unit() -> bool:
    """Whether files are named for one work unit now (``output_naming(unit=...)``): a
    writer then writes that unit's part, merged per dataset later."""
    return _naming.get().unit is not None


def dataset_output_path(path: str | Path, dataset: str) -> Path:
    """``dir/out.root`` -> ``dir/out_<tag>.root`` (tag: :func:`dataset_file_tag`)."""
    path = Path(path)
    return path.with_name(f"{path.stem}_{dataset_file_tag(dataset)}{path.suffix}")


def parts_folder(final: str | Path) -> Path:
    """Where the parts of ``final`` are written: ``<final>.parts/`` beside it."""
    final = Path(final)
    return final.with_name(f"{final.name}.parts")


def run_parts_folder(final: str | Path, run: str) -> Path:
    """Where run ``run`` writes the parts of ``final``: ``<final>.parts/<run>/``."""
    return parts_folder(final) / run


def new_run_name() -> str:
    """A run's name for its parts folders: ``run-<owner tag>-<random>``; the owner tag
    (``framework.utilities._owners``: pid, start time, host) lets a later run tell a folder left by a
    killed driver from one a running driver is writing (:func:`remove_stale_runs`)."""
    return f"run-{owner_tag()}-{secrets.token_hex(3)}"


def remove_stale_runs(final: str | Path) -> list[Path]:
    """Remove the run folders in ``<final>.parts/`` whose driver is gone (a driver killed
    with SIGKILL cannot remove its own), logging one line; a driver of another host, or of
    an older version (no owner tag), is left alone. Returns the folders removed."""
    folder = parts_folder(final)
    runs = sorted(folder.glob("run-*")) if folder.is_dir() else []
    return remove_orphans(runs, _RUN, log, "parts folder(s) left by runs whose driver is gone")


_RUN = re.compile(rf"run-{OWNER_PATTERN}-[0-9a-f]+$")


def part_path(final: str | Path, unit: WorkUnit, run: str | None = None) -> Path:
    """The part of output ``final`` (a dataset's output) that ``unit`` writes:
    ``<final>.parts/<unit.part_name><final's suffix>``, or in ``<final>.parts/<run>/``."""
    final = Path(final)
    folder = parts_folder(final) if run is None else run_parts_folder(final, run)
    return folder / f"{unit.part_name}{final.suffix}"


def final_path(part: str | Path) -> Path:
    """The output a part belongs to: ``dir/out_DY.root.parts/x.root`` (or
    ``dir/out_DY.root.parts/<run>/x.root``) -> ``dir/out_DY.root``.

    Raises:
        ValueError: ``part`` is not in a ``*.parts`` folder (nor in a folder of one).
    """
    folder = Path(part).parent
    if not folder.name.endswith(".parts"):
        folder = folder.parent
    if not folder.name.endswith(".parts"):
        raise ValueError(f"'{part}' is not a part file (not in a '<output>.parts' folder)")
    return folder.with_name(folder.name[: -len(".parts")])


def output_path(configured: str | Path) -> Path:
    """Where a module writes its configured file name now (see the module docstring).

    For a unit, the parts folder is created if the output's own folder exists (if not,
    the module's error about that folder is the one the user should see); never a run's
    folder (:func:`run_parts_folder`): the driver's to create and remove.
    """
    naming = _naming.get()
    path = Path(configured)
    if naming.dataset is None:
        return path
    path = dataset_output_path(path, naming.dataset)
    if naming.unit is None:
        return path
    if naming.run is None and path.parent.is_dir():
        parts_folder(path).mkdir(exist_ok=True)
    return part_path(path, naming.unit, naming.run)


@dataclass
class MergeReport:
    """What :func:`merge_parts` wrote.

    Attributes:
        target: the merged file.
        parts: the parts, in the order merged.
        entries: tree name -> entries written.
        histograms: names of the histograms summed.
        size: the merged file's size in bytes.
    """

    target: Path
    parts: tuple[Path, ...]
    entries: dict[str, int] = field(default_factory=dict)
    histograms: tuple[str, ...] = ()
    size: int = 0


def merge_parts(
    parts: Sequence[str | Path], target: str | Path, *, remove_parts: bool = True, compression: Any = None
) -> MergeReport:
    """Combine the parts of one output into ``target``, atomically (committed with the
    job's outputs, ``framework.utilities._commit``; at once outside a job).

    Every part must hold the same objects, at the top or in directories (TFileService's
    ``<label>/<name>``). TTrees (NanoAOD-style: flat branches, jagged ones with a counter
    ``n<name>``, as ``TreeWriter`` and TFileService's tables write them) are concatenated in
    part order; a part whose tree has no entries adds nothing (an output module that
    wrote no event cannot know the product branches, so its empty tree may have fewer).
    Histograms (``TH1``/``TH2``/``TH3``, with under/overflow) are summed as ``hist.Hist``
    and keep the first part's title; their binning must agree (hist raises otherwise).

    Args:
        parts: the part files in unit order (the merged rows follow it).
        target: the merged file; written as a temporary file and renamed when complete.
        remove_parts: delete the parts (and their folder, once empty) after the rename;
            False keeps them (``--keep-parts``).
        compression: uproot compression of ``target``; None: the first part's.

    Returns:
        a :class:`MergeReport`.

    Raises:
        ValueError: no parts.
        FileOpenError: a part cannot be opened (one line naming it).
        FileReadError: a part holds other objects, other branches, or branches that were
            not written by ``TreeWriter``; names the part and the object.
    """
    paths = [Path(p) for p in parts]
    target = Path(target)
    if not paths:
        raise ValueError(f"no parts to merge into '{target}'")
    files = []
    try:
        for part in paths:
            try:
                files.append(uproot.open(part))
            except Exception as exc:  # noqa: BLE001 - missing, truncated ...
                raise FileOpenError(f"cannot open part '{part}' of '{target}': {one_line(exc)}") from exc
        layout = _layout_of(files[0], paths[0])
        for file, part in zip(files[1:], paths[1:], strict=True):
            other = _layout_of(file, part)
            if other != layout:
                raise FileReadError(
                    f"part '{part}' holds {_describe(other)}, but part '{paths[0]}' holds "
                    f"{_describe(layout)}: they are not parts of one output"
                )
        report = MergeReport(target, tuple(paths))
        with atomic_write(target, f"the merge of {len(paths)} part(s) into '{target}'") as temp:
            with uproot.recreate(
                temp, compression=files[0].file.compression if compression is None else compression
            ) as out:
                for name, classname in layout.items():
                    if classname == "TTree":
                        report.entries[name] = _merge_tree(out, name, files, paths)
                    else:
                        out[name] = _sum_histograms(name, files, paths)
            report.size = temp.stat().st_size
        report.histograms = tuple(n for n, c in layout.items() if c != "TTree")
    finally:
        for file in files:
            file.close()
    if remove_parts:
        for part in paths:
            part.unlink(missing_ok=True)
        for folder in {p.parent for p in paths if p.parent.name.endswith(".parts")}:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only if empty: other outputs' parts may still be there
    log.info(
        "merged %d parts into %s (%s)",
        len(paths),
        target,
        ", ".join(f"{k}: {v} entries" for k, v in report.entries.items()) or "histograms only",
    )
    return report


def merge_unit_parts(parts_per_unit: Sequence[Sequence[str | Path]], *, remove_parts: bool = True) -> list[MergeReport]:
    """Merge what a dataset's units wrote: one output per :func:`final_path`.

    Args:
        parts_per_unit: for each unit, in unit order, the parts it wrote (one per output
            file of the job; ``run_unit(...).parts``).
        remove_parts: as for :func:`merge_parts`.

    Returns:
        One :class:`MergeReport` per output, in the order the outputs first appear.
    """
    by_output: dict[Path, list[Path]] = {}
    for parts in parts_per_unit:
        for part in parts:
            by_output.setdefault(final_path(part), []).append(Path(part))
    return [merge_parts(parts, final, remove_parts=remove_parts) for final, parts in by_output.items()]


def _layout_of(file: Any, part: Path) -> dict[str, str]:
    # Objects in directories are named by path ("label/pt"), and written back so (uproot
    # makes the directories): the directories themselves are no objects to merge.
    layout = {k: v for k, v in file.classnames(cycle=False).items() if v != "TDirectory"}
    for name, classname in layout.items():
        if classname != "TTree" and not classname.startswith(("TH1", "TH2", "TH3")):
            raise FileReadError(
                f"part '{part}': '{name}' is a {classname}, which cannot be merged "
                f"(only TTrees and TH1/TH2/TH3 histograms)"
            )
    return layout


def _describe(layout: dict[str, str]) -> str:
    return ", ".join(f"'{k}' ({v})" for k, v in layout.items()) or "nothing"


def _sum_histograms(name: str, files: list[Any], parts: list[Path]) -> Any:
    total = None
    for file, part in zip(files, parts, strict=True):
        obj = file[name]
        try:
            h = obj.to_hist()
            total = h if total is None else total + h
        except Exception as exc:  # noqa: BLE001 - other binning, ...
            raise FileReadError(
                f"histogram '{name}' of part '{part}' cannot be added to the previous parts': {one_line(exc)}"
            ) from exc
    assert total is not None  # at least one part
    total.title = files[0][name].member("fTitle")  # uproot writes a hist's ``title`` as the TH1's
    return total


def _merge_tree(out: Any, name: str, files: list[Any], parts: list[Path]) -> int:
    """Concatenate tree ``name`` of every part into ``out``; returns the entries written."""
    trees = [f[name] for f in files]
    filled = [(t, p) for t, p in zip(trees, parts, strict=True) if t.num_entries > 0]
    first, first_part = filled[0] if filled else (trees[0], parts[0])
    groups = _branch_groups(first, first_part)
    signature = _signature(first, groups)
    for tree, part in filled[1:]:
        # Same branches and types; the order may differ (a collection's fields follow the
        # input file's order, NanoAOD v15 lists Jet_eta before Jet_pt): the first part's
        # order is written, and every part is read by name.
        if _signature(tree, _branch_groups(tree, part)) != signature:
            raise FileReadError(
                f"tree '{name}' of part '{part}' has other branches than in part "
                f"'{first_part}': they are not parts of one output"
            )
    written = None
    total = 0
    for tree, part in filled or [(first, first_part)]:
        columns = _read_columns(tree, groups, part)
        if written is None:
            types = {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in columns.items()}
            written = out.mktree(name, types, title=first.title)
        if tree.num_entries:
            written.extend(columns)
            total += tree.num_entries
    return total


def _branch_groups(tree: Any, part: Path) -> list[tuple[str, str | None, tuple[str, ...]]]:
    """The tree as ``TreeWriter`` wrote it, in branch order: ``(name, counter, fields)``.

    ``(run, None, ())`` a flat branch; ``(x, nx, ())`` a jagged branch ``x`` counted by
    ``nx``; ``(Jet, nJet, (pt, eta))`` the record collection ``nJet`` + ``Jet_pt`` + ``Jet_eta``.
    """
    counted: dict[str, list[str]] = {}
    for branch in tree.branches:
        if branch.count_branch is not None:
            counted.setdefault(branch.count_branch.name, []).append(branch.name)
    groups: list[tuple[str, str | None, tuple[str, ...]]] = []
    for branch in tree.branches:
        name = branch.name
        if name in counted:
            members, base = counted[name], name[1:]
            if name.startswith("n") and members == [base]:
                groups.append((base, name, ()))
            elif name.startswith("n") and all(m.startswith(base + "_") for m in members):
                groups.append((base, name, tuple(m[len(base) + 1 :] for m in members)))
            else:
                raise FileReadError(
                    f"tree '{tree.name}' of part '{part}': counter '{name}' counts "
                    f"{', '.join(members)}, not n<name> + <name>_<field> as the writer makes them"
                )
        elif branch.count_branch is None:
            groups.append((name, None, ()))
    return groups


def _signature(tree: Any, groups: list[tuple[str, str | None, tuple[str, ...]]]) -> dict[str, Any]:
    """Order-free description of a tree's groups: name -> (counter, {branch: ROOT type})."""
    result = {}
    for base, counter, fields in groups:
        branches = [f"{base}_{f}" for f in fields] or [base]
        result[base] = (counter, {b: tree[b].typename for b in branches})
    return result


def _read_columns(tree: Any, groups: list[tuple[str, str | None, tuple[str, ...]]], part: Path) -> dict[str, Any]:
    """A part's tree as the columns ``mktree``/``extend`` take, rebuilding each group."""
    names = [g[0] if not g[2] else f"{g[0]}_{f}" for g in groups for f in (g[2] or ("",))]
    try:
        arrays = tree.arrays(names, how=dict)
    except Exception as exc:  # noqa: BLE001 - damaged part
        raise FileReadError(f"cannot read tree '{tree.name}' of part '{part}': {one_line(exc)}") from exc
    columns: dict[str, Any] = {}
    for base, counter, fields in groups:
        if counter is None:
            columns[base] = np.asarray(arrays[base])
        elif not fields:
            columns[base] = arrays[base]
        else:
            lists = [arrays[f"{base}_{f}"].layout.to_ListOffsetArray64(True) for f in fields]
            record = ak.contents.RecordArray([lst.content for lst in lists], list(fields), length=len(lists[0].content))
            columns[base] = ak.Array(ak.contents.ListOffsetArray(lists[0].offsets, record))
    return columns
