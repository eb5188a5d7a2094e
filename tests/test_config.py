"""Tests of the config language ``framework.config`` (pure Python, synchronous).

Policy: every feature and every error the package promises is exercised here; error
tests match the part of the message that names the culprit (parameter path, label,
file:line), not the whole sentence.
"""

from __future__ import annotations

import os
import pathlib
import sys
import textwrap

import pytest

import framework.config as cms
from framework.config import ConfigurationError

# ---------------------------------------------------------------- typed parameters


def test_scalars_value_tracked_and_type_name():
    assert cms.int32(4).value() == 4
    assert cms.double(2).value() == 2.0 and isinstance(cms.double(2).value(), float)
    assert cms.bool(True).value() is True
    assert cms.string("x").value() == "x"
    assert cms.int32(1).isTracked() and cms.int32(1).configTypeName() == "int32"
    u = cms.untracked.double(1.5)
    assert not u.isTracked() and u.configTypeName() == "untracked double"
    assert cms.untracked(cms.uint32(3)).configTypeName() == "untracked uint32"


@pytest.mark.parametrize(
    "cls, value",
    [
        (cms.int32, 2**31),
        (cms.int32, -(2**31) - 1),
        (cms.uint32, -1),
        (cms.uint32, 2**32),
        (cms.int64, 2**63),
        (cms.uint64, -1),
        (cms.uint64, 2**64),
    ],
)
def test_integer_out_of_range(cls, value):
    with pytest.raises(ConfigurationError, match=rf"{value} is out of range"):
        cls(value)


@pytest.mark.parametrize(
    "cls, value",
    [
        (cms.int32, 2**31 - 1),
        (cms.int32, -(2**31)),
        (cms.uint32, 0),
        (cms.uint32, 2**32 - 1),
        (cms.int64, -(2**63)),
        (cms.uint64, 2**64 - 1),
    ],
)
def test_integer_range_limits_accepted(cls, value):
    assert cls(value).value() == value


@pytest.mark.parametrize(
    "cls, value, message",
    [
        (cms.int32, True, "expected an integer, got bool True"),
        (cms.int32, 1.5, "got float 1.5"),
        (cms.uint32, "1", "got string '1'"),
        (cms.double, "abc", "expected a number, got string 'abc'"),
        (cms.double, False, "got bool False"),
        (cms.bool, 1, "expected True or False, got int 1"),
        (cms.string, 3, "expected a str, got int 3"),
    ],
)
def test_scalar_type_errors(cls, value, message):
    with pytest.raises(ConfigurationError, match=message):
        cls(value)


def test_set_value_is_checked_and_keeps_old_value_on_error():
    p = cms.untracked.int32(1)
    p.setValue(5)
    assert p.value() == 5
    with pytest.raises(ConfigurationError, match="out of range"):
        p.setValue(2**40)
    assert p.value() == 5 and not p.isTracked()


def test_untracked_call_needs_a_typed_parameter():
    with pytest.raises(ConfigurationError, match="typed parameter"):
        cms.untracked(3)


def test_vectors_behave_like_lists():
    v = cms.vstring("a", "b")
    assert len(v) == 2 and list(v) == ["a", "b"] and v[1] == "b" and v[-1] == "b"
    v.append("c")
    v.extend(["d"])
    v += ["e"]
    assert v.value() == ["a", "b", "c", "d", "e"]
    assert v == ["a", "b", "c", "d", "e"] and "c" in v
    assert v[1:3] == ["b", "c"]
    w = v + ["f"]
    assert isinstance(w, cms.vstring) and len(w) == 6 and len(v) == 5
    del v[0]
    assert v.value() == ["b", "c", "d", "e"]
    assert cms.vint32([1, 2, 3]).value() == [1, 2, 3]  # one iterable, like CMSSW
    assert cms.vstring("abc").value() == ["abc"]  # a str is one element, not three
    assert cms.vdouble(1, 2.5).value() == [1.0, 2.5]


def test_vector_elements_are_checked():
    with pytest.raises(ConfigurationError, match=r"vstring: element \[1\]: expected a str, got int 3"):
        cms.vstring("a", 3)
    v = cms.untracked.vuint32(1)
    with pytest.raises(ConfigurationError, match=r"element \[1\]: -1 is out of range"):
        v.append(-1)
    with pytest.raises(ConfigurationError, match=r"element \[0\]"):
        v[0] = "x"
    v += [7]
    assert v.value() == [1, 7] and not v.isTracked()


@pytest.mark.parametrize(
    "text, parts, encoded",
    [
        ("a", ("a", "", ""), "a"),
        ("a:b", ("a", "b", ""), "a:b"),
        ("a:b:P", ("a", "b", "P"), "a:b:P"),
        ("a::P", ("a", "", "P"), "a::P"),
        ("a:b:", ("a", "b", ""), "a:b"),
    ],
)
def test_input_tag_parsing(text, parts, encoded):
    tag = cms.InputTag(text)
    assert (tag.label, tag.instance, tag.process) == parts
    assert str(tag) == encoded and tag.value() == encoded
    assert (tag.getModuleLabel(), tag.getProductInstanceLabel(), tag.getProcessName()) == parts


def test_input_tag_three_parts_equality_and_hash():
    tag = cms.InputTag("jets", "pt")
    assert str(tag) == "jets:pt" and str(cms.InputTag("jets", "", "RECO")) == "jets::RECO"
    assert tag == cms.InputTag("jets:pt") and tag == "jets:pt" and tag != cms.InputTag("jets")
    assert len({tag, cms.InputTag("jets:pt"), cms.InputTag("jets")}) == 2
    assert {tag: 1}["jets:pt"] == 1
    tag.setValue("muons")
    assert (tag.label, tag.instance) == ("muons", "")


@pytest.mark.parametrize(
    "args, message",
    [(("a:b:c:d",), "more than 3"), ((3,), "expected a str"), (("a:b", "c"), "contains ':'"), (("a", 5), "got int 5")],
)
def test_input_tag_errors(args, message):
    with pytest.raises(ConfigurationError, match=message):
        cms.InputTag(*args)


def test_vinputtag_parses_strings():
    v = cms.VInputTag("a", cms.InputTag("b", "i"))
    assert v[0] == "a" and isinstance(v[1], cms.InputTag)  # CMSSW keeps each item as given
    assert v.value() == ["a", "b:i"] and repr(v) == 'cms.VInputTag("a", cms.InputTag("b","i"))'
    with pytest.raises(ConfigurationError, match="more than 3"):
        cms.VInputTag("a:b:c:d")


def test_pset_attributes_clone_and_value():
    p = cms.PSet(a=cms.int32(1), b=cms.PSet(c=cms.string("x"), d=cms.vint32(1, 2)))
    assert isinstance(p.a, cms.int32) and p.b.c.value() == "x"
    p.e = cms.double(2.0)
    assert p.parameterNames_() == ["a", "b", "e"]
    assert set(p.parameters_()) == {"a", "b", "e"} and "a" in p
    assert p.value() == {"a": 1, "b": {"c": "x", "d": [1, 2]}, "e": 2.0}
    q = p.clone(a=5, b=dict(c="y"), e=None)
    assert q.value() == {"a": 5, "b": {"c": "y", "d": [1, 2]}}
    assert isinstance(q.a, cms.int32)  # a plain value keeps the parameter's type
    assert p.a.value() == 1 and p.b.c.value() == "x"  # the original is untouched (deep copy)
    q.b.d.append(3)
    assert p.b.d.value() == [1, 2]
    r = cms.PSet(p, f=cms.bool(True))  # positional PSets are copied in
    assert r.parameterNames_() == ["a", "b", "e", "f"]


def test_pset_assignment_rules():
    with pytest.raises(ConfigurationError, match="parameter 'free' does not exist yet.*got int 3") as info:
        cms.PSet(n=cms.untracked.uint32(1), free=3)  # CMSSW: a new parameter must be typed
    assert isinstance(info.value, TypeError)
    p = cms.PSet(n=cms.untracked.uint32(1), free=cms.int32(3))
    p.n = 4
    assert isinstance(p.n, cms.uint32) and p.n.value() == 4 and not p.n.isTracked()
    with pytest.raises(ConfigurationError, match="parameter 'n': cms.uint32: -1 is out of range"):
        p.n = -1
    p.n = cms.string("now a string")  # a typed value replaces
    assert isinstance(p.n, cms.string)
    assert p.free == 3  # a typed value compares as its value
    with pytest.raises(ConfigurationError, match="PSet: parameter 'free': cms.int32: expected an integer") as err:
        p.free = "three"  # a plain value keeps the parameter's type
    assert isinstance(err.value, ValueError)
    with pytest.raises(AttributeError, match="no parameter 'nn'.*did you mean 'n'"):
        p.nn
    with pytest.raises(ConfigurationError, match="'value' is reserved"):
        cms.PSet(value=cms.int32(1))
    with pytest.raises(ConfigurationError, match="invalid parameter name 'x_'"):
        p.x_ = 1
    with pytest.raises(ConfigurationError, match="cannot hold a EDProducer"):
        p.m = cms.EDProducer("X")
    del p.free
    assert "free" not in p


def test_untracked_pset_and_vpset():
    p = cms.untracked.PSet(a=cms.untracked.int32(1))
    assert p.configTypeName() == "untracked PSet"
    v = cms.VPSet(cms.PSet(a=cms.int32(1)), cms.PSet(a=cms.int32(2)))
    assert len(v) == 2 and v.value() == [{"a": 1}, {"a": 2}]
    with pytest.raises(ConfigurationError, match=r"VPSet: element \[0\]: expected a PSet"):
        cms.VPSet(cms.int32(1))


# ---------------------------------------------------------------- process and modules


def _process():
    process = cms.Process("TEST")
    process.source = cms.Source("EmptySource")
    process.prod = cms.EDProducer("Prod", x=cms.int32(1))
    process.filt = cms.EDFilter("Filt")
    process.ana = cms.EDAnalyzer("Ana")
    process.out = cms.OutputModule("Out")
    return process


def test_attach_sets_label_kind_and_type():
    process = _process()
    assert process.name_() == "TEST"
    assert process.prod.label_() == "prod" and process.prod.type_() == "Prod"
    assert [m.kind_() for m in process.modules_().values()] == ["EDProducer", "EDFilter", "EDAnalyzer", "OutputModule"]
    assert process.source.kind_() == "Source" and process.source_() is process.source
    assert list(process.producers_()) == ["prod"] and list(process.filters_()) == ["filt"]
    assert list(process.analyzers_()) == ["ana"] and list(process.outputModules_()) == ["out"]
    clone = process.prod.clone(x=2)
    assert not clone.hasLabel_() and clone.x.value() == 2 and process.prod.x.value() == 1
    with pytest.raises(ConfigurationError, match="has no label"):
        clone.label_()


def test_label_reassigned_replaces_everywhere_and_relabel():
    process = _process()
    process.prod = process.prod  # the same object again is fine
    process.seq = cms.Sequence(process.prod + process.filt)
    process.path = cms.Path(process.seq + process.ana)
    old = process.prod
    process.prod = cms.EDProducer("Other")  # CMSSW: the new object takes the old one's place everywhere
    assert process.prod.type_() == "Other" and not old.hasLabel_()
    assert process.seq.contains(process.prod) and not process.seq.contains(old)
    assert str(process.path) == "prod+filt+ana" and str(process.seq) == "prod+filt"  # nested Sequences expanded
    with pytest.raises(ConfigurationError, match="already attached as 'prod'") as info:
        process.prod2 = process.prod
    assert isinstance(info.value, ValueError)
    other = cms.Process("OTHER")  # an object of another process is relabelled, as in CMSSW
    other.renamed = process.ana
    assert process.ana.label_() == "renamed"


@pytest.mark.parametrize("label", ["bad_", "_bad", "1x", "a-b"])
def test_invalid_labels(label):
    with pytest.raises(ConfigurationError, match="invalid label"):
        setattr(cms.Process("P"), label, cms.EDProducer("X"))


def test_invalid_attachments():
    process = cms.Process("P")
    with pytest.raises(ConfigurationError, match="cannot attach int 3"):
        process.x = 3
    with pytest.raises(ConfigurationError, match="must be assigned to process.source"):
        process.x = cms.Source("S")
    with pytest.raises(ConfigurationError, match="process.source must be a cms.Source"):
        process.source = cms.EDProducer("X")
    with pytest.raises(AttributeError, match="no source"):
        process.source
    with pytest.raises(ConfigurationError, match="alphanumeric"):
        cms.Process("MY_PROC")
    with pytest.raises(AttributeError, match="has no 'prd'"):
        process.prd


def test_services():
    process = cms.Process("P")
    process.add_(cms.Service("TritonService", verbose=cms.untracked.bool(True)))
    process.Timing = cms.Service("Timing")
    assert list(process.services_()) == ["TritonService", "Timing"]
    assert process.TritonService.kind_() == "Service"
    with pytest.raises(ConfigurationError, match="process.Other = ..., not process.foo"):
        process.foo = cms.Service("Other")
    with pytest.raises(ConfigurationError, match="takes Services"):
        process.add_(cms.EDProducer("X"))


def test_options_and_max_events_defaults():
    process = cms.Process("P")
    assert process.maxEvents_() == -1
    options = process.options_()
    # CMSSW's keys and defaults: numberOfStreams 0 = as many streams as threads.
    assert {k: options[k] for k in ("numberOfStreams", "numberOfThreads", "wantSummary", "Rethrow")} == {
        "numberOfStreams": 0,
        "numberOfThreads": 1,
        "wantSummary": False,
        "Rethrow": [],
    }
    assert options["numberOfConcurrentLuminosityBlocks"] == 0 and options["accelerators"] == ["*"]
    assert options["fileMode"] == "FULLMERGE" and options["eventSetup"] == {}
    process.options.numberOfStreams = 4
    process.maxEvents.input = 10
    assert process.options_()["numberOfStreams"] == 4 and process.maxEvents_() == 10


def test_options_replaced_keep_defaults_for_missing_keys():
    process = cms.Process("P")
    process.options = cms.untracked.PSet(wantSummary=cms.untracked.bool(True))
    options = process.options_()
    assert options["wantSummary"] is True and options["numberOfStreams"] == 0 and options["numberOfThreads"] == 1
    assert options == {**cms.Process("Q").options_(), "wantSummary": True}
    process.options = cms.PSet(numberOfThreads=cms.int32(2))  # tracked or other int type: by value
    assert process.options_()["numberOfThreads"] == 2
    process.options.numberOfStreams = 3  # the merged PSet is the live one
    assert process.options_()["numberOfStreams"] == 3
    process.maxEvents = cms.untracked.PSet(input=cms.untracked.int32(5))
    assert process.maxEvents_() == 5


def test_options_errors():
    process = cms.Process("P")
    with pytest.raises(
        ConfigurationError,
        match="unknown parameter 'numberOfStream'.*did you mean "
        "'numberOfStreams'.*known: numberOfStreams, numberOfThreads, wantSummary",
    ):
        process.options = cms.untracked.PSet(numberOfStream=cms.untracked.uint32(2))
    with pytest.raises(ConfigurationError, match="process.maxEvents: unknown parameter 'inpt'.*known: input, output"):
        process.maxEvents = cms.untracked.PSet(inpt=cms.untracked.int32(1))
    with pytest.raises(ConfigurationError, match="process.options.numberOfStreams: .*-1 is out of range"):
        process.options = cms.untracked.PSet(numberOfStreams=cms.untracked.int32(-1))
    with pytest.raises(ConfigurationError, match="parameter 'wantSummary'.*expected True or False"):
        process.options.wantSummary = 1
    process.options.extra = cms.untracked.int32(1)  # a PSet accepts it; the check comes later
    with pytest.raises(ConfigurationError, match="unknown parameter 'extra'"):
        process.validate_()
    del process.options
    process.options.numberOfThreads = 0  # CMSSW: one thread per core (build_job resolves it)
    assert process.options_()["numberOfThreads"] == 0
    process.maxEvents.input = -2
    with pytest.raises(ConfigurationError, match="maxEvents.input must be >= -1"):
        process.maxEvents_()


def test_path_flattening_and_inversion():
    process = _process()
    process.p2 = cms.EDProducer("P2")
    process.seq = cms.Sequence(process.prod * process.p2)
    process.p = cms.Path(process.seq + ~process.filt + process.ana)
    process.e = cms.EndPath(process.out)
    assert process.p.moduleEntries_() == [("prod", False), ("p2", False), ("filt", True), ("ana", False)]
    assert list(process.paths_()) == ["p"] and list(process.endpaths_()) == ["e"]
    assert process.e.moduleEntries_() == [("out", False)]
    process.p += process.p2  # already on the path: kept at its first place
    assert [label for label, _ in process.p.moduleEntries_()] == ["prod", "p2", "filt", "ana"]
    process.validate_()


def test_inversion_only_for_filters_and_not_mixed():
    process = _process()
    # CMSSW accepts '~' on any module in a config (building the job rejects it on a non-filter)
    assert (~process.prod).module is process.prod
    with pytest.raises(TypeError):
        ~cms.Sequence()
    process.p = cms.Path(process.filt + ~process.filt)
    with pytest.raises(ConfigurationError, match="module 'filt' appears both plain and inverted"):
        process.p.moduleEntries_()


def test_tasks_and_task_labels():
    process = _process()
    process.t1 = cms.EDProducer("T")
    process.t2 = cms.EDFilter("T")
    process.t3 = cms.EDProducer("T")
    process.t4 = cms.EDProducer("T")
    process.inner = cms.Task(process.t2)
    process.outer = cms.Task(process.t1, process.inner)
    process.seq = cms.Sequence(process.prod, cms.Task(process.t3))  # a Task inside a Sequence
    process.p = cms.Path(process.seq + process.filt, process.outer)
    process.lone = cms.Task(process.t4)
    assert process.p.moduleEntries_() == [("prod", False), ("filt", False)]
    assert process.p.taskLabels_() == {"t1", "t2", "t3"}
    assert list(process.tasks_()) == ["inner", "outer", "lone"]
    assert process.outer.moduleLabels_() == {"t1", "t2"}
    assert process.unscheduledLabels_() == {"t1", "t2", "t3", "t4"}
    process.validate_()


def test_schedule_object_errors():
    process = _process()
    with pytest.raises(ConfigurationError, match="a Task holds EDProducers, EDFilters, ES modules, Services and Tasks"):
        cms.Task(process.ana)
    with pytest.raises(ConfigurationError, match="pass a Task as an extra argument"):
        process.prod + cms.Task(process.prod)
    with pytest.raises(ConfigurationError, match="cannot hold int 3"):
        cms.Path(3)
    with pytest.raises(ConfigurationError, match="cannot hold Service"):
        cms.Sequence(cms.Service("S"))
    with pytest.raises(ConfigurationError, match="holds Paths and EndPaths"):
        cms.Schedule(process.prod)


def test_path_with_unattached_module():
    process = _process()
    process.p = cms.Path(process.prod + cms.EDProducer("Forgotten"))
    with pytest.raises(
        ConfigurationError, match="Path 'p' refers to an EDProducer of type 'Forgotten' that is not attached"
    ):
        process.validate_()
    with pytest.raises(ConfigurationError, match="Path 'p' refers to an EDProducer of type 'Forgotten'"):
        process.p.moduleEntries_()


def test_path_with_module_of_another_process():
    other = cms.Process("OTHER")
    other.x = cms.EDProducer("X")
    process = _process()
    process.p = cms.Path(other.x)
    with pytest.raises(ConfigurationError, match="type 'X' that is not attached.*labelled 'x' elsewhere"):
        process.validate_()


def test_task_with_unattached_module():
    process = _process()
    # CMSSW checks a Task when it is attached (RuntimeError), not only at validation
    with pytest.raises(RuntimeError, match="process.t: .*EDProducer of type 'Loose', is not attached"):
        process.t = cms.Task(cms.EDProducer("Loose"))
    process2 = _process()
    process2.p = cms.Path(process2.prod, cms.Task(cms.EDFilter("Loose2")))
    with pytest.raises(ConfigurationError, match="Path 'p' refers to an EDFilter of type 'Loose2'"):
        process2.validate_()


def test_schedule_orders_and_selects_paths():
    process = _process()
    process.a = cms.Path(process.prod)
    process.b = cms.Path(process.filt)
    process.c = cms.Path(process.ana)
    process.e = cms.EndPath(process.out)
    assert list(process.paths_()) == ["a", "b", "c"]
    process.schedule = cms.Schedule(process.c, process.a, process.e)
    assert list(process.paths_()) == ["c", "a"] and list(process.endpaths_()) == ["e"]
    process.validate_()
    process.schedule.append(cms.Path(process.prod))
    with pytest.raises(ConfigurationError, match="schedule refers to unlabelled Path"):
        process.validate_()


def test_dump_python_round_trip(tmp_path):
    process = _process()
    process.prod.tags = cms.VInputTag("a", "b:c")
    process.prod.nested = cms.untracked.PSet(v=cms.vdouble(1.5), items=cms.VPSet(cms.PSet(k=cms.string("s"))))
    process.t = cms.Task(process.filt)
    process.seq = cms.Sequence(process.prod)
    process.p = cms.Path(process.seq + process.ana, process.t)
    process.e = cms.EndPath(process.out)
    process.options.numberOfStreams = 2
    process.add_(cms.Service("TritonService"))
    process.schedule = cms.Schedule(process.p, process.e)
    text = process.dumpPython_()
    cfg = tmp_path / "dumped_cfg.py"
    cfg.write_text(text)
    again = cms.load_config(cfg, [])
    assert again.dumpPython_() == text
    assert again.p.moduleEntries_() == [("prod", False), ("ana", False)] and again.p.taskLabels_() == {"filt"}
    assert again.options_()["numberOfStreams"] == 2


# ---------------------------------------------------------------- descriptions


def _description():
    desc = cms.ParameterSetDescription()
    desc.add("src", cms.InputTag("Jet"), "AK4 jet collection")
    desc.add("minNumber", cms.uint32(2), "minimum number of jets")
    desc.add("minPt", cms.double(30.0), "jet pT threshold [GeV]")
    desc.add("names", cms.vstring("a"), "names")
    desc.add("modelName", cms.string, "Triton model name")
    desc.add("verbose", cms.untracked.bool(False), "log every request")
    client = cms.ParameterSetDescription()
    client.add("timeout", cms.untracked.uint32(10), "seconds")
    client.add("mode", cms.untracked.string("Async"), "mode")
    desc.add("Client", client, "Triton client settings")
    item = cms.ParameterSetDescription()
    item.add("name", cms.string, "histogram name")
    item.add("nbins", cms.uint32(10), "bins")
    desc.add_vpset("histograms", item, "one entry per histogram", default=[])
    return desc


CTX = "module 'm' (type T)"


def test_description_fills_defaults_and_returns_plain_values():
    module = cms.EDProducer(
        "T",
        modelName=cms.string("pn"),
        Client=cms.PSet(timeout=cms.untracked.uint32(3)),
        histograms=cms.VPSet(cms.PSet(name=cms.string("h1"))),
    )
    ps = _description().validate(module, CTX)
    assert isinstance(ps, cms.ParameterSet)
    assert ps.src == cms.InputTag("Jet") and isinstance(ps.src, cms.InputTag)
    assert ps.minNumber == 2 and type(ps.minNumber) is int
    assert ps.minPt == 30.0 and type(ps.minPt) is float
    assert ps.names == ["a"] and ps.modelName == "pn" and ps.verbose is False
    assert isinstance(ps.Client, cms.ParameterSet) and ps.Client.timeout == 3 and ps.Client.mode == "Async"
    assert [h.name for h in ps.histograms] == ["h1"] and ps.histograms[0].nbins == 10
    assert ps.to_dict() == {
        "src": "Jet",
        "minNumber": 2,
        "minPt": 30.0,
        "names": ["a"],
        "modelName": "pn",
        "verbose": False,
        "Client": {"timeout": 3, "mode": "Async"},
        "histograms": [{"name": "h1", "nbins": 10}],
    }
    assert ps.src is not module.parameters_().get("src")  # results do not alias the config


def test_parameter_set_mapping_interface():
    ps = _description().validate({"modelName": "pn"}, CTX)
    assert "minPt" in ps and "nope" not in ps and len(ps) == 8
    assert list(ps)[:3] == ["src", "minNumber", "minPt"]
    assert ps.get("nope", 7) == 7 and ps["minPt"] == 30.0
    assert "minPt=30.0" in repr(ps) and "Client=ParameterSet(" in repr(ps)
    with pytest.raises(AttributeError, match="read-only"):
        ps.minPt = 1.0
    with pytest.raises(AttributeError, match="no parameter 'minPT'.*did you mean 'minPt'"):
        ps.minPT
    with pytest.raises(KeyError, match="no parameter 'x'"):
        ps["x"]


def test_description_missing_required():
    with pytest.raises(
        ConfigurationError,
        match=r"^\[Configuration\] module 'm' \(type T\): missing required "
        r"parameter 'modelName' \(string: Triton model name\)$",
    ):
        _description().validate(cms.EDProducer("T"), CTX)


def test_description_unknown_parameter_with_suggestion():
    with pytest.raises(
        ConfigurationError, match="module 'm' \\(type T\\): unknown parameter 'minPT' \\(did you mean 'minPt'\\?\\)"
    ):
        _description().validate(cms.PSet(modelName=cms.string("x"), minPT=cms.double(1)), CTX)
    with pytest.raises(ConfigurationError, match="unknown parameter 'zzz' \\(valid: src, minNumber"):
        _description().validate({"modelName": "x", "zzz": 1}, CTX)


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("minPt", "abc", "parameter 'minPt': expected double, got string 'abc'"),
        ("minPt", cms.string("abc"), "parameter 'minPt': expected double, got string 'abc'"),
        ("minPt", True, "expected double, got bool True"),
        ("minNumber", 2.0, "parameter 'minNumber': expected uint32, got float 2.0"),
        ("minNumber", cms.double(2), "expected uint32, got double 2.0"),
        ("minNumber", False, "expected uint32, got bool False"),
        ("minNumber", -1, "parameter 'minNumber': expected uint32, got int -1: -1 is out of range \\[0, 4294967295\\]"),
        ("minNumber", cms.int32(-1), "expected uint32, got int32 -1: -1 is out of range"),
        ("verbose", 1, "parameter 'verbose': expected untracked bool, got int 1"),
        ("names", "a", "parameter 'names': expected vstring, got string 'a'"),
        ("names", ["a", 2], "expected vstring, got list \\['a', 2\\]: element \\[1\\]: expected a str"),
        ("src", 3, "parameter 'src': expected InputTag, got int 3"),
        ("src", cms.string("Jet"), "expected InputTag, got string 'Jet'"),
        ("Client", 3, "parameter 'Client': expected PSet, got int 3"),
        ("Client", cms.int32(3), "parameter 'Client': expected PSet, got int32 3"),
        ("histograms", cms.PSet(), "parameter 'histograms': expected VPSet"),
        ("histograms", "x", "parameter 'histograms': expected VPSet"),
    ],
)
def test_description_wrong_types(name, value, message):
    params = {"modelName": "m", name: value}
    with pytest.raises(ConfigurationError, match=message):
        _description().validate(params, CTX)


def test_description_accepts_unambiguous_plain_values_and_compatible_types():
    ps = _description().validate(
        {
            "modelName": "m",
            "minPt": 25,
            "minNumber": cms.int32(3),
            "names": ("x", "y"),
            "src": "a:b",
            "Client": {"timeout": 5},
            "histograms": [{"name": "h"}, cms.PSet(name=cms.string("g"))],
        },
        CTX,
    )
    assert ps.minPt == 25.0 and type(ps.minPt) is float and ps.minNumber == 3
    assert ps.names == ["x", "y"] and ps.src == cms.InputTag("a", "b")
    assert ps.Client.timeout == 5 and [h.name for h in ps.histograms] == ["h", "g"]
    # A typed integer for a double: refused, as CMSSW refuses it (a plain 7 is fine)
    with pytest.raises(
        ConfigurationError, match=r"expected double, got int32 7 \(CMSSW's types must match: cms.double\(7\)\)"
    ):
        _description().validate({"modelName": "m", "minPt": cms.int32(7)}, CTX)


def test_description_vectors_of_tags_and_numbers():
    desc = cms.ParameterSetDescription()
    desc.add("tags", cms.VInputTag(), "tags")
    desc.add("weights", cms.vdouble(), "weights")
    ps = desc.validate({"tags": ["a", cms.InputTag("b", "c")], "weights": [1, 2]}, CTX)
    assert ps.tags == [cms.InputTag("a"), cms.InputTag("b:c")] and all(isinstance(t, cms.InputTag) for t in ps.tags)
    assert ps.weights == [1.0, 2.0] and all(type(w) is float for w in ps.weights)
    assert ps.to_dict() == {"tags": ["a", "b:c"], "weights": [1.0, 2.0]}
    with pytest.raises(ConfigurationError, match="parameter 'weights': expected vdouble, got vstring"):
        desc.validate({"weights": cms.vstring("x")}, CTX)
    with pytest.raises(ConfigurationError, match=r"expected vdouble, got vint32 .* must match: cms.vdouble\(...\)"):
        desc.validate({"weights": cms.vint32(1, 2)}, CTX)
    with pytest.raises(ConfigurationError, match=r"parameter 'weights': nan is not a number \(element 1\)"):
        desc.validate({"weights": [1.0, float("nan")]}, CTX)


def test_description_tracked_mismatch():
    with pytest.raises(
        ConfigurationError,
        match="parameter 'verbose': expected untracked bool, got bool \\(use cms.untracked.bool\\(...\\)\\)",
    ):
        _description().validate({"modelName": "m", "verbose": cms.bool(True)}, CTX)
    with pytest.raises(
        ConfigurationError,
        match="parameter 'modelName': expected string, got untracked string \\(drop cms.untracked\\)",
    ):
        _description().validate({"modelName": cms.untracked.string("m")}, CTX)
    with pytest.raises(ConfigurationError, match="parameter 'Client': expected PSet, got untracked PSet"):
        _description().validate({"modelName": "m", "Client": cms.untracked.PSet()}, CTX)


def test_description_nested_errors_name_the_path():
    with pytest.raises(
        ConfigurationError, match="parameter 'Client.timeout': expected untracked uint32, got string 'x'"
    ):
        _description().validate({"modelName": "m", "Client": {"timeout": "x"}}, CTX)
    with pytest.raises(ConfigurationError, match="unknown parameter 'Client.timeOut' \\(did you mean 'timeout'\\?\\)"):
        _description().validate({"modelName": "m", "Client": {"timeOut": 1}}, CTX)
    with pytest.raises(ConfigurationError, match="missing required parameter 'histograms\\[1\\].name'"):
        _description().validate({"modelName": "m", "histograms": [{"name": "a"}, {"nbins": 3}]}, CTX)
    with pytest.raises(ConfigurationError, match="parameter 'histograms\\[0\\].nbins': expected uint32, got int -3"):
        _description().validate({"modelName": "m", "histograms": [{"name": "a", "nbins": -3}]}, CTX)
    with pytest.raises(ConfigurationError, match="parameter 'histograms\\[0\\]': expected PSet, got int 3"):
        _description().validate({"modelName": "m", "histograms": [3]}, CTX)


def test_description_required_vpset_and_untracked_required_type():
    desc = cms.ParameterSetDescription()
    item = cms.ParameterSetDescription()
    item.add("x", cms.int32(0))
    desc.add_vpset("items", item, "items")
    desc.add("fileName", cms.untracked.string, "output file")
    with pytest.raises(ConfigurationError, match="missing required parameter 'items' \\(VPSet: items\\)"):
        desc.validate({"fileName": "f"}, CTX)
    with pytest.raises(ConfigurationError, match="missing required parameter 'fileName' \\(untracked string"):
        desc.validate({"items": []}, CTX)
    with pytest.raises(ConfigurationError, match="expected untracked string, got string"):
        desc.validate({"items": [], "fileName": cms.string("f")}, CTX)
    ps = desc.validate({"items": cms.VPSet(cms.PSet(), cms.PSet(x=cms.int32(4))), "fileName": "f"}, CTX)
    assert [i.x for i in ps["items"]] == [0, 4]


def test_description_optional_free_form_and_allow_unknown():
    desc = cms.ParameterSetDescription()
    desc.add_optional("level", cms.untracked.uint32, "compression level")
    desc.add("extra", cms.PSet, "anything")
    assert "level" not in desc.validate({"extra": {}}, CTX)
    assert desc.validate({"extra": {}, "level": cms.untracked.uint32(3)}, CTX).level == 3
    ps = desc.validate({"extra": cms.PSet(a=cms.vint32(1), b=cms.PSet(c=cms.InputTag("x:y")), d=cms.vint32(1, 2))}, CTX)
    assert ps.extra.a == [1] and ps.extra.b.c == cms.InputTag("x", "y") and ps.extra.d == [1, 2]
    with pytest.raises(ConfigurationError, match="missing required parameter 'extra'"):
        desc.validate({}, CTX)
    open_desc = cms.ParameterSetDescription()
    open_desc.add("known", cms.int32(1))
    open_desc.allow_unknown_("free-form")
    ps = open_desc.validate({"other": cms.string("s"), "vp": cms.VPSet(cms.PSet(k=cms.int32(2)))}, CTX)
    assert ps.known == 1 and ps.other == "s" and ps.vp[0].k == 2
    assert open_desc.describe()[-1] == cms.DescriptionRow("*", "any", "", "free-form")


def test_description_author_errors():
    desc = cms.ParameterSetDescription()
    desc.add("a", cms.int32(1))
    with pytest.raises(ValueError, match="declared twice"):
        desc.add("a", cms.int32(2))
    with pytest.raises(TypeError, match="expected a typed default"):
        desc.add("b", 3)
    with pytest.raises(TypeError, match="add_vpset"):
        desc.add("c", cms.VPSet())
    item = cms.ParameterSetDescription()
    item.add("n", cms.string)
    with pytest.raises(ConfigurationError, match="missing required parameter 'v\\[0\\].n'"):
        desc.add_vpset("v", item, default=[{}])


def test_describe_rows():
    rows = _description().describe()
    by_name = {r.name: r for r in rows}
    assert by_name["minPt"] == ("minPt", "double", "30.0", "jet pT threshold [GeV]", False)
    assert by_name["src"].default == "'Jet'" and by_name["modelName"].default == "required"
    assert by_name["verbose"].type_name == "untracked bool"
    assert by_name["Client.timeout"] == ("Client.timeout", "untracked uint32", "10", "seconds", False)
    assert by_name["histograms"].default == "[]" and by_name["histograms[].name"].type_name == "string"


# ---------------------------------------------------------------- loading configs


def _write(tmp_path, text, name="test_cfg.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_load_config_returns_validated_process(tmp_path):
    path = _write(
        tmp_path,
        """
        import os
        import framework.config as cms
        process = cms.Process("LOAD")
        process.here = cms.EDProducer("X", cfg=cms.string(os.path.basename(__file__)))
        process.p = cms.Path(process.here)
    """,
    )
    process = cms.load_config(str(path), [])
    assert process.name_() == "LOAD" and process.here.cfg.value() == "test_cfg.py"


def test_load_config_missing_file(tmp_path):
    with pytest.raises(ConfigurationError, match="config file '.*nope_cfg.py' not found"):
        cms.load_config(tmp_path / "nope_cfg.py", [])


def test_load_config_syntax_error_with_line(tmp_path):
    path = _write(tmp_path, "import framework.config as cms\nprocess = cms.Process('A'\nx = 1\n")
    with pytest.raises(ConfigurationError, match=rf"{path}:2: syntax error: '\(' was never closed"):
        cms.load_config(path, [])


def test_load_config_exception_inside(tmp_path):
    path = _write(tmp_path, "import framework.config as cms\n\nprocess = cms.Process('A')\nx = 1 / 0\n")
    with pytest.raises(ConfigurationError, match=rf"{path}:4: ZeroDivisionError: division by zero$") as info:
        cms.load_config(path, [])
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_load_config_configuration_error_inside_names_line(tmp_path):
    path = _write(
        tmp_path,
        """\
        import framework.config as cms
        process = cms.Process("A")
        process.a = cms.EDProducer("X",
                                   n=3)
    """,
    )
    with pytest.raises(ConfigurationError, match=rf"{path}:3: ConfigurationError: .*parameter 'n' does not exist"):
        cms.load_config(path, [])


def test_load_config_no_process_or_wrong_type(tmp_path):
    with pytest.raises(ConfigurationError, match="defines no 'process'"):
        cms.load_config(_write(tmp_path, "x = 1\n"), [])
    with pytest.raises(ConfigurationError, match="'process' is a str, expected a cms.Process"):
        cms.load_config(_write(tmp_path, "process = 'x'\n"), [])


def test_load_config_validates(tmp_path):
    path = _write(
        tmp_path,
        """
        import framework.config as cms
        process = cms.Process("A")
        process.p = cms.Path(cms.EDAnalyzer("Lost"))
    """,
    )
    with pytest.raises(ConfigurationError, match=rf"{path}: Path 'p' refers to an EDAnalyzer of type 'Lost'"):
        cms.load_config(path, [])


def test_load_config_imports_fragments_next_to_it(tmp_path):
    fragment = "frag_for_test_config_cff"
    (tmp_path / f"{fragment}.py").write_text(
        "import framework.config as cms\nprod = cms.EDProducer('X')\ndef broken():\n    return {}['k']\n"
    )
    path = _write(
        tmp_path,
        f"""
        import framework.config as cms
        from {fragment} import prod
        process = cms.Process("A")
        process.prod = prod
    """,
    )
    try:
        assert cms.load_config(path, []).prod.type_() == "X"
        assert str(tmp_path) not in sys.path  # removed again
        bad = _write(tmp_path, f"import {fragment}\n{fragment}.broken()\n", name="bad_cfg.py")
        with pytest.raises(ConfigurationError, match=rf"bad_cfg.py:2: KeyError: 'k' \(at .*{fragment}.py:4\)"):
            cms.load_config(bad, [])
    finally:
        sys.modules.pop(fragment, None)


VARPARSING_CFG = """
    import framework.config as cms
    options = cms.VarParsing()
    options.register("inputFiles", [], cms.VarParsing.multiplicity.list, cms.VarParsing.varType.string, "input files")
    options.register("maxEvents", -1, cms.VarParsing.multiplicity.singleton, cms.VarParsing.varType.int, "events")
    options.register("scale", 1.0, cms.VarParsing.multiplicity.singleton, cms.VarParsing.varType.float, "scale")
    options.register("fast", False, cms.VarParsing.multiplicity.singleton, cms.VarParsing.varType.bool, "fast")
    options.parseArguments()
    process = cms.Process("VP")
    process.source = cms.Source("S", fileNames=cms.untracked.vstring(*options.inputFiles))
    process.maxEvents.input = options.maxEvents
    process.keep = cms.PSet(scale=cms.double(options.scale), fast=cms.bool(options.fast))
"""


def test_varparsing_defaults_and_values(tmp_path):
    path = _write(tmp_path, VARPARSING_CFG)
    process = cms.load_config(path, [])
    assert process.maxEvents_() == -1 and process.source.fileNames.value() == []
    process = cms.load_config(
        path, ["inputFiles=a.root,b.root", "maxEvents=5", "inputFiles=c.root", "scale=2.5", "fast=True"]
    )
    assert process.source.fileNames.value() == ["a.root", "b.root", "c.root"]
    assert process.maxEvents_() == 5
    assert process.keep.scale.value() == 2.5 and process.keep.fast.value() is True


@pytest.mark.parametrize(
    "arg, message",
    [
        (
            "maxEvent=3",
            "unknown argument 'maxEvent' \\(did you mean 'maxEvents'\\?\\); valid: inputFiles, maxEvents",
        ),
        ("maxEvents=abc", "argument 'maxEvents=abc': expected int, got 'abc'"),
        ("scale=x", "argument 'scale=x': expected float"),
        ("fast=maybe", "argument 'fast=maybe': expected bool"),
        ("maxEvents", "argument 'maxEvents' is not of the form name=value"),
    ],
)
def test_varparsing_errors(tmp_path, arg, message):
    path = _write(tmp_path, VARPARSING_CFG)
    with pytest.raises(ConfigurationError, match=message):
        cms.load_config(path, [arg])


def test_varparsing_singleton_twice(tmp_path):
    with pytest.raises(ConfigurationError, match="argument 'maxEvents' given twice"):
        cms.load_config(_write(tmp_path, VARPARSING_CFG), ["maxEvents=1", "maxEvents=2"])


def test_arguments_for_config_without_varparsing(tmp_path):
    path = _write(tmp_path, "import framework.config as cms\nprocess = cms.Process('A')\n")
    with pytest.raises(ConfigurationError, match=rf"config {path} does not take arguments.*: a=1"):
        cms.load_config(path, ["a=1"])


def test_varparsing_outside_load_config_and_registration_errors():
    options = cms.VarParsing("analysis")
    options.parseArguments()  # no load_config running: nothing to parse, defaults stay
    assert options.maxEvents == -1 and options.inputFiles == [] and options.outputFile == "output.root"
    options.maxEvents = 3
    assert options.maxEvents == 3
    with pytest.raises(ConfigurationError, match="already registered"):
        options.register("maxEvents", 1)
    with pytest.raises(ConfigurationError, match="'x': expected int, got 'a'"):
        options.register("x", "a", cms.VarParsing.multiplicity.singleton, cms.VarParsing.varType.int)
    with pytest.raises(ConfigurationError, match="no argument 'nope'"):
        options.nope = 1
    with pytest.raises(AttributeError, match="no argument 'maxEvent'.*did you mean 'maxEvents'"):
        options.maxEvent


# ---------------------------------------------------------------- FileInPath


def _search_area(tmp_path, monkeypatch):
    """Two search-path folders; the file is only in the second."""
    first, second = tmp_path / "first", tmp_path / "second"
    (second / "Pkg/Sub/data").mkdir(parents=True)
    (second / "Pkg/Sub/data/file.txt").write_text("x")
    first.mkdir()
    monkeypatch.setenv("CMSSW_SEARCH_PATH", f"{first}:{second}")
    return first, second


def test_file_in_path_resolves_on_search_path_in_order(tmp_path, monkeypatch):
    first, second = _search_area(tmp_path, monkeypatch)
    f = cms.FileInPath("Pkg/Sub/data/file.txt")
    assert f.relativePath() == "Pkg/Sub/data/file.txt" and f.value() == "Pkg/Sub/data/file.txt"
    assert f.fullPath() == str(second / "Pkg/Sub/data/file.txt")
    assert pathlib.Path(f) == second / "Pkg/Sub/data/file.txt" and os.fspath(f) == f.fullPath()
    (first / "Pkg/Sub/data").mkdir(parents=True)
    (first / "Pkg/Sub/data/file.txt").write_text("y")
    assert cms.FileInPath("Pkg/Sub/data/file.txt").fullPath() == str(first / "Pkg/Sub/data/file.txt")
    # the project's data/ folder comes after CMSSW_SEARCH_PATH's folders
    project = cms.FileInPath("models/deepmet/config.pbtxt").fullPath()
    assert project.endswith("data/models/deepmet/config.pbtxt") and os.path.isfile(project)
    assert not cms.FileInPath("") and cms.FileInPath("a")


def test_file_in_path_unresolvable_is_one_line(tmp_path, monkeypatch):
    first, second = _search_area(tmp_path, monkeypatch)
    with pytest.raises(ConfigurationError) as err:
        cms.FileInPath("Pkg/Sub/data/missing.txt").fullPath()
    message = str(err.value)
    assert "\n" not in message and "'Pkg/Sub/data/missing.txt'" in message
    assert f"CMSSW_SEARCH_PATH ({first}:{second})" in message and "data" in message
    with pytest.raises(ConfigurationError, match="is a directory, not a file"):
        cms.FileInPath("Pkg/Sub").fullPath()
    with pytest.raises(ConfigurationError, match="expected a relative path"):
        cms.FileInPath(3)


def test_file_in_path_validation_dump_and_describe(tmp_path, monkeypatch):
    _first, second = _search_area(tmp_path, monkeypatch)
    desc = cms.ParameterSetDescription()
    desc.add("model", cms.FileInPath("Pkg/Sub/data/file.txt"), "a file")
    desc.add("json", cms.string(""), "a string resolved by the module")
    desc.add("other", cms.untracked.FileInPath, "required untracked")
    params = desc.validate(
        {"json": cms.FileInPath("Pkg/x.json"), "other": cms.untracked.FileInPath("Pkg/Sub/data/file.txt")}, "m"
    )
    assert isinstance(params.model, cms.FileInPath) and params.model.fullPath() == str(second / "Pkg/Sub/data/file.txt")
    assert params.json == "Pkg/x.json"  # a FileInPath stands for its relative path where a string is declared
    assert params.to_dict()["model"] == "Pkg/Sub/data/file.txt"
    with pytest.raises(ConfigurationError, match=r"] m: parameter 'model': cms.FileInPath 'Pkg/nope': not found"):
        desc.validate({"model": "Pkg/nope", "other": "Pkg/Sub/data/file.txt"}, "m")
    with pytest.raises(ConfigurationError, match=r"parameter 'model': expected FileInPath, got int 3"):
        desc.validate({"model": 3, "other": "Pkg/Sub/data/file.txt"}, "m")
    with pytest.raises(ConfigurationError, match=r"expected untracked FileInPath, got FileInPath"):
        desc.validate({"other": cms.FileInPath("Pkg/Sub/data/file.txt")}, "m")
    rows = {r.name: r for r in desc.describe()}
    assert rows["model"].type_name == "FileInPath" and rows["model"].default == "'Pkg/Sub/data/file.txt'"
    assert rows["other"].type_name == "untracked FileInPath"
    assert cms.FileInPath("a/b").dumpPython_() == "cms.FileInPath('a/b')"
    assert cms.untracked.FileInPath("a/b").dumpPython_() == "cms.untracked.FileInPath('a/b')"


def test_file_in_path_round_trips_through_dump_python(tmp_path, monkeypatch):
    _search_area(tmp_path, monkeypatch)
    process = cms.Process("FIP")
    process.source = cms.Source("EmptySource")
    process.prod = cms.EDProducer("X", model=cms.FileInPath("Pkg/Sub/data/file.txt"))
    process.p = cms.Path(process.prod)
    text = process.dumpPython_()
    assert "model = cms.FileInPath('Pkg/Sub/data/file.txt')" in text
    cfg = tmp_path / "dumped_cfg.py"
    cfg.write_text(text)
    assert cms.load_config(cfg, []).dumpPython_() == text
