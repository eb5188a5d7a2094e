"""CMSSW's ``RecoMET`` import names (the DeepMET SONIC producer's cfi), over pysonic's ``modules``."""
