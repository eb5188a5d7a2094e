import FWCore.ParameterSet.Config as cms

# With particleNetSonicTriton: ParticleNet's JetTags through SONIC use CMS's TorchScript
# models (particlenet_PT, ...) and their preprocess_PT.json (CMSSW's pfParticleNet_cff).
particleNetPTSonicTriton = cms.Modifier()
