"""Work units: preprocessing (entries, clusters, UUID), splitting aligned to clusters, the
cache, and PoolSource reading entry ranges.

Cluster layouts are made with tiny files written in ``tmp_path`` (one basket per
``extend``); the real samples check the real files (each is one cluster).
"""

from __future__ import annotations

import json
import os
import types

import awkward as ak
import numpy as np
import pytest
import trio
import uproot

from framework import FileOpenError, FileReadError
from framework.io import (
    Dataset,
    FileInfo,
    FileSpec,
    PoolSource,
    WorkUnit,
    limit_units,
    preprocess,
    preprocess_file,
    split_units,
)
from framework.io.samples import locate_sample


def sample(name):
    try:
        return str(locate_sample(name, fetch=False))
    except FileOpenError as exc:
        pytest.skip(f"no local {name} ({exc}); 'python -m framework.io.samples {name}' fetches it")


def write_clustered(path, sizes, *, first_event=1):
    """Events in clusters of ``sizes`` entries (one ``extend`` each): Jet (jagged), MET_pt, ids."""
    n = sum(sizes)
    counts = np.arange(n) % 3
    data = {
        "run": np.ones(n, np.uint32),
        "luminosityBlock": np.full(n, 3, np.uint32),
        "event": np.arange(first_event, first_event + n, dtype=np.uint64),
        "Jet": ak.zip({"pt": ak.unflatten(np.arange(counts.sum(), dtype=np.float32), counts)}),
        "MET_pt": np.arange(n, dtype=np.float32),
    }
    with uproot.recreate(path) as f:
        tree = f.mktree("Events", {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in data.items()})
        lo = 0
        for size in sizes:
            tree.extend({k: v[lo : lo + size] for k, v in data.items()})
            lo += size
    return str(path)


def assert_partition(units, info):
    """Units cover [0, num_entries) in order, each entry once, boundaries at clusters."""
    assert units[0].entry_start == 0 and units[-1].entry_stop == info.num_entries
    for a, b in zip(units, units[1:], strict=False):
        assert a.entry_stop == b.entry_start
    assert all(u.entry_start <= u.entry_stop for u in units)


# ------------------------------------------------------------------ splitting


@pytest.mark.parametrize(
    "chunk, expected",
    [
        (250, [(0, 300), (300, 600), (600, 900), (900, 1000)]),  # coffea's align_clusters walk
        (100, [(k, k + 100) for k in range(0, 1000, 100)]),  # one cluster per unit
        (70, [(k, k + 100) for k in range(0, 1000, 100)]),  # 100 is nearer 70 than 200 is
        (160, [(k, k + 200) for k in range(0, 1000, 200)]),  # 200 is nearer 160 than 100 is
        (10**6, [(0, 1000)]),
    ],
)
def test_units_are_aligned_to_clusters(chunk, expected):
    info = FileInfo("f.root", "Events", 1000, tuple(range(0, 1001, 100)), "uuid")
    units = split_units("DY", info, chunk)
    assert [(u.entry_start, u.entry_stop) for u in units] == expected
    assert all(u.entry_start in info.clusters and u.entry_stop in info.clusters for u in units)
    assert_partition(units, info)


def test_a_cluster_much_larger_than_the_chunk_is_cut():
    info = FileInfo("f.root", "Events", 1000, tuple(range(0, 1001, 100)), "uuid")
    units = split_units("D", info, 40)  # clusters of 100 > 1.5 x 40: halves
    assert [(u.entry_start, u.entry_stop) for u in units] == [(k, k + 50) for k in range(0, 1000, 50)]
    info = FileInfo("hzz.root", "events", 2421, (0, 2421), "uuid")  # one cluster, as the real file
    units = split_units("HZZ", info, 500)
    assert [(u.entry_start, u.entry_stop) for u in units] == [
        (0, 485),
        (485, 970),
        (970, 1455),
        (1455, 1940),
        (1940, 2421),
    ]
    assert_partition(units, info)
    # 1.5 x chunk or less: kept whole, as coffea does
    assert len(split_units("HZZ", info, 1614)) == 1


def test_random_layouts_cover_every_entry_exactly_once():
    rng = np.random.default_rng(7)
    for _ in range(200):
        sizes = rng.integers(1, 50, size=rng.integers(1, 20))
        clusters = tuple(np.concatenate([[0], np.cumsum(sizes)]).tolist())
        info = FileInfo("f.root", "Events", clusters[-1], clusters, "u")
        chunk = int(rng.integers(1, 120))
        units = split_units("D", info, chunk)
        assert_partition(units, info)
        covered = np.zeros(info.num_entries, int)
        for u in units:
            covered[u.entry_start : u.entry_stop] += 1
        assert (covered == 1).all()
        # Aligned wherever no cluster had to be cut (a cluster <= 1.5 x chunk is never cut).
        if max(sizes) <= 1.5 * chunk:
            assert {u.entry_start for u in units} <= set(clusters)


def test_empty_tree_and_given_steps():
    empty = FileInfo("e.root", "Events", 0, (0,), "u")
    assert split_units("D", empty, 10) == [WorkUnit("D", "e.root", "Events", 0, 0)]
    info = FileInfo("f.root", "Events", 40, (0, 40), "u")
    assert [(u.entry_start, u.entry_stop) for u in split_units("D", info, 5, [(0, 10), (30, 40)])] == [
        (0, 10),
        (30, 40),
    ]
    with pytest.raises(ValueError, match=r"steps \[30, 50\] of file 'f.root' are beyond its 40 entries"):
        split_units("D", info, 5, [(30, 50)])
    with pytest.raises(ValueError, match="chunk size must be >= 1"):
        split_units("D", info, 0)


def test_units_cut_at_skip_and_max_events_as_one_job_reads_them():
    """skipEvents, then maxEvents entries, across the dataset's units in order (what
    cmsrun --dataset's one job per dataset reads, for --executor dask)."""
    units = [WorkUnit("D", f, "Events", a, b) for f, a, b in [("a", 0, 10), ("a", 10, 20), ("b", 0, 0), ("b", 0, 15)]]

    def ranges(skip, limit):
        return [(u.file, u.entry_start, u.entry_stop) for u in limit_units(units, skip, limit)]

    assert limit_units(units) == units  # nothing to cut: the empty unit stays
    assert ranges(0, 12) == [("a", 0, 10), ("a", 10, 12)]
    assert ranges(13, -1) == [("a", 13, 20), ("b", 0, 15)]
    assert ranges(25, 4) == [("b", 5, 9)]
    assert ranges(3, 0) == [] and ranges(50, -1) == []
    assert sum(u.num_entries for u in limit_units(units, 7, 100)) == 28  # 35 entries, 7 skipped


def test_unit_ids_are_stable_and_file_name_safe():
    a = WorkUnit("/DY/Run2/NANO", "/data/x/nano_dy.root", "Events", 0, 20)
    b = WorkUnit("/DY/Run2/NANO", "/data/y/nano_dy.root", "Events", 0, 20)
    assert a.id == "/DY/Run2/NANO:/data/x/nano_dy.root:Events[0,20)"
    assert a.part_name.startswith("nano_dy.0-20.") and "/" not in a.part_name
    assert a.part_name != b.part_name and a.part_name == WorkUnit(*a.__dict__.values()).part_name


# ------------------------------------------------------------------ preprocessing real and tiny files


def test_preprocess_file_reads_clusters_and_uuid(tmp_path):
    path = write_clustered(tmp_path / "c.root", [7, 5, 9])
    info = preprocess_file(path, "Events")
    assert (info.num_entries, info.clusters) == (21, (0, 7, 12, 21))
    assert info.size == os.path.getsize(path) and info.mtime_ns == os.stat(path).st_mtime_ns
    with uproot.open(path) as f:
        assert info.uuid == str(f.file.uuid)
    units = split_units("D", info, 10)
    assert [(u.entry_start, u.entry_stop) for u in units] == [(0, 12), (12, 21)]


def test_preprocess_real_samples():
    pfnano = preprocess_file(sample("pfnano.root"), "Events")
    assert (pfnano.num_entries, pfnano.clusters, pfnano.uuid) == (10, (0, 10), "f2f7b0a2-043c-11ee-ada3-6ebde183beef")
    hzz = preprocess_file(sample("uproot-HZZ.root"), "events")
    assert hzz.num_entries == 2421


@pytest.mark.parametrize(
    "content, problem",
    [
        (None, "does not exist"),
        (b"", "is empty"),
        (b"not a root file at all", "is not a ROOT file"),
    ],
)
def test_bad_file_gives_one_line_naming_it(tmp_path, content, problem):
    path = tmp_path / "bad.root"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(FileOpenError) as info:
        preprocess_file(str(path), "Events")
    assert f"input file '{path}' {problem}" in str(info.value) and "\n" not in str(info.value)


def test_truncated_real_file_names_it(tmp_path):
    with open(sample("nano_dy.root"), "rb") as f:
        data = f.read()
    path = tmp_path / "cut.root"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FileOpenError, match=rf"input file '{path}' is truncated: it has [\d,]+ bytes, its header says"):
        preprocess_file(str(path), "Events")


# ------------------------------------------------------------------ the cache


def counting_mapper(calls):
    def mapper(fn, paths, trees):
        calls.extend(zip(paths, trees, strict=True))
        return map(fn, paths, trees)

    return mapper


def test_cache_is_reused_while_files_are_unchanged(tmp_path):
    a = write_clustered(tmp_path / "a.root", [10, 10])
    b = write_clustered(tmp_path / "b.root", [4], first_event=100)
    datasets = [
        Dataset("A", (FileSpec(a, "Events"), FileSpec(b, "Events"))),
        Dataset("B", (FileSpec(b, "Events"),)),
    ]  # b in two datasets: read once
    cache = tmp_path / "out" / "fs.preprocessed.json"
    cache.parent.mkdir()
    calls = []
    first = preprocess(datasets, 10, cache=cache, mapper=counting_mapper(calls))
    assert calls == [(a, "Events"), (b, "Events")]
    assert [(u.file, u.entry_start, u.entry_stop) for u in first["A"]] == [(a, 0, 10), (a, 10, 20), (b, 0, 4)]
    assert [u.dataset for u in first["B"]] == ["B"]
    assert {f["path"] for f in json.loads(cache.read_text())["files"]} == {a, b}

    calls.clear()
    again = preprocess(datasets, 10, cache=cache, mapper=counting_mapper(calls))
    assert calls == [] and again == first
    # Another chunk size needs no file read either: the cache holds clusters, not units.
    assert [len(u) for u in preprocess(datasets, 100, cache=cache, mapper=counting_mapper(calls)).values()] == [2, 1]
    assert calls == []

    # Rewritten file (other size, mtime and UUID): read again; the other one still cached.
    write_clustered(tmp_path / "a.root", [6, 6, 6])
    changed = preprocess(datasets, 6, cache=cache, mapper=counting_mapper(calls))
    assert calls == [(a, "Events")]
    assert [(u.entry_start, u.entry_stop) for u in changed["A"] if u.file == a] == [(0, 6), (6, 12), (12, 18)]

    # Only touched (same size, new mtime): read again too.
    calls.clear()
    os.utime(b, ns=(os.stat(b).st_atime_ns, os.stat(b).st_mtime_ns + 10**9))
    preprocess(datasets, 6, cache=cache, mapper=counting_mapper(calls))
    assert calls == [(b, "Events")]


def test_unreadable_cache_is_ignored(tmp_path, caplog):
    a = write_clustered(tmp_path / "a.root", [5])
    cache = tmp_path / "cache.json"
    cache.write_text("{not json")
    units = preprocess([Dataset("A", (FileSpec(a, "Events"),))], 10, cache=cache)
    assert [u.num_entries for u in units["A"]] == [5]
    assert "unreadable" in caplog.text and json.loads(cache.read_text())["version"] == 1


def test_preprocessed_steps_are_recomputed_when_the_uuid_changed(tmp_path, caplog):
    a = write_clustered(tmp_path / "a.root", [5, 5])
    spec = FileSpec(a, "Events", ((0, 5),), 10, "not-the-uuid")
    units = preprocess([Dataset("A", (spec,))], 5)["A"]
    assert [(u.entry_start, u.entry_stop) for u in units] == [(0, 5), (5, 10)] and "computed again" in caplog.text
    uuid = preprocess_file(a, "Events").uuid
    units = preprocess([Dataset("A", (FileSpec(a, "Events", ((0, 5),), 10, uuid),))], 5)["A"]
    assert [(u.entry_start, u.entry_stop) for u in units] == [(0, 5)]


# ------------------------------------------------------------------ PoolSource over entry ranges


def make_source(files=(), **overrides):
    params = dict(
        fileNames=[str(f) for f in files],
        skipEvents=0,
        treeName="Events",
        duplicateCheckMode="checkAllFilesOpened",
        eventsPerRead=0,
    )
    params.update(overrides)
    return PoolSource(types.SimpleNamespace(**params))


async def read(source, request, max_events=-1):
    source.collections()
    source.set_branch_request(request)
    send, receive = trio.open_memory_channel(0)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(source.run, send, max_events)
            events = [
                (tuple(e.id), e.file_name, e.entry, np.asarray(e.collections["Jet"].pt).tolist()) async for e in receive
            ]
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
    finally:
        source.close()
    return events


@pytest.mark.parametrize("name", ["nano_dy.root", "nano_tt_v15.root"])
async def test_units_read_the_same_events_as_the_whole_file(name):
    path = sample(name)
    request = {"Jet": {"pt"}}
    full = await read(make_source([path]), request)
    info = preprocess_file(path, "Events")
    units = split_units("D", info, 7)  # one cluster per real file: cut into ranges of ~7
    assert len(units) > 3
    source = make_source()
    source.set_units(units)
    assert await read(source, request) == full
    # One unit alone: exactly its entries.
    one = make_source()
    one.set_units([units[2]])
    assert await read(one, request) == full[units[2].entry_start : units[2].entry_stop]


async def test_ranges_across_clusters_and_files_with_skip_and_max_events(tmp_path):
    a = write_clustered(tmp_path / "a.root", [7, 5, 9])
    b = write_clustered(tmp_path / "b.root", [3, 3], first_event=100)
    request = {"Jet": {"pt"}, "MET": None}
    full = await read(make_source([a, b]), request)
    units = [WorkUnit("D", a, "Events", 3, 15), WorkUnit("D", b, "Events", 0, 6), WorkUnit("D", a, "Events", 15, 21)]
    source = make_source(eventsPerRead=4)
    source.set_units(units)
    assert await read(source, request) == full[3:15] + full[21:27] + full[15:21]
    skipping = make_source(skipEvents=10)
    skipping.set_units(units)
    assert await read(skipping, request, max_events=5) == (full[13:15] + full[21:24])


async def test_unit_beyond_the_file_is_a_one_line_error(tmp_path):
    a = write_clustered(tmp_path / "a.root", [7])
    source = make_source()
    source.set_units([WorkUnit("D", a, "Events", 5, 9)])
    with pytest.raises(
        FileReadError,
        match=rf"entries \[5, 9\) of tree 'Events' in input file '{a}' are out of "
        r"range: the tree has 7 entries",
    ):
        await read(source, {"Jet": {"pt"}})


def test_no_file_names_and_no_units(tmp_path):
    from framework import ConfigurationError

    with pytest.raises(ConfigurationError, match="fileNames is empty"):
        make_source().collections()
    with pytest.raises(ConfigurationError, match="no work units"):
        make_source().set_units([])
