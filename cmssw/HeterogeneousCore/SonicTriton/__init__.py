"""CMSSW's ``HeterogeneousCore.SonicTriton``: TritonService's cfi and cff (pysonic's ``framework.service``)."""
