"""CMSSW's ``FWCore.ParameterSet.VarParsing``: ``from FWCore.ParameterSet.VarParsing import VarParsing``."""

from framework.config import VarParsing as VarParsing
