"""Scale-out job (``cmsbench scale``, ``tests/test_dask.py``): fixed CPU work, optionally a SONIC request, per event.

    cmsrun framework/bench/configs/scale_cfg.py --dataset FILESET --executor dask [--workers N] cpuTime=5
    cmsrun framework/bench/configs/scale_cfg.py --dataset FILESET --executor dask sonic=1 repository=DIR   # host server
    cmsrun framework/bench/configs/scale_cfg.py --dataset FILESET --executor dask sonic=1 server=HOST:PORT

``BenchCPUProducer`` burns ``cpuTime`` ms per event; with ``sonic=1`` ``TinySonicProducer``
sends the event number to the ``tiny`` identity model (``framework.serving.testing.
write_tiny_repository``) on ``server``, or, without one, on the fallback server serving
``repository`` (one per host with the Dask executor). The output keeps the ids, ``Jet_pt``,
the jets' HT and the echoed value (not the CPU producer's product: its calibration differs
from process to process), so runs can be compared event by event.
"""

import framework.config as cms
from framework.bench.configs.benchServer_cff import servers_from
from framework.sonic import recommended_retries

V = cms.VarParsing
options = V()
options.register("inputFiles", [], V.multiplicity.list, V.varType.string, "input files (default: pfnano.root)")
options.register("cpuTime", 5.0, V.multiplicity.singleton, V.varType.float, "CPU work per event, ms")
options.register("sonic", 0, V.multiplicity.singleton, V.varType.int, "1: a tiny SONIC request per event")
options.register(
    "server", "", V.multiplicity.singleton, V.varType.string, "host:port of a Triton server serving 'tiny'"
)
options.register(
    "repository", "", V.multiplicity.singleton, V.varType.string, "the fallback's repository (with 'tiny')"
)
options.register("failover", 0, V.multiplicity.singleton, V.varType.int, "1: the tiny client retries, fails over")
options.register("outputFile", "scale.root", V.multiplicity.singleton, V.varType.string, "NanoAOD output")
options.register(
    "keep",
    [],
    V.multiplicity.list,
    V.varType.string,
    "more outputCommands 'keep' patterns (a bigger output, e.g. PFCands_*)",
)
options.register("streams", 1, V.multiplicity.singleton, V.varType.int, "numberOfStreams")
options.register(
    "extra", "", V.multiplicity.singleton, V.varType.string, "'file:Class' of one more EDAnalyzer on the Path (tests)"
)
options.parseArguments()

files = options.inputFiles
if not files:
    from framework.io.samples import locate_sample

    files = [str(locate_sample("pfnano.root"))]

process = cms.Process("SCALE")
process.source = cms.Source(
    "PoolSource", fileNames=cms.untracked.vstring(*files), duplicateCheckMode=cms.untracked.string("noDuplicateCheck")
)
process.options.numberOfStreams = options.streams
process.cpu = cms.EDProducer("framework.bench._modules:BenchCPUProducer", cpuTime=cms.double(options.cpuTime))
process.jetHT = cms.EDProducer("JetHTProducer", minPt=cms.double(30.0))
sequence = process.cpu * process.jetHT
if options.sonic:
    process.TritonService = cms.Service(
        "TritonService",
        servers=servers_from(options.server, "scale"),
        fallback=cms.PSet(
            enable=cms.untracked.bool(not options.server),
            device=cms.untracked.string("cpu"),
            modelRepository=cms.untracked.string(options.repository),
        ),
    )
    process.tiny = cms.EDProducer(
        "framework.bench._modules:TinySonicProducer",
        Client=cms.PSet(
            modelName=cms.string("tiny"),
            modelConfigPath=cms.FileInPath(f"{options.repository}/tiny/config.pbtxt"),
            mode=cms.string("Async"),
            timeout=cms.untracked.uint32(60),
            **({"retries": recommended_retries()} if options.failover else {}),
        ),
    )
    sequence = sequence * process.tiny
if options.extra:
    process.extra = cms.EDAnalyzer(options.extra)
    sequence = sequence * process.extra
process.out = cms.OutputModule(
    "NanoAODOutputModule",
    fileName=cms.untracked.string(options.outputFile),
    outputCommands=cms.untracked.vstring(
        "drop *", "keep Jet_pt", "keep jetHT", "keep tiny", *(f"keep {k}" for k in options.keep)
    ),
)
process.p = cms.Path(sequence)
process.e = cms.EndPath(process.out)
