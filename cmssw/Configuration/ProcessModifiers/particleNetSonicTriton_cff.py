import FWCore.ParameterSet.Config as cms

particleNetSonicTriton = cms.Modifier()
