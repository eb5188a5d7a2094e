"""CMSSW's SonicTriton unit test, with our own config, on CMS's real ``gat_test``.

CMSSW's unit test (HeterogeneousCore/SonicTriton/test/unittest.sh) runs
``tritonTest_cfg.py modules=TritonGraphProducer,TritonGraphFilter,TritonGraphAnalyzer
maxEvents=2 unittest=1 verbose=1 device=CPU testother=1 fallbackName=...``; that file is
read, not copied. The config below uses what it uses (VarParsing list options,
``enableSonicTriton`` with ``TritonService_cff``, the fallback server's ``instanceBaseName``
and ``useGPU``, EmptySource, the module type picked from its name, the shared-memory clone
and its gRPC twin made with ``clone(Client = dict(useSharedMemory = not ...))``,
MessageLogger categories), and runs every module in the three modes in one job, so one
fallback server (one per test module) serves CMS's ``gat_test`` through the torch runner
and the ``densenet_onnx`` stand-in of ``scripts/image_models.py`` (the image test's
``modules=TritonImageProducer models=densenet_onnx``). The graphs have 12 to 20 nodes
(CMSSW's unit test: 1 to 10) so that ``x__0`` (>= 68 kB) reaches pysonic's shared-memory
threshold (64 KiB) and the shared-memory clones do use shared memory. The image model is a
DenseNet of the stand-in's names and code with one layer per dense block (DenseNet-121 has
6, 12, 24, 16) to keep the test fast.

What is checked: every module logged the output CMSSW's modules log, for both events; the
logits equal CMS's model run here (torch, in this process) on the graph CMSSW's module
draws for the event; all 19 graph modules agree bit for bit; the shared-memory clones sent
through shared memory and the gRPC clones as payloads; the filters kept every event; the
analyzers ran ``Sync`` (reset from the other modes with CMSSW's warning); the image
producer's top 5 are those of the stand-in run in onnxruntime. And without a server: the
random graphs against a g++ build of CMSSW's drawing code (where g++ exists), the
parameters against CMSSW's ``fillDescriptions``, bad parameters in one line.
"""

from __future__ import annotations

import importlib
import logging
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import trio

import framework.config as cms
from framework.core import EventID, build_job, run_job
from framework.utilities import ConfigurationError
from modules.cpp_random import Mt19937
from modules.sonic_tests import (
    TritonGraphAnalyzer,
    TritonGraphFilter,
    TritonGraphProducer,
    TritonImageProducer,
    random_graph,
)

from support import CMS_MODELS

ROOT = pathlib.Path(__file__).resolve().parents[1]
GAT_TEST = CMS_MODELS / "HeterogeneousCore" / "SonicTriton" / "data" / "models" / "gat_test"
MODES = ("Sync", "PseudoAsync", "Async")
GRAPH = {"nodeMin": 12, "nodeMax": 20, "edgeMin": 20, "edgeMax": 40}

CONFIG = textwrap.dedent("""
    from FWCore.ParameterSet.VarParsing import VarParsing
    import FWCore.ParameterSet.Config as cms

    options = VarParsing()
    options.register("maxEvents", -1, VarParsing.multiplicity.singleton, VarParsing.varType.int, "events")
    options.register("modules", "TritonGraphProducer", VarParsing.multiplicity.list, VarParsing.varType.string, "")
    options.register("models", "gat_test", VarParsing.multiplicity.list, VarParsing.varType.string, "their models")
    options.register("modes", "Async", VarParsing.multiplicity.list, VarParsing.varType.string, "client modes")
    options.register("verbose", False, VarParsing.multiplicity.singleton, VarParsing.varType.bool, "verbose")
    options.register("testother", False, VarParsing.multiplicity.singleton, VarParsing.varType.bool, "gRPC twin")
    options.register("fallbackName", "", VarParsing.multiplicity.singleton, VarParsing.varType.string, "name")
    options.register("device", "auto", VarParsing.multiplicity.singleton, VarParsing.varType.string, "device")
    options.register("nodes", "1,10", VarParsing.multiplicity.singleton, VarParsing.varType.string, "min,max")
    options.parseArguments()
    if len(options.models) != len(options.modules):
        # assigning to a list option appends, as in CMSSW
        options.models = [options.models[0]] * (len(options.modules) - 1)
    nodeMin, nodeMax = (int(n) for n in options.nodes.split(","))

    from Configuration.ProcessModifiers.enableSonicTriton_cff import enableSonicTriton
    process = cms.Process("sonicTest", enableSonicTriton)
    process.load("HeterogeneousCore.SonicTriton.TritonService_cff")
    process.maxEvents = cms.untracked.PSet(input = cms.untracked.int32(options.maxEvents))
    process.source = cms.Source("EmptySource")
    process.TritonService.verbose = options.verbose
    process.TritonService.fallback.verbose = options.verbose
    if len(options.fallbackName) > 0:
        process.TritonService.fallback.instanceBaseName = options.fallbackName
    if options.device.lower() != "auto":
        process.TritonService.fallback.useGPU = options.device.lower() == "gpu"

    process.p = cms.Path()
    kinds = {"Producer": cms.EDProducer, "Filter": cms.EDFilter, "Analyzer": cms.EDAnalyzer}
    keep = ["TritonClient", "TritonService"]
    for mode in options.modes:
        for module, model in zip(options.modules, options.models):
            Module = [kind for name, kind in kinds.items() if name in module][0]
            label = module + mode
            setattr(process, label, Module(module,
                Client = cms.PSet(
                    mode = cms.string(mode),
                    preferredServer = cms.untracked.string(""),
                    timeout = cms.untracked.uint32(60),
                    modelName = cms.string(model),
                    modelVersion = cms.string(""),
                    modelConfigPath = cms.FileInPath(
                        "HeterogeneousCore/SonicTriton/data/models/{}/config.pbtxt".format(model)),
                    verbose = cms.untracked.bool(options.verbose),
                    allowedTries = cms.untracked.uint32(0),
                    useSharedMemory = cms.untracked.bool(True),
                    compression = cms.untracked.string(""),
                ),
            ))
            first = getattr(process, label)
            if module == "TritonImageProducer":
                first.batchSize = cms.int32(1)
                first.topN = cms.uint32(5)
                first.imageList = cms.FileInPath(
                    "HeterogeneousCore/SonicTriton/data/models/{}/{}_labels.txt".format(model, model.split("_")[0]))
            else:
                first.nodeMin = cms.uint32(nodeMin)
                first.nodeMax = cms.uint32(nodeMax)
                first.edgeMin = cms.uint32(20)
                first.edgeMax = cms.uint32(40)
                first.brief = cms.bool(False)
            process.p += first
            keep.extend([label, label + ":TritonClient"])
            if options.testother:
                setattr(process, label + "GRPC",
                        first.clone(Client = dict(useSharedMemory = not first.Client.useSharedMemory)))
                process.p += getattr(process, label + "GRPC")
                keep.extend([label + "GRPC", label + "GRPC:TritonClient"])
    process.TritonGraphProducerBrief = process.TritonGraphProducerAsync.clone(brief = True)
    process.p += process.TritonGraphProducerBrief

    process.load("FWCore/MessageService/MessageLogger_cfi")
    process.MessageLogger.cerr.FwkReport.reportEvery = 500
    for category in keep:
        setattr(process.MessageLogger.cerr, category, cms.untracked.PSet(limit = cms.untracked.int32(10000000)))
""")


# -- without a server ---------------------------------------------------------------------


def test_the_engine_is_std_mt19937():
    # The C++ standard's check value ([rand.predef]): the 10000th output, default seed 5489.
    assert Mt19937(5489).raw(10000)[-1] == 4123659995


DRAW_CC = textwrap.dedent("""
    // CMSSW's TritonGraphHelper::makeInput drawing, alone (our own few lines).
    #include <cstdint>
    #include <cstdio>
    #include <cstdlib>
    #include <random>
    int main(int argc, char** argv) {
      unsigned run = 1, lumi = 1, event = std::atoi(argv[1]);
      std::uint32_t seed = (lumi << 10) + (run << 20) + event;
      std::mt19937 rng(seed);
      std::uniform_int_distribution<int> nodesDist(1, 10), edgesDist(20, 40);
      int nodes = nodesDist(rng), edges = edgesDist(rng);
      std::printf("%d %d\\n", nodes, edges);
      std::normal_distribution<float> x(-10, 4);
      for (int i = 0; i < nodes * 1433; ++i) std::printf("%.9g\\n", x(rng));
      std::uniform_int_distribution<int> end(0, nodes - 1);
      for (int i = 0; i < 2 * edges; ++i) std::printf("%d\\n", end(rng));
    }
""")


def test_graphs_are_those_of_cmssws_cpp(tmp_path):
    """Node and edge counts and the edges equal a g++ build of the same draws; the node
    features too, but for the few that glibc's ``logf`` (not correctly rounded) puts an ulp
    off before the scaling by 4."""
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("no g++ on this machine to build the C++ reference")
    (tmp_path / "draw.cc").write_text(DRAW_CC)
    subprocess.run([compiler, "-O2", "-o", str(tmp_path / "draw"), str(tmp_path / "draw.cc")], check=True, timeout=120)
    exact = total = 0
    for event in (1, 2, 3, 7):
        text = subprocess.run([str(tmp_path / "draw"), str(event)], capture_output=True, text=True, check=True).stdout
        numbers = text.split()
        nodes, edges = int(numbers[0]), int(numbers[1])
        x, edge_index = random_graph(EventID(1, 1, event), 1, 10, 20, 40, 1433)
        assert x.shape == (nodes, 1433) and edge_index.shape == (2, edges)
        np.testing.assert_array_equal(edge_index.ravel(), np.array(numbers[2 + nodes * 1433 :], np.int64))
        reference = np.array(numbers[2 : 2 + nodes * 1433], np.float32)
        # One ulp of logf scaled by the standard deviation 4 (values of ~-10 +- 20: ulp <= 2e-6).
        np.testing.assert_allclose(x.ravel(), reference, rtol=0, atol=1e-5)
        exact += int((x.ravel() == reference).sum())
        total += reference.size
    assert exact / total > 0.999


def rows(type_):
    desc = cms.ParameterSetDescription()
    type_.fill_descriptions(desc)
    return {row.name: row for row in desc.describe()}


@pytest.mark.parametrize("type_", [TritonGraphProducer, TritonGraphFilter, TritonGraphAnalyzer])
def test_graph_parameters_are_cmssws(type_):
    described = rows(type_)
    for name, default in (("nodeMin", 100), ("nodeMax", 4000), ("edgeMin", 8000), ("edgeMax", 15000)):
        assert (described[name].type_name, described[name].default, described[name].extension) == (
            "uint32",
            repr(default),
            False,
        )
    assert (described["brief"].type_name, described["brief"].default) == ("bool", "False")
    assert "Client.modelName" in described
    assert {name for name, row in described.items() if "." not in name and row.extension} == set()


def test_image_parameters_are_cmssws():
    described = rows(TritonImageProducer)
    assert (described["batchSize"].type_name, described["batchSize"].default) == ("int32", "1")
    assert (described["topN"].type_name, described["topN"].default) == ("uint32", "5")
    assert (described["imageList"].type_name, described["imageList"].default) == ("FileInPath", "required")


def graph_process(**parameters) -> cms.Process:
    process = cms.Process("bad")
    process.source = cms.Source("EmptySource")
    process.graph = cms.EDProducer(
        "TritonGraphProducer",
        Client=cms.PSet(
            timeout=cms.untracked.uint32(5),
            modelName=cms.string("gat_test"),
            modelConfigPath=cms.FileInPath("models/facile/config.pbtxt"),  # any config: nothing is served
        ),
        **parameters,
    )
    process.p = cms.Path(process.graph)
    return process


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"nodeMin": cms.uint32(9), "nodeMax": cms.uint32(3)}, "parameter 'nodeMin' = 9 is above 'nodeMax' = 3$"),
        ({"edgeMin": cms.uint32(50), "edgeMax": cms.uint32(40)}, "parameter 'edgeMin' = 50 is above 'edgeMax' = 40$"),
        ({"nodeMin": cms.uint32(0)}, "parameter 'nodeMin' = 0: an edge needs a node to end on$"),
    ],
)
def test_bad_graph_parameters_are_one_line(parameters, message):
    with pytest.raises(
        ConfigurationError, match=r"^\[Configuration\] EDProducer 'graph' \(type TritonGraphProducer\): " + message
    ):
        build_job(graph_process(**parameters))


# -- CMSSW's unit test, our config, one fallback server -------------------------------------


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def image_models():
    """scripts/image_models.py, imported."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module("image_models")
    finally:
        sys.path.remove(str(ROOT / "scripts"))


@pytest.fixture(scope="module")
def unit_test(tmp_path_factory):
    """The job (two events), its log records and workers; the stand-in's folder."""
    if not (GAT_TEST / "1" / "model.pt").is_file():
        pytest.skip(f"CMS's gat_test is not in {CMS_MODELS} (set PYSONIC_CMS_MODELS to a CMSSW data layout)")
    pytest.importorskip("torch")
    pytest.importorskip("onnx")
    folder = tmp_path_factory.mktemp("sonic_unit_test")
    # The stand-in's files, names and code, with one layer per dense block.
    densenet = image_models().write_densenet(folder / "data", depths=(1, 1, 1, 1))
    (folder / "sonicTest_cfg.py").write_text(CONFIG)
    handler = Records()
    loggers = [logging.getLogger("pysonic")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CMSSW_SEARCH_PATH", f"{folder / 'data'}:{CMS_MODELS}")
        patch.setenv("XDG_CACHE_HOME", str(folder / "cache"))  # the generated models, not the user's cache
        for logger in loggers:
            logger.addHandler(handler)
        try:
            process = cms.load_config(
                folder / "sonicTest_cfg.py",
                [
                    "modules=TritonGraphProducer,TritonGraphFilter,TritonGraphAnalyzer,TritonImageProducer",
                    "models=gat_test,gat_test,gat_test,densenet_onnx",
                    "modes=Sync,PseudoAsync,Async",
                    "maxEvents=2",
                    "verbose=1",
                    "testother=1",
                    "device=CPU",
                    "fallbackName=triton_server_instance_CPU",
                    f"nodes={GRAPH['nodeMin']},{GRAPH['nodeMax']}",
                ],
            )
            job = build_job(process)
            trio.run(run_job, job)
        finally:
            for logger in loggers:
                logger.removeHandler(handler)
    return job, handler.records, densenet


GRAPH_LABELS = [
    f"{kind}{mode}{grpc}"
    for kind in ("TritonGraphProducer", "TritonGraphFilter", "TritonGraphAnalyzer")
    for mode in MODES
    for grpc in ("", "GRPC")
]


def logged(records, label):
    """The module's own messages, by event id: the text after its first line."""
    found: dict[str, str] = {}
    for record in records:
        message = record.getMessage()
        head, _, body = message.partition("\n")
        if record.name == "pysonic.modules" and head.startswith(f"{label}: event "):
            found[head.removeprefix(f"{label}: event ")] = body
    return found


def parse_rows(body):
    rows = re.findall(r"^output (\d+): (.*)$", body, flags=re.MULTILINE)
    assert [int(i) for i, _ in rows] == list(range(len(rows)))
    return np.array([[float(v) for v in values.split()] for _, values in rows], np.float64)


def test_every_graph_module_logs_cms_models_logits_for_the_events_graph(unit_test):
    import torch

    from framework.serving.torch_backend import load_torchscript

    job, records, _ = unit_test
    model = load_torchscript("gat_test", str(GAT_TEST / "1" / "model.pt"), "cpu")
    for event in ("1:1:1", "1:1:2"):
        x, edge_index = random_graph(EventID(1, 1, int(event.rsplit(":", 1)[1])), *GRAPH.values(), 1433)
        with torch.no_grad(), torch.jit.optimized_execution(False):
            expected = model(torch.from_numpy(x), torch.from_numpy(edge_index)).numpy()
        bodies = {label: logged(records, label)[event] for label in GRAPH_LABELS}
        assert len(set(bodies.values())) == 1, "the 18 graph modules disagree"  # same graph, same answer
        values = parse_rows(bodies["TritonGraphProducerAsync"])
        assert values.shape == expected.shape == (x.shape[0], 7)
        np.testing.assert_allclose(values, expected, rtol=2e-5, atol=1e-3)  # logged with %g: 6 digits
        brief = logged(records, "TritonGraphProducerBrief")[event]
        assert brief == f"output shape: {x.shape[0]}, 7"


def test_shared_memory_clones_use_it_and_grpc_clones_do_not(unit_test):
    job = unit_test[0]
    for label in GRAPH_LABELS:
        transport = job.workers[label].module.client.transport
        if label.endswith("GRPC"):
            assert (transport.shm_calls, transport.payload_calls) == (0, 2), label
        else:
            assert (transport.shm_calls, transport.payload_calls) == (2, 0), label


def test_filters_keep_every_event_and_every_module_ran_twice(unit_test):
    job = unit_test[0]
    for label, worker in job.workers.items():
        assert worker.times.calls == 2 and worker.errors == 0, label
    assert job.workers["TritonGraphFilterAsync"].kind == "EDFilter"
    assert job.workers["TritonGraphAnalyzerAsync"].kind == "EDAnalyzer"


def test_modes_as_configured_and_analyzers_reset_to_sync(unit_test):
    job, records, _ = unit_test
    for label in GRAPH_LABELS:
        mode = next(m for m in MODES if m in label)
        client = job.workers[label].module.client
        assert client.mode == ("Sync" if "Analyzer" in label else mode), label
    warnings = {r.getMessage() for r in records if r.levelno == logging.WARNING}
    for label in ("TritonGraphAnalyzerPseudoAsync", "TritonGraphAnalyzerAsyncGRPC"):
        assert any(w.startswith(f"{label}: Resetting client mode to Sync for SonicOneEDAnalyzer") for w in warnings)
    assert not any(w.startswith("TritonGraphAnalyzerSync:") for w in warnings)


def test_image_producer_logs_the_stand_ins_top5(unit_test):
    import onnxruntime

    job, records, densenet = unit_test
    labels = (densenet / "densenet_labels.txt").read_text().splitlines()
    session = onnxruntime.InferenceSession(str(densenet / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    scores = session.run(["fc6_1"], {"data_0": np.full((1, 3, 224, 224), 0.5, np.float32)})[0][0]
    best = np.argsort(-scores, kind="stable")[:5]
    for label in ("TritonImageProducerAsync", "TritonImageProducerSyncGRPC"):
        for event, body in logged(records, label).items():
            lines = body.splitlines()
            assert lines[0] == "Scores for image 0:", (label, event)
            assert [line.split(" : ")[0] for line in lines[1:6]] == [labels[i] for i in best]
            np.testing.assert_allclose([float(line.split(" : ")[1]) for line in lines[1:6]], scores[best], rtol=1e-4)
    assert labels[:2] == ["stand-in class 0", "stand-in class 1"] and len(labels) == 1000
    assert "untrained" in image_models().__doc__.lower()  # said where the stand-in is made


def test_inception_graphdef_is_refused_in_one_line(capsys):
    assert image_models().main(["inception_graphdef"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no TensorFlow backend" in error


def test_the_generated_cfis_clone_as_cmssws_do():
    from HeterogeneousCore.SonicTriton.tritonGraphAnalyzer_cfi import tritonGraphAnalyzer

    assert tritonGraphAnalyzer.type_() == "TritonGraphAnalyzer"
    module = tritonGraphAnalyzer.clone(
        Client=dict(mode="Sync", timeout=30, modelName="gat_test", modelConfigPath="models/facile/config.pbtxt"),
        nodeMax=10,
    )
    params = cms.ParameterSetDescription()
    TritonGraphAnalyzer.fill_descriptions(params)
    validated = params.validate(module, "module 'a' (type TritonGraphAnalyzer)")
    assert (validated.nodeMin, validated.nodeMax, validated.Client.mode) == (100, 10, "Sync")
