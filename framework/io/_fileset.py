"""Datasets: coffea's fileset format (JSON or YAML), and a config's own ``fileNames``.

A fileset maps dataset names to their files, as coffea writes it (``coffea.dataset_tools``;
the format of ``preprocess``'s input and output, and of ``processor.Runner``)::

    {"DYJets": {"files": {"a.root": "Events", "b.root": "Events"},
                "metadata": {"xsec": 6077.2, "isMC": true}},
     "Data":   {"files": ["c.root", "d.root:Events"], "treename": "Events"},
     "TT":     ["e.root", "f*.root"]}

Accepted per dataset:

* ``files`` as a mapping ``path -> tree`` (a tree name; ``null`` for the default), or
  ``path -> {"object_path": tree, "steps": [[start, stop], ...], "num_entries": n,
  "uuid": "..."}`` (coffea's *preprocessed* form: the ``steps`` are then the work units,
  as coffea processes exactly those; they are recomputed if the file's ``uuid`` changed);
* ``files`` as a list of paths, each optionally ``path.root:tree`` (uproot's colon
  syntax), with the dataset-level ``treename`` (coffea) as default tree;
* a bare list of paths instead of the mapping (coffea's ``Runner`` form).

``metadata`` (a mapping or null) is kept; other keys (``form``, ``preload``, ...) are
ignored. The tree of a file is, first found: its own entry, the dataset's ``treename``,
the ``default_tree`` (PoolSource's ``treeName``, default ``Events``).

Paths: URLs (``root://``, ``https://``) are kept as they are; local paths expand ``~``,
and a relative path is relative to **the folder of the fileset file** (not the current
directory), so a fileset and its files can move together. Local paths with glob
characters (``*``, ``?``, ``[``) are expanded, sorted; a pattern matching nothing is an
error. ``sample:NAME`` (a pysonic extension) is one of the project's real CMS samples
(``framework.io.samples``: ``sample:nano_dy.root``), located or fetched and checksum-verified
when the fileset is loaded, so that a fileset of samples runs on a fresh clone. Datasets
keep the order of the file.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from framework.utilities import ConfigurationError, FileOpenError

__all__ = ["FileSpec", "Dataset", "load_fileset", "parse_fileset", "expand_file_names", "dataset_file_tag"]

_GLOB = re.compile(r"[*?\[]")
_TREE_SUFFIX = re.compile(r"^(?P<path>.+\.root):(?P<tree>[^:/][^:]*)$")  # "a.root:Events", not a URL's port


@dataclass(frozen=True)
class FileSpec:
    """One file of a dataset.

    Attributes:
        path: a local path (absolute once loaded from a fileset file) or a URL.
        tree: the TTree holding the events.
        steps: entry ranges ``((start, stop), ...)`` (half-open) to process, from a
            preprocessed fileset; None: the whole file, split by ``--chunk-size``.
        num_entries: the entry count the fileset claims (None: unknown).
        uuid: the ROOT file's UUID the ``steps`` were computed for (None: unknown).
    """

    path: str
    tree: str
    steps: tuple[tuple[int, int], ...] | None = None
    num_entries: int | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class Dataset:
    """A named list of files (coffea's dataset; CMSSW's input of one job).

    Attributes:
        name: the fileset key (may be a DAS name with slashes; see :func:`dataset_file_tag`).
        files: in fileset order; a file may appear in several datasets.
        metadata: the fileset's ``metadata`` mapping (empty if none).
    """

    name: str
    files: tuple[FileSpec, ...]
    metadata: Mapping[str, Any] = field(default_factory=dict)


def dataset_file_tag(name: str) -> str:
    """The dataset name as it goes into file names: runs of characters other than
    letters, digits, ``.``, ``_``, ``-``, ``+`` become ``_`` (``/DY/Run2/NANO`` ->
    ``DY_Run2_NANO``)."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", name).strip("_") or "dataset"


def load_fileset(path: str | os.PathLike[str], *, default_tree: str = "Events") -> list[Dataset]:
    """Read a coffea fileset from a ``.json`` file, or YAML (``.yaml``, ``.yml``, other).

    Args:
        path: the fileset file; relative paths inside it are relative to its folder.
        default_tree: the tree of files for which the fileset names none.

    Returns:
        The datasets in file order.

    Raises:
        FileOpenError: the file cannot be read; a ``sample:`` file can be neither found
            nor fetched.
        ConfigurationError: not valid JSON/YAML, or not a fileset; one line naming the
            file, the dataset and the key (and the line for syntax errors).
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise FileOpenError(f"cannot read fileset '{path}': {exc.strerror or exc}") from exc
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text, object_pairs_hook=functools.partial(_unique_keys, path))
        except json.JSONDecodeError as exc:
            raise ConfigurationError(
                f"fileset '{path}' is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
    else:
        import yaml  # only YAML filesets need it

        try:
            data = yaml.load(text, Loader=_unique_key_loader(path))  # noqa: S506 - a SafeLoader subclass
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
            problem = getattr(exc, "problem", None) or type(exc).__name__
            raise ConfigurationError(f"fileset '{path}' is not valid YAML: {problem}{where}") from None
    return parse_fileset(data, origin=str(path), base=path.resolve().parent, default_tree=default_tree)


def _unique_keys(path: Path, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON's ``object_pairs_hook``: a key given twice is an error (json keeps the last one,
    so a dataset listed twice would silently lose its first listing)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ConfigurationError(
                f"fileset '{path}': key '{key}' is given twice; the second would replace the first"
            )
        out[key] = value
    return out


@functools.cache
def _unique_key_loader(path: Path) -> Any:
    """A ``yaml.SafeLoader`` that refuses a mapping key given twice (PyYAML keeps the last
    one, so a dataset listed twice would silently lose its first listing), naming both lines."""
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise ConfigurationError(
                        f"fileset '{path}': key '{key}' is given twice (lines {seen[key]} and {line}); "
                        "the second would replace the first"
                    )
                seen[key] = line
            return super().construct_mapping(node, deep)

    return UniqueKeyLoader


def parse_fileset(data: Any, *, origin: str, base: Path | None = None, default_tree: str = "Events") -> list[Dataset]:
    """Datasets from a fileset already parsed into Python objects (see the module docstring).

    Args:
        data: ``{dataset: {...}}`` as JSON/YAML gives it.
        origin: the fileset's name in errors (its path).
        base: the folder relative local paths are relative to (None: the current one).
        default_tree: the tree of files for which the fileset names none.

    Raises:
        ConfigurationError: one line naming ``origin``, the dataset and the key at fault.
        FileOpenError: a ``sample:`` file can be neither found nor fetched.
    """
    if not isinstance(data, Mapping) or not data:
        what = "empty" if isinstance(data, Mapping) or data is None else f"a {type(data).__name__}"
        raise ConfigurationError(f"fileset '{origin}' is {what}: expected a mapping of dataset names to their files")
    datasets = []
    tags: dict[str, str] = {}
    for name, value in data.items():
        where = f"fileset '{origin}': dataset '{name}'"
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"fileset '{origin}': dataset name {name!r} is not a non-empty string")
        tag = dataset_file_tag(name)
        if tag in tags:
            raise ConfigurationError(
                f"{where}: gives the same output file-name tag '{tag}' as dataset '{tags[tag]}'; rename one"
            )
        tags[tag] = name
        datasets.append(_parse_dataset(name, value, where, base, default_tree))
    return datasets


def _parse_dataset(name: str, value: Any, where: str, base: Path | None, default_tree: str) -> Dataset:
    if isinstance(value, list):  # coffea Runner's bare list
        value = {"files": value}
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{where}: is a {type(value).__name__}, expected a mapping with key 'files' or a list")
    if "files" not in value:
        keys = ", ".join(repr(k) for k in value) or "none"
        raise ConfigurationError(f"{where}: has no key 'files' (keys: {keys})")
    tree = value.get("treename") or default_tree
    if not isinstance(tree, str):
        raise ConfigurationError(f"{where}: key 'treename' is a {type(tree).__name__}, expected a string")
    metadata = value.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ConfigurationError(f"{where}: key 'metadata' is a {type(metadata).__name__}, expected a mapping")
    files = value["files"]
    specs: list[FileSpec] = []
    if isinstance(files, Mapping):
        for path, entry in files.items():
            specs += _file_entry(str(path), entry, tree, f"{where}: key 'files' entry '{path}'", base)
    elif isinstance(files, list):
        for i, path in enumerate(files):
            if not isinstance(path, str):
                raise ConfigurationError(f"{where}: key 'files' item {i} is a {type(path).__name__}, expected a path")
            match = _TREE_SUFFIX.match(path)
            path, own = (match["path"], match["tree"]) if match else (path, tree)
            specs += [FileSpec(p, own) for p in _expand(path, base, f"{where}: key 'files' item {i}")]
    else:
        raise ConfigurationError(f"{where}: key 'files' is a {type(files).__name__}, expected a mapping or a list")
    if not specs:
        raise ConfigurationError(f"{where}: key 'files' lists no file")
    return Dataset(name, tuple(specs), dict(metadata))


def _file_entry(path: str, entry: Any, tree: str, where: str, base: Path | None) -> list[FileSpec]:
    if entry is None or isinstance(entry, str):
        return [FileSpec(p, entry or tree) for p in _expand(path, base, where)]
    if not isinstance(entry, Mapping):
        raise ConfigurationError(f"{where}: is a {type(entry).__name__}, expected a tree name or a mapping")
    own = entry.get("object_path") or tree
    if not isinstance(own, str):
        raise ConfigurationError(f"{where}: key 'object_path' is a {type(own).__name__}, expected a tree name")
    num_entries = entry.get("num_entries")
    if num_entries is not None and (not isinstance(num_entries, int) or num_entries < 0):
        raise ConfigurationError(f"{where}: key 'num_entries' is {num_entries!r}, expected an integer >= 0")
    steps = _steps(entry.get("steps"), num_entries, where)
    uuid = entry.get("uuid")
    paths = _expand(path, base, where)
    if steps is not None and len(paths) > 1:
        raise ConfigurationError(f"{where}: has 'steps' but its pattern matches {len(paths)} files")
    return [FileSpec(p, own, steps, num_entries, None if uuid is None else str(uuid)) for p in paths]


def _steps(steps: Any, num_entries: int | None, where: str) -> tuple[tuple[int, int], ...] | None:
    """coffea's ``steps``: ``[[start, stop], ...]``, sorted, not overlapping, within the file."""
    if steps is None:
        return None
    ok = isinstance(steps, list) and all(
        isinstance(s, list) and len(s) == 2 and all(isinstance(x, int) and x >= 0 for x in s) and s[0] <= s[1]
        for s in steps
    )
    if not ok:
        raise ConfigurationError(
            f"{where}: key 'steps' is not a list of [start, stop] entry pairs with 0 <= start <= stop"
        )
    result = tuple(sorted((s[0], s[1]) for s in steps))
    for (_, stop), (start, _) in zip(result, result[1:], strict=False):
        if start < stop:
            raise ConfigurationError(
                f"{where}: key 'steps' has overlapping ranges (one starts at {start}, "
                f"before the previous one stops at {stop})"
            )
    if num_entries is not None and result and result[-1][1] > num_entries:
        raise ConfigurationError(
            f"{where}: key 'steps' goes up to entry {result[-1][1]}, beyond its num_entries {num_entries}"
        )
    return result


SAMPLE_PREFIX = "sample:"


def _expand(path: str, base: Path | None, where: str) -> list[str]:
    """A fileset path -> file paths: URLs kept, local ones absolute and glob-expanded,
    ``sample:NAME`` located (:func:`framework.io.samples.locate_sample`)."""
    if "://" in path:
        return [path]
    if path.startswith(SAMPLE_PREFIX):
        return [_sample(path[len(SAMPLE_PREFIX) :], where)]
    local = path[len("file:") :] if path.startswith("file:") else path
    local = os.path.expanduser(local)
    if base is not None and not os.path.isabs(local):
        local = str(base / local)
    if not _GLOB.search(local):
        return [local]
    matches = sorted(glob.glob(local))
    if not matches:
        raise ConfigurationError(f"{where}: pattern '{path}' matches no file")
    return matches


def _sample(name: str, where: str) -> str:
    from .samples import SHA256, locate_sample  # only filesets that name samples need it

    if name not in SHA256:
        raise ConfigurationError(f"{where}: unknown sample '{name}' (known: {', '.join(sorted(SHA256))})")
    try:
        return str(locate_sample(name))
    except FileOpenError as exc:
        raise FileOpenError(f"{where}: {exc}") from exc


def expand_file_names(names: Sequence[str], context: str) -> list[str]:
    """A config's ``fileNames`` with local glob patterns expanded (sorted; in place of the
    pattern). ``file:`` prefixes and URLs are kept; paths stay relative to the current folder.

    Raises:
        ConfigurationError: a pattern matches no file (names ``context`` and the pattern).
    """
    result: list[str] = []
    for name in names:
        local = name[len("file:") :] if name.startswith("file:") and not name.startswith("file://") else name
        if "://" in local or not _GLOB.search(local):
            result.append(name)
            continue
        matches = sorted(glob.glob(os.path.expanduser(local)))
        if not matches:
            raise ConfigurationError(f"{context}: fileNames pattern '{name}' matches no file")
        result += matches
    return result
