"""Datasets: coffea filesets (JSON and YAML), relative paths, globs, trees, errors.

Filesets are written in ``tmp_path``; the trees are checked on the real samples
(``uproot-HZZ.root``, whose tree is ``events``) through PoolSource's ``treeName``.
"""

from __future__ import annotations

import json
import types

import pytest
import trio

from framework import ConfigurationError, FileOpenError
from framework.io import Dataset, FileSpec, PoolSource, dataset_file_tag, load_fileset, parse_fileset
from framework.io.samples import locate_sample


def sample(name):
    try:
        return locate_sample(name, fetch=False)
    except FileOpenError as exc:
        pytest.skip(f"no local {name} ({exc}); 'python -m framework.io.samples {name}' fetches it")


def write(path, text):
    path.write_text(text)
    return path


# ------------------------------------------------------------------ the formats


def test_coffea_dict_form_json(tmp_path):
    fileset = write(
        tmp_path / "fs.json",
        json.dumps(
            {
                "DYJets": {
                    "files": {"a.root": "Events", "/abs/b.root": None, "root://host:1094//c.root": "Other"},
                    "metadata": {"xsec": 6077.2, "isMC": True},
                },
            }
        ),
    )
    [ds] = load_fileset(fileset)
    assert ds == Dataset(
        "DYJets",
        (
            FileSpec(str(tmp_path / "a.root"), "Events"),  # relative to the fileset's folder
            FileSpec("/abs/b.root", "Events"),  # null tree: the default
            FileSpec("root://host:1094//c.root", "Other"),  # URLs as they are
        ),
        {"xsec": 6077.2, "isMC": True},
    )


def test_coffea_list_forms_yaml(tmp_path):
    (tmp_path / "data").mkdir()
    for name in ("x1.root", "x2.root", "y.root"):
        (tmp_path / "data" / name).write_bytes(b"")
    fileset = write(
        tmp_path / "fs.yaml",
        """
Data:
  treename: Events
  files:
    - data/y.root:Muons     # uproot's colon syntax names the tree
    - data/x*.root          # globs expanded, sorted
TT: [data/y.root]           # coffea Runner's bare list
""",
    )
    data, tt = load_fileset(fileset, default_tree="events")
    assert data.files == (
        FileSpec(str(tmp_path / "data/y.root"), "Muons"),
        FileSpec(str(tmp_path / "data/x1.root"), "Events"),
        FileSpec(str(tmp_path / "data/x2.root"), "Events"),
    )
    assert tt.files == (FileSpec(str(tmp_path / "data/y.root"), "events"),)  # default_tree
    assert data.metadata == {} and [d.name for d in (data, tt)] == ["Data", "TT"]


def test_preprocessed_coffea_fileset_keeps_its_steps(tmp_path):
    fileset = write(
        tmp_path / "pre.json",
        json.dumps(
            {
                "DY": {
                    "files": {
                        "/d/a.root": {
                            "object_path": "Events",
                            "steps": [[20, 40], [0, 20]],
                            "num_entries": 40,
                            "uuid": "u-1",
                        }
                    },
                    "form": "compressed...",
                    "metadata": None,
                }
            }
        ),
    )
    [ds] = load_fileset(fileset)
    assert ds.files == (FileSpec("/d/a.root", "Events", ((0, 20), (20, 40)), 40, "u-1"),)


def test_sample_names_are_located(tmp_path):
    """``sample:NAME`` is the project's verified copy of a sample, wherever it lies; a tree
    after it as for any path. (Not fetched here: skipped where the sample is not local.)"""
    dy = sample("nano_dy.root")
    fileset = write(
        tmp_path / "fs.yaml", "A:\n  files: {sample:nano_dy.root: Events}\nB: [sample:nano_dy.root:Events]\n"
    )
    a, b = load_fileset(fileset)
    assert a.files == b.files == (FileSpec(str(dy), "Events"),)


def test_dataset_names_become_safe_file_tags():
    assert (
        dataset_file_tag("/DYJetsToLL_M-50/RunIISummer20UL18NanoAODv9-v1/NANOAODSIM")
        == "DYJetsToLL_M-50_RunIISummer20UL18NanoAODv9-v1_NANOAODSIM"
    )
    with pytest.raises(ConfigurationError, match="dataset 'a b'.*same output file-name tag 'a_b' as dataset 'a/b'"):
        parse_fileset({"a/b": ["x.root"], "a b": ["y.root"]}, origin="f.json")


# ------------------------------------------------------------------ errors: one line naming file and key


@pytest.mark.parametrize(
    "content, message",
    [
        ("[1, 2]", "fileset '{f}' is a list: expected a mapping of dataset names"),
        ("{}", "fileset '{f}' is empty"),
        ('{"DY": {"file": ["a.root"]}}', "fileset '{f}': dataset 'DY': has no key 'files' (keys: 'file')"),
        (
            '{"DY": {"files": "a.root"}}',
            "fileset '{f}': dataset 'DY': key 'files' is a str, expected a mapping or a list",
        ),
        ('{"DY": {"files": [3]}}', "fileset '{f}': dataset 'DY': key 'files' item 0 is a int, expected a path"),
        (
            '{"DY": {"files": {"a.root": 3}}}',
            "dataset 'DY': key 'files' entry 'a.root': is a int, expected a tree name",
        ),
        (
            '{"DY": {"files": {"a.root": {"steps": [[5, 2]]}}}}',
            "entry 'a.root': key 'steps' is not a list of [start, stop]",
        ),
        ('{"DY": {"files": {"a.root": {"steps": [[0, 5], [3, 9]]}}}}', "key 'steps' has overlapping ranges"),
        ('{"DY": {"files": {"a.root": {"steps": [[0, 50]], "num_entries": 40}}}}', "beyond its num_entries 40"),
        ('{"DY": {"files": [], "metadata": 3}}', "dataset 'DY': key 'metadata' is a int, expected a mapping"),
        ('{"DY": {"files": []}}', "fileset '{f}': dataset 'DY': key 'files' lists no file"),
        (
            '{"DY": {"files": ["nothing*.root"]}}',
            "dataset 'DY': key 'files' item 0: pattern 'nothing*.root' matches no file",
        ),
        ('{"DY": {"files": ["a.root"]', "fileset '{f}' is not valid JSON: Expecting ',' delimiter at line 1 column 28"),
        (
            '{"DY": {"files": ["sample:nano_dy.rot"]}}',
            "dataset 'DY': key 'files' item 0: unknown sample 'nano_dy.rot' (known: ",
        ),
    ],
)
def test_bad_json_filesets_name_file_dataset_and_key(tmp_path, content, message):
    fileset = write(tmp_path / "fs.json", content)
    with pytest.raises(ConfigurationError) as info:
        load_fileset(fileset)
    assert message.format(f=fileset) in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_yaml_names_the_line(tmp_path):
    fileset = write(tmp_path / "fs.yml", "DY:\n  files: [a.root\n  metadata: {}\n")
    with pytest.raises(ConfigurationError, match=r"fileset '.*fs.yml' is not valid YAML: .* at line \d+ column \d+"):
        load_fileset(fileset)


def test_missing_fileset_file(tmp_path):
    with pytest.raises(FileOpenError, match=r"cannot read fileset '.*nosuch.json': No such file"):
        load_fileset(tmp_path / "nosuch.json")


# ------------------------------------------------------------------ trees and globs in PoolSource


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


async def read_all(source):
    send, receive = trio.open_memory_channel(0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(source.run, send, -1)
        events = [e async for e in receive]
    source.close()
    return events


async def test_tree_name_reads_a_tree_not_called_events():
    hzz = sample("uproot-HZZ.root")
    with pytest.raises(FileOpenError, match=r"has no tree 'Events' \(trees in the file: events\)"):
        make_source([hzz]).collections()
    source = make_source([hzz], treeName="events")
    collections = source.collections()
    assert {"Jet", "Muon", "MET"} <= set(collections) and {"Px", "Py", "Pz", "E"} <= set(collections["Jet"])
    source.set_branch_request({"Muon": {"Px", "Py"}})
    events = await read_all(source)
    assert len(events) == 2421
    # The tree has no run/lumi/event branches: ids are 1:1:<entry+1>.
    assert [tuple(e.id) for e in events[:2]] == [(1, 1, 1), (1, 1, 2)]


def test_config_file_names_expand_globs(tmp_path, monkeypatch):
    for name in ("b.root", "a.root", "c.txt"):
        (tmp_path / name).write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    source = make_source(["file:*.root", "root://host//x*.root", "c.txt"])
    assert source.file_names == ["a.root", "b.root", "root://host//x*.root", "c.txt"]
    with pytest.raises(ConfigurationError, match=r"PoolSource: fileNames pattern 'z\*\.root' matches no file"):
        make_source(["z*.root"])
