"""SONIC: inference as a service on NVIDIA Triton (CMSSW's HeterogeneousCore/Sonic*).

Layering: this subpackage is the only part of the framework that knows about Triton
(tritonclient, the tritonserver binary). It builds on the core's ExternalWork and bridge.
"""

from ._client import ClientStatistics as ClientStatistics
from ._client import ServerInfo as ServerInfo
from ._client import SslOptions as SslOptions
from ._client import TensorSpec as TensorSpec
from ._client import TritonClient as TritonClient
from ._client import TritonInputData as TritonInputData
from ._client import TritonOutputData as TritonOutputData
from ._client import TritonRequest as TritonRequest
from ._client import client_description as client_description
from ._producer import SonicEDFilter as SonicEDFilter
from ._producer import SonicEDProducer as SonicEDProducer
from ._service import TritonService as TritonService
