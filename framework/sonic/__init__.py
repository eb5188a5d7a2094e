"""SONIC: inference as a service on NVIDIA Triton (CMSSW's HeterogeneousCore/Sonic*).

Layering: this subpackage is the only part of the framework that knows about Triton
(tritonclient, the tritonserver binary). It builds on the core's ExternalWork and bridge.

Files: ``_client`` (TritonClient, per-event TritonRequest), ``_retry`` (retry policy and
failover, ``Client.retries``), ``_service`` (TritonService: discovery, routing, server
health, fallback server), ``_service_stats`` (end-of-job numbers), ``_server``
(LocalTritonServer), ``_producer`` (SonicEDProducer/SonicEDFilter).
"""

from ._client import TritonClient as TritonClient
from ._client import client_description as client_description
from ._client_stats import ClientStatistics as ClientStatistics
from ._data import TensorSpec as TensorSpec
from ._data import TritonInputData as TritonInputData
from ._data import TritonInputMap as TritonInputMap
from ._data import TritonOutputData as TritonOutputData
from ._data import TritonOutputMap as TritonOutputMap
from ._producer import SonicEDFilter as SonicEDFilter
from ._producer import SonicEDProducer as SonicEDProducer
from ._request import TritonRequest as TritonRequest
from ._retry import DEFAULT_RETRIES as DEFAULT_RETRIES
from ._retry import RetryAction as RetryAction
from ._retry import is_recoverable as is_recoverable
from ._routing import ServerHealth as ServerHealth
from ._server_info import ServerInfo as ServerInfo
from ._server_info import SslOptions as SslOptions
from ._service import TritonService as TritonService
