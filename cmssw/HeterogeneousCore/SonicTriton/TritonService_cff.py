from HeterogeneousCore.SonicTriton.TritonService_cfi import *

from Configuration.ProcessModifiers.enableSonicTriton_cff import enableSonicTriton
from framework.serving import resolve_device as _resolve_device

# As CMSSW's: under enableSonicTriton the fallback server starts for the models no server
# serves, on the GPU when one is visible (CMSSW asks its CUDA service, pysonic nvidia-smi).
enableSonicTriton.toModify(TritonService,
    fallback = dict(
        enable = True,
        useGPU = _resolve_device("auto", "TritonService_cff") == "gpu",
    ),
)
