"""Reading remote data: muons from root:// URLs or /store/ names, through redirectors.

    cmsrun configs/remote_cfg.py --dataset configs/datasets/opendata_fileset.yaml
    cmsrun configs/remote_cfg.py inputFiles=root://eospublic.cern.ch//eos/root-eos/cms_opendata_2012_nanoaod/Run2012B_DoubleMuParked.root
    cmsrun configs/remote_cfg.py inputFiles=/store/... [redirectors=root://mysite//,root://cms-xrd-global.cern.ch//]

A ``/store/...`` name (a CMS logical file name) is opened through ``redirectors``, tried
in order (CMSSW's site-local, regional, global "AAA" fallback); each open is cut at
``openTimeout`` seconds and each read request at ``timeout``; transient read errors are
tried again ``readRetries`` times. The summary's "Remote input files" table says which
redirector served each file. No Triton: muon pT and multiplicity histograms and a slim
NanoAOD output.
"""

import framework.config as cms

V = cms.VarParsing
options = V()
options.register(
    "inputFiles",
    [],
    V.multiplicity.list,
    V.varType.string,
    "input files: paths, root:// or https:// URLs, /store/ names (or use --dataset)",
)
options.register(
    "redirectors",
    ["root://cmsxrootd.fnal.gov//", "root://cms-xrd-global.cern.ch//"],
    V.multiplicity.list,
    V.varType.string,
    "redirectors for /store/ names, in order",
)
options.register("openTimeout", 30.0, V.multiplicity.singleton, V.varType.float, "seconds per open at one place")
options.register("timeout", 30.0, V.multiplicity.singleton, V.varType.float, "seconds per read request")
options.register("outputFile", "remote.root", V.multiplicity.singleton, V.varType.string, "NanoAOD output")
options.register("histFile", "remote_hists.root", V.multiplicity.singleton, V.varType.string, "histogram output")
options.parseArguments()

process = cms.Process("REMOTE")
process.source = cms.Source(
    "PoolSource",
    fileNames=cms.untracked.vstring(*options.inputFiles),
    redirectors=cms.untracked.vstring(*options.redirectors),
    openTimeout=cms.untracked.double(options.openTimeout),
    timeout=cms.untracked.double(options.timeout),
    readRetries=cms.untracked.uint32(2),
)
process.options.numberOfStreams = 2
process.options.wantSummary = True

process.muonHists = cms.EDAnalyzer(
    "HistogramAnalyzer",
    fileName=cms.untracked.string(options.histFile),
    histograms=cms.VPSet(
        cms.PSet(
            name=cms.string("muon_pt"),
            src=cms.InputTag("Muon"),
            field=cms.string("pt"),
            nbins=cms.uint32(50),
            min=cms.double(0.0),
            max=cms.double(100.0),
            xlabel=cms.string("muon p_{T} [GeV]"),
        ),
        cms.PSet(
            name=cms.string("muon_eta"),
            src=cms.InputTag("Muon"),
            field=cms.string("eta"),
            nbins=cms.uint32(48),
            min=cms.double(-2.4),
            max=cms.double(2.4),
            xlabel=cms.string("muon #eta"),
        ),
    ),
)
process.out = cms.OutputModule(
    "NanoAODOutputModule",
    fileName=cms.untracked.string(options.outputFile),
    outputCommands=cms.untracked.vstring(
        "drop *", "keep Muon_pt", "keep Muon_eta", "keep Muon_phi", "keep Muon_charge"
    ),
)
process.p = cms.Path(process.muonHists)
process.e = cms.EndPath(process.out)
