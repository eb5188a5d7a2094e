"""Benchmark job: the four model stand-ins on real PFNano events, direct or as a service.

    cmsrun framework/bench/configs/models_cfg.py backend=direct            # onnxruntime in-process
    cmsrun framework/bench/configs/models_cfg.py backend=sonic [server=127.0.0.1:PORT]
    cmsrun framework/bench/configs/models_cfg.py models=facile source=empty events=2000 streams=16
    cmsrun framework/bench/configs/models_cfg.py backend=noinference   # the same job, zeros for outputs

``models`` chooses among particlenet, deepmet, deeptau, facile (ParticleNet AK4, DeepMET,
DeepTau, FACILE); each gets its input producer and its model producer, which is the
direct (``backend=direct``) or the SONIC (``backend=sonic``) twin with the SAME
``Client`` PSet; ``backend=noinference`` runs the direct twin with ``runInference =
False`` (the same conversion of inputs and outputs, zeros instead of the onnxruntime
call), so that a job's CPU without any inference is measured (``cmsbench cpu``); ``batchRows`` turns on the SONIC
producers' cross-event batching (``Client.batching``). ``cpuTime`` adds a fixed CPU cost
per event (the MiniAOD demonstrator: the models are ~10 % of the event); ``cpuChunks``
fixes that work as SHA-256 chunks, the same in every job. Input:
``pfnano.root`` repeated ``repeat`` times (``noDuplicateCheck``), or ``source=empty``
(FACILE only: its inputs are synthesized). DeepTau uses ``minTaus=3`` jet-seeded
candidates (pfnano.root stores no taus; see ``modules/deeptau_inputs.py``). Without
``server`` the SONIC modules use the fallback local server on ``data/models``;
``server=host:port,http://host:port`` declares its HTTP endpoint too, and ``transport``
chooses the protocol (``Client.transport``). ``busyThread=FILE`` runs a Python thread
that wants the GIL all the time beside the job (what a source's reading thread does) and
writes its own CPU seconds to FILE at the end (``cmsbench cpu`` subtracts them).
"""

import framework.config as cms
from framework.bench.configs.benchServer_cff import servers_from

V = cms.VarParsing
options = V()
options.register("backend", "sonic", V.multiplicity.singleton, V.varType.string, "direct | sonic | noinference")
options.register(
    "models", ["particlenet", "deepmet", "deeptau", "facile"], V.multiplicity.list, V.varType.string, "models to run"
)
options.register(
    "server",
    "",
    V.multiplicity.singleton,
    V.varType.string,
    "host:port (gRPC), optionally ,http://host:port (its HTTP endpoint) ('' = fallback server)",
)
options.register(
    "transport", "auto", V.multiplicity.singleton, V.varType.string, "Client.transport: auto | http | grpc"
)
options.register(
    "busyThread",
    "",
    V.multiplicity.singleton,
    V.varType.string,
    "a GIL-busy Python thread beside the job; its CPU seconds written to this file ('' = none)",
)
options.register("mode", "Async", V.multiplicity.singleton, V.varType.string, "SONIC mode")
options.register(
    "sharedMemory",
    True,
    V.multiplicity.singleton,
    V.varType.bool,
    "Client.useSharedMemory (shared memory with a local server)",
)
options.register(
    "batchRows", 0, V.multiplicity.singleton, V.varType.int, "Client.batching.maxRows: cross-event batching (0 = off)"
)
options.register("batchDelay", 100, V.multiplicity.singleton, V.varType.int, "Client.batching.maxDelay, microseconds")
options.register("source", "pfnano", V.multiplicity.singleton, V.varType.string, "pfnano | empty")
options.register("inputFiles", [], V.multiplicity.list, V.varType.string, "input files (default: pfnano.root)")
options.register("repeat", 10, V.multiplicity.singleton, V.varType.int, "times the file list is read")
options.register("events", -1, V.multiplicity.singleton, V.varType.int, "events (-1 = all; EmptySource: required)")
options.register("streams", 2, V.multiplicity.singleton, V.varType.int, "numberOfStreams")
options.register("threads", 2, V.multiplicity.singleton, V.varType.int, "numberOfThreads")
options.register("cpuTime", 0.0, V.multiplicity.singleton, V.varType.float, "CPU work per event, ms")
options.register("cpuMode", "burn", V.multiplicity.singleton, V.varType.string, "burn | sleep (CPU work elsewhere)")
options.register("cpuChunks", 0, V.multiplicity.singleton, V.varType.int, "64 KiB chunks hashed per event (0: cpuTime)")
options.register("nChannels", 16000, V.multiplicity.singleton, V.varType.int, "FACILE rows per event")
options.register("minTaus", 3, V.multiplicity.singleton, V.varType.int, "DeepTau candidates per event (at least)")
options.register("barrier", "", V.multiplicity.singleton, V.varType.string, "start-barrier folder ('' = none)")
options.register(
    "modelName",
    "",
    V.multiplicity.singleton,
    V.varType.string,
    "Triton model name of the (single) model ('' = its own, e.g. particlenet_ak4)",
)
options.register(
    "dumpInputs",
    "",
    V.multiplicity.singleton,
    V.varType.string,
    "save the first model's inputs of every event to this .npz ('' = no)",
)
options.register(
    "dumpFolder",
    "",
    V.multiplicity.singleton,
    V.varType.string,
    "save each model's inputs of every event to <dumpFolder>/<model>.npz ('' = no)",
)
options.parseArguments()

KNOWN = ("particlenet", "deepmet", "deeptau", "facile")
for name in options.models:
    if name not in KNOWN:
        raise ValueError(f"models_cfg.py: unknown model '{name}' (known: {', '.join(KNOWN)})")
if options.backend not in ("direct", "sonic", "noinference"):
    raise ValueError(f"models_cfg.py: backend '{options.backend}' is not direct, sonic or noinference")

process = cms.Process("BENCH")
if options.source == "empty":
    process.source = cms.Source("EmptySource")
else:
    files = options.inputFiles
    if not files:
        from framework.io.samples import locate_sample

        files = [str(locate_sample("pfnano.root"))]
    process.source = cms.Source(
        "PoolSource",
        fileNames=cms.untracked.vstring(*(files * options.repeat)),
        duplicateCheckMode=cms.untracked.string("noDuplicateCheck"),
    )
process.maxEvents.input = options.events
process.options.numberOfStreams = options.streams
process.options.numberOfThreads = options.threads

process.TritonService = cms.Service(
    "TritonService", servers=servers_from(options.server, "bench"), fallback=cms.PSet(enable=cms.untracked.bool(True))
)


def client(model_name, config_name):
    return cms.PSet(
        modelName=cms.string(model_name),
        # the stand-in's own config (found in the project's data/); a renamed variant
        # (modelName) serves the same files, so ModelVersioning's sums agree
        modelConfigPath=cms.FileInPath(f"models/{config_name}/config.pbtxt"),
        mode=cms.string(options.mode),
        timeout=cms.untracked.uint32(120),
        useSharedMemory=cms.untracked.bool(options.sharedMemory),
        transport=cms.untracked.string(options.transport),
        batching=cms.untracked.PSet(
            maxRows=cms.untracked.uint32(options.batchRows), maxDelay=cms.untracked.uint32(options.batchDelay)
        ),
    )


def twin(sonic_type, direct_type):
    return sonic_type if options.backend == "sonic" else direct_type


producers = {
    "particlenet": (
        cms.EDProducer("ParticleNetInputProducer"),
        twin("ParticleNetSonicProducer", "modules.particlenet:ParticleNetDirectProducer"),
        "particlenet_ak4",
    ),
    "deepmet": (
        cms.EDProducer("DeepMETInputProducer"),
        twin("DeepMETSonicProducer", "modules.deepmet:DeepMETDirectProducer"),
        "deepmet",
    ),
    "deeptau": (
        cms.EDProducer("modules.deeptau:DeepTauInputProducer", minTaus=cms.uint32(options.minTaus)),
        twin("modules.deeptau:DeepTauSonicProducer", "modules.deeptau:DeepTauDirectProducer"),
        "deeptau",
    ),
    "facile": (
        cms.EDProducer("modules.facile:FacileInputProducer", nChannels=cms.uint32(options.nChannels)),
        twin("modules.facile:FacileSonicProducer", "modules.facile:FacileDirectProducer"),
        "facile",
    ),
}
inputs, path = [], []
if options.barrier:
    process.barrier = cms.EDAnalyzer(
        "framework.bench._modules:BenchStartBarrier", directory=cms.untracked.string(options.barrier)
    )
    path.append(process.barrier)
if options.busyThread:
    process.busy = cms.EDAnalyzer(
        "framework.bench._modules:BenchBusyThread", report=cms.untracked.string(options.busyThread)
    )
    path.append(process.busy)
if options.cpuTime > 0 or options.cpuChunks > 0:
    process.cpu = cms.EDProducer(
        "framework.bench._modules:BenchCPUProducer",
        cpuTime=cms.double(options.cpuTime),
        mode=cms.untracked.string(options.cpuMode),
        chunks=cms.untracked.uint32(options.cpuChunks),
    )
    path.append(process.cpu)
if options.modelName and len(options.models) != 1:
    raise ValueError("models_cfg.py: modelName needs exactly one model")
for name in options.models:
    input_producer, model_type, own_name = producers[name]
    model_name = options.modelName or own_name
    setattr(process, f"{name}Inputs", input_producer)
    producer = cms.EDProducer(model_type, src=cms.InputTag(f"{name}Inputs"), Client=client(model_name, own_name))
    if options.backend == "noinference":  # the direct twin, zeros instead of onnxruntime
        producer.runInference = cms.untracked.bool(False)
    setattr(process, name, producer)
    inputs.append(getattr(process, f"{name}Inputs"))
    path.append(getattr(process, name))
if options.dumpInputs:
    process.dump = cms.EDAnalyzer(
        "framework.bench._modules:BenchInputDumper",
        src=cms.InputTag(f"{options.models[0]}Inputs"),
        fileName=cms.untracked.string(options.dumpInputs),
    )
    path.append(process.dump)
if options.dumpFolder:
    for name in options.models:
        dumper = cms.EDAnalyzer(
            "framework.bench._modules:BenchInputDumper",
            src=cms.InputTag(f"{name}Inputs"),
            fileName=cms.untracked.string(f"{options.dumpFolder}/{name}.npz"),
        )
        setattr(process, f"{name}Dump", dumper)
        path.append(dumper)
process.inputsTask = cms.Task(*inputs)
process.p = cms.Path(*path, process.inputsTask)
