"""The layout of a NanoAOD-style tree (collections, counters) and branch requests.

NanoAOD stores every collection flat: branch ``X_y`` is field ``y`` of collection ``X``
(split at the *first* underscore, so ``JetPFCands_pt`` belongs to ``JetPFCands``, not to
``Jet``), and a jagged collection has a counter branch (``nX``, found through uproot's
``TBranch.count_branch``). A collection without counter (``MET_pt``, ``MET_phi``) holds one
object per event, and a branch without underscore (``run``, ``genWeight``) is a collection
of its own. :func:`scan_tree` finds them; :func:`resolve_request` and :func:`check_types`
check what modules ask for against one file.
"""

from __future__ import annotations

import difflib
import logging
from dataclasses import dataclass
from typing import Any

import uproot

from framework.utilities import FileReadError

__all__ = ["Collection", "scan_tree", "resolve_request", "check_types", "check_interpretable", "unreadable_branch"]

log = logging.getLogger("pysonic.source")


@dataclass(frozen=True)
class Collection:
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


def scan_tree(tree: Any) -> dict[str, Collection]:
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
    result: dict[str, Collection] = {}
    for prefix, members in groups.items():
        fields = tuple(b.name[len(prefix) + 1 :] for b in members)
        counts = [b.count_branch.name if b.count_branch is not None else None for b in members]
        own = {f"n{prefix}"} | {f"n{b.name}" for b in members}  # nJet, or nJet_pt per field
        if None not in counts and (len(set(counts)) == 1 or set(counts) <= own):
            counter = f"n{prefix}" if f"n{prefix}" in names else counts[0]
            result[prefix] = Collection(prefix, "jagged", fields, counter)
        elif f"n{prefix}" in counters:
            # nJet counts some Jet_* fields but not all: still the jagged Jet collection,
            # with broken fields (a Jet_pt of strings) that _check_types names if requested.
            result[prefix] = Collection(prefix, "jagged", fields, f"n{prefix}")
        else:
            # No counter, or fields with unrelated counters: one record per event, whose
            # fields may themselves be arrays.
            result[prefix] = Collection(prefix, "singleton", fields)
    counters |= {c.counter for c in result.values() if c.counter}  # nJet beside nJet_pt (v15)
    for name in plain:
        if name in counters:
            continue
        if name in result:
            log.warning("plain branch '%s' has the name of a collection; it is not readable", name)
            continue
        result[name] = Collection(name, "plain", ())
    return result


_NUMERIC_KINDS = "biuf"  # numpy dtype kinds: bool, signed, unsigned, floating


def _numeric(interpretation: Any, *, scalar: bool) -> bool:
    if not isinstance(interpretation, uproot.interpretation.numerical.AsDtype):
        return False
    dtype = interpretation.to_dtype
    return dtype.kind in _NUMERIC_KINDS and (not scalar or dtype.shape == ())


def _field_problem(coll: Collection, branch: Any) -> str | None:
    """What a collection field's branch should be but is not (None: fine).

    Jagged collections (``Jet``): one number per object, i.e. a jagged branch of a numeric
    type counted by the collection's counter (or by its own ``nJet_pt``, NanoAOD v15).
    Singletons (``MET``): numbers per event, fixed-size or jagged arrays of numbers allowed.
    """
    interpretation = branch.interpretation
    if coll.kind == "jagged":
        counter = branch.count_branch.name if branch.count_branch is not None else None
        if (
            isinstance(interpretation, uproot.interpretation.jagged.AsJagged)
            and _numeric(interpretation.content, scalar=True)
            and counter in (coll.counter, f"n{branch.name}")
        ):
            return None
        return f"one number per {coll.name} object (a numeric jagged branch counted by '{coll.counter}')"
    if _numeric(interpretation, scalar=False) or (
        isinstance(interpretation, uproot.interpretation.jagged.AsJagged)
        and _numeric(interpretation.content, scalar=False)
    ):
        return None
    return f"numbers per event (collection '{coll.name}' has no counter branch)"


def unreadable_branch(tree: Any, branches: list[str], lo: int, hi: int) -> str | None:
    """The first of ``branches`` whose entries [lo, hi) cannot be read (after a failed read)."""
    for name in branches:
        try:
            tree[name].array(entry_start=lo, entry_stop=hi, library="np")
        except Exception:  # noqa: BLE001 - this one is damaged
            return name
    return None


def check_types(
    tree: Any, layout: dict[str, Collection], request: dict[str, tuple[str, ...] | None], file_name: str
) -> None:
    """Check that the requested branches hold what the collections promise to modules.

    Raises:
        FileReadError: naming file, branch, what was expected and the branch's ROOT type
            (and uproot's interpretation): a field of strings, of nested vectors, or of a
            type uproot cannot read.
    """
    for name, fields in request.items():
        coll = layout[name]
        branches = coll.branches(fields)
        check_interpretable(tree, branches, file_name, collection=name)
        if coll.kind == "plain":
            continue
        for branch_name in branches:
            branch = tree[branch_name]
            expected = None if branch_name == coll.counter else _field_problem(coll, branch)
            if expected is not None:
                raise FileReadError(
                    f"branch '{branch_name}' of input file '{file_name}' is {branch.typename} "
                    f"(uproot {type(branch.interpretation).__name__}), expected {expected}",
                    file=file_name,
                    collection=name,
                    branch=branch_name,
                )


def check_interpretable(tree: Any, branches: list[str], file_name: str, *, collection: str | None = None) -> None:
    """Raises FileReadError (with ``file``, ``collection``, ``branch``) for a branch uproot cannot read."""
    for name in branches:
        interpretation = tree[name].interpretation
        if isinstance(interpretation, uproot.interpretation.identify.UnknownInterpretation):
            raise FileReadError(
                f"branch '{name}' of input file '{file_name}' has a type uproot cannot read "
                f"({tree[name].typename}): {' '.join(str(interpretation).split())}",
                file=file_name,
                collection=collection,
                branch=name,
            )


def _nearest(name: str, names: list[str]) -> tuple[str, ...]:
    return tuple(difflib.get_close_matches(name, names, n=3, cutoff=0.6))


def _quoted(names: tuple[str, ...]) -> str:
    return ", ".join(repr(c) for c in names) if names else "none close"


def resolve_request(
    layout: dict[str, Collection], request: dict[str, Any] | None, file_name: str
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
            nearest = _nearest(name, list(layout))
            raise FileReadError(
                f"input file '{file_name}' has no collection or branch '{name}' (nearest: {_quoted(nearest)})",
                file=file_name,
                collection=name,
                branch=name,
                nearest=nearest,
            )
        if fields is None or coll.kind == "plain":
            if fields and coll.kind == "plain":
                raise FileReadError(
                    f"branch '{name}' of input file '{file_name}' is a plain branch, it has no fields {sorted(fields)}",
                    file=file_name,
                    collection=name,
                    branch=name,
                )
            resolved[name] = None
            continue
        for f in sorted(fields):
            if f not in coll.fields:
                branch = f"{name}_{f}"
                nearest = _nearest(branch, [f"{name}_{x}" for x in coll.fields])
                raise FileReadError(
                    f"input file '{file_name}' has no branch '{branch}' (nearest: {_quoted(nearest)})",
                    file=file_name,
                    collection=name,
                    branch=branch,
                    nearest=nearest,
                )
        resolved[name] = tuple(f for f in coll.fields if f in fields)  # file order
    return resolved
