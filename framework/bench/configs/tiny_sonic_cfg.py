"""Benchmark job: a fixed CPU cost, then the smallest SONIC request, per event (EmptySource).

    cmsrun framework/bench/configs/tiny_sonic_cfg.py server=127.0.0.1:PORT [streams=16] [cpuTime=2] [mode=Async]

The server must serve the ``tiny`` identity model (``python -m framework.bench`` writes
it; ``framework.serving.testing.write_tiny_repository``). Used by the latency-hiding,
client-overhead and clients-per-server benchmarks. ``cpuTime=0`` drops the CPU work;
``batchRows=64`` turns on cross-event batching (``Client.batching``);
``cpuMode=sleep`` stands for CPU work done on another machine; ``barrier=DIR`` holds the
first event until ``DIR/go`` exists (several jobs starting together).
"""

import framework.config as cms

V = cms.VarParsing
options = V()
options.register(
    "server",
    "",
    V.multiplicity.singleton,
    V.varType.string,
    "host:port of the Triton server (required); several, comma-separated: servers of the same model",
)
options.register(
    "modelConfig",
    "",
    V.multiplicity.singleton,
    V.varType.string,
    "the served tiny model's config.pbtxt (Client.modelConfigPath)",
)
options.register("events", 1000, V.multiplicity.singleton, V.varType.int, "events (EmptySource)")
options.register("streams", 1, V.multiplicity.singleton, V.varType.int, "numberOfStreams")
options.register("threads", 1, V.multiplicity.singleton, V.varType.int, "numberOfThreads")
options.register("cpuTime", 2.0, V.multiplicity.singleton, V.varType.float, "CPU work per event, ms (0 = none)")
options.register("cpuMode", "burn", V.multiplicity.singleton, V.varType.string, "burn | sleep")
options.register("mode", "Async", V.multiplicity.singleton, V.varType.string, "SONIC mode: Async, Sync, PseudoAsync")
options.register("width", 4, V.multiplicity.singleton, V.varType.int, "float32 values per request")
options.register(
    "batchRows", 0, V.multiplicity.singleton, V.varType.int, "Client.batching.maxRows: cross-event batching (0 = off)"
)
options.register("batchDelay", 100, V.multiplicity.singleton, V.varType.int, "Client.batching.maxDelay, microseconds")
options.register("barrier", "", V.multiplicity.singleton, V.varType.string, "start-barrier folder ('' = none)")
options.parseArguments()
if not options.server:
    raise ValueError("tiny_sonic_cfg.py: server=host:port is required")

process = cms.Process("BENCH")
process.source = cms.Source("EmptySource")
process.maxEvents.input = options.events
process.options.numberOfStreams = options.streams
process.options.numberOfThreads = options.threads

servers = []
for index, server in enumerate(options.server.split(",")):
    address, _, port = server.rpartition(":")
    servers.append(
        cms.PSet(
            name=cms.untracked.string("bench" if index == 0 else f"bench{index}"),
            address=cms.untracked.string(address),
            port=cms.untracked.uint32(int(port)),
        )
    )
process.TritonService = cms.Service(
    "TritonService",
    servers=cms.untracked.VPSet(*servers),
    fallback=cms.PSet(enable=cms.untracked.bool(False)),
)
process.tiny = cms.EDProducer(
    "framework.bench._modules:TinySonicProducer",
    width=cms.uint32(options.width),
    Client=cms.PSet(
        modelName=cms.string("tiny"),
        modelConfigPath=cms.FileInPath(options.modelConfig),  # the bench server's model (no fallback here)
        mode=cms.string(options.mode),
        timeout=cms.untracked.uint32(60),
        batching=cms.untracked.PSet(
            maxRows=cms.untracked.uint32(options.batchRows), maxDelay=cms.untracked.uint32(options.batchDelay)
        ),
    ),
)
modules = []
if options.barrier:
    process.barrier = cms.EDAnalyzer(
        "framework.bench._modules:BenchStartBarrier", directory=cms.untracked.string(options.barrier)
    )
    modules.append(process.barrier)
if options.cpuTime > 0:
    process.cpu = cms.EDProducer(
        "framework.bench._modules:BenchCPUProducer",
        cpuTime=cms.double(options.cpuTime),
        mode=cms.untracked.string(options.cpuMode),
    )
    modules.append(process.cpu)
modules.append(process.tiny)
process.p = cms.Path(*modules)
