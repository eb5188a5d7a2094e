"""SONIC's client: inference as a service on NVIDIA Triton (CMSSW's HeterogeneousCore/Sonic*).

Layering: the client side of SONIC, built on the core's ExternalWork; what it may import
is written once, in :mod:`framework` (``tests/test_layering.py`` checks it).

Files, in the direction of their imports: each imports only files listed before it
(``tests/test_layering.py`` checks that there is no cycle):

* ``_server_info``: :class:`ServerInfo`, :class:`SslOptions` (where a server listens, how
  to open a channel), the fallback server's name;
* ``_waits``: the waits of a request's path as steps (``Sleep``, ``Blocking``, ``Attempt``)
  and the two drivers that do them, in trio or blocking: the retry loop, the routing's
  probes and the fallback's start are written once, as generators of steps; the gRPC
  status of an error (``grpc_status``);
* ``_data``: :class:`TensorSpec`, :class:`TritonInputData` / :class:`TritonOutputData` and
  the maps :class:`TritonInputMap` / :class:`TritonOutputMap` (CMSSW's names);
* ``_client_stats``: :class:`ClientStatistics` and the client's thread-safe counters;
* ``_model_config``: the client's model checks at begin_job, as CMSSW's ``TritonClient``
  makes them: the local ``config.pbtxt`` (``Client.modelConfigPath``, parsed with
  tritonclient's ``model_config_pb2``) against the server's metadata, and ModelVersioning
  (checksum sums of the local and the served config);
* ``_oip``: Open Inference Protocol servers other than Triton (Seldon MLServer, KServe):
  discovery without a repository index, a model without ``ModelConfig``, which RPCs a
  server lacks (UNIMPLEMENTED);
* ``_shm``: the clients' system shared-memory regions: a pool per client and server,
  registration, cleanup (end of job, failover, dead jobs' regions), which servers are on
  this host;
* ``_wire``: Triton's ``ModelInfer`` request written from the input arrays, and the
  response's outputs read as numpy views (the protobuf wire format, by hand);
* ``_http``: the Open Inference Protocol's HTTP ``infer`` with Triton's binary tensor
  extension, written and read on trio's own sockets (keep-alive connections per server);
* ``_transport``: how a call's tensors travel (``Client.useSharedMemory``,
  ``Client.transport``): through a shared-memory region or as payloads, over HTTP or gRPC;
* ``_retry``: ``Client.retries`` (:class:`RetryAction`) and ``RetryPolicy``, the retry loop
  (one generator of steps for the three modes), which drives the ``Router`` and the
  callables it is given;
* ``_batching``: ``Client.batching``, cross-event batching: the :class:`~framework.sonic._batching.Batcher` merging
  the requests of events in flight for one model into one call, and giving each its rows;
* ``_request``: :class:`TritonRequest`, one event's inference in the three modes; sees its
  client through the ``RequestClient`` interface;
* ``_client``: :class:`TritonClient`: model metadata, options, counters, retry policy;
* ``_producer``: :class:`SonicEDProducer` / :class:`SonicEDFilter` /
  :class:`SonicEDAnalyzer` / :class:`SonicOneEDAnalyzer`;
* ``_pool``: the configured servers as a pool that changes during the job: surveys (READY
  models, Triton's queue time and executions) and saturation (queue time per execution);
* ``_health``: :class:`ServerBook`, the records of the job's servers: what each serves
  (begin_job and the pool's surveys), its health (failures, outages, due probes) and load
  (requests outstanding, latency, saturation); it chooses nothing;
* ``_routing``: ``Routing``, the clients' router: a request's server (``route``), chosen
  from the book's records, the probes and surveys it asks for, the shared gRPC clients; it
  owns the fallback, which it sees through its :class:`~framework.sonic._routing.Fallback`
  interface (made by TritonService).

The names below are the client's public API: for module authors (``SonicEDProducer``, the
tensor maps, the retry parameters) and for the packages above it (``framework.service``,
``framework.inference``, ``framework.cmsrun.executor``: the router, the server descriptions, the
waits as steps), which import them from here and never from the files.
"""

from ._client import TritonClient as TritonClient
from ._client import client_description as client_description
from ._client import resolve_config_path as resolve_config_path
from ._client_stats import ClientStatistics as ClientStatistics
from ._data import BatchRows as BatchRows
from ._data import TensorSpec as TensorSpec
from ._data import TritonInputData as TritonInputData
from ._data import TritonInputMap as TritonInputMap
from ._data import TritonOutputData as TritonOutputData
from ._data import TritonOutputMap as TritonOutputMap
from ._health import ServerBook as ServerBook
from ._health import ServerHealth as ServerHealth
from ._http import close_idle_connections as close_idle_connections
from ._oip import unimplemented as unimplemented
from ._pool import DiscoveryParameters as DiscoveryParameters
from ._producer import SonicEDAnalyzer as SonicEDAnalyzer
from ._producer import SonicEDFilter as SonicEDFilter
from ._producer import SonicEDProducer as SonicEDProducer
from ._producer import SonicOneEDAnalyzer as SonicOneEDAnalyzer
from ._request import TritonRequest as TritonRequest
from ._retry import DEFAULT_RETRIES as DEFAULT_RETRIES
from ._retry import RECOMMENDED_RETRIES as RECOMMENDED_RETRIES
from ._retry import RetryAction as RetryAction
from ._retry import is_recoverable as is_recoverable
from ._retry import recommended_retries as recommended_retries
from ._retry import retries_pset as retries_pset
from ._routing import Routing as Routing
from ._routing import ready_models as ready_models
from ._server_info import FALLBACK_SERVER as FALLBACK_SERVER
from ._server_info import ServerInfo as ServerInfo
from ._server_info import SslOptions as SslOptions
from ._server_info import request_metadata as request_metadata
from ._shm import shm_region_name as shm_region_name
from ._waits import Blocking as Blocking
from ._waits import Steps as Steps
from ._waits import grpc_status as grpc_status
