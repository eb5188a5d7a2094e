"""The source's per-event views: NumPy fields without awkward, awkward behaviour as before.

A view must behave as the eager awkward object PoolSource used to hand out
(``ak.Array(records[start:stop])``, ``ak.Record(Record(records, i))``) for everything
except its fields, which are NumPy views of the chunk. Each awkward operation below is
compared with the same operation on that eager object, so that an awkward release that
changes what the views rely on (its private ``_layout`` state) fails here.
"""

from __future__ import annotations

import copy
import pickle
import types

import awkward as ak
import numpy as np
import pytest
import trio
import uproot

from framework.io import JaggedChunk, JaggedView, PoolSource, SingletonChunk, SingletonView
from framework.io._views import JaggedColumn, numpy_column


@pytest.fixture
def jets():
    """A chunk of 3 entries with 3, 0 and 4 jets (pt float32, eta float32, id int32)."""
    pt = np.arange(7, dtype=np.float32) * 10 + 5
    contents = [
        ak.contents.NumpyArray(pt),
        ak.contents.NumpyArray(-pt / 100),
        ak.contents.NumpyArray(np.arange(7, dtype=np.int32)),
    ]
    records = ak.contents.RecordArray(contents, ["pt", "eta", "id"], length=7)
    return JaggedChunk(records, np.array([0, 3, 3, 7], dtype=np.int64))


def eager(chunk, i):
    return ak.Array(chunk.records[chunk.offsets[i] : chunk.offsets[i + 1]])


def built(view) -> bool:
    return "_layout" in view.__dict__


def test_fields_are_numpy_views_of_the_chunk_and_build_nothing(jets):
    view = jets[2]
    assert isinstance(view, ak.Array) and isinstance(view, JaggedView)
    assert len(view) == 4 and view.fields == ["pt", "eta", "id"] and view.ndim == 1
    for field in ("pt", "eta", "id"):
        column = jets.columns[field]
        for value in (getattr(view, field), view[field]):
            assert isinstance(value, np.ndarray) and value.dtype == column.dtype
            assert np.shares_memory(value, column)
            np.testing.assert_array_equal(value, np.asarray(eager(jets, 2)[field]))
    assert len(jets[1]) == 0 and jets[1].pt.shape == (0,)
    assert not built(view)


@pytest.mark.parametrize(
    "operation",
    [
        lambda a: a.to_list(),
        lambda a: a[a.pt > 40].to_list(),
        lambda a: a[1:].to_list(),
        lambda a: a[-1].to_list(),
        lambda a: a[["pt", "id"]].to_list(),
        lambda a: [r.to_list() for r in a],
        lambda a: ak.num(a, axis=0),
        lambda a: ak.zip({"x": a.pt, "y": a.id}).to_list(),
        lambda a: str(ak.type(a)),
        lambda a: ak.to_numpy(a).tolist(),
        lambda a: ak.Array(a).to_list(),
        lambda a: copy.copy(a).to_list(),
        lambda a: pickle.loads(pickle.dumps(a)).to_list(),
        lambda a: ak.concatenate([a, a]).to_list(),
        lambda a: a.layout.form.to_dict(),
    ],
    ids=[
        "to_list",
        "mask",
        "slice",
        "index",
        "projection",
        "iteration",
        "num",
        "zip",
        "type",
        "to_numpy",
        "ak.Array",
        "copy",
        "pickle",
        "concatenate",
        "layout",
    ],
)
def test_awkward_operations_act_as_on_the_eager_array(jets, operation):
    for i in range(len(jets)):  # event 1 has no jets: a[-1] raises, on both
        assert outcome(operation, jets[i]) == outcome(operation, eager(jets, i))


def outcome(operation, array):
    try:
        return operation(array)
    except Exception as exc:  # noqa: BLE001 - the same error is the same outcome
        return type(exc)


def test_errors_are_awkwards(jets):
    with pytest.raises(AttributeError, match="no field named 'phi'"):
        jets[0].phi
    with pytest.raises(ak.errors.FieldNotFoundError):
        jets[0]["phi"]


def test_a_view_set_a_field_becomes_a_plain_array_and_the_chunk_is_unchanged(jets):
    view = jets[0]
    view["pt2"] = view.pt * 2
    assert type(view) is ak.Array and view.fields == ["pt", "eta", "id", "pt2"]
    assert view.pt2.to_list() == [10.0, 30.0, 50.0]
    assert jets[0].fields == ["pt", "eta", "id"] and jets.records.fields == ["pt", "eta", "id"]


def singleton_chunk():
    """MET-like: pt float32, nGood int64 (scalars), cov float32[2] (fixed size), w (jagged)."""
    w = ak.Array([[1.0, 2.0], [], [3.0]]).layout
    contents = [
        ak.contents.NumpyArray(np.array([1.5, 2.5, 3.5], np.float32)),
        ak.contents.NumpyArray(np.array([4, 5, 6], np.int64)),
        ak.contents.NumpyArray(np.arange(6, dtype=np.float32).reshape(3, 2)),
        w,
    ]
    return SingletonChunk(ak.contents.RecordArray(contents, ["pt", "nGood", "cov", "w"], length=3))


def test_singleton_fields_are_numpy_and_the_record_is_awkwards():
    chunk = singleton_chunk()
    for i in range(3):
        view, ref = chunk[i], ak.Record(ak.record.Record(chunk.records, i))
        assert isinstance(view, ak.Record) and isinstance(view, SingletonView)
        assert view.fields == ["pt", "nGood", "cov", "w"]
        assert type(view.pt) is np.float32 and view.pt == ref.pt and view["nGood"] == ref.nGood
        assert type(view.nGood) is np.int64
        assert isinstance(view.cov, np.ndarray) and view.cov.tolist() == ref.cov.to_list()
        assert isinstance(view.w, np.ndarray) and view.w.tolist() == ref.w.to_list()
        assert not built(view)
        assert view.to_list() == ref.to_list() and str(ak.type(view)) == str(ak.type(ref))
        assert view[["pt", "w"]].to_list() == ref[["pt", "w"]].to_list()
        assert pickle.loads(pickle.dumps(view)).to_list() == ref.to_list()


def test_numpy_column_leaves_non_numbers_to_awkward():
    strings = ak.Array(["a", "bc"]).layout
    nested = ak.Array([[[1]], [[2, 3]]]).layout
    assert numpy_column(strings) is None and numpy_column(nested) is None
    jagged = numpy_column(ak.Array([[1, 2], [], [3]]).layout)
    assert isinstance(jagged, JaggedColumn) and [jagged[i].tolist() for i in range(3)] == [[1, 2], [], [3]]


async def test_poolsource_hands_out_views_of_a_real_file(tmp_path):
    """Jagged collection, singleton and a plain jagged branch (PSWeight) through the source."""
    counts = np.array([2, 0, 3])
    pt = ak.unflatten(np.arange(5, dtype=np.float32), counts)
    weights = ak.Array([[1.0, 0.5], [0.9], []])
    path = tmp_path / "views.root"
    data = {
        "Jet": ak.zip({"pt": pt, "mass": pt * 0.1}),
        "MET_pt": np.array([1, 2, 3], np.float32),
        "PSWeight": weights,
        "genWeight": np.array([1.0, -1.0, 1.0]),
    }
    with uproot.recreate(path) as f:
        f.mktree("Events", {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in data.items()})
        f["Events"].extend(data)
    params = types.SimpleNamespace(
        fileNames=[str(path)], skipEvents=0, treeName="Events", duplicateCheckMode="noDuplicateCheck", eventsPerRead=0
    )
    source = PoolSource(params)
    source.collections()
    source.set_branch_request({"Jet": None, "MET": None, "PSWeight": None, "genWeight": None})
    send, receive = trio.open_memory_channel(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(source.run, send, -1)
        events = [e async for e in receive]
    source.close()
    for i, event in enumerate(events):
        jets = event.collections["Jet"]
        assert isinstance(jets, JaggedView) and jets.pt.tolist() == pt[i].to_list()
        assert jets.to_list() == ak.zip({"pt": pt, "mass": pt * 0.1})[i].to_list()
        assert isinstance(event.collections["MET"], SingletonView) and event.collections["MET"].pt == i + 1
        ps = event.collections["PSWeight"]
        assert isinstance(ps, np.ndarray) and ps.tolist() == weights[i].to_list()
        assert type(event.collections["genWeight"]) is np.float64


def test_source_data_are_read_only(jets):
    """Every module of an event sees the same data: an in-place change is an error."""
    with pytest.raises(ValueError, match="read-only"):
        jets[0].pt[0] = 0.0
    with pytest.raises(ValueError, match="read-only"):
        singleton_chunk()[0].cov[:] = 0.0
    assert (jets[0].pt * 2).tolist() == [10.0, 30.0, 50.0]  # a copy is the module's own
