"""NanoAODOutputModule and HistogramAnalyzer, driven by hand as the framework drives them.

Each test builds the module as the builder does (``_fw_bind``, validated parameters,
``__init__``), then ``select`` / ``begin_unit`` / ``write`` (or ``analyze``) /
``end_unit``, with events made of real PoolSource views plus products put by hand; the
files written are read back with uproot.
"""

from __future__ import annotations

import contextlib
import os
import types

import awkward as ak
import numpy as np
import pytest
import trio
import uproot

import framework.config as cms
from framework import ConfigurationError, FileOpenError, ProductDescription, ProductRegistry
from framework.core import Event, EventID, EventPrincipal
from framework.io import PoolSource
from framework.utilities import commit_outputs
from modules.histograms import HistogramAnalyzer
from modules.output import NanoAODOutputModule

N = 8


def build(cls, label, **params):
    desc = cms.ParameterSetDescription()
    cls.fill_descriptions(desc)
    module = cls.__new__(cls)
    module._fw_bind(label, cls.__name__)
    module.__init__(desc.validate(params, f"{cls.__name__} '{label}'"))
    return module


@pytest.fixture
def input_file(tmp_path):
    """N events: Jet (pt, eta; i % 3 jets), JetPFCands, MET (pt, phi), genWeight."""
    counts = np.arange(N) % 3
    total = int(counts.sum())
    data = {
        "run": np.ones(N, np.uint32),
        "luminosityBlock": np.full(N, 2, np.uint32),
        "event": np.arange(100, 100 + N, dtype=np.uint64),
        "Jet": ak.zip(
            {
                "pt": ak.unflatten(np.arange(total, dtype=np.float32) + 20, counts),
                "eta": ak.unflatten(np.zeros(total, np.float32), counts),
            }
        ),
        "JetPFCands": ak.zip({"pt": ak.unflatten(np.ones(N, np.float32), np.ones(N, int))}),
        "MET_pt": np.arange(N, dtype=np.float32),
        "MET_phi": np.ones(N, np.float32),
        "genWeight": np.full(N, 0.5, np.float32),
    }
    path = tmp_path / "in.root"
    with uproot.recreate(path) as f:
        tree = f.mktree("Events", {k: (v.type if isinstance(v, ak.Array) else v.dtype) for k, v in data.items()})
        tree.extend(data)
    return path


async def source_events(path, request):
    source = PoolSource(
        types.SimpleNamespace(
            fileNames=[str(path)],
            skipEvents=0,
            treeName="Events",
            duplicateCheckMode="noDuplicateCheck",
            eventsPerRead=0,
        )
    )
    collections = source.collections()
    source.set_branch_request(request)
    send, receive = trio.open_memory_channel(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(source.run, send, -1)
        events = [e async for e in receive]
    source.close()
    return collections, events


def request_of(module):
    """The branch request the scheduler would derive from the module's consumes."""
    return {c.label: (None if c.branches is None else set(c.branches)) for c in module._fw_consumes}


def event_for(module, src, index, products=(), paths=None):
    principal = EventPrincipal(src.id, 0, index, src.collections)
    principal.products.update(dict(products))
    principal.path_results.update(paths or {})
    return Event(principal, module.label, frozenset())


async def run_output(input_file, tmp_path, *, products=None, product_values=None, paths=None, **params):
    """select -> begin_unit -> write (selected events) -> end_unit; returns (module, tree)."""
    out = build(NanoAODOutputModule, "out", fileName=str(tmp_path / "out.root"), **params)
    collections = PoolSource(
        types.SimpleNamespace(
            fileNames=[str(input_file)],
            skipEvents=0,
            treeName="Events",
            duplicateCheckMode="noDuplicateCheck",
            eventsPerRead=0,
        )
    ).collections()
    out.select(ProductRegistry(collections, products or []))
    source_request = {k: v for k, v in request_of(out).items() if k in collections}
    _, events = await source_events(input_file, source_request)
    out.begin_unit()
    for i, src in enumerate(events):
        event = event_for(out, src, i, (product_values or (lambda i: {}))(i), paths(i) if paths else None)
        if out.selected(event):
            out.write(event)
    out.end_unit()
    return out, uproot.open(tmp_path / "out.root")["Events"]


# ------------------------------------------------------------------ NanoAODOutputModule


async def test_keep_drop_patterns_and_read_back(input_file, tmp_path):
    out, tree = await run_output(
        input_file,
        tmp_path,
        outputCommands=["drop *", "keep Jet_*", "drop Jet_eta", "keep MET_pt", "keep gen*", "keep run"],
    )
    # "Jet_*" does not match JetPFCands_pt: the prefix is the whole collection name.
    assert set(tree.keys()) == {"run", "luminosityBlock", "event", "nJet", "Jet_pt", "MET_pt", "genWeight"}
    assert request_of(out) == {"Jet": {"pt"}, "MET": {"pt"}, "genWeight": set()}
    original = uproot.open(input_file)["Events"].arrays(["event", "Jet_pt", "MET_pt", "genWeight"])
    written = tree.arrays(["event", "Jet_pt", "MET_pt", "genWeight"])
    assert ak.to_list(written) == ak.to_list(original)
    assert tree["run"].array().tolist() == [1] * N and tree["luminosityBlock"].array().tolist() == [2] * N


async def test_products_of_every_kind(input_file, tmp_path):
    products = [
        ProductDescription("prod", "", "P"),
        ProductDescription("prod", "arr", "P"),
        ProductDescription("coll", "", "C"),
        ProductDescription("single", "", "S"),
        ProductDescription("maybe", "", "M"),
        ProductDescription("unused", "", "U"),
    ]

    def values(i):
        return {
            ("prod", ""): float(i) * 1.5,
            ("prod", "arr"): np.arange(i, dtype=np.int32),
            ("coll", ""): {"x": np.full(i % 3, i, np.float32), "y": np.arange(i % 3, dtype=np.int64)},
            ("single", ""): {"a": np.float32(i), "b": i},
            ("maybe", ""): True,
        }

    out, tree = await run_output(
        input_file,
        tmp_path,
        products=products,
        product_values=values,
        outputCommands=["drop *", "keep prod*", "keep coll_*", "drop coll_y", "keep single_*", "keep maybe_*"],
    )
    # "maybe" might have had fields (consumed), but is a number: its branch "maybe" is dropped.
    assert "maybe" in request_of(out) and "unused" not in request_of(out)
    assert set(tree.keys()) == {
        "run",
        "luminosityBlock",
        "event",
        "prod",
        "nprod_arr",
        "prod_arr",
        "ncoll",
        "coll_x",
        "single_a",
        "single_b",
    }
    got = tree.arrays(library="np")
    expected = [values(i) for i in range(N)]
    np.testing.assert_array_equal(got["prod"], [e[("prod", "")] for e in expected])
    assert [list(a) for a in got["prod_arr"]] == [list(range(i)) for i in range(N)]
    assert got["prod_arr"][3].dtype == np.int32
    assert got["ncoll"].tolist() == [i % 3 for i in range(N)]
    assert [list(a) for a in got["coll_x"]] == [[i] * (i % 3) for i in range(N)]
    assert got["single_a"].tolist() == list(range(N)) and got["single_b"].tolist() == list(range(N))


async def test_select_events_and_several_baskets(input_file, tmp_path):
    out, tree = await run_output(
        input_file,
        tmp_path,
        basketSize=2,
        SelectEvents={"SelectEvents": ["pA", "pB"]},
        paths=lambda i: {"pA": i % 3 == 0, "pB": i == 1},
    )
    assert tree["event"].array().tolist() == [100 + i for i in range(N) if i % 3 == 0 or i == 1]
    assert tree["event"].num_baskets == 2  # four events, two per basket
    assert out.events_written == 4


async def test_select_events_unknown_path(input_file, tmp_path):
    with pytest.raises(ConfigurationError, match=r"'out'.*Path 'pZ'.*Paths: pA"):
        await run_output(input_file, tmp_path, SelectEvents={"SelectEvents": ["pZ"]}, paths=lambda i: {"pA": True})


def test_zero_events_give_an_empty_tree(tmp_path):
    out = build(NanoAODOutputModule, "out", fileName=str(tmp_path / "empty.root"))
    out.select(ProductRegistry({"Jet": ("pt",)}, []))
    out.begin_unit()
    out.end_unit()
    tree = uproot.open(tmp_path / "empty.root")["Events"]
    assert tree.num_entries == 0
    assert {"run", "luminosityBlock", "event"} <= set(tree.keys())


def test_temporary_file_renamed_at_end_and_removed_on_abort(tmp_path):
    final = tmp_path / "out.root"
    for finish in ("end_unit", "abort_unit"):
        out = build(NanoAODOutputModule, "out", fileName=str(final), basketSize=1)
        out.select(ProductRegistry({}, [ProductDescription("p", "", "P")]))
        out.begin_unit()
        principal = EventPrincipal(EventID(1, 1, 1), 0, 0, {})
        principal.products[("p", "")] = 3.0
        out.write(Event(principal, "out", frozenset()))  # one basket written
        temp = out.temp_name
        assert temp.exists() and not final.exists()
        assert temp.parent == final.parent and str(os.getpid()) in temp.name
        getattr(out, finish)()  # outside a job (no commit open): renamed at once
        assert not temp.exists()
        assert final.exists() == (finish == "end_unit")
        final.unlink(missing_ok=True)


def test_files_renamed_only_when_the_job_commits(tmp_path):
    """Inside a job's commit, end_unit closes the files and the commit renames them; a job
    that fails after end_unit (a later module's end_job) leaves the earlier files alone."""
    final, hists = tmp_path / "out.root", tmp_path / "h.root"
    for fail in (False, True):
        final.write_bytes(b"the previous good file")
        hists.write_bytes(b"the previous histograms")
        with contextlib.suppress(RuntimeError), commit_outputs("test job") as commit:
            out = build(NanoAODOutputModule, "out", fileName=str(final))
            out.select(ProductRegistry({}, []))
            histograms = hist_module(tmp_path)
            out.begin_unit()
            histograms.begin_unit()
            out.end_unit()
            histograms.end_unit()
            assert final.read_bytes() == b"the previous good file"  # closed, not renamed
            assert len(commit.staged) == 2 and all(s.complete for s in commit.staged)
            if fail:
                raise RuntimeError("a module's end_job")
        if fail:
            assert final.read_bytes() == b"the previous good file"
            assert hists.read_bytes() == b"the previous histograms"
        else:
            assert uproot.open(final)["Events"].num_entries == 0 and "jetPt" in uproot.open(hists)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["h.root", "out.root"]


def test_unwritable_output_fails_in_begin_job(tmp_path):
    missing = tmp_path / "no" / "such" / "dir" / "out.root"
    out = build(NanoAODOutputModule, "out", fileName=str(missing))
    with pytest.raises(FileOpenError, match=r"'out'.*no/such/dir/out.root"):
        out.begin_unit()
    a_file = tmp_path / "plain"
    a_file.write_text("x")
    out = build(NanoAODOutputModule, "out", fileName=str(a_file / "out.root"))
    with pytest.raises(FileOpenError, match="plain/out.root"):
        out.begin_unit()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into read-only folders")
def test_read_only_folder(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    out = build(NanoAODOutputModule, "out", fileName=str(folder / "out.root"))
    with pytest.raises(FileOpenError, match="ro/out.root"):
        out.begin_unit()


def test_product_changing_type_is_an_error(tmp_path):
    out = build(NanoAODOutputModule, "out", fileName=str(tmp_path / "o.root"))
    out.select(ProductRegistry({}, [ProductDescription("p", "", "P")]))
    out.begin_unit()
    for i, value in enumerate([1.0, np.arange(3)]):
        principal = EventPrincipal(EventID(1, 1, i), 0, i, {})
        principal.products[("p", "")] = value
        if i == 0:
            out.write(Event(principal, "out", frozenset()))
        else:
            with pytest.raises(TypeError, match=r"product 'p'.*event 1:1:1.*was a number"):
                out.write(Event(principal, "out", frozenset()))
    out.abort_unit()


def test_product_named_like_a_source_collection():
    out = build(NanoAODOutputModule, "out", fileName="o.root")
    with pytest.raises(ConfigurationError, match=r"product 'MET' of module 'MET'.*source collection 'MET'"):
        out.select(ProductRegistry({"MET": ("pt",)}, [ProductDescription("MET", "", "P")]))


def test_product_replaces_the_inputs_branches_of_its_names():
    """A rerun tagger's table ``Jet_tag`` replaces the input's ``Jet_tag_*`` (not ``Jet_tagger``)."""
    out = build(NanoAODOutputModule, "out", fileName="o.root")
    out.select(ProductRegistry({"Jet": ("pt", "tag_a", "tag_b", "tagger")}, [ProductDescription("Jet_tag", "", "P")]))
    items = {item.name: item.fields for item in out.items}
    assert items == {"Jet": ("pt", "tagger"), "Jet_tag": None}


def test_bad_output_command():
    with pytest.raises(ConfigurationError, match=r"'out'.*'keepall \*'"):
        build(NanoAODOutputModule, "out", fileName="o.root", outputCommands=["keepall *"])


# ------------------------------------------------------------------ HistogramAnalyzer


def hist_module(tmp_path, **overrides):
    items = [
        {
            "name": "jetPt",
            "src": "Jet",
            "field": "pt",
            "nbins": 5,
            "min": 0.0,
            "max": 25.0,
            "title": "Jet p_{T}",
            "xlabel": "p_{T} [GeV]",
        },
        {"name": "scalar", "src": "prod", "nbins": 4, "min": 0.0, "max": 4.0},
        {"name": "array", "src": "prod:arr", "nbins": 3, "min": 0.0, "max": 3.0},
    ]
    return build(
        HistogramAnalyzer,
        "hists",
        fileName=str(tmp_path / "h.root"),
        histograms=overrides.pop("histograms", items),
        **overrides,
    )


async def test_histograms_filled_and_read_back(input_file, tmp_path):
    module = hist_module(tmp_path)
    assert request_of(module) == {"Jet": {"pt"}, "prod": None}
    _, events = await source_events(input_file, {"Jet": {"pt"}})
    module.begin_unit()
    scalars, arrays = [], []
    for i, src in enumerate(events):
        scalars.append(i * 0.7)
        arrays.append(np.arange(i % 4) - 0.5)
        module.analyze(event_for(module, src, i, {("prod", ""): scalars[-1], ("prod", "arr"): arrays[-1]}))
    module.end_unit()
    f = uproot.open(tmp_path / "h.root")
    jet_pt = uproot.open(input_file)["Events"]["Jet_pt"].array()
    for name, data, edges in [
        ("jetPt", ak.flatten(jet_pt), np.linspace(0, 25, 6)),
        ("scalar", scalars, np.linspace(0, 4, 5)),
        ("array", np.concatenate(arrays), np.linspace(0, 3, 4)),
    ]:
        data = np.asarray(data, dtype=float)
        inside, _ = np.histogram(data[data < edges[-1]], edges)  # numpy closes the last bin
        flow = [np.count_nonzero(data < edges[0]), np.count_nonzero(data >= edges[-1])]
        np.testing.assert_array_equal(f[name].values(flow=True), [flow[0], *inside, flow[1]])
        assert f[name].classname == "TH1D"
    assert f["jetPt"].title == "Jet p_{T}" and f["jetPt"].axis().member("fTitle") == "p_{T} [GeV]"


def test_histograms_abort_writes_nothing(tmp_path):
    module = hist_module(tmp_path)
    module.begin_unit()
    module.abort_unit()
    assert list(tmp_path.iterdir()) == []


def test_histogram_configuration_errors(tmp_path):
    bad_range = [{"name": "h", "src": "Jet", "field": "pt", "nbins": 5, "min": 3.0, "max": 3.0}]
    with pytest.raises(ConfigurationError, match=r"'hists': histogram 'h'.*min < max"):
        hist_module(tmp_path, histograms=bad_range)
    twice = [{"name": "h", "src": "a", "nbins": 1, "min": 0.0, "max": 1.0}] * 2
    with pytest.raises(ConfigurationError, match="'h' is used twice"):
        hist_module(tmp_path, histograms=twice)
    with pytest.raises(FileOpenError, match="missing"):
        build(HistogramAnalyzer, "hists", fileName=str(tmp_path / "missing" / "h.root")).begin_unit()


async def test_histogram_of_a_collection_needs_a_field(input_file, tmp_path):
    module = hist_module(tmp_path, histograms=[{"name": "h", "src": "Jet", "nbins": 1, "min": 0.0, "max": 1.0}])
    _, events = await source_events(input_file, {"Jet": None})
    with pytest.raises(TypeError, match=r"'hists': histogram 'h'.*collection: set 'field' to one of pt, eta"):
        module.analyze(event_for(module, events[0], 0))
