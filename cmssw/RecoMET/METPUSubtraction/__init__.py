"""CMSSW's ``RecoMET.METPUSubtraction``: ``deepMETSonicProducer_cfi`` (pysonic's ``modules.deepmet``)."""
