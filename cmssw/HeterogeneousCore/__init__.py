"""CMSSW's ``HeterogeneousCore`` import names (SONIC's fragments), over ``framework``."""
