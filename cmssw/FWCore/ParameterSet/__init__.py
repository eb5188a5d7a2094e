"""CMSSW's ``FWCore.ParameterSet``: the configuration language, from ``framework.config``."""
