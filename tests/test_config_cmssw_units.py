"""The facts CMSSW's own unit tests of its config language assert, with configs written here.

The ``unittest`` classes at the end of CMSSW's ``FWCore/ParameterSet/python/Config.py``,
``Types.py``, ``Modules.py``, ``SequenceTypes.py``, ``VarParsing`` and
``FWCore/ParameterSet/test/test_argparse.py`` were read; these tests state the same behaviours
through CMSSW's import names, with their own modules, labels and values (CMSSW's tests are not
copied). The facts that need CMSSW's C++ bridge (``fillProcessDesc``) are asserted where pysonic
has the same decision: the case a SwitchProducer runs is checked by building and running a job.
Pure Python, no server, no file (tests/test_config_cmssw.py holds the older facts).
"""

from __future__ import annotations

import functools
import pickle
import textwrap

import pytest
import trio

import framework
import framework.config
import FWCore.ParameterSet.Config as cms
from framework import EDAnalyzer, EDProducer
from framework.config import ConfigurationError
from framework.core import build_job, run_job
from framework.utilities import NotSupportedError
from FWCore.ParameterSet.VarParsing import VarParsing

# ---------------------------------------------------------------- 1. SwitchProducer, ProcessAccelerator


def _enabled_if(name: str, priority: int, accelerators: list[str]) -> tuple[bool, int]:
    return name in accelerators, priority


def _test_case(name: str, priority: int):  # module-level functions (partial): the switch pickles
    return functools.partial(_enabled_if, name, priority)


class SwitchProducerLab(cms.SwitchProducer):
    """A switch of three cases enabled by the accelerators 'lab1', 'lab2', 'lab3' (priority rising)."""

    def __init__(self, **cases):
        super().__init__({f"lab{i}": _test_case(f"lab{i}", i) for i in (1, 2, 3)}, **cases)


class SwitchProducerGPU(cms.SwitchProducer):
    """CPU always, 'gpu-lab' when that accelerator is selected (and preferred)."""

    def __init__(self, **cases):
        super().__init__(dict(cpu=cms.SwitchProducer.getCpu(), gpu=_test_case("gpu-lab", 2)), **cases)


class ProcessAcceleratorLab(cms.ProcessAccelerator):
    """Accelerators 'gpu-lab' and 'fpga-lab'; ``enabled`` says which this "machine" has."""

    def __init__(self, enabled=("gpu-lab",)):
        self.enabled = list(enabled)

    def labels(self):
        return ["gpu-lab", "fpga-lab"]

    def enabledLabels(self):  # noqa: N802 - CMSSW's hook
        return self.enabled

    def apply(self, process, accelerators):
        process.LabService = cms.Service("LabService", gpu=cms.untracked.bool("gpu-lab" in accelerators))

    def dumpPythonImpl(self, options):  # noqa: N802 - CMSSW's hook
        return f"{options.indentation()}enabled = {self.enabled!r}"


def test_switch_producer_cases_are_edproducers_or_aliases_labelled_label_at_case():
    switch = SwitchProducerLab(lab1=cms.EDProducer("Jets"), lab2=cms.EDAlias())
    assert switch.lab1.type_() == "Jets" and isinstance(switch.lab2, cms.EDAlias)
    with pytest.raises(ValueError, match="case 'cuda' is not allowed"):
        SwitchProducerLab(cuda=cms.EDProducer("Jets"))
    for wrong in (cms.EDAnalyzer("A"), cms.EDFilter("F"), cms.Service("S"), cms.ESProducer("E"), switch):
        with pytest.raises(TypeError, match="can only be a cms.EDProducer or cms.EDAlias"):
            SwitchProducerLab(lab1=wrong)
    process = cms.Process("LAB")
    process.jets = switch
    assert (switch.label_(), switch.lab1.label_(), switch.lab2.label_()) == ("jets", "jets@lab1", "jets@lab2")
    switch.lab3 = cms.EDProducer("JetsFast")  # a case added later is labelled too
    del switch.lab1
    switch.lab1 = cms.EDProducer("JetsAgain")
    assert (switch.lab3.label_(), switch.lab1.label_()) == ("jets@lab3", "jets@lab1")
    alone = SwitchProducerLab(lab1=cms.EDProducer("Jets"))
    alone.setLabel("sp")  # CMSSW's setLabel, as the process does
    with pytest.raises(ValueError):
        alone.setLabel("other")
    alone.setLabel(None)
    alone.setLabel("other")
    assert alone.lab1.label_() == "other@lab1"
    # a SwitchProducer is a producer of its own kind, in Sequences and Tasks like one
    process.s = cms.Sequence(switch)
    process.t = cms.Task(switch)
    assert list(process.switchProducers) == ["jets"] and "jets" not in process.producers
    assert process.switchProducerNames() == "jets" and process.producerNames() == ""
    assert process.t.moduleNames() == {"jets"} and process.s.moduleNames() == {"jets"}


def test_switch_producer_takes_the_enabled_case_of_highest_priority():
    switch = SwitchProducerLab(lab1=cms.EDProducer("Slow"), lab2=cms.EDProducer("Fast"))
    assert switch._getProducer(["lab1", "lab2", "lab3"]).type_() == "Fast"
    assert switch._getProducer(["lab1", "lab3"]).type_() == "Slow"
    assert switch._chooseCase(["lab2"]) == "lab2"
    with pytest.raises(RuntimeError, match="all cases .* are disabled"):
        SwitchProducerLab(lab1=cms.EDProducer("Slow"))._getProducer(["lab2", "lab3"])


def test_switch_producer_clone_and_modifiers_edit_replace_add_and_remove_cases():
    switch = SwitchProducerLab(
        lab1=cms.EDProducer("Slow", n=cms.int32(1), cuts=cms.PSet(pt=cms.double(20))),
        lab2=cms.EDProducer("Fast", n=cms.int32(11)),
    )
    copy = switch.clone()
    copy.lab1.n = 3
    assert switch.lab1.n == 1 and copy.lab2.n == 11  # cases are copied
    edited = switch.clone(lab1=dict(n=4, cuts=dict(pt=None)), lab2=dict(eta=cms.double(2.4)))
    assert edited.lab1.n == 4 and not edited.lab1.cuts.hasParameter("pt") and edited.lab2.eta == 2.4
    swapped = switch.clone(lab1=cms.EDProducer("Other"), lab3=cms.EDProducer("New"), lab2=None)
    assert swapped.lab1.type_() == "Other" and swapped.lab3.type_() == "New" and not hasattr(swapped, "lab2")
    with pytest.raises(TypeError):
        switch.clone(lab1=cms.EDAnalyzer("A"))
    modifier = cms.Modifier()
    cms.Process("LAB", modifier)
    modifier.toModify(switch, lab1=dict(n=5), lab2=cms.EDProducer("Faster"), lab3=cms.EDAlias(a=cms.VPSet()))
    assert switch.lab1.n == 5 and switch.lab2.type_() == "Faster" and isinstance(switch.lab3, cms.EDAlias)
    modifier.toReplaceWith(switch.lab1, cms.EDProducer("Replaced", m=cms.int32(42)))
    assert switch.lab1.type_() == "Replaced" and switch.lab1.m == 42
    with pytest.raises(TypeError):
        modifier.toReplaceWith(switch.lab1, cms.EDAnalyzer("A"))
    with pytest.raises(TypeError):
        modifier.toReplaceWith(switch.lab3, cms.EDProducer("NotAnAlias"))
    modifier.toModify(switch, lab3=None)
    assert not hasattr(switch, "lab3")
    process = cms.Process("LAB2")
    process.jets = switch
    modifier.toReplaceWith(process.jets, SwitchProducerLab(lab2=cms.EDProducer("Other")))
    assert process.jets.lab2.type_() == "Other" and process.jets.lab2.label_() == "jets@lab2"
    with pytest.raises(TypeError):
        modifier.toModify(switch, lab2=cms.EDAnalyzer("A"))


def test_switch_producer_dumps_with_its_class_and_pickles_with_module_level_cases():
    process = cms.Process("LAB")
    process.jets = SwitchProducerGPU(gpu=cms.EDProducer("JetsGPU", n=cms.int32(2)), cpu=cms.EDProducer("JetsCPU"))
    process.ProcessAcceleratorLab = ProcessAcceleratorLab()
    text = process.dumpPython()
    assert f"from {__name__} import ProcessAcceleratorLab\nfrom {__name__} import SwitchProducerGPU\n" in text
    assert (
        'process.jets = SwitchProducerGPU(\n    cpu = cms.EDProducer("JetsCPU"),\n'
        '    gpu = cms.EDProducer("JetsGPU",\n        n = cms.int32(2)\n    )\n)'
    ) in text
    assert "process.ProcessAcceleratorLab = ProcessAcceleratorLab(\n    enabled = ['gpu-lab']\n)" in text
    again = pickle.loads(pickle.dumps(process.jets))
    assert again.cpu.type_() == "JetsCPU" and again._chooseCase(["cpu"]) == "cpu"


def test_options_accelerators_select_among_the_available_ones():
    process = cms.Process("LAB")
    assert process.selectAccelerators_() == ["cpu"]  # no ProcessAccelerator: the CPU only
    with pytest.raises(TypeError, match="under its class name"):
        process.lab = ProcessAcceleratorLab()

    class Fragment:  # what process.load finds in an _cff (CMSSW's Accelerators_cff)
        ProcessAcceleratorLab = ProcessAcceleratorLab()

    process.extend(Fragment())
    assert list(process.processAccelerators) == ["ProcessAcceleratorLab"]
    assert process.selectAccelerators_() == ["cpu", "gpu-lab"]
    assert process.LabService.gpu.value() is True  # apply() customized the Services
    for patterns, selected in ((["gpu-*"], ["gpu-lab"]), (["c*", "*lab"], ["cpu", "gpu-lab"]), (["fpga-lab"], [])):
        process.options.accelerators = patterns
        assert process.selectAccelerators_() == selected, patterns
    assert process.LabService.gpu.value() is False
    for wrong in (["tpu"], ["*", "cpu"]):
        process.options.accelerators = wrong
        with pytest.raises(ValueError):
            process.selectAccelerators_()
    # apply() reaches Services only
    view = cms.ProcessForProcessAccelerator(process)
    process.jets = cms.EDProducer("Jets")
    with pytest.raises(TypeError):
        view.jets  # noqa: B018 - the access is the test
    with pytest.raises(TypeError):
        view.other = cms.EDProducer("X")
    view.add_(cms.Service("Added"))
    assert "Added" in process.services


class _CaseProducer(EDProducer):
    """A case of the switch below: puts its own type name, so that the reader sees which ran."""

    def __init__(self, params):
        self.produces()

    def produce(self, event):
        event.put(self.type_name)


class _SwitchReader(EDAnalyzer):
    seen: list[tuple[str, str]] = []

    def __init__(self, params):
        self.src = self.consumes("jets")

    def analyze(self, event):
        type(self).seen.append(event.get(self.src))


for _type, _cls in (("testJetsCPU", _CaseProducer), ("testJetsGPU", _CaseProducer), ("testJetsReader", _SwitchReader)):
    framework.register_type(_type, _cls)


class MachineWithLabGPU(ProcessAcceleratorLab):
    """The accelerator of the jobs below: it customizes no Service (pysonic has no LabService)."""

    def apply(self, process, accelerators):
        pass


def _switch_job(accelerator=None, patterns=None, gpu_case=None):
    process = cms.Process("LAB")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = 2
    if accelerator is not None:
        process.add_(accelerator)  # under its class name
    if patterns is not None:
        process.options.accelerators = patterns
    process.jets = SwitchProducerGPU(
        cpu=cms.EDProducer("testJetsCPU"), gpu=gpu_case if gpu_case is not None else cms.EDProducer("testJetsGPU")
    )
    process.reader = cms.EDAnalyzer("testJetsReader")
    process.p = cms.Path(process.reader, cms.Task(process.jets))
    process.validate_()
    return build_job(process)


@pytest.mark.parametrize(
    ("accelerator", "patterns", "expected"),
    [
        (None, None, "testJetsCPU"),  # this machine: no accelerator declared, the CPU case
        (MachineWithLabGPU(), None, "testJetsGPU"),  # an accelerator present: its case wins
        (MachineWithLabGPU(), ["cpu"], "testJetsCPU"),  # process.options.accelerators forbids it
        (MachineWithLabGPU(enabled=()), None, "testJetsCPU"),  # known, but not on this machine
    ],
)
def test_the_chosen_case_runs_under_the_switch_producers_label(accelerator, patterns, expected):
    job = _switch_job(accelerator, patterns)
    worker = job.workers["jets"]
    assert (worker.label, worker.type_name, worker.kind) == ("jets", expected, "EDProducer")
    _SwitchReader.seen = []
    trio.run(run_job, job)
    assert _SwitchReader.seen == [expected, expected]  # consumers read the product of "jets"


def test_a_chosen_edalias_case_is_refused_when_the_job_is_built():
    alias = cms.EDAlias(jetsCPU=cms.VPSet(cms.PSet(type=cms.string("*"))))
    with pytest.raises(NotSupportedError, match=r"EDAlias as the chosen case of SwitchProducer 'jets' \(jets@gpu\)"):
        _switch_job(MachineWithLabGPU(), gpu_case=alias)
    assert _switch_job(None, gpu_case=alias).workers["jets"].type_name == "testJetsCPU"  # not chosen: fine


# ---------------------------------------------------------------- 2. Schedule and Task details


def _producers(process, labels):
    for label in labels:
        setattr(process, label, cms.EDProducer(label.upper()))
    return [getattr(process, label) for label in labels]


def test_schedule_tasks_one_task_unlabelled_tasks_copy_and_module_names():
    process = cms.Process("SCH")
    a, b = _producers(process, "ab")
    process.Tracer = cms.Service("Tracer")
    process.pa, process.pb = cms.Path(a), cms.Path(b)
    process.ta = cms.Task(a)
    process.tt = cms.Task(b, process.Tracer)
    schedule = cms.Schedule(process.pa, process.pb, tasks=[process.ta, process.tt, process.ta])
    assert schedule.tasks() == [process.ta, process.tt]  # once each, in order (CMSSW's ordered set)
    assert cms.Schedule(process.pa, tasks=process.ta).tasks() == [process.ta]  # one Task, not a list
    copy = schedule.copy()
    assert list(copy) == [process.pa, process.pb] and copy.tasks() == [process.ta, process.tt] and copy is not schedule
    assert schedule.moduleNames() == {"a", "b", "Tracer"}  # Services on Tasks too
    process.c, process.d = cms.EDProducer("C"), cms.EDProducer("D")
    process.schedule = cms.Schedule(tasks=[process.ta, cms.Task(process.c, process.d)])  # an unlabelled Task
    process.validate_()
    assert process.dumpPython().endswith(
        "process.schedule = cms.Schedule(tasks=[cms.Task(process.c, process.d), process.ta])\n"
    )
    with pytest.raises(RuntimeError, match="not attached"):
        process.schedule = cms.Schedule(cms.Path(a))


def test_task_placeholders_resolve_to_tasks_or_modules_and_conditional_placeholders_too():
    process = cms.Process("PH")
    process.a = cms.EDProducer("A")
    process.b = cms.EDAnalyzer("B")
    process.t1 = cms.Task(cms.TaskPlaceholder("c"))
    process.t2 = cms.Task(process.a, cms.TaskPlaceholder("d"), process.t1)
    process.ct = cms.ConditionalTask(cms.ConditionalTaskPlaceholder("e"))
    process.p = cms.Path(process.b, process.t2, process.ct)
    assert process.t2.dumpPython() == 'cms.Task(cms.TaskPlaceholder("d"), process.a, process.t1)\n'
    assert process.ct.dumpPython() == 'cms.ConditionalTask(cms.ConditionalTaskPlaceholder("e"))\n'
    process.c, process.d, process.e = cms.EDProducer("C"), cms.EDProducer("D"), cms.EDProducer("E")
    process.resolve()
    assert list(process.t1) == [process.c] and list(process.t2) == [process.a, process.d, process.t1]
    assert list(process.ct) == [process.e] and process.p.taskLabels_() == {"a", "c", "d", "e"}
    with pytest.raises(RuntimeError, match="TaskPlaceholder 'b'"):
        cms.Task(cms.TaskPlaceholder("b")).resolve(process._objects)  # an EDAnalyzer cannot be on a Task


# ---------------------------------------------------------------- 3. a parameter given twice


def test_a_parameter_given_twice_to_a_constructor_is_a_value_error():
    common, other = cms.PSet(pt=cms.double(1.0)), cms.PSet(pt=cms.double(2.0), eta=cms.double(2.4))
    for make in (
        lambda: cms.EDProducer("Jets", common, other),
        lambda: cms.EDProducer("Jets", common, pt=cms.double(3.0)),
        lambda: cms.PSet(common, pt=cms.double(3.0)),
    ):
        with pytest.raises(ValueError, match="parameter 'pt' given twice"):
            make()
    merged = cms.EDProducer("Jets", common, eta=cms.double(2.5))
    assert (merged.pt, merged.eta) == (1.0, 2.5)


# ---------------------------------------------------------------- 4. prune through placeholders


def test_prune_keeps_what_placeholders_name_and_unresolved_ones_when_asked():
    process = cms.Process("PR")
    a, b, c = _producers(process, "abc")
    process.s = cms.Sequence(cms.SequencePlaceholder("a") + b)
    process.t = cms.Task(cms.TaskPlaceholder("c"))
    process.p = cms.Path(process.s, process.t)
    process.unused = cms.EDProducer("U")
    process.prune()
    assert set(process.producers) == {"a", "b", "c"} and {"s", "t", "p"} <= set(process._objects)
    kept = cms.Process("PR")
    kept.b = cms.EDProducer("B")
    kept.s = cms.Sequence(cms.SequencePlaceholder("later") + kept.b)
    kept.t = cms.Task(cms.TaskPlaceholder("laterTask"), kept.b)
    kept.p = cms.Path(kept.s, kept.t)
    kept.prune(keepUnresolvedSequencePlaceholders=True)
    assert kept.s.dumpPython() == 'cms.Sequence(cms.SequencePlaceholder("later")+process.b)\n'
    assert kept.t.dumpPython() == 'cms.Task(cms.TaskPlaceholder("laterTask"), process.b)\n'
    with pytest.raises(RuntimeError, match="later"):
        kept.prune()


# ---------------------------------------------------------------- 5. ranges with MIN and MAX


def test_event_and_luminosity_block_ranges_with_min_and_max():
    assert repr(cms.EventRange("7:MIN - 9:MAX")) == "cms.EventRange(7, 0, 1, 9, 0, 0)"  # run:event, lumi 0
    assert repr(cms.LuminosityBlockRange("7:MIN - 9:MAX")) == "cms.LuminosityBlockRange(7, 1, 9, 0)"
    assert cms.LuminosityBlockRange("3:0-3:4").start() == "3:1"  # a start of 0 is the first
    events = cms.untracked.VEventRange("1:2-3:4", "5:MIN-7:MAX", "2:1:5-2:1:max")
    assert events.value() == ["1:0:2-3:0:4", "5:0:1-7:0:0", "2:1:5-2:1:0"]
    lumis = cms.untracked.VLuminosityBlockRange("5:MIN-7:MAX", "8:3")
    assert lumis.value() == ["5:1-7:0", "8:3-8:3"]
    assert cms.EventRange(1, 2, 3, 4) == cms.EventRange("1:2-3:4")  # run, event, run, event
    with pytest.raises(RuntimeError, match="out of order"):
        cms.EventRange("9:1-7:1")
    with pytest.raises(RuntimeError, match="out of order"):
        cms.LuminosityBlockRange("4:5-4:2")
    with pytest.raises(ValueError):
        cms.EventRange("1:2:3-4:5")  # the two ends must have the same form


# ---------------------------------------------------------------- 6. Task membership and iteration


def test_tasks_are_checked_when_attached_iterate_and_name_everything_they_hold():
    process = cms.Process("TK")
    producer, loose = cms.EDProducer("P"), cms.EDProducer("Loose")
    service, other_service = cms.Service("Svc"), cms.Service("Svc", v=cms.untracked.uint32(3))
    es_source, es_producer, empty = cms.ESSource("ES"), cms.ESProducer("EP"), cms.Task()
    task = cms.Task(producer, es_source, service)
    task.add(es_source, es_producer, empty)  # one already held is not added again
    with pytest.raises(RuntimeError, match="cannot hold EDAnalyzer"):
        task.add(cms.EDAnalyzer("A"))
    assert list(task) == [producer, es_source, service, es_producer, empty]
    process.prod, process.essrc, process.esprod = producer, es_source, es_producer
    process.Svc = service
    process.t = task
    assert task.moduleNames() == {"prod", "essrc", "esprod", "Svc"}
    process.p = cms.Path(cms.Sequence(process.prod), process.t)
    assert process.p.moduleNames() == {"prod", "essrc", "esprod", "Svc"}
    with pytest.raises(RuntimeError, match="process.t2: an entry of unlabelled Task, EDProducer of type 'Loose'"):
        process.t2 = cms.Task(loose)
    with pytest.raises(RuntimeError, match="Service of type 'Svc', is not attached"):
        process.t3 = cms.Task(other_service)  # not the Service the process holds
    process.Svc = other_service  # replaces the Service in the Tasks too
    assert list(process.t) == [producer, es_source, other_service, es_producer, empty]
    process.t3 = cms.Task(other_service)


# ---------------------------------------------------------------- 7. EDAlias conflicts


def test_an_edalias_never_takes_the_place_of_a_module_in_use():
    class Fragment:  # what process.load finds in a _cff
        def __init__(self, **items):
            self.__dict__.update(items)

    for container in (cms.Task, cms.Sequence, cms.Path):
        process = cms.Process("AL")
        process.jets = cms.EDProducer("Jets")
        process.c = container(process.jets)
        if container is not cms.Path:
            process.p = cms.Path(process.c)
        with pytest.raises(ValueError, match="process.jets with an EDAlias while it is used by"):
            process.jets = cms.EDAlias(other=cms.EDAlias.allProducts())
        with pytest.raises(ValueError, match="Trying to override definition of process.jets"):
            process.extend(Fragment(jets=cms.EDProducer("OtherJets")))
        with pytest.raises(ValueError):
            process.extend(Fragment(jets=cms.EDAlias()))
    process = cms.Process("AL")
    process.jets = cms.EDProducer("Jets")  # not used anywhere: the alias may take its label
    process.jets = cms.EDAlias(other=cms.EDAlias.allProducts())
    assert list(process.aliases) == ["jets"]


# ---------------------------------------------------------------- 8. ESInputTag and VESInputTag


def test_es_input_tags_are_module_colon_data_and_their_vector():
    tag = cms.ESInputTag(data="alignment")
    assert (tag.getModuleLabel(), tag.getDataLabel()) == ("", "alignment") and repr(
        tag
    ) == 'cms.ESInputTag("","alignment")'
    for bad in ("label:too:many", "no_colon"):
        with pytest.raises(RuntimeError):
            cms.ESInputTag(bad)
    pset = cms.PSet(it=cms.ESInputTag("geom:"))
    for value, expected in (
        ("", ("", "")),
        (":ideal", ("", "ideal")),
        (("geom", "ideal"), ("geom", "ideal")),
        ([], ("", "")),
    ):
        pset.it = value
        assert (pset.it.getModuleLabel(), pset.it.getDataLabel()) == expected, value
    for bad in ("too:many:parts", "no_colon", ("one",), ["a", "b", "c"]):
        with pytest.raises(RuntimeError):
            pset.it = bad
    assert repr(cms.VESInputTag(cms.ESInputTag("a:"), cms.ESInputTag("b:"))) == (
        'cms.VESInputTag(cms.ESInputTag("a",""), cms.ESInputTag("b",""))'
    )
    assert repr(cms.VESInputTag(("a2", ""), ("b2", "d"), ("", "c"))) == 'cms.VESInputTag("a2:", "b2:d", ":c")'
    vector = cms.PSet(v=cms.untracked.VESInputTag()).v
    vector.setValue([["x", ""], "y:z"])
    assert vector.value() == ["x:", "y:z"] and not vector.isTracked()
    with pytest.raises(RuntimeError):
        vector.setValue(["no_colon"])
    with pytest.raises(RuntimeError):
        cms.VESInputTag("a:b:c")


# ---------------------------------------------------------------- 9. InputTag from tuples and lists


def test_input_tags_from_tuples_and_lists_and_too_many_parts():
    pset = cms.PSet(it=cms.InputTag("jets"), vit=cms.VInputTag())
    for value, expected in (
        ((), ("", "", "")),
        (("jets",), ("jets", "", "")),
        (["jets", "pt"], ("jets", "pt", "")),
        (("jets", "", "RECO"), ("jets", "", "RECO")),
    ):
        pset.it = value
        assert (pset.it.getModuleLabel(), pset.it.getProductInstanceLabel(), pset.it.getProcessName()) == expected
    for bad in ("a:b:c:d", ("a", "b", "c", "d")):
        with pytest.raises(RuntimeError):
            pset.it = bad
    with pytest.raises(RuntimeError):
        cms.VInputTag("a:b:c:d")
    assert repr(cms.VInputTag(("a",), ("b", "i"), ["c", "i", "p"])) == 'cms.VInputTag("a", "b:i", "c:i:p")'
    pset.vit = [("a",), ["b", "i"]]
    assert pset.vit.value() == ["a", "b:i"] and cms.InputTag(["jets", "pt"]).value() == "jets:pt"


# ---------------------------------------------------------------- 10. SecSource, Looper, SubProcess


def test_secsource_looper_and_subprocess_load_dump_and_are_refused_when_built(tmp_path):
    config = tmp_path / "mixing_cfg.py"
    config.write_text(
        textwrap.dedent("""
            import FWCore.ParameterSet.Config as cms
            process = cms.Process("MIX")
            process.source = cms.Source("EmptySource")
            process.pileup = cms.SecSource("EmbeddedRootSource", fileNames=cms.untracked.vstring("minbias.root"))
            pileup = cms.SecSource("EmbeddedRootSource", type=cms.string("poisson"))
            process.mix = cms.EDProducer("MixingModule", input=pileup)
            process.looper = cms.Looper("IterateNTimesLooper", nTimes=cms.uint32(3))
            child = cms.Process("CHILD")
            child.a = cms.EDProducer("A")
            child.p = cms.Path(child.a)
            process.addSubProcess(cms.SubProcess(child, outputCommands=cms.untracked.vstring("keep *")))
        """)
    )
    process = framework.config.load_config(config)  # CMSSW's configs build them unconditionally
    assert process.pileup.type_() == "EmbeddedRootSource" and "pileup" in process.psets
    assert process.looper.type_() == "IterateNTimesLooper" and process.looper_() is process.looper
    (sub,) = process.subProcesses_()
    assert sub.getProcessName() == "CHILD" and sub.outputCommands() == ["keep *"]
    text = process.dumpPython()
    assert 'process.looper = cms.Looper("IterateNTimesLooper",\n    nTimes = cms.uint32(3)\n)' in text
    assert 'process.pileup = cms.SecSource("EmbeddedRootSource",\n' in text
    assert "childProcess = process\n" in text and "process.addSubProcess(cms.SubProcess(process = childProcess" in text
    with pytest.raises(NotSupportedError, match=r"a looper \(process.looper"):
        build_job(process)
    del process.looper
    with pytest.raises(NotSupportedError, match="a SubProcess"):
        build_job(process)
    process.subProcesses_().clear()
    with pytest.raises(NotSupportedError, match=r"cms.SecSource \(process.pileup\)"):
        build_job(process)
    del process.pileup
    with pytest.raises(NotSupportedError, match=r"cms.SecSource \(process.mix.input\)"):
        build_job(process)
    with pytest.raises(ValueError, match="process.looper"):
        process.loop = cms.Looper("L")
    with pytest.raises(ValueError, match="must be a cms.Process"):
        cms.SubProcess("CHILD")


# ---------------------------------------------------------------- 11. FinalPath and Tasks


def test_final_path_holds_no_tasks():
    process = cms.Process("FP")
    process.out = cms.OutputModule("Out")
    process.t = cms.Task()
    for make in (
        lambda: cms.FinalPath(cms.Task()),
        lambda: cms.FinalPath(process.out, process.t),
        lambda: cms.FinalPath(process.out, cms.ConditionalTask()),
        lambda: cms.FinalPath(process.out).associate(process.t),
    ):
        with pytest.raises(TypeError, match="FinalPath"):
            make()
    assert cms.Path(cms.Task()).dumpPython() == "cms.Path(cms.Task())\n"  # a Path may hold one alone


# ---------------------------------------------------------------- 12. allowed(...)


def test_allowed_with_a_default_and_ambiguous_or_impossible_values():
    pset = cms.PSet(
        either=cms.required.allowed(cms.int32, cms.string, default=cms.int32(3)),
        quiet=cms.required.untracked.allowed(cms.int32, cms.string, default=cms.int32(3)),
    )
    assert pset.dumpPython() == "cms.PSet(\n    either = cms.int32(3),\n    quiet = cms.untracked.int32(3)\n)"
    pset.either = "three"
    assert pset.either.configTypeName() == "string"
    signed = cms.PSet(n=cms.required.allowed(cms.int32, cms.uint32))
    signed.n = -42  # only int32 takes it
    assert signed.n.configTypeName() == "int32"
    for value in (42, 4.2):  # both take 42, none 4.2: CMSSW's RuntimeError
        with pytest.raises(RuntimeError, match="ambiguous|none fits"):
            cms.PSet(n=cms.optional.allowed(cms.int32, cms.uint32)).n = value
    with pytest.raises(TypeError):
        cms.PSet(n=cms.required.allowed(cms.int32, cms.string)).n = cms.uint32(2)
    tag = cms.PSet(src=cms.required.allowed(cms.InputTag, cms.VInputTag, default=cms.InputTag("jets")))
    tag.src.setValue("muons")  # a str is no VInputTag
    assert tag.src.value() == "muons"
    either_int_or_pset = cms.PSet(out=cms.optional.untracked.allowed(cms.int32, cms.PSet))
    either_int_or_pset.out = cms.untracked.PSet(perModule=cms.untracked.int32(3))
    assert either_int_or_pset.out.perModule == 3


# ---------------------------------------------------------------- 13. EDAlias.allProducts


def test_edalias_all_products():
    alias = cms.EDAlias(jets=cms.EDAlias.allProducts(), muons=cms.EDAlias.allProducts())
    assert len(alias.jets) == 1 and alias.jets[0].type.value() == "*"
    assert not alias.jets[0].hasParameter("fromProductInstance") and alias.jets[0] is not alias.muons[0]
    renamed = alias.clone(jets=None, taus=cms.EDAlias.allProducts())
    assert not hasattr(renamed, "jets") and renamed.taus[0].type == "*"


# ---------------------------------------------------------------- 14. replace, remove, copyAndExclude


def _labels(seq) -> list[str]:
    """``m``, ``!m`` (inverted), ``-m`` (ignored) in execution order: CMSSW's decorated names."""
    return [("!" if inverted else "-" if inverted is None else "") + m.label_() for m, inverted in seq._entries_()]


@pytest.fixture
def modules():
    process = cms.Process("SEQ")
    for label in ("f1", "f2", "f3", "f4", "f5", "f6", "f7"):
        setattr(process, label, cms.EDFilter(label.upper()))
    return process


def test_replace_matches_negated_and_ignored_occurrences_and_never_edits_nested_sequences(modules):
    f1, f2, f3, f4, f5 = (getattr(modules, f"f{i}") for i in range(1, 6))
    inner = cms.Sequence(f1 + f2)
    modules.inner = inner  # labelled: shared, and never edited in place
    outer = cms.Sequence(~f1 + inner)
    assert outer.replace(~f1, f2) and _labels(outer) == ["f2", "f1", "f2"]  # only the negated f1
    assert outer.replace(f2, ~f1) and _labels(outer) == ["!f1", "f1", "!f1"]
    assert _labels(inner) == ["f1", "f2"]  # the nested Sequence kept; outer holds a copy of its items
    ignored = cms.Sequence(cms.ignore(f1) + inner)
    assert ignored.replace(cms.ignore(f1), f2) and _labels(ignored) == ["f2", "f1", "f2"]
    every = cms.Sequence(f1 + ~f2 + f1 + f2 + cms.ignore(f2))
    every.replace(f2, f3)  # the operand of ~ and ignore too, the decoration stays
    assert _labels(every) == ["f1", "!f3", "f1", "f3", "-f3"]
    placeholder = cms.SequencePlaceholder("x")
    nested = cms.Sequence(cms.Sequence(placeholder))
    assert nested.replace(placeholder, f2) and nested.dumpPython() == "cms.Sequence(process.f2)\n"
    whole = cms.Sequence(~f1 + inner)
    assert whole.replace(inner, f1) and _labels(whole) == ["!f1", "f1"]
    assert not whole.replace(f5, f4)
    with pytest.raises(TypeError):
        whole.replace(f1, cms.Task())


def test_replace_of_tasks_in_sequences_and_tasks(modules):
    f1, f2, f3, f4, f5, f6, f7 = (getattr(modules, f"f{i}") for i in range(1, 8))
    t6, t7 = cms.Task(f6), cms.Task(f7)
    s1 = cms.Sequence(f1 + f2, t6)
    s2 = cms.Sequence(f3 + f4, t7)
    top = cms.Sequence(s1 + s2, cms.Task(f5))
    top.replace(f3, f5)
    assert _labels(top) == ["f1", "f2", "f5", "f4"] and _labels(s2) == ["f3", "f4"]
    assert top.taskLabels_() == {"f5", "f6", "f7"}  # s2's Task joined top's
    assert top.replace(t7, cms.Task(f2)) and not top.replace(t7, cms.Task(f2))
    task = cms.Task(f1, f2, f2)
    assert len(list(task)) == 2 and task.replace(f2, f3) and task.dumpPython() == "cms.Task(process.f1, process.f3)\n"
    inner = cms.Task(f1, f2)
    outer = cms.Task(f1, f3, inner)
    outer.replace(f1, f4)
    assert outer.dumpPython() == "cms.Task(process.f2, process.f3, process.f4)\n" and list(inner) == [f1, f2]
    with pytest.raises(TypeError):
        outer.replace(f1, cms.EDAnalyzer("A"))


def test_remove_the_first_occurrence_depth_first(modules):
    f1, f2, f3, f4 = (getattr(modules, f"f{i}") for i in range(1, 5))
    s1 = cms.Sequence(f1 + f2 + ~f3)
    s2 = cms.Sequence(f1 + s1)
    assert s1.remove(f2) and _labels(s1) == ["f1", "!f3"] and _labels(s2) == ["f1", "f1", "!f3"]
    assert s2.remove(f3) and _labels(s2) == ["f1", "f1"] and _labels(s1) == ["f1", "!f3"]
    twice = cms.Sequence(f1 + f2 + f1 + f2)
    assert twice.remove(f2) and _labels(twice) == ["f1", "f1", "f2"]
    s3 = cms.Sequence(f2 + cms.ignore(f3) + cms.Sequence(f1) + f3)
    assert s3.remove(f3) and _labels(s3) == ["f2", "f1", "f3"]  # ignore(f3) went with its f3
    tasks = cms.Sequence(f1, cms.Task(f3), cms.Task(f4))
    assert tasks.remove(f4) and tasks.dumpPython() == "cms.Sequence(process.f1, cms.Task(process.f3))\n"
    modules.t1 = cms.Task(f1)
    modules.t2 = cms.Task(f2, modules.t1)
    t3 = cms.Task(modules.t1, modules.t2, f1)
    t3.remove(f1)  # the first f1 is t1's: t1 emptied goes
    assert t3.dumpPython() == "cms.Task(process.f1, process.t2)\n" and list(modules.t1) == [f1]
    t3.remove(f1)  # inside t2's t1: t2 replaced by an unlabelled copy
    assert t3.dumpPython() == "cms.Task(process.f1, process.f2)\n"
    assert not cms.Sequence(f1).remove(f4)


def test_copy_and_exclude_with_ignore_and_negation(modules):
    a, b, c, d, e, f = (getattr(modules, f"f{i}") for i in range(1, 7))
    assert _labels(cms.Sequence(cms.ignore(a) + b).copyAndExclude([a])) == ["f2"]
    assert _labels(cms.Sequence(cms.ignore(a) + b).copyAndExclude([cms.ignore(a)])) == ["f2"]
    assert _labels(cms.Sequence(cms.ignore(a) + b).copyAndExclude([b])) == ["-f1"]
    assert _labels(cms.Sequence(a + ~b + c).copyAndExclude([~b])) == ["f1", "f3"]
    assert _labels(cms.Sequence(a + ~b + c).copyAndExclude([b])) == ["f1", "f3"]
    assert _labels(cms.Sequence(a + b + c + ~d).copyAndExclude([a, b, c, d])) == []
    shared = cms.Sequence(a + b)
    top = cms.Sequence(c + shared + d)
    copy = top.copyAndExclude([c])  # shared is unchanged, so held as it is
    shared.remove(a)
    assert _labels(copy) == ["f2", "f4"] and _labels(top.copyAndExclude([shared])) == ["f3", "f4"]
    inner = cms.Task(f)
    with_tasks = cms.Sequence(a + ~d, cms.Task(e, cms.Task(b, inner)))
    assert (
        with_tasks.copyAndExclude([a, f]).dumpPython()
        == "cms.Sequence(~process.f4, cms.Task(process.f2, process.f5))\n"
    )
    assert with_tasks.copyAndExclude([inner]).taskLabels_() == {"f2", "f5"}
    assert with_tasks.copyAndExclude([a, d, b, e, f]).dumpPython() == "cms.Sequence()\n"
    with pytest.raises(TypeError):
        cms.Task(a).copyAndExclude([cms.Sequence(a)])


# ---------------------------------------------------------------- 15. Modifiers across Processes, clone


def test_a_later_process_may_not_choose_new_modifiers():
    chosen, late = cms.Modifier(), cms.Modifier()
    cms.Process("FIRST", chosen)
    cms.Process("SECOND", chosen)  # already chosen: fine
    cms.Process("THIRD")
    with pytest.raises(RuntimeError, match="The Process FOURTH tried to redefine which Modifiers to use"):
        cms.Process("FOURTH", late)
    assert not late.isChosen()


def test_each_config_loaded_starts_as_a_new_cmsrun(tmp_path):
    config = tmp_path / "era_cfg.py"
    config.write_text(
        "import FWCore.ParameterSet.Config as cms\nrun3 = cms.Modifier()\nprocess = cms.Process('ERA', run3)\n"
    )
    cms.Process("BEFORE")
    assert framework.config.load_config(config).name_() == "ERA"
    assert framework.config.load_config(config).name_() == "ERA"  # and again
    with pytest.raises(RuntimeError):
        cms.Process("AFTER", cms.Modifier())  # this interpreter's own Processes still count


def test_clone_may_not_change_allow_any_label():
    wild = cms.PSet(allowAnyLabel_=cms.required.PSetTemplate(limit=cms.required.int32))
    assert wild.clone().dumpPython() == wild.dumpPython()  # kept by clone
    with pytest.raises(AttributeError, match="allowAnyLabel_"):
        wild.clone(allowAnyLabel_=cms.optional.double)
    module = cms.EDProducer("P", allowAnyLabel_=cms.optional.int32)
    with pytest.raises(AttributeError, match="allowAnyLabel_"):
        module.clone(allowAnyLabel_=cms.optional.double)
    assert isinstance(module.clone(), cms.EDProducer)


# ---------------------------------------------------------------- 16. VarParsing('standard'), argparse configs


def test_varparsing_standard_preset(tmp_path):
    config = tmp_path / "standard_cfg.py"
    config.write_text(
        textwrap.dedent("""
            import FWCore.ParameterSet.Config as cms
            from FWCore.ParameterSet.VarParsing import VarParsing
            options = VarParsing("standard")
            options.register("ints", "", VarParsing.multiplicity.list, VarParsing.varType.int)
            options.parseArguments()
            process = cms.Process("STD")
            process.keep = cms.PSet(
                files=cms.vstring(options.files), output=cms.string(options.output),
                maxEvents=cms.int32(options.maxEvents), ints=cms.vint32(options.ints),
            )
        """)
    )
    keep = framework.config.load_config(config, ["maxEvents=10", "files=a.root,b.root", "ints=0,1,-1"]).keep
    assert keep.files.value() == ["a.root", "b.root"] and keep.maxEvents == 10 and keep.ints.value() == [0, 1, -1]
    assert keep.output == "output_numEvent10.root"  # output is a tagString, tagged as CMSSW's
    options = VarParsing("standard")
    assert (options.maxEvents, options.files, options.secondaryFiles, options.secondaryOutput) == (-1, [], [], "")
    with pytest.raises(ConfigurationError, match="unknown preset 'other'"):
        VarParsing("other")


def test_cmsrun_hands_the_arguments_after_the_config_to_its_argparse(tmp_path, capsys):
    config = tmp_path / "argparse_cfg.py"
    config.write_text(
        textwrap.dedent("""
            import argparse
            import FWCore.ParameterSet.Config as cms
            parser = argparse.ArgumentParser(description="a config with its own options")
            parser.add_argument("--maxEvents", type=int, default=1)
            parser.add_argument("-o", "--output", default=None)
            parser.add_argument("-i", "--intprod", type=int, default=1)
            parser.add_argument("--flag", action="store_true")
            args = parser.parse_args()
            process = cms.Process("ARGS")
            process.source = cms.Source("EmptySource")
            process.maxEvents.input = args.maxEvents
            process.keep = cms.PSet(intprod=cms.int32(args.intprod), flag=cms.bool(args.flag))
            if args.output is not None:
                process.out = cms.OutputModule("NanoAODOutputModule", fileName=cms.untracked.string(args.output))
        """)
    )
    from framework.cmsrun import main

    assert main(["--dump", str(config), "--maxEvents", "2", "--flag", "-o", "foo.root", "-i", "2"]) == 0
    text = capsys.readouterr().out
    assert "input = cms.untracked.int32(2)" in text and "flag = cms.bool(True)" in text
    assert "intprod = cms.int32(2)" in text and "fileName = cms.untracked.string('foo.root')" in text
    assert main(["--dump", str(config)]) == 0
    assert "flag = cms.bool(False)" in capsys.readouterr().out
