import FWCore.ParameterSet.Config as cms

deepMETSonicTriton = cms.Modifier()
