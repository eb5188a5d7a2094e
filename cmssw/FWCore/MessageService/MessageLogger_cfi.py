"""CMSSW's ``FWCore.MessageService.MessageLogger_cfi``: the MessageLogger with CMSSW's defaults.

``process.load("FWCore.MessageService.MessageLogger_cfi")`` (slashes accepted). The
service maps these settings onto Python logging: ``framework/core/_messagelogger.py`` says which
have an effect. ``categories`` (a list that older configs append to) is kept for them.
"""

import FWCore.ParameterSet.Config as cms

MessageLogger = cms.Service(
    "MessageLogger",
    suppressWarning=cms.untracked.vstring(),
    suppressFwkInfo=cms.untracked.vstring(),
    suppressInfo=cms.untracked.vstring(),
    suppressDebug=cms.untracked.vstring(),
    debugModules=cms.untracked.vstring(),
    categories=cms.untracked.vstring("FwkReport", "FwkSummary", "Root_NoDictionary"),
    default=cms.untracked.PSet(),
    cout=cms.untracked.PSet(enable=cms.untracked.bool(False)),
    cerr=cms.untracked.PSet(
        enable=cms.untracked.bool(True),
        threshold=cms.untracked.string("INFO"),
        noTimeStamps=cms.untracked.bool(False),
        INFO=cms.untracked.PSet(limit=cms.untracked.int32(0)),
        default=cms.untracked.PSet(limit=cms.untracked.int32(10000000)),
        FwkReport=cms.untracked.PSet(reportEvery=cms.untracked.int32(1), limit=cms.untracked.int32(10000000)),
        FwkSummary=cms.untracked.PSet(reportEvery=cms.untracked.int32(1), limit=cms.untracked.int32(10000000)),
        Root_NoDictionary=cms.untracked.PSet(limit=cms.untracked.int32(0)),
    ),
    files=cms.untracked.PSet(),
)
