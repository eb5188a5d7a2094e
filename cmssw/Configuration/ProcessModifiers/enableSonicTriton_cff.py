import FWCore.ParameterSet.Config as cms

# Enables TritonService's fallback server (HeterogeneousCore.SonicTriton.TritonService_cff).
enableSonicTriton = cms.Modifier()
