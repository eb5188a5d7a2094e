"""CMSSW's ``FWCore`` import names, as thin aliases of pysonic's ``framework`` (see cmssw/README.md)."""
