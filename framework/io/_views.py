"""Per-event views of a chunk's collections: NumPy fields at once, awkward only on demand.

Modules see one event's jagged collection as an ``ak.Array`` of records and a singleton
as an ``ak.Record``. Building those per event costs 10-50 us each (awkward slices every
field's layout and validates it), and reading a field as NumPy through awkward
(``np.asarray(jets.pt)``) another ~100 us: on a flat ntuple, 10-30x what reading the
event from the file costs. The views here are ``ak.Array`` / ``ak.Record`` subclasses
that hold only their chunk and entry (or object) range:

* a field (``jets.pt``, ``jets["pt"]``, ``met.pt``) is a read-only NumPy view of the
  chunk's column, no copy: 1-D for a jagged collection's field (one value per object), a
  NumPy scalar for a singleton's number (an array for its array-valued fields), in ~1 us
  (read-only: see :func:`read_only`);
* ``len``, ``fields`` and ``ndim`` need nothing more;
* everything else (masks and slices, ``ak.*`` functions, ufuncs on the whole record,
  iteration, ``to_list``, printing, ``isinstance(x, ak.Array)``) works as on an eager
  awkward object: the view builds its layout on first use (the same layout the eager
  view had) and awkward takes it from there. Results are plain awkward objects.

The layout hides behind awkward's private ``_layout`` attribute, which ``ak.Array`` and
``ak.Record`` read everywhere (awkward 2.x); tests/test_views.py compares awkward
operations on views with the same operations on eager objects, so an awkward release
that changes this fails there rather than in a job.
"""

from __future__ import annotations

from typing import Any

import awkward as ak
import numpy as np

__all__ = ["JaggedColumn", "JaggedView", "SingletonView", "numpy_column", "read_only"]


class JaggedColumn:
    """A jagged numeric branch over a chunk: ``column[i]`` is entry i's values.

    Args:
        offsets: int64, shape (n_entries + 1,): entry i's values are
            ``data[offsets[i]:offsets[i + 1]]``.
        data: the values of every entry, 1-D (or n-D for fixed-size inner dimensions).

    ``column[i]`` is a NumPy view into ``data`` (no copy).
    """

    __slots__ = ("data", "bounds")

    def __init__(self, offsets: np.ndarray[Any, Any], data: np.ndarray[Any, Any]) -> None:
        self.data = data
        self.bounds = offsets.tolist()  # Python ints: slicing with them is ~3x faster

    def __getitem__(self, i: int) -> np.ndarray[Any, Any]:
        return self.data[self.bounds[i] : self.bounds[i + 1]]

    def __len__(self) -> int:
        return len(self.bounds) - 1


def read_only(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``array``, made read-only (a view of it, not the caller's object).

    Source data are shared by every module of an event (CMSSW products are const): an
    in-place change (``jets.pt *= 2``) raises ``ValueError`` instead of altering what
    other modules, and the output module, read. Copy to modify (``jets.pt * 2``).
    """
    view = array.view()
    view.flags.writeable = False
    return view


def numpy_column(layout: ak.contents.Content) -> np.ndarray[Any, Any] | JaggedColumn | None:
    """Per-entry NumPy access to a branch's layout, if it holds plain numbers.

    Returns:
        the NumPy array, read-only (``[i]`` is entry i's number, or its fixed-size array) for a
        ``NumpyArray``; a :class:`JaggedColumn` for a list of numbers per entry; None for
        anything else (strings, nested lists, records, parameters such as ``__array__``),
        which keeps going through awkward.
    """
    if isinstance(layout, ak.contents.NumpyArray):
        return None if layout.parameters else read_only(layout.data)
    if isinstance(layout, (ak.contents.ListOffsetArray, ak.contents.ListArray)):
        content = layout.content
        if not layout.parameters and isinstance(content, ak.contents.NumpyArray) and not content.parameters:
            lists = layout.to_ListOffsetArray64(False)
            return JaggedColumn(np.asarray(lists.offsets), read_only(content.data))
    return None


_AWKWARD_STATE = ("_behavior", "_attrs", "_numbaview", "_cpp_type", "_generator", "_lookup")
"""What ``ak.Array.__init__``/``ak.Record.__init__`` set per instance besides ``_layout``
(awkward 2.x), all None for a source view."""


class _SourceView:
    """What both views share: fields from the chunk's NumPy columns, a lazy layout.

    A view's state is its chunk and ``_index``, the NumPy index of this event in the
    chunk's columns (a slice of objects, or an entry). awkward's ``__init__`` sets its
    own state per instance; the views skip it, so the class holds the same defaults
    (``_AWKWARD_STATE``). Assigning ``_layout`` (awkward does, in ``__setitem__`` or
    ``layout = ...``, then turns the object into a plain ``ak.Array``/``ak.Record``
    through ``_update_class``) stores it in the instance dict, and ``_update_class``
    copies the defaults there too, where the plain class looks.
    """

    _behavior = _attrs = _numbaview = _cpp_type = _generator = _lookup = None

    def __init__(self, chunk: Any, index: slice | int) -> None:  # noqa: D107 - no awkward __init__
        self.__dict__.update(_chunk=chunk, _index=index)

    @property
    def _layout(self) -> Any:
        state = self.__dict__
        layout = state.get("_layout")
        if layout is None:
            layout = state["_layout"] = self._build_layout()
        return layout

    @_layout.setter
    def _layout(self, layout: Any) -> None:
        self.__dict__["_layout"] = layout

    def _update_class(self, restore: Any = None) -> None:
        state = self.__dict__
        for name in _AWKWARD_STATE:
            state.setdefault(name, None)
        super()._update_class(restore)  # type: ignore[misc]  # awkward's, next in the view's MRO

    def _build_layout(self) -> Any:
        raise NotImplementedError

    @property
    def fields(self) -> list[str]:
        """The field names, in file order (as awkward's ``fields``)."""
        return list(self._chunk.fields)

    def __getitem__(self, where: Any) -> Any:
        if type(where) is str:
            column = self._chunk.columns.get(where)
            if column is not None:
                return column[self._index]
        return super().__getitem__(where)  # type: ignore[misc]  # awkward's, next in the view's MRO

    def __getattr__(self, where: str) -> Any:
        # Only for names that are no attribute of the class: awkward's methods and
        # properties come first, as with awkward's own field attributes.
        state = self.__dict__
        chunk = state.get("_chunk")
        if chunk is not None:
            column = chunk.columns.get(where)
            if column is not None:
                return column[state["_index"]]
        return super().__getattr__(where)  # type: ignore[misc]  # awkward's, next in the view's MRO


class JaggedView(_SourceView, ak.Array):  # type: ignore[misc]  # awkward has no type information
    """One event's objects of a jagged collection (``event.get("Jet")``).

    An ``ak.Array`` of records, ``len(view)`` objects. A field (``view.pt``,
    ``view["pt"]``) is a read-only 1-D NumPy view of the chunk's column, shape
    (len(view),), in the branch's dtype (``Jet_pt``: float32); the rest is awkward's
    (module docstring).

    Args:
        chunk: the chunk's :class:`~framework.io._chunks.JaggedChunk` (``fields``;
            ``columns``: field -> NumPy data of every object of the chunk, for numeric
            fields; ``records``: the same as an awkward ``RecordArray``).
        start, stop: this event's objects, ``[start, stop)`` of the chunk's.
    """

    def __init__(self, chunk: Any, start: int, stop: int) -> None:
        super().__init__(chunk, slice(start, stop))

    def _build_layout(self) -> ak.contents.Content:
        return self._chunk.records[self._index]

    def __len__(self) -> int:
        length: int = self._index.stop - self._index.start
        return length

    @property
    def ndim(self) -> int:
        return 1


class SingletonView(_SourceView, ak.Record):  # type: ignore[misc]  # awkward has no type information
    """One event's record of a singleton collection (``event.get("MET")``).

    An ``ak.Record``. A numeric field (``view.pt``, ``view["pt"]``) is a NumPy scalar in
    the branch's dtype (``MET_pt``: ``np.float32``); an array-valued one (a fixed-size
    or jagged array per event) a read-only NumPy array view; the rest is awkward's.

    Args:
        chunk: the chunk's :class:`~framework.io._chunks.SingletonChunk` (``fields``;
            ``columns``: field -> per-entry NumPy access as ``numpy_column`` gives,
            for numeric fields; ``records``: the awkward ``RecordArray``).
        index: the entry in the chunk.
    """

    def _build_layout(self) -> ak.record.Record:
        return ak.record.Record(self._chunk.records, self._index)
