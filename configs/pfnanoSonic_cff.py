"""PFNano input and TritonService with an optional server: what the PFNano SONIC jobs share.

    from pfnanoSonic_cff import pfnano_options, pfnano_sonic

    options = pfnano_options("my_output.root")  # VarParsing("analysis") + server
    options.register(...)                        # the job's own options
    options.parseArguments()
    process = cms.Process("NAME", *modifiers)
    pfnano_sonic(process, options)

The options are CMSSW's ``VarParsing("analysis")`` standard set (``inputFiles``,
``outputFile``, ``maxEvents``, ``secondaryInputFiles``, ...) plus ``server``. Two
differences from CMSSW's preset, both to keep these jobs' behaviour: ``outputFile`` is a
plain string here (the preset's ``tagString`` would write ``x_numEvent10.root`` for
``maxEvents=10``), and no ``inputFiles`` means the real ``pfnano.root`` sample (located or
fetched and checksum-verified by ``framework.io.samples``), not an empty source.

A fragment (``_cff``): ``cmsrun`` puts the config's folder first on ``sys.path`` while it
runs, and forgets the fragment afterwards, so each job gets fresh objects.
"""

import framework.config as cms


def pfnano_options(output_file):
    """``VarParsing("analysis")`` with ``outputFile`` defaulting to ``output_file`` (not
    tagged) and ``server``: ``address:port`` of a Triton server (empty: none)."""
    V = cms.VarParsing  # noqa: N806 - CMSSW configs' alias
    options = V("analysis")
    options.setType("outputFile", V.varType.string)
    options.setDefault("outputFile", output_file)
    server_help = "address:port of a Triton server to use (empty: the fallback local server)"
    options.register("server", "", V.multiplicity.singleton, V.varType.string, server_help)
    return options


def remote_server(server):
    """The ``TritonService.servers`` entry (named ``remote``) of ``server`` = ``address:port``
    (gRPC), optionally followed by ``,http://address:port``: its HTTP endpoint (``httpPort``,
    a pysonic extension: the HTTP transport, ``Client.transport``).

    Raises:
        UsageError: ``server`` is not ``address:port`` with a TCP port 1-65535 (one line naming it).
    """
    grpc, _, http = server.partition(",http://")
    address, port = cms.host_port(grpc, "server")
    entry = cms.PSet(
        name=cms.untracked.string("remote"),
        address=cms.untracked.string(address),
        port=cms.untracked.uint32(port),
    )
    if http:
        entry.httpPort = cms.untracked.uint32(cms.host_port(http, "server")[1])
    return entry


def pfnano_sonic(process, options):
    """The source, ``maxEvents`` and TritonService of ``process`` from ``options``
    (:func:`pfnano_options`): PoolSource of ``inputFiles`` (the real sample if none),
    CMSSW's TritonService (``HeterogeneousCore.SonicTriton.TritonService_cff``: its fallback
    server under the ``enableSonicTriton`` modifier) with ``server`` as its server
    ``remote`` when given."""
    input_files = options.inputFiles
    if not input_files:
        from framework.io.samples import locate_sample

        input_files = [str(locate_sample("pfnano.root"))]
    process.source = cms.Source("PoolSource", fileNames=cms.untracked.vstring(*input_files))
    process.maxEvents.input = options.maxEvents
    process.load("HeterogeneousCore.SonicTriton.TritonService_cff")
    if options.server:
        process.TritonService.servers.append(remote_server(options.server))
