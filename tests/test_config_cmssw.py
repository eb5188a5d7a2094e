"""CMSSW's semantics of the configuration language, through CMSSW's import names.

Each test states one behaviour that CMSSW configs rely on (FWCore/ParameterSet's Config,
Types, SequenceTypes, Mixins, Modules): typed values that act as values, CMSSW's type
checks, clone/update_ and the placeholders of generated cfis, Modifiers and eras,
process.load of fragments, del and relabelling, Sequence editing, ES modules and options.
The configs and fragments are written here; CMSSW's own files are not copied.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

import framework
import framework.config
import FWCore.ParameterSet.Config as cms
from framework.config import ConfigurationError
from framework.core import build_job as core_build_job

# ---------------------------------------------------------------- import names


def test_cmssw_import_names_are_the_framework_objects():
    import FWCore.ParameterSet.Modules as modules
    import FWCore.ParameterSet.SequenceTypes as sequence_types
    import FWCore.ParameterSet.Types as types
    from FWCore.ParameterSet.VarParsing import VarParsing

    assert cms.PSet is framework.config.PSet and cms.Process is framework.config.Process
    assert types.int32 is cms.int32 and types.untracked is cms.untracked and types.bool is cms.bool
    assert sequence_types.Sequence is cms.Sequence and modules.EDProducer is cms.EDProducer
    assert VarParsing is framework.config.VarParsing
    assert FWCore.__file__.endswith("cmssw/FWCore/__init__.py")  # the aliases live in cmssw/


import FWCore  # noqa: E402 - used above, for its location

# ---------------------------------------------------------------- typed values act as values


def test_typed_scalars_behave_as_their_values():
    assert not cms.untracked.bool(False) and cms.bool(True)
    assert not cms.int32(0) and not cms.string("") and cms.string("x")
    assert cms.int32(5) > 3 and cms.int32(5) >= 5 and cms.uint32(2) < cms.int32(3) and 2.5 < cms.double(3)  # noqa: SIM300 - the reflected comparison is the test
    assert cms.int32(5) + 1 == 6 and 10 - cms.int32(4) == 6 and cms.double(1.5) * 2 == 3.0
    assert cms.int32(7) // 2 == 3 and -cms.int32(3) == -3 and abs(cms.double(-2.0)) == 2.0
    assert cms.string("ab") + "c" == "abc" and "x" + cms.string("y") == "xy" and len(cms.string("abc")) == 3
    assert [10, 20, 30][cms.uint32(1)] == 20  # an integer parameter works as an index
    assert int(cms.double(2.7)) == 2 and float(cms.int32(3)) == 3.0
    assert f"{cms.double(0.5):.2f}" == "0.50" and str(cms.int32(4)) == "4"
    assert cms.vint32(1, 2) + [3] == [1, 2, 3] and isinstance(cms.vint32(1) + [2], cms.vint32)


@pytest.mark.parametrize(
    "make, error",
    [
        (lambda: cms.int32("i"), ValueError),
        (lambda: cms.uint32(-1), ValueError),
        (lambda: cms.bool(1), ValueError),
        (lambda: cms.vint32(1, "blah"), TypeError),
        (lambda: cms.vint32().append("blah"), TypeError),
        (lambda: cms.PSet("foo"), ValueError),  # type: ignore[arg-type]  # the wrong type is the test
        (lambda: cms.PSet(foo="bar"), TypeError),
        (lambda: cms.untracked(1), TypeError),  # type: ignore[arg-type]  # the wrong type is the test
    ],
)
def test_bad_values_raise_the_python_errors_cmssw_raises(make, error):
    with pytest.raises(error) as info:
        make()
    assert isinstance(info.value, ConfigurationError)  # and still one of ours, for cmsrun's one line


def test_new_parameters_must_be_typed_and_existing_ones_keep_their_type():
    module = cms.EDProducer("P", n=cms.int32(1), tag=cms.InputTag("a"))
    with pytest.raises(TypeError, match="EDProducer of type 'P': parameter 'm' does not exist yet"):
        module.m = 2
    module.n = 3  # a plain value sets the value, the type stays
    assert isinstance(module.n, cms.int32) and module.n == 3
    with pytest.raises(ValueError, match="parameter 'n': cms.int32: expected an integer"):
        module.n = "three"
    module.tag = "b:i"
    assert module.tag == cms.InputTag("b", "i")
    module.n = cms.untracked.string("now")  # a typed value replaces, as in CMSSW
    assert module.n.configTypeName() == "untracked string"


def test_parameter_names_with_colons_are_accepted_for_message_categories():
    cerr = cms.untracked.PSet()
    setattr(cerr, "TritonClient:extra", cms.untracked.PSet(limit=cms.untracked.int32(10)))
    assert cerr.parameterNames_() == ["TritonClient:extra"]


# ---------------------------------------------------------------- clone, update_, generated cfis


def test_clone_with_cmssw_rules():
    base = cms.EDProducer(
        "P",
        a=cms.int32(1),
        sub=cms.PSet(x=cms.string("u"), y=cms.double(1.0)),
        items=cms.VPSet(cms.PSet(k=cms.int32(0)), cms.PSet(k=cms.int32(1))),
    )
    c = base.clone(a=2, sub=dict(x="v"), items={1: dict(k=5)}, new=cms.bool(True))
    assert (c.a, c.sub.x, c.sub.y, [p.k.value() for p in c.items], c.new) == (2, "v", 1.0, [0, 5], True)
    assert base.a == 1 and base.sub.x == "u" and base.items[1].k == 1  # deep copy
    assert "sub" not in base.clone(sub=None).parameterNames_()
    with pytest.raises(TypeError, match="'newPlain' does not exist yet"):
        base.clone(newPlain=3)
    with pytest.raises(TypeError, match="no parameter 'nope' to remove"):
        base.clone(nope=None)
    extra = base.clone(cms.PSet(fromPSet=cms.int32(9)))  # positional PSets add their parameters
    assert extra.fromPSet == 9


def test_update_has_parameter_and_get_parameter():
    pset = cms.PSet(Client=cms.PSet(mode=cms.string("Sync")), n=cms.int32(1))
    pset.update_(dict(n=4, Client=dict(mode="Async"), added=cms.untracked.bool(True)))
    assert pset.n == 4 and pset.Client.mode == "Async" and pset.added.isTracked() is False
    assert pset.hasParameter(["Client", "mode"]) and not pset.hasParameter(["Client", "nope"])
    assert pset.getParameter("n") == 4 and pset.getParameter("nope") is None


def test_required_optional_and_allowed_placeholders_of_generated_cfis():
    cfi = cms.EDProducer(
        "P",
        need=cms.required.double,
        maybe=cms.optional.untracked.vstring,
        either=cms.optional.allowed(cms.int32, cms.string),
        kept=cms.int32(1),
    )
    assert cfi.need.value() is None
    text = cfi.dumpPython_()
    assert "need = cms.required.double" in text and "maybe = cms.optional.untracked.vstring" in text
    assert "either = cms.optional.allowed(cms.int32,cms.string)" in text
    module = cfi.clone(need=2.5, maybe=["a", "b"])
    assert isinstance(module.need, cms.double) and module.need == 2.5
    assert isinstance(module.maybe, cms.vstring) and not module.maybe.isTracked() and module.maybe == ["a", "b"]
    module.either = "text"
    assert isinstance(module.either, cms.string)
    with pytest.raises(ValueError, match="parameter 'need': expected double, got string"):
        cfi.clone(need="x")
    # Unset placeholders are absent for validation: the description decides.
    desc = cms.ParameterSetDescription()
    desc.add("need", cms.double(7.0))
    desc.add("kept", cms.int32(0))
    desc.add_optional("maybe", cms.untracked.vstring)
    desc.add_optional("either", cms.int32)
    params = desc.validate(cfi, "cfi")
    assert params.need == 7.0 and "maybe" not in params and "either" not in params
    assert cms.allowed(cms.int32, cms.string, default=cms.int32(3)) == 3


# ---------------------------------------------------------------- Modifiers


def test_modifier_acts_only_when_chosen_by_the_process():
    run3, other = cms.Modifier(), cms.Modifier()
    module = cms.EDProducer("P", a=cms.int32(1), sub=cms.PSet(x=cms.string("u"), y=cms.int32(0)))
    other.toModify(module, a=10)  # not chosen: nothing happens
    assert module.a == 1
    cms.Process("T", run3)
    run3.toModify(module, a=2, sub=dict(x="v", y=None), b=cms.bool(True))
    assert module.a == 2 and module.sub.x == "v" and not module.sub.hasParameter("y") and module.b == True  # noqa: E712
    run3.toModify(module, lambda m: setattr(m, "a", 3))
    assert module.a == 3
    with pytest.raises(TypeError, match="'func' or parameters, but not both"):
        run3.toModify(module, lambda m: None, a=4)
    with pytest.raises(KeyError, match="Unknown parameter name 'zz'"):
        run3.toModify(module, zz=1)
    (run3 & other).toModify(module, a=5)
    (run3 & ~other).toModify(module, a=6)
    (other | run3).toModify(module, sub=dict(x="w"))
    assert module.a == 6 and module.sub.x == "w"


def test_to_replace_with_and_modifier_chains():
    a, b, unused = cms.Modifier(), cms.Modifier(), cms.Modifier()
    era = cms.ModifierChain(a, cms.ModifierChain(b))
    process = cms.Process("T", era)
    assert a.isChosen() and b.isChosen() and not unused.isChosen() and process.isUsingModifier(b)
    process.x = cms.EDProducer("Old", p=cms.int32(1))
    process.y = cms.EDProducer("Y")
    process.s = cms.Sequence(process.x)
    b.toReplaceWith(process.x, cms.EDProducer("New", q=cms.string("z")))
    assert process.x.type_() == "New" and process.x.parameterNames_() == ["q"] and process.x.label_() == "x"
    a.toReplaceWith(process.s, cms.Sequence(process.y + process.x))
    assert str(process.s) == "y+x"
    with pytest.raises(TypeError, match="same class type"):
        a.toReplaceWith(process.x, cms.EDFilter("F"))
    unused.toReplaceWith(process.s, cms.Sequence(process.y))
    assert str(process.s) == "y+x"
    smaller = era.copyAndExclude([b])
    assert smaller._holds(a) and not smaller._holds(b)


# ---------------------------------------------------------------- load / extend


@pytest.fixture
def fragments(tmp_path, monkeypatch):
    """A package ``frag`` with a Modifier, a cfi, and a cff that clones, modifies and groups."""
    package = tmp_path / "frag"
    package.mkdir()
    (package / "__init__.py").write_text("")
    files = {
        "mods_cff.py": """
            import FWCore.ParameterSet.Config as cms
            sonic = cms.Modifier()
        """,
        "thing_cfi.py": """
            import FWCore.ParameterSet.Config as cms
            thing = cms.EDProducer("Thing", a=cms.int32(1), sub=cms.PSet(x=cms.string("u")))
        """,
        "group_cff.py": """
            import FWCore.ParameterSet.Config as cms
            from frag.thing_cfi import *
            from frag.mods_cff import sonic
            other = thing.clone(a=2)
            sonic.toModify(other, a=5, sub=dict(x="v"))
            common = cms.PSet(z=cms.int32(3))
            thingTask = cms.Task(thing)
            thingSeq = cms.Sequence(other, thingTask)

            def _add(process):
                process.added = cms.EDProducer("Added")

            addWhenSonic = sonic.makeProcessModifier(_add)
        """,
        "MessageThing_cfi.py": """
            import FWCore.ParameterSet.Config as cms
            Messages = cms.Service("Messages", level=cms.untracked.string("INFO"))
        """,
    }
    for name, text in files.items():
        (package / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m == "frag" or m.startswith("frag.")]:
        del sys.modules[name]


def test_load_attaches_a_fragments_objects_and_applies_modifiers(fragments):
    from frag.mods_cff import sonic  # type: ignore[import-not-found]  # written by the fixture

    process = cms.Process("T", sonic)
    module = process.load("frag.group_cff")
    assert module.__name__ == "frag.group_cff"
    assert list(process.producers) == ["other", "thing", "added"]  # the ProcessModifier ran last
    assert process.other.a == 5 and process.other.sub.x == "v" and process.thing.a == 1
    assert process.common.z == 3 and str(process.thingSeq) == "other, thingTask"
    process.load("frag/MessageThing_cfi")  # CMSSW accepts slashes
    assert process.Messages.level == "INFO" and "Messages" in process.services


def test_load_without_the_modifier_and_extend_of_a_namespace(fragments):
    process = cms.Process("T")
    process.load("frag.group_cff")
    assert "added" not in process.producers
    extra = type("Namespace", (), {"more": cms.EDAnalyzer("A"), "_hidden": cms.EDAnalyzer("H")})
    process.extend(extra)
    assert "more" in process.analyzers and "_hidden" not in process.analyzers


def test_a_fragment_may_not_redefine_a_label_in_use(fragments):
    process = cms.Process("T")
    process.other = cms.EDProducer("Mine")
    process.p = cms.Path(process.other)
    with pytest.raises(ValueError, match="Trying to override definition of process.other"):
        process.load("frag.group_cff")


def test_load_config_starts_each_config_from_fresh_fragments(fragments, tmp_path):
    cfg = tmp_path / "modified_cfg.py"
    cfg.write_text(
        textwrap.dedent("""
            import FWCore.ParameterSet.Config as cms
            from frag.mods_cff import sonic
            process = cms.Process("T", sonic)
            process.load("frag.group_cff")
        """)
    )
    plain = tmp_path / "plain_cfg.py"
    plain.write_text(
        'import FWCore.ParameterSet.Config as cms\nprocess = cms.Process("T")\nprocess.load("frag.group_cff")\n'
    )
    from frag.mods_cff import sonic as imported_before

    assert framework.config.load_config(cfg).other.a == 5
    assert not imported_before.isChosen()  # chosen by that config, unchosen once it has run
    process = framework.config.load_config(plain)  # the Modifier chosen by the first config is not
    assert process.other.a == 2 and "added" not in process.producers


# ---------------------------------------------------------------- del, relabel, dictionaries


def _process() -> cms.Process:
    process = cms.Process("T")
    for label in "abc":
        setattr(process, label, cms.EDProducer(label.upper()))
    process.f = cms.EDFilter("F")
    process.t = cms.Task(process.c)
    process.s = cms.Sequence(process.a + process.b)
    process.p = cms.Path(process.s + ~process.f, process.t)
    process.e = cms.EndPath(process.b)
    process.schedule = cms.Schedule(process.p, process.e)
    return process


def test_del_removes_an_object_everywhere():
    process = _process()
    del process.b
    assert "b" not in process.producers and str(process.s) == "a" and str(process.e) == ""
    del process.c
    assert process.t.isEmpty() and process.p.moduleNames() == {"a", "f"}
    del process.f
    assert str(process.p) == "a, t" and process.p.dumpSequencePython() == "process.s"
    del process.e
    assert list(process.schedule) == [process.p]
    process.validate_()


def test_process_dictionaries_and_names():
    process = _process()
    process.es = cms.ESProducer("Geometry", scale=cms.double(1.0))
    process.add_(cms.ESSource("EmptyESSource"), cms.Service("Tracer"))
    process.prefer("es")
    assert list(process.producers) == ["a", "b", "c"] and list(process.filters) == ["f"]
    assert list(process.paths) == ["p"] and list(process.endpaths) == ["e"] and list(process.tasks) == ["t"]
    assert list(process.sequences) == ["s"] and list(process.services) == ["Tracer"]
    assert list(process.es_producers) == ["es"] and list(process.es_sources) == ["EmptyESSource"]
    assert list(process.es_prefers) == ["es_prefer_es"]
    assert process.producerNames() == "a b c" and process.pathNames() == "p"
    process.unscheduled = cms.Path(process.a)  # process.paths has every Path; paths_() the scheduled
    assert list(process.paths) == ["p", "unscheduled"] and list(process.paths_()) == ["p"]
    with pytest.raises(TypeError):
        process.paths["x"] = cms.Path()  # read-only views
    with pytest.raises(ValueError, match="read-only"):
        process.paths = {}


# ---------------------------------------------------------------- Sequence editing


def test_sequence_str_and_queries():
    process = _process()
    # str() as CMSSW's: nested Sequences expanded to their modules
    assert str(process.p) == "a+b+~f, t" and str(process.s) == "a+b"
    assert process.p.dumpSequencePython() == "process.s+~process.f"
    assert process.p.dumpPython() == "cms.Path(process.s+~process.f, process.t)\n"
    assert str(cms.Sequence(process.a + cms.Sequence(process.b + process.c))) == "a+b+c"
    assert process.p.moduleNames() == {"a", "b", "c", "f"}
    assert process.p.contains(process.b) and process.p.contains(process.c) and not process.e.contains(process.a)
    assert process.p.index(process.s) == 0 and process.p.index(~process.f) == 1
    with pytest.raises(ValueError):
        process.p.index(process.a)  # only the top level


def test_sequence_remove_insert_replace():
    process = _process()
    assert process.p.remove(process.b)  # found inside s: s is replaced here by a copy without b
    assert str(process.p) == "a+~f, t" and str(process.s) == "a+b"
    assert not process.p.remove(process.b)
    process.p.insert(0, process.b)
    assert str(process.p) == "b+a+~f, t"
    assert process.s.replace(process.a, process.c) and str(process.s) == "c+b"
    process.p.replace(process.f, process.a)  # CMSSW: the operand of ~f is replaced, the ~ stays
    assert str(process.p) == "b+a+~a, t"
    process.s += process.a
    assert str(process.s) == "c+b+a"


def test_sequence_copies():
    process = _process()
    copy = process.p.copy()
    copy += process.c
    assert str(process.p) == "a+b+~f, t" and not copy.hasLabel_()
    excluded = process.p.copyAndExclude([process.b, process.t])
    # s copied without b: an unlabelled Sequence, written as its items (CMSSW)
    assert excluded.dumpPython() == "cms.Path(process.a+~process.f)\n"
    assert excluded.moduleNames() == {"a", "f"} and str(process.s) == "a+b"
    expanded = process.p.expandAndClone()
    assert str(expanded) == "a+b+~f, t"


def test_task_editing():
    process = _process()
    process.t.add(process.a)
    assert process.t.moduleNames() == {"a", "c"} and process.t.contains(process.a)
    assert str(process.t) == "cms.Task(c, a)"
    assert process.t.remove(process.c) and process.t.moduleNames() == {"a"}
    process.t.replace(process.a, process.b)
    assert process.t.moduleNames() == {"b"} and process.t.copyAndExclude([process.b]).isEmpty()


# ---------------------------------------------------------------- options, ES modules


def test_options_with_cmssw_keys():
    process = cms.Process("T")
    process.options = cms.untracked.PSet(
        numberOfThreads=cms.untracked.uint32(4),
        numberOfConcurrentLuminosityBlocks=cms.untracked.uint32(2),
        accelerators=cms.untracked.vstring("cpu"),
    )
    options = process.options_()
    assert options["numberOfStreams"] == 0 and options["numberOfThreads"] == 4  # 0 = as many as threads
    assert options["accelerators"] == ["cpu"] and options["numberOfConcurrentLuminosityBlocks"] == 2
    process.maxLuminosityBlocks = cms.untracked.PSet(input=cms.untracked.int32(1))
    assert process.maxLuminosityBlocks.input == 1


# ---------------------------------------------------------------- a CMSSW-style config runs


class _Counter(framework.EDProducer):
    """Puts the event count; asks for the EventSetup when told to."""

    @classmethod
    def fill_descriptions(cls, desc):
        desc.add("askSetup", cms.untracked.bool(False))

    def __init__(self, params):
        self.ask = params.askSetup
        self.produces()

    def produce(self, event):
        if self.ask:
            self.esConsumes()
        event.put(1)


framework.register_type("testCmsswCounter", _Counter)

CMSSW_STYLE_CFG = """
import FWCore.ParameterSet.Config as cms
process = cms.Process("STYLE")
process.source = cms.Source("EmptySource")
process.maxEvents = cms.untracked.PSet(input=cms.untracked.int32(3))
process.counter = cms.EDProducer("testCmsswCounter", askSetup=cms.untracked.bool({ask}))
process.p = cms.Path(process.counter)
process.geometry = cms.ESProducer("GeometryESProducer", scale=cms.double(1.0))
process.conditions = cms.ESSource("PoolDBESSource", connect=cms.string("frontier://x"))
process.prefer("conditions")
process.load("FWCore/MessageService/MessageLogger_cfi")
process.MessageLogger.cerr.FwkReport.reportEvery = 500
process.MessageLogger.categories.append("TritonClient")
setattr(process.MessageLogger.cerr, "counter:TritonClient", cms.untracked.PSet(limit=cms.untracked.int32(0)))
process.MessageLogger.cerr.threshold = "WARNING"
process.options.numberOfThreads = 2
process.options.numberOfStreams = 0
"""


def test_a_cmssw_style_config_with_es_modules_and_message_logger_runs(tmp_path, capsys):
    import logging

    from framework.cmsrun import main

    path = tmp_path / "style_cfg.py"
    path.write_text(CMSSW_STYLE_CFG.format(ask=False))
    level = logging.getLogger("pysonic").level
    process = framework.config.load_config(path)
    job = core_build_job(process)
    assert job.streams == 2  # numberOfStreams 0 = as many as threads
    assert logging.getLogger("pysonic").level == level  # building a job changes no logging
    assert main([str(path), "--no-progress"]) == 0
    assert logging.getLogger("pysonic").level == level  # the MessageLogger's settings are undone at the end
    path.write_text(CMSSW_STYLE_CFG.format(ask=True))
    assert main([str(path), "--no-progress"]) == 1
    assert "module 'counter' asks for the EventSetup: pysonic has none" in capsys.readouterr().err


async def test_message_logger_maps_threshold_categories_and_files_onto_logging(tmp_path, monkeypatch):
    import logging

    from framework.core import MessageLogger

    monkeypatch.chdir(tmp_path)
    process = cms.Process("ML")
    process.load("FWCore.MessageLogger.MessageLogger_cfi")  # the older name of the same fragment
    ml = process.MessageLogger
    ml.cerr.threshold = "WARNING"
    ml.cerr.TritonClient = cms.untracked.PSet(limit=cms.untracked.int32(0))
    ml.files = cms.untracked.PSet(debugLog=cms.untracked.PSet(threshold=cms.untracked.string("INFO")))
    desc = cms.ParameterSetDescription()
    MessageLogger.fill_descriptions(desc)
    before = logging.getLogger("pysonic").level
    service = MessageLogger(desc.validate(ml, "MessageLogger"))
    assert logging.getLogger("pysonic").level == before  # nothing changes before the job begins
    await service.begin_job()
    try:
        assert logging.getLogger("pysonic").level == logging.WARNING
        logging.getLogger("pysonic.sonic").warning("silenced TritonClient message")
        logging.getLogger("pysonic").warning("kept message")
    finally:
        await service.end_job()
    assert logging.getLogger("pysonic").level == before
    text = (tmp_path / "debugLog.log").read_text()
    assert "kept message" in text and "silenced" not in text


# ---------------------------------------------------------------- dumpPython, cmsrun --dump


def test_dump_python_in_cmssw_layout_rebuilds_the_config(fragments, tmp_path, capsys):
    from framework.cmsrun import main

    cfg = tmp_path / "dump_cfg.py"
    cfg.write_text(
        textwrap.dedent("""
            import FWCore.ParameterSet.Config as cms
            from frag.mods_cff import sonic
            process = cms.Process("DUMP", sonic)
            process.source = cms.Source("EmptySource")
            process.load("frag.group_cff")
            process.f = cms.EDFilter("F", tag=cms.InputTag("a", "b"), names=cms.vstring("x", "it's"),
                                     req=cms.required.untracked.int32)
            process.p = cms.Path(process.thingSeq + ~process.f)
            process.schedule = cms.Schedule(process.p)
        """)
    )
    assert main([str(cfg), "--dump"]) == 0
    text = capsys.readouterr().out
    assert text.startswith('import FWCore.ParameterSet.Config as cms\n\nprocess = cms.Process("DUMP")\n\n')
    # parameters sorted by name, as CMSSW dumps them
    assert 'process.f = cms.EDFilter("F",\n    names = cms.vstring(\'x\', "it\'s"),\n' in text
    assert '    req = cms.required.untracked.int32,\n    tag = cms.InputTag("a","b")\n)' in text
    assert "process.thingTask = cms.Task(process.thing)" in text
    assert text.index("process.thingTask =") < text.index("process.thingSeq =") < text.index("process.p =")
    assert "process.p = cms.Path(process.thingSeq+~process.f)" in text
    assert text.endswith("process.schedule = cms.Schedule(*[ process.p ])\n")
    dumped = tmp_path / "dumped_cfg.py"
    dumped.write_text(text)
    again = framework.config.load_config(dumped)  # no Modifier needed: the dump holds the result
    assert again.dumpPython() == text and again.other.a == 5 and "added" in again.producers
    from framework.cmsrun import edm_config_dump

    assert edm_config_dump([str(cfg)]) == 0 and capsys.readouterr().out == text  # CMSSW's command name


# ---------------------------------------------------------------- more of CMSSW's language


def test_keyword_parameters_are_sorted_and_dumps_end_with_a_newline():
    module = cms.EDAnalyzer("A", foo=cms.untracked.int32(1), bar=cms.untracked.string("it"))
    module.zed = cms.bool(True)
    assert module.parameterNames_() == ["bar", "foo", "zed"]  # CMSSW adds keywords sorted
    assert module.dumpPython() == (
        "cms.EDAnalyzer(\"A\",\n    bar = cms.untracked.string('it'),\n    foo = cms.untracked.int32(1),\n"
        "    zed = cms.bool(True)\n)\n"
    )
    assert module.copy().foo == 1 and not module.copy().hasLabel_()
    assert cms.PSet(b=cms.int32(1), a=cms.int32(2)).dumpPython() == (
        "cms.PSet(\n    a = cms.int32(2),\n    b = cms.int32(1)\n)"
    )


def test_ignore_and_wait_in_paths():
    process = cms.Process("T")
    process.f = cms.EDFilter("F")
    process.a = cms.EDProducer("A")
    process.p = cms.Path(cms.ignore(process.f) + cms.wait(process.a))
    assert process.p.dumpPython() == "cms.Path(cms.ignore(process.f)+cms.wait(process.a))\n"
    assert str(process.p) == "cms.ignore(f)+cms.wait(a)"
    assert process.p.moduleEntries_() == [("f", None), ("a", False)]  # None: the decision is ignored
    assert process.p.contains(process.f) and process.p.remove(process.f) and str(process.p) == "cms.wait(a)"
    with pytest.raises(TypeError):
        cms.ignore(cms.Sequence())


class _Reject(framework.EDFilter):
    def filter(self, event):
        return False


class _Seen(framework.EDAnalyzer):
    count = 0

    def analyze(self, event):
        type(self).count += 1


framework.register_type("testCmsswReject", _Reject)
framework.register_type("testCmsswSeen", _Seen)


async def test_an_ignored_filter_does_not_stop_its_path():
    from framework.core import run_job

    process = cms.Process("T")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = 3
    process.reject = cms.EDFilter("testCmsswReject")
    process.seen = cms.EDAnalyzer("testCmsswSeen")
    process.p = cms.Path(cms.ignore(process.reject) + process.seen)
    _Seen.count = 0
    await run_job(core_build_job(process))
    assert _Seen.count == 3
    process.p = cms.Path(process.reject + process.seen)
    _Seen.count = 0
    await run_job(core_build_job(process))
    assert _Seen.count == 0


def test_sequences_and_tasks_hold_no_parameters_and_tasks_hold_es_modules():
    process = _process()
    with pytest.raises(AttributeError):
        process.s.something = 1
    process.es = cms.ESProducer("E")
    process.t.add(process.es)
    assert process.t.moduleLabels_() == {"c"}  # ES modules are configuration only: nothing runs
    with pytest.raises(RuntimeError, match="cannot hold EDAnalyzer"):
        cms.Task(cms.EDAnalyzer("A"))
    process.alias = cms.EDAlias(a=cms.VPSet(cms.PSet(type=cms.string("Foo"))))
    assert list(process.aliases) == ["alias"] and "cms.EDAlias(" in process.dumpPython()


def test_attach_errors_are_cmssw_exception_types():
    process = cms.Process("T")
    with pytest.raises(TypeError):
        process.b = "this should fail"
    with pytest.raises(TypeError):
        process.bad = cms.Service("Bad")  # a Service goes under its type name
    with pytest.raises(ValueError):
        process.bad = cms.Source("PoolSource")


def test_global_replace():
    process = _process()
    process.globalReplace("b", cms.EDProducer("B2"))
    assert process.b.type_() == "B2" and process.s.contains(process.b) and process.e.contains(process.b)
    with pytest.raises(ValueError, match="has no 'nope'"):
        process.globalReplace("nope", cms.EDProducer("X"))


def test_max_events_output_takes_an_int_or_a_pset():
    process = cms.Process("T")
    assert process.maxEvents.output.value() is None
    process.maxEvents.output = 10
    assert process.maxEvents.output == 10
    process.maxEvents.output = cms.untracked.PSet(out=cms.untracked.int32(10))
    assert process.maxEvents.output.out == 10
    process.maxEvents = cms.untracked.PSet(input=cms.untracked.int32(5))
    assert process.maxEvents_() == 5


def test_input_tag_es_input_tag_and_vbool():
    tag = cms.InputTag("label", processName="proc")
    assert tag.moduleLabel == "label" and tag.productInstanceLabel == "" and tag.processName == "proc"
    assert repr(tag) == 'cms.InputTag("label","","proc")'
    tag.productInstanceLabel = "i"
    tag.setModuleLabel("other")
    assert tag.value() == "other:i:proc" and cms.InputTag("a") < cms.InputTag("b")
    es = cms.ESInputTag("module:data")
    assert (es.getModuleLabel(), es.getDataLabel(), es.value()) == ("module", "data", "module:data")
    assert cms.vbool(True, False).value() == [True, False]
    with pytest.raises(TypeError):
        cms.vbool(1)


def test_placeholders_set_in_place_any_label_and_templates():
    pset = cms.PSet(anInt=cms.required.int32)
    pset.anInt.setValue(3)
    assert pset.anInt.value() == 3 and pset.dumpPython() == "cms.PSet(\n    anInt = cms.int32(3)\n)"
    untracked = cms.PSet(anInt=cms.required.untracked.int32)
    untracked.anInt = 5
    assert untracked.dumpPython() == "cms.PSet(\n    anInt = cms.untracked.int32(5)\n)"
    with pytest.raises(TypeError):
        cms.PSet(anInt=cms.required.int32).anInt = cms.string("x")
    wild = cms.PSet(allowAnyLabel_=cms.required.int32)
    assert not wild.hasParameter("allowAnyLabel_")
    wild.foo = 3
    assert isinstance(wild.foo, cms.int32) and wild.foo == 3
    with pytest.raises(ValueError, match="parameter 'bar'"):
        wild.bar = "bad"
    categories = cms.untracked.PSet(
        allowAnyLabel_=cms.optional.untracked.PSetTemplate(
            limit=cms.untracked.int32(10), reportEvery=cms.untracked.int32(1)
        )
    )
    categories.TritonClient = dict(limit=0)
    assert categories.TritonClient.limit == 0 and categories.TritonClient.reportEvery == 1
    assert "allowAnyLabel_ = cms.optional.untracked.PSetTemplate(" in categories.dumpPython()


def test_modifier_edits_vectors_by_index_and_reports_unknown_names():
    m = cms.Modifier()
    cms.Process("T", m)
    module = cms.EDAnalyzer(
        "A",
        fred=cms.vuint32(1, 2, 3),
        flintstones=cms.VPSet(cms.PSet(fred=cms.int32(1)), cms.PSet(wilma=cms.int32(1))),
        nested=cms.PSet(inner=cms.PSet(wilma=cms.int32(1))),
    )
    m.toModify(module, fred={1: 7}, flintstones={1: dict(wilma=cms.int32(2))})
    assert list(module.fred) == [1, 7, 3] and module.flintstones[1].wilma == 2
    with pytest.raises(IndexError):
        m.toModify(module, fred={5: 7})
    with pytest.raises(TypeError):
        m.toModify(module, flintstones=dict(bogus=cms.int32(37)))
    with pytest.raises(KeyError):
        m.toModify(module, nested=dict(imnothere=dict(wilma=2)))
    chain = cms.ModifierChain(m, cms.ModifierChain(cms.Modifier()))
    assert chain._isOrContains(m) and m._isOrContains(m) and not m._isOrContains(chain)


def test_path_dumps_vector_layout_schedule_checks_and_prune():
    process = cms.Process("T")
    for label in "abcd":
        setattr(process, label, cms.EDAnalyzer(label.upper()))
    process.prod = cms.EDProducer("P")
    process.t1 = cms.Task(process.prod)
    unlabelled = cms.Sequence(process.a + process.b, cms.Task(process.prod))
    process.p = cms.Path(process.c + unlabelled + process.a)
    # an unlabelled Sequence is written as its items, its Tasks join the Path's
    assert process.p.dumpPython() == "cms.Path(process.c+process.a+process.b+process.a, cms.Task(process.prod))\n"
    assert cms.Path(process.a, process.t1, cms.Task(), process.t1).dumpPython() == (
        "cms.Path(process.a, cms.Task(), process.t1)\n"
    )
    with pytest.raises(TypeError):
        cms.Path(cms.ESProducer("E"))
    assert cms.vint32(*range(7)).dumpPython() == "cms.vint32(\n    0, 1, 2, 3, 4,\n    5, 6\n)"
    assert cms.VPSet(cms.PSet(i=cms.int32(2))).dumpPython() == "cms.VPSet(cms.PSet(\n    i = cms.int32(2)\n))"
    with pytest.raises(RuntimeError, match="not attached"):
        process.schedule = cms.Schedule(cms.Path(process.a))
    process.schedule = cms.Schedule(process.p, tasks=[process.t1])
    assert process.schedule.contains(process.prod) and not process.schedule.contains(process.d)
    process.unused = cms.Sequence(process.d)
    process.tracked = cms.PSet(x=cms.int32(1))
    process.kept = cms.untracked.PSet(x=cms.int32(1))
    process.prune()
    assert "d" not in process.analyzers and "unused" not in process.sequences and "tracked" not in process.psets
    assert {"a", "b", "c"} <= set(process.analyzers) and "kept" in process.psets and "t1" in process.tasks
    with pytest.raises(RuntimeError):
        cms.Process("bad_name")


def test_process_fragment_final_path_and_print_options():
    from FWCore.ParameterSet.Mixins import PrintOptions

    fragment = cms.ProcessFragment("FRAG")
    fragment.a = cms.EDProducer("A")
    fragment.out = cms.OutputModule("O")
    fragment.fp = cms.FinalPath(fragment.out)
    process = cms.Process("T")
    process.extend(fragment)
    assert list(process.producers) == ["a"] and list(process.finalpaths) == ["fp"]
    assert process.fp.dumpPython(PrintOptions()) == "cms.FinalPath(process.out)\n"
    assert process.a._inProcess and not cms.EDProducer("X")._inProcess
    assert not cms.PSet(f=cms.required.vint32).f  # an unset placeholder is false


def test_event_and_luminosity_ranges_and_non_finite_doubles(tmp_path):
    source = cms.Source(
        "PoolSource",
        lumisToProcess=cms.untracked.VLuminosityBlockRange("1:1-1:5", cms.LuminosityBlockRange(2, 1, 2, 3)),
        firstEvent=cms.untracked.EventID(1, 2, 3),
        cut=cms.double(float("inf")),
        cuts=cms.vdouble(-float("inf"), 1.0),
    )
    assert source.lumisToProcess.value() == ["1:1-1:5", "2:1-2:3"] and source.firstEvent.event() == 3
    assert cms.EventRange("1:1:1-1:1:10").end() == "1:1:10" and cms.LuminosityBlockID(4, 5).luminosityBlock() == 5
    with pytest.raises(ValueError):
        cms.LuminosityBlockRange("1-x")
    with pytest.raises(TypeError):
        cms.VEventRange("nonsense")
    text = source.dumpPython()
    assert "cut = cms.double(float('inf'))" in text and "cms.vdouble(-float('inf'), 1.0)" in text
    namespace = {"cms": cms}
    exec("again = " + text, namespace)  # the dump is valid Python that rebuilds the values
    again = namespace["again"]
    assert again.cut == float("inf") and again.lumisToProcess.value() == source.lumisToProcess.value()
    process = cms.Process("T")
    process.p = cms.Path()
    process.setSchedule_(cms.Schedule(process.p))
    assert list(process.schedule_()) == [process.p]


def test_reassigning_a_path_or_task_label_keeps_its_place():
    process = _process()
    new_path = cms.Path(process.a)
    process.p = new_path
    assert list(process.schedule) == [new_path, process.e]
    new_task = cms.Task(process.a)
    process.t = new_task
    assert process.p.moduleNames() == {"a"} and process.e.moduleNames() == {"b"}
    process.s2 = cms.Sequence(process.b, process.t)
    process.t = cms.Task(process.c)
    assert process.s2.moduleNames() == {"b", "c"}


def test_placeholders_are_resolved_when_the_config_is_loaded(tmp_path):
    cfg = tmp_path / "placeholder_cfg.py"
    cfg.write_text(
        textwrap.dedent("""
            import FWCore.ParameterSet.Config as cms
            process = cms.Process("T")
            process.a = cms.EDProducer("A")
            process.b = cms.EDProducer("B")
            process.p = cms.Path(process.a + cms.SequencePlaceholder("later"), cms.TaskPlaceholder("lateTask"))
            process.later = cms.Sequence(process.b)
            process.lateTask = cms.ConditionalTask(process.a)
        """)
    )
    unresolved = cms.Path(cms.SequencePlaceholder("later"))
    assert unresolved.dumpPython() == 'cms.Path(cms.SequencePlaceholder("later"))\n'
    process = framework.config.load_config(cfg)
    assert process.p.moduleEntries_() == [("a", False), ("b", False)]
    assert process.p.dumpPython() == "cms.Path(process.a+process.later, process.lateTask)\n"
    assert list(process.conditionaltasks) == ["lateTask"] and process.p.taskLabels_() == {"a"}
    bad = tmp_path / "bad_placeholder_cfg.py"
    bad.write_text(
        'import FWCore.ParameterSet.Config as cms\nprocess = cms.Process("T")\n'
        'process.p = cms.Path(cms.SequencePlaceholder("nothing"))\n'
    )
    with pytest.raises(ConfigurationError, match="bad_placeholder_cfg.py: SequencePlaceholder 'nothing'"):
        framework.config.load_config(bad)


def test_wrong_kinds_in_sequences_and_schedules_are_type_errors():
    process = _process()
    with pytest.raises(TypeError, match="cannot chain"):
        process.a + 3
    with pytest.raises(TypeError, match="Schedule holds Paths and EndPaths"):
        cms.Schedule(process.a)
    with pytest.raises(TypeError, match="associate"):
        process.p.associate(process.a)
