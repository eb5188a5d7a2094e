import FWCore.ParameterSet.Config as cms

from Configuration.ProcessModifiers.enableSonicTriton_cff import enableSonicTriton
from Configuration.ProcessModifiers.particleNetSonicTriton_cff import particleNetSonicTriton
from Configuration.ProcessModifiers.deepMETSonicTriton_cff import deepMETSonicTriton

# all the SONIC (Triton) process modifiers; as in CMSSW, not particleNetPTSonicTriton (which
# only chooses the TorchScript model files, asked for on its own)
allSonicTriton = cms.ModifierChain(enableSonicTriton, particleNetSonicTriton, deepMETSonicTriton)
