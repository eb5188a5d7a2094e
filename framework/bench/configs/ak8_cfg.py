"""Benchmark job: CMS's ParticleNet AK8 job, ``configs/particlenet_ak8_cfg.py``, on more events.

    cmsrun framework/bench/configs/ak8_cfg.py sonic=0|1 [server=127.0.0.1:PORT] repeat=N events=M

The job is the project's ``configs/particlenet_ak8_cfg.py`` as a user runs it (CMSSW's
chain: tag infos, the General and MD-2prong JetTags, direct onnxruntime or SONIC under
CMSSW's ``particleNetSonicTriton`` modifier, the discriminators, the NanoAOD-like output),
loaded with ``compare=0`` and these changes only, so that a CPU measurement has events
enough: the real sample (10 events) listed ``repeat`` times and read without the duplicate
check, ``events`` of them, the job on ``streams`` streams and ``threads`` threads
(``cmsbench cpu`` pins it to one core). Needs CMS's models on ``CMSSW_SEARCH_PATH``.
"""

import pathlib

import framework.config as cms
from framework.io.samples import locate_sample

V = cms.VarParsing
options = V()
options.register("sonic", 0, V.multiplicity.singleton, V.varType.int, "1: the JetTags as a service (SONIC)")
options.register("server", "", V.multiplicity.singleton, V.varType.string, "host:port ('' = the fallback)")
options.register("repeat", 10, V.multiplicity.singleton, V.varType.int, "times the sample is listed")
options.register("events", -1, V.multiplicity.singleton, V.varType.int, "events (-1 = all)")
options.register("streams", 2, V.multiplicity.singleton, V.varType.int, "numberOfStreams")
options.register("threads", 1, V.multiplicity.singleton, V.varType.int, "numberOfThreads")
options.parseArguments()

CONFIG = pathlib.Path(__file__).resolve().parents[3] / "configs" / "particlenet_ak8_cfg.py"
sample = str(locate_sample("pfnano.root"))
arguments = [f"sonic={options.sonic}", "compare=0", f"maxEvents={options.events}", f"inputFiles={sample}"]
if options.server:
    arguments.append(f"server={options.server}")
process = cms.load_config(CONFIG, arguments)
process.source.fileNames = cms.untracked.vstring(*[sample] * options.repeat)
process.source.duplicateCheckMode = cms.untracked.string("noDuplicateCheck")
process.options.numberOfStreams = options.streams
process.options.numberOfThreads = options.threads
