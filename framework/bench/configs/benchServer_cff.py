"""The benchmark jobs' Triton server from their ``server=host:port`` option (what they share).

from framework.bench.configs.benchServer_cff import servers_from
process.TritonService = cms.Service("TritonService", servers=servers_from(options.server, "bench"), ...)
"""

import framework.config as cms


def servers_from(server, name):
    """``TritonService.servers``: one server called ``name`` at ``server`` (``host:port``, a TCP
    port 1-65535, else a one-line usage error naming the option), or none for ``""``."""
    if not server:
        return cms.untracked.VPSet()
    address, port = cms.host_port(server, "server")
    return cms.untracked.VPSet(
        cms.PSet(
            name=cms.untracked.string(name), address=cms.untracked.string(address), port=cms.untracked.uint32(port)
        )
    )
