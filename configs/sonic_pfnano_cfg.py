"""The main job: ParticleNet AK4 tagging and DeepMET as a service on real CMS PFNano events.

    cmsrun configs/sonic_pfnano_cfg.py [inputFiles=a.root,b.root] [outputFile=...] [mode=Async]

Reads the real PFNano sample (10 events; located or fetched and checksum-verified by
``framework.io.samples``), builds the model inputs, sends every event to both models on a
Triton server (the fallback local server started automatically, or ``server=host:port``),
writes the new products next to a few input branches, fills histograms of events with at
least two central jets above 30 GeV, and prints TrigReport, TimeReport and Triton's
per-model statistics. The models have untrained weights: the scores exercise the data
flow, they are no physics result.
"""

from pfnanoSonic_cff import pfnano_options, pfnano_sonic

import framework.config as cms
from framework.sonic import recommended_retries

options = pfnano_options("sonic_pfnano.root")
options.register(
    "histFile",
    "sonic_pfnano_histograms.root",
    cms.VarParsing.multiplicity.singleton,
    cms.VarParsing.varType.string,
    "output ROOT file with histograms",
)
options.register(
    "mode",
    "Async",
    cms.VarParsing.multiplicity.singleton,
    cms.VarParsing.varType.string,
    "SONIC client mode: Async, Sync or PseudoAsync",
)
options.parseArguments()

process = cms.Process("SONIC")
pfnano_sonic(process, options)
process.TritonService.fallback.enable = True  # always: this job is SONIC only
process.TritonService.fallback.device = "cpu"
process.options.numberOfStreams = 4
process.options.numberOfThreads = 2
process.options.wantSummary = True


def client(model_name):
    return cms.PSet(
        modelName=cms.string(model_name),
        modelConfigPath=cms.FileInPath(f"models/{model_name}/config.pbtxt"),  # found in the project's data/
        mode=cms.string(options.mode),
        timeout=cms.untracked.uint32(30),
        timeoutUnit=cms.untracked.string("seconds"),
        retries=recommended_retries(),  # CMSSW's default is no retry; this job fails over
    )


process.particleNetInputs = cms.EDProducer("ParticleNetInputProducer")
process.particleNetAK4 = cms.EDProducer(
    "ParticleNetSonicProducer", src=cms.InputTag("particleNetInputs"), Client=client("particlenet_ak4")
)
process.deepMETInputs = cms.EDProducer("DeepMETInputProducer")
process.deepMET = cms.EDProducer(
    "DeepMETSonicProducer", src=cms.InputTag("deepMETInputs"), pf_src=cms.InputTag("PFCands"), Client=client("deepmet")
)
process.inputsTask = cms.Task(process.particleNetInputs, process.deepMETInputs)

process.dijetFilter = cms.EDFilter(
    "JetMultiplicityFilter", minNumber=cms.uint32(2), minPt=cms.double(30.0), maxAbsEta=cms.double(2.5)
)


def histogram(name, src, field, nbins, low, high, xlabel):
    return cms.PSet(
        name=cms.string(name),
        src=cms.InputTag(src),
        field=cms.string(field),
        nbins=cms.uint32(nbins),
        min=cms.double(low),
        max=cms.double(high),
        xlabel=cms.string(xlabel),
    )


process.histograms = cms.EDAnalyzer(
    "HistogramAnalyzer",
    fileName=cms.untracked.string(options.histFile),
    histograms=cms.VPSet(
        histogram("jet_pt", "Jet", "pt", 50, 0.0, 500.0, "jet p_{T} [GeV]"),
        histogram("jet_probb", "particleNetAK4", "probb", 20, 0.0, 1.0, "ParticleNet P(b) (untrained)"),
        histogram("deepmet_pt", "deepMET", "pt", 40, 0.0, 400.0, "DeepMET p_{T} [GeV] (untrained)"),
        histogram("rawmet_pt", "RawMET", "pt", 40, 0.0, 400.0, "raw PF MET p_{T} [GeV]"),
    ),
)

process.out = cms.OutputModule(
    "NanoAODOutputModule",
    fileName=cms.untracked.string(options.outputFile),
    outputCommands=cms.untracked.vstring(
        "drop *",
        "keep Jet_pt",
        "keep Jet_eta",
        "keep Jet_phi",
        "keep RawMET_*",
        "keep particleNetAK4_*",
        "keep deepMET_*",
    ),
    SelectEvents=cms.untracked.PSet(SelectEvents=cms.vstring("sonic")),
)

process.sonic = cms.Path(process.particleNetAK4 + process.deepMET, process.inputsTask)
process.dijet = cms.Path(process.dijetFilter + process.histograms)
process.outpath = cms.EndPath(process.out)
