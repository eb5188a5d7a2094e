"""The benchmark jobs' Triton server from their ``server=`` option (what they share).

from framework.bench.configs.benchServer_cff import servers_from
process.TritonService = cms.Service("TritonService", servers=servers_from(options.server, "bench"), ...)

``server=host:port`` is its gRPC endpoint; ``server=host:port,http://host:port`` declares its
HTTP endpoint too (``httpPort``: ``Client.transport`` ``auto`` and ``http`` use it). An
HTTP endpoint alone is not enough: discovery, metadata and statistics go over gRPC.
"""

import framework.config as cms
from framework.utilities import UsageError

HTTP = "http://"


def servers_from(server, name):
    """``TritonService.servers``: one server called ``name`` at ``server`` (``host:port`` of its
    gRPC endpoint, optionally ``,http://host:port`` of its HTTP one; each a TCP port 1-65535,
    else a one-line usage error naming the option), or none for ``""``."""
    if not server:
        return cms.untracked.VPSet()
    grpc = [part for part in server.split(",") if not part.startswith(HTTP)]
    http = [part[len(HTTP) :] for part in server.split(",") if part.startswith(HTTP)]
    if len(grpc) != 1 or len(http) > 1:
        raise UsageError(
            f"argument 'server={server}': expected host:port (gRPC), optionally followed by ,http://host:port"
        )
    address, port = cms.host_port(grpc[0], "server")
    entry = cms.PSet(
        name=cms.untracked.string(name), address=cms.untracked.string(address), port=cms.untracked.uint32(port)
    )
    if http:
        http_host, http_port = cms.host_port(http[0], "server")
        if http_host != address:
            raise UsageError(f"argument 'server={server}': the HTTP endpoint must be on the same host ({address})")
        entry.httpPort = cms.untracked.uint32(http_port)
    return cms.untracked.VPSet(entry)
