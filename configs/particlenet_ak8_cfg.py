"""CMSSW's ParticleNet AK8 (General V01 and mass-decorrelated 2-prong V01) on real PFNano events.

    CMSSW_SEARCH_PATH=/path/to/cms-data cmsrun configs/particlenet_ak8_cfg.py [sonic=1 [pt=1]] [inputFiles=...]

The models and their preprocess.json are CMS's own files, found as CMSSW finds them: a
``FileInPath`` such as ``RecoBTag/Combined/data/models/particlenet/config.pbtxt`` resolved
on ``CMSSW_SEARCH_PATH`` (a CMSSW data area, e.g. ``$CMSSW_RELEASE_BASE/external/.../data``,
or a folder holding clones of the cms-data repositories ``RecoBTag-Combined`` as
``RecoBTag/Combined/data``). The chain is CMSSW's pfParticleNet_cff: tag infos, JetTags
(direct onnxruntime, or SONIC under CMSSW's ``particleNetSonicTriton`` process modifier,
which ``sonic=1`` turns on; with ``pt=1`` also CMSSW's ``particleNetPTSonicTriton``, which
serves the same networks as TorchScript: ``particlenet_PT`` and
``particlenet_AK8_MD-2prong_PT`` with their ``preprocess_PT.json``), discriminators as
NanoAOD stores them. Writes ``particlenet_ak8.root``
(``FatJet_pt/eta/phi`` and the eleven ``FatJet_particleNet*`` scores, the input's fat
jets in order) and prints the agreement with the scores CMSSW stored in the input.
"""

import copy

from pfnanoSonic_cff import pfnano_options, pfnano_sonic

import framework.config as cms

options = pfnano_options("particlenet_ak8.root")
options.register(
    "sonic",
    0,
    cms.VarParsing.multiplicity.singleton,
    cms.VarParsing.varType.int,
    "1: the JetTags through SONIC (Triton); 0: onnxruntime in the job",
)
options.register(
    "pt",
    0,
    cms.VarParsing.multiplicity.singleton,
    cms.VarParsing.varType.int,
    "1 (with sonic=1): CMSSW's particleNetPTSonicTriton, the TorchScript models (particlenet_PT, ...)",
)
options.register(
    "compare",
    1,
    cms.VarParsing.multiplicity.singleton,
    cms.VarParsing.varType.int,
    "1: print the agreement with the input's FatJet_particleNet* scores (the input must have them)",
)
options.parseArguments()

# SONIC or direct is chosen as CMSSW chooses it: the particleNetSonicTriton process modifier
# replaces the JetTags producers by their SONIC twins (sonic=1 asks for it, with
# enableSonicTriton, which turns TritonService's fallback server on).
from Configuration.ProcessModifiers.enableSonicTriton_cff import enableSonicTriton  # noqa: E402
from Configuration.ProcessModifiers.particleNetPTSonicTriton_cff import particleNetPTSonicTriton  # noqa: E402
from Configuration.ProcessModifiers.particleNetSonicTriton_cff import particleNetSonicTriton  # noqa: E402

if options.pt and not options.sonic:
    # In CMSSW particleNetPTSonicTriton alone changes nothing; here that is a mistake to name.
    raise cms.ConfigurationError("pt=1 (particleNetPTSonicTriton) acts only together with sonic=1")
modifiers = [enableSonicTriton, particleNetSonicTriton] if options.sonic else []
modifiers += [particleNetPTSonicTriton] if options.pt else []
process = cms.Process("PNET", *modifiers)
pfnano_sonic(process, options)
process.options.numberOfStreams = 2
process.options.numberOfThreads = 2

QCD = ["probQCDbb", "probQCDcc", "probQCDb", "probQCDc", "probQCDothers"]


def client(model_name):
    return cms.PSet(
        modelName=cms.string(model_name),
        modelConfigPath=cms.FileInPath(f"RecoBTag/Combined/data/models/{model_name}/config.pbtxt"),
        mode=cms.string("Async"),
        timeout=cms.untracked.uint32(60),
    )


process.pfParticleNetTagInfos = cms.EDProducer(
    "DeepBoostedJetTagInfoProducer",
    jets=cms.InputTag("FatJet"),
    min_jet_pt=cms.double(150.0),
    use_puppiP4=cms.bool(False),
    min_puppi_wgt=cms.double(0.01),
)


def jet_tags(type_name, **params):
    """CMSSW's JetTags producer of one model: ``type_name`` is the direct or the SONIC twin
    (each gets its own copy of the parameters)."""
    return cms.EDProducer(type_name, **copy.deepcopy(params))


GENERAL = dict(
    src=cms.InputTag("pfParticleNetTagInfos"),
    preprocess_json=cms.FileInPath("RecoBTag/Combined/data/ParticleNetAK8/General/V01/preprocess.json"),
    flav_names=cms.vstring(
        "probTbcq",
        "probTbqq",
        "probTbc",
        "probTbq",
        "probTbel",
        "probTbmu",
        "probTbta",
        "probWcq",
        "probWqq",
        "probZbb",
        "probZcc",
        "probZqq",
        "probHbb",
        "probHcc",
        "probHqqqq",
        *QCD,
    ),  # fmt: skip
    Client=client("particlenet"),
)
MASS_DECORRELATED = dict(
    src=cms.InputTag("pfParticleNetTagInfos"),
    preprocess_json=cms.FileInPath("RecoBTag/Combined/data/ParticleNetAK8/MD-2prong/V01/preprocess.json"),
    flav_names=cms.vstring("probXbb", "probXcc", "probXqq", *QCD),
    Client=client("particlenet_AK8_MD-2prong"),
)
process.pfParticleNetJetTags = jet_tags("BoostedJetONNXJetTagsProducer", **GENERAL)
process.pfMassDecorrelatedParticleNetJetTags = jet_tags("BoostedJetONNXJetTagsProducer", **MASS_DECORRELATED)
particleNetSonicTriton.toReplaceWith(
    process.pfParticleNetJetTags, jet_tags("ParticleNetSonicJetTagsProducer", **GENERAL)
)
particleNetSonicTriton.toReplaceWith(
    process.pfMassDecorrelatedParticleNetJetTags, jet_tags("ParticleNetSonicJetTagsProducer", **MASS_DECORRELATED)
)


def torchscript_model(model_name, preprocess):
    """What CMSSW's pfParticleNet_cff changes under particleNetSonicTriton & particleNetPTSonicTriton:
    the TorchScript twin of the model (inputs named ``pf_points__0`` ... ``sv_mask__5``, Triton's
    PyTorch convention) and the preprocess file with those input names."""
    return dict(
        preprocess_json=cms.FileInPath(f"RecoBTag/Combined/data/ParticleNetAK8/{preprocess}"),
        Client=dict(
            modelName=model_name,
            modelConfigPath=cms.FileInPath(f"RecoBTag/Combined/data/models/{model_name}/config.pbtxt"),
        ),
    )


(particleNetSonicTriton & particleNetPTSonicTriton).toModify(
    process.pfParticleNetJetTags, **torchscript_model("particlenet_PT", "General/V01/preprocess_PT.json")
)
(particleNetSonicTriton & particleNetPTSonicTriton).toModify(
    process.pfMassDecorrelatedParticleNetJetTags,
    **torchscript_model("particlenet_AK8_MD-2prong_PT", "MD-2prong/V01/preprocess_PT.json"),
)


def tags(module, *names):
    return cms.VInputTag(*(f"{module}:{n}" for n in names))


def ratio(name, signal, module="pfParticleNetJetTags"):
    return cms.PSet(name=cms.string(name), numerator=tags(module, *signal), denominator=tags(module, *signal, *QCD))


# NanoAOD's discriminators (CMSSW's pfParticleNetDiscriminatorsJetTags_cfi)
process.pfParticleNetDiscriminatorsJetTags = cms.EDProducer(
    "BTagProbabilityToDiscriminator",
    discriminators=cms.VPSet(
        cms.PSet(name=cms.string("QCD"), numerator=tags("pfParticleNetJetTags", *QCD), denominator=cms.VInputTag()),
        ratio("TvsQCD", ["probTbcq", "probTbqq"]),
        ratio("WvsQCD", ["probWcq", "probWqq"]),
        ratio("ZvsQCD", ["probZbb", "probZcc", "probZqq"]),
        ratio("HbbvsQCD", ["probHbb"]),
        ratio("HccvsQCD", ["probHcc"]),
        ratio("H4qvsQCD", ["probHqqqq"]),
    ),
)
process.pfMassDecorrelatedParticleNetDiscriminatorsJetTags = cms.EDProducer(
    "BTagProbabilityToDiscriminator",
    discriminators=cms.VPSet(
        cms.PSet(
            name=cms.string("QCD"),
            numerator=tags("pfMassDecorrelatedParticleNetJetTags", *QCD),
            denominator=cms.VInputTag(),
        ),
    ),
)

# NanoAOD's FatJet columns: particleNet_<X> and particleNetMD_<X>
NOMINAL = ["QCD", "TvsQCD", "WvsQCD", "ZvsQCD", "HbbvsQCD", "HccvsQCD", "H4qvsQCD"]
COLUMNS = {
    "particleNet": {n: cms.InputTag(f"pfParticleNetDiscriminatorsJetTags:{n}") for n in NOMINAL},
    "particleNetMD": {
        "QCD": cms.InputTag("pfMassDecorrelatedParticleNetDiscriminatorsJetTags:QCD"),
        **{x: cms.InputTag(f"pfMassDecorrelatedParticleNetJetTags:prob{x}") for x in ("Xbb", "Xcc", "Xqq")},
    },
}
process.FatJet_particleNet = cms.EDProducer("JetTagTableProducer", variables=cms.PSet(**COLUMNS["particleNet"]))
process.FatJet_particleNetMD = cms.EDProducer("JetTagTableProducer", variables=cms.PSet(**COLUMNS["particleNetMD"]))
process.particleNetTask = cms.Task(
    process.pfParticleNetTagInfos,
    process.pfParticleNetJetTags,
    process.pfMassDecorrelatedParticleNetJetTags,
    process.pfParticleNetDiscriminatorsJetTags,
    process.pfMassDecorrelatedParticleNetDiscriminatorsJetTags,
)
process.particleNet = cms.Path(process.FatJet_particleNet + process.FatJet_particleNetMD, process.particleNetTask)

process.out = cms.OutputModule(
    "NanoAODOutputModule",
    fileName=cms.untracked.string(options.outputFile),
    outputCommands=cms.untracked.vstring(
        "drop *", "keep FatJet_pt", "keep FatJet_eta", "keep FatJet_phi", "keep FatJet_particleNet*"
    ),
)
process.outpath = cms.EndPath(process.out)

if options.compare:
    scores = {f"{table}_{n}": tag for table, columns in COLUMNS.items() for n, tag in columns.items()}
    process.agreement = cms.EDAnalyzer(
        "JetTagAgreementAnalyzer", jets=cms.InputTag("FatJet"), scores=cms.PSet(**scores)
    )
    process.outpath += process.agreement
