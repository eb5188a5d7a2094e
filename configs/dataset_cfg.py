"""A CPU-only job for datasets: jets, HT, an event weight from the dataset's metadata, a
selection, histograms and a slim NanoAOD output.

    cmsrun configs/dataset_cfg.py --dataset configs/datasets/nano_fileset.yaml [--chunk-size N]
    cmsrun configs/dataset_cfg.py inputFiles=a.root,b.root      # without a fileset

With ``--dataset``, every output gets the dataset's name (``dataset.root`` ->
``dataset_DYJets.root``, ``dataset_hists_DYJets.root``) and the fileset's files replace
``fileNames``. Each event's ``weight`` is ``xsec * lumi / sumw`` for a dataset whose
fileset metadata says ``isMC: true`` (``XsecWeightProducer``), 1 otherwise. No Triton:
this is the config the dataset and scale-out tests run on.
"""

import framework.config as cms

V = cms.VarParsing
options = V()
options.register("inputFiles", [], V.multiplicity.list, V.varType.string, "input files (default: nano_dy.root)")
options.register("outputFile", "dataset.root", V.multiplicity.singleton, V.varType.string, "NanoAOD output")
options.register("histFile", "dataset_hists.root", V.multiplicity.singleton, V.varType.string, "histogram output")
options.register("streams", 2, V.multiplicity.singleton, V.varType.int, "numberOfStreams")
options.register("lumi", 1000.0, V.multiplicity.singleton, V.varType.float, "luminosity of the weights [pb^-1]")
options.parseArguments()

files = options.inputFiles
if not files:
    from framework.io.samples import locate_sample

    files = [str(locate_sample("nano_dy.root"))]

process = cms.Process("DATASET")
process.source = cms.Source("PoolSource", fileNames=cms.untracked.vstring(*files))
process.options.numberOfStreams = options.streams
process.options.wantSummary = True  # TrigReport / TimeReport (with --executor dask: one for the whole run)

process.jetHT = cms.EDProducer("JetHTProducer", minPt=cms.double(30.0))
process.weight = cms.EDProducer("XsecWeightProducer", lumi=cms.double(options.lumi))
process.twoJets = cms.EDFilter("JetMultiplicityFilter", minNumber=cms.uint32(2), minPt=cms.double(30.0))
process.hists = cms.EDAnalyzer(
    "HistogramAnalyzer",
    fileName=cms.untracked.string(options.histFile),
    histograms=cms.VPSet(
        cms.PSet(
            name=cms.string("jet_pt"),
            src=cms.InputTag("Jet"),
            field=cms.string("pt"),
            nbins=cms.uint32(50),
            min=cms.double(0.0),
            max=cms.double(250.0),
            xlabel=cms.string("jet pT [GeV]"),
        ),
        cms.PSet(
            name=cms.string("ht"),
            src=cms.InputTag("jetHT"),
            nbins=cms.uint32(40),
            min=cms.double(0.0),
            max=cms.double(800.0),
            xlabel=cms.string("HT [GeV]"),
        ),
    ),
)
process.out = cms.OutputModule(
    "NanoAODOutputModule",
    fileName=cms.untracked.string(options.outputFile),
    # Branches every NanoAOD version has (v15 renamed MET to PFMET).
    outputCommands=cms.untracked.vstring("drop *", "keep Jet_pt", "keep Jet_eta", "keep jetHT", "keep weight"),
)

process.p = cms.Path(process.jetHT * process.weight * process.twoJets * process.hists)
process.e = cms.EndPath(process.out)
