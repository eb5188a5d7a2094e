"""PoolSource: collections, ids, branch requests, skipping, duplicates, errors, views.

Edge cases use tiny NanoAOD-like files written in ``tmp_path`` with uproot; the real
CMS sample ``pfnano.root`` (found with ``framework.io.samples``) checks the real layout.
"""

from __future__ import annotations

import logging
import types

import awkward as ak
import numpy as np
import pytest
import trio
import trio.testing
import uproot

from framework import FileOpenError, FileReadError
from framework.io import PoolSource
from framework.io._layout import check_interpretable
from framework.io.samples import locate_sample


@pytest.fixture(scope="module")
def pfnano():
    try:
        return str(locate_sample("pfnano.root", fetch=False))
    except FileOpenError as exc:
        pytest.skip(f"no local pfnano.root ({exc}); 'python -m framework.io.samples pfnano.root' fetches it")


def make_source(files, **overrides):
    params = dict(
        fileNames=[str(f) for f in files],
        skipEvents=0,
        treeName="Events",
        duplicateCheckMode="checkAllFilesOpened",
        eventsPerRead=0,
    )
    params.update(overrides)
    return PoolSource(types.SimpleNamespace(**params))


def write_nano(path, n, *, first_event=1, tree="Events", baskets=1, ids=True):
    """A tiny NanoAOD-like file: Jet (jagged), JetPFCands (jagged), MET (singleton), genWeight."""
    counts = np.arange(n) % 4
    total = int(counts.sum())
    data = {
        "Jet": ak.zip(
            {
                "pt": ak.unflatten(np.arange(total, dtype=np.float32) + 10, counts),
                "eta": ak.unflatten(np.linspace(-2, 2, total, dtype=np.float32), counts),
            }
        ),
        "JetPFCands": ak.zip(
            {
                "pt": ak.unflatten(np.ones(2 * n, np.float32), np.full(n, 2)),
                "jetIdx": ak.unflatten(np.zeros(2 * n, np.int32), np.full(n, 2)),
            }
        ),
        "MET_pt": np.arange(n, dtype=np.float32) * 2,
        "MET_phi": np.zeros(n, np.float32),
        "genWeight": np.ones(n, np.float32),
    }
    if ids:
        data = {
            "run": np.full(n, 1, np.uint32),
            "luminosityBlock": np.full(n, 7, np.uint32),
            "event": np.arange(first_event, first_event + n, dtype=np.uint64),
            **data,
        }
    with uproot.recreate(path) as f:
        t = f.mktree(tree, {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in data.items()})
        step = max(1, -(-n // baskets))
        for lo in range(0, n, step):
            t.extend({k: v[lo : lo + step] for k, v in data.items()})
    return path


async def read_all(source, max_events=-1):
    """Run the source to the end; its error (if any) is raised as is, not in a group."""
    send, receive = trio.open_memory_channel(0)
    events = []
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(source.run, send, max_events)
            async with receive:
                async for event in receive:
                    events.append(event)
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
    finally:
        source.close()
    return events


# ------------------------------------------------------------------ real sample


def test_pfnano_collections(pfnano):
    colls = make_source([pfnano]).collections()
    assert "pt" in colls["Jet"] and "pt" in colls["PFCands"]
    assert "pFCandsIdx" in colls["JetPFCands"] and "pFCandsIdx" not in colls["Jet"]  # prefix split
    assert {"pt", "phi"} <= set(colls["MET"])
    assert colls["run"] == () and colls["genWeight"] == ()
    assert "nJet" not in colls and "nPFCands" not in colls  # counters come with their collection


async def test_pfnano_ids_and_views_match_file(pfnano):
    source = make_source([pfnano])
    source.collections()
    source.set_branch_request({"Jet": {"pt", "eta"}, "MET": None, "PFCands": {"pt"}, "genWeight": None})
    events = await read_all(source)
    tree = uproot.open(pfnano)["Events"]
    ref = tree.arrays(["run", "luminosityBlock", "event", "Jet_pt", "Jet_eta", "MET_pt", "nPFCands", "genWeight"])
    assert [tuple(e.id) for e in events] == list(
        zip(ref.run.tolist(), ref.luminosityBlock.tolist(), ref.event.tolist(), strict=True)
    )
    assert [e.entry for e in events] == list(range(len(ref)))
    for e, r in zip(events, ref, strict=True):
        jets = e.collections["Jet"]
        assert isinstance(jets, ak.Array) and jets.fields == ["eta", "pt"]  # file order
        assert isinstance(jets.pt, np.ndarray) and jets.pt.dtype == np.float32
        np.testing.assert_array_equal(jets.pt, r.Jet_pt)
        assert jets.to_list() == [{"eta": eta, "pt": pt} for eta, pt in zip(r.Jet_eta, r.Jet_pt, strict=True)]
        met = e.collections["MET"]
        assert isinstance(met, ak.Record) and met.pt == r.MET_pt and isinstance(met.pt, np.float32)
        assert len(e.collections["PFCands"]) == r.nPFCands
        assert e.collections["genWeight"] == r.genWeight
        assert e.file_name == pfnano


async def test_branch_request_limits_what_is_read(pfnano, monkeypatch):
    read: list[list[str]] = []
    original = uproot.behaviors.TBranch.HasBranches.arrays

    def spy(self, expressions=None, *args, **kwargs):
        read.append(list(expressions))
        return original(self, expressions, *args, **kwargs)

    monkeypatch.setattr(uproot.behaviors.TBranch.HasBranches, "arrays", spy)
    source = make_source([pfnano])
    source.set_branch_request({"Jet": {"pt"}, "run": set()})
    events = await read_all(source)
    assert read == [["run", "luminosityBlock", "event", "nJet", "Jet_pt"]]
    assert source.statistics().branches == tuple(read[0])
    assert set(events[0].collections) == {"Jet", "run"}
    assert events[0].collections["Jet"].fields == ["pt"]


async def test_one_counter_per_field_as_in_nanoaod_v15(tmp_path):
    # NanoAOD v15 has nJet and also nJet_pt, nJet_eta, ...: one counter per field.
    counts = np.array([2, 0, 1])
    pt = ak.unflatten(np.array([5.0, 6.0, 7.0], np.float32), counts)
    path = tmp_path / "v15.root"
    with uproot.recreate(path) as f:
        t = f.mktree("Events", {"nJet": np.int32, "Jet_pt": pt.type, "Jet_eta": pt.type})
        t.extend({"nJet": counts.astype(np.int32), "Jet_pt": pt, "Jet_eta": -pt})
    assert set(uproot.open(path)["Events"].keys()) >= {"nJet_pt", "nJet_eta"}
    source = make_source([path])
    assert source.collections() == {"Jet": ("pt", "eta")}
    source.set_branch_request({"Jet": {"eta"}})
    events = await read_all(source)
    assert [np.asarray(e.collections["Jet"].eta).tolist() for e in events] == [[-5.0, -6.0], [], [-7.0]]


async def test_views_share_the_chunk_memory(tmp_path):
    source = make_source([write_nano(tmp_path / "a.root", 6)])
    source.set_branch_request({"Jet": None})
    events = await read_all(source)
    content = events[1].collections._collections["Jet"].records.content("pt").data
    pts = [events[i].collections["Jet"].pt for i in (1, 2)]
    assert len(pts[0]) and len(pts[1])
    assert all(np.shares_memory(p, content) for p in pts)


# ------------------------------------------------------------------ selection of events


async def test_skip_events_across_files(tmp_path):
    a = write_nano(tmp_path / "a.root", 5, first_event=1)
    b = write_nano(tmp_path / "b.root", 5, first_event=101)
    events = await read_all(make_source([a, b], skipEvents=7))
    assert [e.id.event for e in events] == [103, 104, 105]
    assert [(e.file_name, e.entry) for e in events] == [(str(b), 2), (str(b), 3), (str(b), 4)]


async def test_max_events_reads_no_more_than_needed(tmp_path):
    source = make_source([write_nano(tmp_path / "a.root", 10)], eventsPerRead=3)
    events = await read_all(source, max_events=4)
    assert [e.id.event for e in events] == [1, 2, 3, 4]
    assert source.statistics().entries_read == 4


async def test_several_files_in_order_with_clusters(tmp_path):
    a = write_nano(tmp_path / "a.root", 9, first_event=1, baskets=3)
    b = write_nano(tmp_path / "b.root", 4, first_event=50)
    events = await read_all(make_source([a, f"file:{b}"]))
    assert [e.id.event for e in events] == list(range(1, 10)) + [50, 51, 52, 53]
    assert [len(e.collections["Jet"]) for e in events] == [i % 4 for i in range(9)] + [0, 1, 2, 3]


async def test_duplicate_check(tmp_path, caplog):
    a = write_nano(tmp_path / "a.root", 5)
    with caplog.at_level(logging.WARNING, logger="pysonic.source"):
        checked = make_source([a, a])
        events = await read_all(checked)
    assert [e.id.event for e in events] == [1, 2, 3, 4, 5]
    assert checked.statistics().duplicates_skipped == 5
    assert "duplicate event 1:7:1" in caplog.text
    events = await read_all(make_source([a, a], duplicateCheckMode="noDuplicateCheck"))
    assert [e.id.event for e in events] == [1, 2, 3, 4, 5] * 2


async def test_duplicates_do_not_count_towards_max_events(tmp_path):
    a = write_nano(tmp_path / "a.root", 3, first_event=1)
    b = write_nano(tmp_path / "b.root", 3, first_event=3)  # event 3 repeats
    events = await read_all(make_source([a, b]), max_events=5)
    assert [e.id.event for e in events] == [1, 2, 3, 4, 5]


async def test_zero_event_file_is_not_an_error(tmp_path):
    empty = write_nano(tmp_path / "empty.root", 0)
    full = write_nano(tmp_path / "full.root", 2)
    assert await read_all(make_source([empty])) == []
    assert [e.id.event for e in await read_all(make_source([empty, full, empty]))] == [1, 2]


async def test_file_without_ids_gets_entry_numbers(tmp_path, caplog):
    path = write_nano(tmp_path / "noids.root", 3, ids=False)
    events = await read_all(make_source([path, path]))
    assert [str(e.id) for e in events] == ["1:1:1", "1:1:2", "1:1:3"] * 2
    assert "no run/luminosityBlock/event" in caplog.text


async def test_one_range_is_read_ahead_not_more(tmp_path, monkeypatch):
    async def run_here(fn, *args, **kwargs):
        # Reads on the trio thread, so that wait_all_tasks_blocked() also waits for them.
        await trio.lowlevel.checkpoint()
        return fn(*args)

    monkeypatch.setattr(trio.to_thread, "run_sync", run_here)
    source = make_source([write_nano(tmp_path / "a.root", 8)], eventsPerRead=2)
    send, receive = trio.open_memory_channel(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(source.run, send, -1)
        first = await receive.receive()  # event 0 of range [0, 2) is out
        await trio.testing.wait_all_tasks_blocked()
        assert first.id.event == 1
        assert source.statistics().entries_read == 4  # range [2, 4) read ahead, no further
        for _ in range(2):
            await receive.receive()  # event 1, then event 2: the first of range [2, 4)
        await trio.testing.wait_all_tasks_blocked()
        assert source.statistics().entries_read == 6
        nursery.cancel_scope.cancel()
    source.close()


async def test_source_stops_quietly_when_the_receiver_closes(tmp_path):
    source = make_source([write_nano(tmp_path / "a.root", 6)], eventsPerRead=2)
    send, receive = trio.open_memory_channel(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(source.run, send, -1)
        await receive.receive()
        await receive.aclose()
    assert source.statistics().events_sent == 1


# ------------------------------------------------------------------ errors


def test_missing_file(tmp_path):
    with pytest.raises(FileOpenError, match="nope.root"):
        make_source([tmp_path / "nope.root"]).collections()


def test_not_a_root_file(tmp_path):
    path = tmp_path / "text.root"
    path.write_text("this is not ROOT\n" * 100)
    with pytest.raises(FileOpenError, match="text.root"):
        make_source([path]).collections()


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.99])
async def test_truncated_file(tmp_path, keep):
    good = write_nano(tmp_path / "good.root", 20)
    cut = tmp_path / "cut.root"
    cut.write_bytes(good.read_bytes()[: int(good.stat().st_size * keep)])
    # Where the cut falls decides which: the tree metadata (open) or the baskets (read).
    with pytest.raises((FileOpenError, FileReadError), match="cut.root"):
        source = make_source([cut])
        source.collections()
        await read_all(source)


async def test_corrupt_basket_names_file_and_entries(tmp_path):
    path = write_nano(tmp_path / "bad.root", 50)
    branch = uproot.open(path)["Events"]["Jet_pt"]
    seek, size = int(branch.member("fBasketSeek")[0]), int(branch.member("fBasketBytes")[0])
    raw = bytearray(path.read_bytes())
    for i in range(seek + size - 40, seek + size - 10):  # inside the compressed payload
        raw[i] ^= 0xFF
    path.write_bytes(bytes(raw))
    source = make_source([path])
    source.set_branch_request({"Jet": {"pt"}})
    with pytest.raises(FileReadError, match=r"entries \[0, 50\).*bad.root"):
        await read_all(source)


def test_missing_tree_lists_the_trees(tmp_path):
    path = write_nano(tmp_path / "other.root", 3, tree="Friends")
    with pytest.raises(FileOpenError, match=r"other.root' has no tree 'Events' \(trees in the file: Friends\)"):
        make_source([path]).collections()


def test_missing_collection_and_field_name_the_nearest(tmp_path):
    source = make_source([write_nano(tmp_path / "a.root", 3)])
    with pytest.raises(FileReadError, match=r"'Jets'.*nearest: 'Jet'"):
        source.set_branch_request({"Jets": None})
    with pytest.raises(FileReadError, match=r"a.root.*'Jet_ptt'.*nearest: 'Jet_pt'") as info:
        source.set_branch_request({"Jet": {"ptt"}})
    error = info.value  # the same facts as fields, as uproot's KeyInFileError carries its key
    assert (error.collection, error.branch, error.file) == ("Jet", "Jet_ptt", str(tmp_path / "a.root"))
    assert error.nearest[0] == "Jet_pt" and error.entries is None


async def test_missing_branch_in_a_later_file(tmp_path):
    a = write_nano(tmp_path / "a.root", 2)
    b = tmp_path / "b.root"
    with uproot.recreate(b) as f:
        t = f.mktree("Events", {"run": np.uint32, "luminosityBlock": np.uint32, "event": np.uint64})
        t.extend(
            {"run": np.ones(1, np.uint32), "luminosityBlock": np.ones(1, np.uint32), "event": np.array([9], np.uint64)}
        )
    source = make_source([a, b])
    source.set_branch_request({"Jet": {"pt"}})
    with pytest.raises(FileReadError, match=r"b.root.*no collection or branch 'Jet'"):
        await read_all(source)


def test_uninterpretable_branch_is_a_read_error():
    unknown = uproot.interpretation.identify.UnknownInterpretation("no streamer", "f.root", "Events/weird")
    tree = {"weird": types.SimpleNamespace(interpretation=unknown, typename="TWeird")}
    with pytest.raises(FileReadError, match=r"branch 'weird' of input file 'f.root'.*TWeird"):
        check_interpretable(tree, ["weird"], "f.root")


async def test_a_file_listed_several_times_is_opened_once(tmp_path):
    """noDuplicateCheck with one file listed 3 times: 3x the events, one open and scan."""
    a = write_nano(tmp_path / "a.root", 4)
    source = make_source([a, a, a], duplicateCheckMode="noDuplicateCheck")
    source.set_branch_request({"Jet": {"pt"}})
    events = await read_all(source)
    assert [e.id.event for e in events] == [1, 2, 3, 4] * 3
    assert source.statistics().files_opened == (str(a),)
