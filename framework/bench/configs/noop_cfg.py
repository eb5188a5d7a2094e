"""Benchmark job: a Path of ``modules`` no-op producers over EmptySource events.

    cmsrun framework/bench/configs/noop_cfg.py modules=50 events=10000 streams=8

The framework's own cost per module call is (wall time with k modules - wall time with 0)
/ (events x k); ``python -m framework.bench overhead`` does that subtraction.
"""

import framework.config as cms

V = cms.VarParsing
options = V()
options.register("modules", 10, V.multiplicity.singleton, V.varType.int, "no-op producers on the Path")
options.register("events", 10000, V.multiplicity.singleton, V.varType.int, "events (EmptySource)")
options.register("streams", 1, V.multiplicity.singleton, V.varType.int, "numberOfStreams")
options.register("threads", 1, V.multiplicity.singleton, V.varType.int, "numberOfThreads")
options.parseArguments()

process = cms.Process("BENCH")
process.source = cms.Source("EmptySource")
process.maxEvents.input = options.events
process.options.numberOfStreams = options.streams
process.options.numberOfThreads = options.threads
noops = []
for i in range(options.modules):
    setattr(process, f"noop{i}", cms.EDProducer("framework.bench._modules:BenchNoOpProducer"))
    noops.append(getattr(process, f"noop{i}"))
process.p = cms.Path(*noops)
