"""CMSSW's ``FWCore.MessageLogger.MessageLogger_cfi``: the same as ``FWCore.MessageService.MessageLogger_cfi``."""

from FWCore.MessageService.MessageLogger_cfi import *  # noqa: F403 - CMSSW's file does the same
