"""SONIC: inference as a service on NVIDIA Triton (CMSSW's HeterogeneousCore/Sonic*).

Layering: this subpackage is the only part of the framework that knows about Triton
(tritonclient, the tritonserver binary). It builds on the core's ExternalWork and bridge.

Files, in the direction of their imports: each imports only files listed before it
(``tests/test_layering.py`` checks that there is no cycle and that the client side never
reaches TritonService's parts):

* ``python_backend``, ``onnx_backend``, ``torch_backend``: the framework's Triton
  Python-backend model and its ONNX (onnxruntime) and TorchScript (torch, GPU) runners;
  they run inside the server's Python and import nothing else of the framework (the
  direct twins use the ONNX runner in-process);
* ``_server_info``: :class:`ServerInfo`, :class:`SslOptions` (where a server listens, how
  to open a channel), the fallback server's name;
* ``_data``: :class:`TensorSpec`, :class:`TritonInputData` / :class:`TritonOutputData` and
  the maps :class:`TritonInputMap` / :class:`TritonOutputMap` (CMSSW's names);
* ``_client_stats``: :class:`ClientStatistics` and the client's thread-safe counters;
* ``_shm``: the clients' system shared-memory regions: a pool per client and server,
  registration, cleanup (end of job, failover, dead jobs' regions), which servers are on
  this host;
* ``_transport``: how a call's tensors travel (``Client.useSharedMemory``): through a
  shared-memory region or as gRPC payloads;
* ``_installation``, ``_processes``, ``_server``: the tritonserver binary and its
  processes, ``LocalTritonServer``; ``_cmstriton``: the ``cmstriton`` command;
* ``testing`` (public, not imported here): tiny Python-backend models written into a
  repository and a server that is checked to leave nothing behind, for tests and benchmarks;
* ``_retry``: ``Client.retries`` (:class:`RetryAction`) and ``RetryPolicy``, the retry loop,
  which drives the ``Router`` and the callables it is given;
* ``_batching``: ``Client.batching``, cross-event batching: the :class:`Batcher` merging
  the requests of events in flight for one model into one call, and giving each its rows;
* ``_request``: :class:`TritonRequest`, one event's inference in the three modes; sees its
  client through the ``RequestClient`` interface;
* ``_client``: :class:`TritonClient`: model metadata, options, counters, retry policy;
* ``_producer``: :class:`SonicEDProducer` / :class:`SonicEDFilter`;
* ``_twins``: a model's SONIC producer and its direct (in-process onnxruntime) twin
  sharing one conversion: :class:`ModelConversion`, :class:`SonicConversionProducer`,
  :class:`OnnxDirectProducer`;
* ``_fallback``: the fallback server's life (start on demand, restart, load, stop);
* ``_routing``: ``Routing``, the clients' router: a request's server (``route``), server
  health and probes, the shared gRPC clients; it owns the fallback;
* ``_service_stats``: the end-of-job numbers and tables;
* ``_service``: :class:`TritonService`, thin: parameters, discovery and assignment at
  begin_job, ``connect``, end_job.
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
from ._twins import ModelConversion as ModelConversion
from ._twins import OnnxDirectProducer as OnnxDirectProducer
from ._twins import SonicConversionProducer as SonicConversionProducer
