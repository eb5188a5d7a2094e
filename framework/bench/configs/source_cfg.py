"""Benchmark job: PoolSource reading whole collections, nothing else.

    cmsrun framework/bench/configs/source_cfg.py inputFiles=a.root repeat=20 collections=Jet,Tau

The file list is ``inputFiles`` repeated ``repeat`` times (``noDuplicateCheck``);
``BenchBranchReader`` consumes every field of ``collections``, so the source reads exactly
those branches. ``python -m framework.bench source`` compares it with ``uproot.iterate``.
With ``emptyEvents=N`` the same job runs over N EmptySource events and reads nothing:
what the framework costs per event whatever the source (``collections`` is ignored).
"""

import framework.config as cms

V = cms.VarParsing
options = V()
options.register("inputFiles", [], V.multiplicity.list, V.varType.string, "input files (default: nano_tt_v15.root)")
options.register("repeat", 10, V.multiplicity.singleton, V.varType.int, "times the file list is read")
options.register(
    "collections",
    ["Jet", "Tau", "Muon", "Electron"],
    V.multiplicity.list,
    V.varType.string,
    "collections to read (all fields)",
)
options.register("treeName", "Events", V.multiplicity.singleton, V.varType.string, "tree to read")
options.register("streams", 1, V.multiplicity.singleton, V.varType.int, "numberOfStreams")
options.register("threads", 1, V.multiplicity.singleton, V.varType.int, "numberOfThreads")
options.register(
    "emptyEvents",
    0,
    V.multiplicity.singleton,
    V.varType.int,
    "if > 0: this many EmptySource events instead of the files, nothing read",
)
options.parseArguments()

process = cms.Process("BENCH")
collections = options.collections
if options.emptyEvents > 0:
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = options.emptyEvents
    collections = []
else:
    files = options.inputFiles
    if not files:
        from framework.io.samples import locate_sample

        files = [str(locate_sample("nano_tt_v15.root"))]
    process.source = cms.Source(
        "PoolSource",
        fileNames=cms.untracked.vstring(*(files * options.repeat)),
        duplicateCheckMode=cms.untracked.string("noDuplicateCheck"),
        treeName=cms.untracked.string(options.treeName),
    )
process.options.numberOfStreams = options.streams
process.options.numberOfThreads = options.threads
process.reader = cms.EDAnalyzer("framework.bench._modules:BenchBranchReader", collections=cms.vstring(*collections))
process.p = cms.Path(process.reader)
