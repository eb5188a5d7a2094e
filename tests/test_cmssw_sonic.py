"""SONIC's parameter sets as CMSSW defines them, CMSSW's module packages, and its test producer.

References (read, never copied): cms-sw/cmssw HeterogeneousCore/SonicTriton/src/
TritonClient.cc and SonicCore/src/SonicClientBase.cc (``fillPSetDescription``),
SonicTriton/src/TritonService.cc (``fillDescriptions``), SonicTriton/test/
TritonIdentityProducer.cc, in the release whose ``tritonTest_cfg.py`` uses VarParsing. The
expected rows below are CMSSW's specification, written out by hand.

The end-to-end test runs a REAL tritonserver serving a Python-backend identity model with
``allow_ragged_batch`` (CMSSW's ``ragged_io`` is an ONNX model; serving it needs the
standard-repository support of another branch).
"""

from __future__ import annotations

import importlib
import io
import logging
import pathlib
import sys
import textwrap

import numpy as np
import pytest
from rich.console import Console

import framework
import framework.config as cms
from framework import EDAnalyzer
from framework.cmsrun._main import _describe
from framework.core import build_job, run_job
from framework.service import TritonService
from framework.serving.testing import TensorConfig, write_python_model
from framework.sonic import TritonClient, client_description
from framework.utilities import ConfigurationError
from modules.deepmet import DeepMETSonicProducer
from modules.sonic_tests import BATCH_SIZES, RAGGED_ENTRIES

from support import cms_models

ROOT = pathlib.Path(__file__).resolve().parents[1]

# CMSSW's Client PSet: name -> (type as pysonic names it, tracked, default or "required").
CMSSW_CLIENT = {
    "mode": ("string", True, "PseudoAsync"),
    "modelName": ("string", True, "required"),
    "modelVersion": ("string", True, ""),
    "modelConfigPath": ("FileInPath", True, "required"),
    "preferredServer": ("string", False, ""),
    "timeout": ("uint32", False, "required"),
    "timeoutUnit": ("string", False, "seconds"),
    "verbose": ("bool", False, False),
    "allowedTries": ("uint32", False, 0),
    "useSharedMemory": ("bool", False, True),
    "compression": ("string", False, ""),
    "outputs": ("vstring", False, []),
}
CMSSW_FALLBACK = {
    "enable": ("bool", False),
    "debug": ("bool", False),
    "verbose": ("bool", False),
    "useDocker": ("bool", False),
    "useGPU": ("bool", False),
    "retries": ("int32", -1),
    "wait": ("int32", -1),
    "instanceBaseName": ("string", "triton_server_instance"),
    "instanceName": ("string", ""),
    "tempDir": ("string", ""),
    "imageName": ("string", ""),
    "sandboxName": ("string", ""),
}


def rows(desc: cms.ParameterSetDescription) -> dict[str, cms.DescriptionRow]:
    return {row.name: row for row in desc.describe()}


def test_the_client_pset_is_cmssws():
    described = rows(client_description())
    for name, (type_name, tracked, default) in CMSSW_CLIENT.items():
        row = described[name]
        assert row.type_name == (type_name if tracked else f"untracked {type_name}"), name
        assert row.default == ("required" if default == "required" else repr(default)), name
        assert not row.extension, name
    extensions = {name for name, row in described.items() if row.extension and "." not in name}
    assert extensions == {"batchMode", "retries", "batching", "transport"}
    assert described["batching.maxRows"].extension  # nested rows of an extension are extensions
    # Later CMSSW releases' Retry VPSet is CMSSW's, not an extension.
    assert not described["Retry"].extension and described["Retry"].type_name == "VPSet"


def test_the_client_defaults_are_cmssws(monkeypatch):
    params = client_description().validate(
        {"modelName": "m", "modelConfigPath": "models/facile/config.pbtxt", "timeout": cms.untracked.uint32(5)}, "c"
    )
    client = TritonClient(params)
    assert (client.mode, client.retries, client.compression, client.timeout) == ("PseudoAsync", (), None, 5.0)
    monkeypatch.setenv("CMSSW_SEARCH_PATH", str(cms_models()))  # ragged_io's config, as CMSSW finds it
    # CMSSW's tritonTest_cfg.py spelling: mode and modelVersion tracked, compression "" = none.
    cmssw_spelling = cms.PSet(
        mode=cms.string("Async"),
        preferredServer=cms.untracked.string(""),
        timeout=cms.untracked.uint32(30),
        modelName=cms.string("ragged_io"),
        modelVersion=cms.string(""),
        modelConfigPath=cms.FileInPath("HeterogeneousCore/SonicTriton/data/models/ragged_io/config.pbtxt"),
        verbose=cms.untracked.bool(False),
        allowedTries=cms.untracked.uint32(0),
        useSharedMemory=cms.untracked.bool(True),
        compression=cms.untracked.string(""),
    )
    assert TritonClient(client_description().validate(cmssw_spelling, "c")).mode == "Async"
    with pytest.raises(ConfigurationError, match=r"parameter 'mode': expected string, got untracked string"):
        client_description().validate({**dict(cmssw_spelling.parameters_()), "mode": cms.untracked.string("Sync")}, "c")
    for missing in ("modelConfigPath", "timeout"):
        with pytest.raises(ConfigurationError, match=f"missing required parameter '{missing}'"):
            client_description().validate({k: v for k, v in cmssw_spelling.parameters_().items() if k != missing}, "c")


def test_model_config_path_is_looked_up_as_cmssws_file_in_path(tmp_path, monkeypatch):
    from framework.sonic import resolve_config_path

    (tmp_path / "b" / "Pkg" / "data").mkdir(parents=True)
    (tmp_path / "b" / "Pkg" / "data" / "config.pbtxt").write_text("")
    monkeypatch.setenv("CMSSW_SEARCH_PATH", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    assert resolve_config_path("Pkg/data/config.pbtxt") == tmp_path / "b" / "Pkg" / "data" / "config.pbtxt"
    # then the project's data/ folder
    assert resolve_config_path("models/deepmet/config.pbtxt") == ROOT / "data" / "models" / "deepmet" / "config.pbtxt"

    class Resolved:  # a path-like value (cms.FileInPath) resolves itself
        def __fspath__(self):
            return str(tmp_path / "elsewhere.pbtxt")

    assert resolve_config_path(Resolved()) == tmp_path / "elsewhere.pbtxt"


def test_the_triton_service_pset_is_cmssws():
    desc = cms.ParameterSetDescription()
    TritonService.fill_descriptions(desc)
    described = rows(desc)
    assert described["verbose"].type_name == "untracked bool" and described["verbose"].default == "False"
    assert described["servers"].type_name == "untracked VPSet" and described["servers"].default == "[]"
    assert described["servers[].port"].default == "required"
    assert described["fallback"].type_name == "PSet"  # tracked, as in CMSSW
    for name, (type_name, default) in CMSSW_FALLBACK.items():
        row = described[f"fallback.{name}"]
        assert (row.type_name, row.default, row.extension) == (f"untracked {type_name}", repr(default), False), name
    extensions = {name for name, row in described.items() if row.extension}
    assert extensions == {
        "fallback.instances",
        "fallback.modelRepository",
        "health",
        "health.unhealthyAfter",
        "health.probeInterval",
        "health.probeTimeout",
        "servers[].headers",
        "servers[].bearerTokenFile",
        "servers[].bearerTokenVariable",
        "servers[].httpPort",
        "discovery",
        "discovery.wait",
        "discovery.interval",
        "discovery.saturatedAbove",
    }


def service(**fallback) -> TritonService:
    desc = cms.ParameterSetDescription()
    TritonService.fill_descriptions(desc)
    return TritonService(desc.validate({"fallback": fallback}, "TritonService"))


def test_a_server_declares_its_http_endpoint():
    """pysonic's httpPort (0 = none): the server's HTTP endpoint for Client.transport."""
    desc = cms.ParameterSetDescription()
    TritonService.fill_descriptions(desc)
    servers = [
        {"name": "a", "address": "h", "port": 8001, "httpPort": 8000},
        {"name": "b", "address": "h", "port": 9001},
    ]
    svc = TritonService(desc.validate({"servers": servers}, "TritonService"))
    assert (svc.routing.book.servers["a"].http_address, svc.routing.book.servers["b"].http_address) == ("h:8000", "")
    with pytest.raises(ConfigurationError, match=r"servers 'a': httpPort: 70000 is not a TCP port"):
        TritonService(desc.validate({"servers": [{**servers[0], "httpPort": 70000}]}, "TritonService"))


@pytest.mark.parametrize(
    ("fallback", "message"),
    [
        ({"useDocker": True}, r"TritonService: fallback.useDocker = True: the fallback server here is a local"),
        ({"container": "podman"}, r"TritonService: fallback.container = 'podman': .* never a container$"),
        ({"device": "tpu"}, r"TritonService: fallback.device='tpu' is not one of cpu, gpu, auto$"),
    ],
)
def test_what_cannot_be_done_here_is_one_line(fallback, message):
    with pytest.raises(ConfigurationError, match=message) as info:
        service(**fallback)
    assert "\n" not in str(info.value)


def test_fallback_keys_with_no_meaning_here_are_accepted():
    svc = service(
        enable=True,
        debug=True,
        retries=3,
        wait=-1,
        instanceBaseName="x",
        instanceName="y",
        tempDir="/tmp",
        imageName="img",
        sandboxName="sb",
        useGPU=False,
    )
    params = svc._fallback.params
    assert (params.enable, params.device, params.wait) == (True, "cpu", 120)  # wait -1 = pysonic's default
    assert service(useGPU=False, device="gpu")._fallback.params.device == "gpu"  # later releases' key wins
    assert service(wait=30)._fallback.params.wait == 30


def test_the_site_server_from_sonic_local_balancer(monkeypatch, caplog):
    monkeypatch.setenv("SONIC_LOCAL_BALANCER_HOST", "triton.example")
    monkeypatch.setenv("SONIC_LOCAL_BALANCER_PORT", "8005")
    servers = service().routing.book.servers
    assert list(servers)[0] == "SONIC_LOCAL_BALANCER"
    assert servers["SONIC_LOCAL_BALANCER"].address == "triton.example:8005"
    monkeypatch.delenv("SONIC_LOCAL_BALANCER_PORT")
    with caplog.at_level(logging.WARNING, logger="pysonic.sonic"):
        assert "SONIC_LOCAL_BALANCER" not in service().routing.book.servers
    assert any("incomplete server information" in r.getMessage() for r in caplog.records)


def test_a_job_without_triton_service_gets_the_fallback_enabled():
    implicit = TritonService.implicit_parameters()
    desc = cms.ParameterSetDescription()
    TritonService.fill_descriptions(desc)
    assert desc.validate(implicit, "TritonService").fallback.enable
    assert not desc.validate({}, "TritonService").fallback.enable  # a configured one: CMSSW's default


def test_describe_marks_the_extensions_and_says_the_mode_is_kept():
    out = io.StringIO()
    _describe("DeepMETSonicProducer", Console(file=out, width=400))
    text = out.getvalue()
    assert "Client.batching *" in text and "Client.retries *" in text and "src *" in text
    assert "Client.allowedTries *" not in text and "pf_src *" not in text
    assert "pysonic extension" in text
    assert "kept as given when the server is the local CPU fallback" in text


# -- CMSSW's module packages --------------------------------------------------------------


def test_the_committed_cfis_are_up_to_date():
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        generate_cfis = importlib.import_module("generate_cfis")
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert generate_cfis.stale() == []  # else: python scripts/generate_cfis.py
    text = (ROOT / "cmssw" / "RecoMET" / "METPUSubtraction" / "deepMETSonicProducer_cfi.py").read_text()
    assert "deepMETSonicProducer = cms.EDProducer('DeepMETSonicProducer'," in text
    assert "    timeout = cms.required.untracked.uint32," in text
    assert "  pf_src = cms.InputTag('PFCands')," in text


def test_cmssw_packages_have_an_init_in_every_folder():
    for folder in (ROOT / "cmssw").rglob("*"):
        if folder.is_dir() and any(folder.glob("*.py")):
            assert (folder / "__init__.py").is_file(), folder


def _cmssw_config_language():
    """FWCore's config language with CMSSW's generated-cfi helpers (another branch's work)."""
    config = pytest.importorskip("FWCore.ParameterSet.Config")
    if not hasattr(config, "required") or not hasattr(config, "Modifier"):
        pytest.skip("FWCore.ParameterSet.Config has no cms.required / cms.Modifier yet")
    return config


def test_a_deepmet_fragment_as_cmssw_writes_it_validates(tmp_path, monkeypatch):
    _cmssw_config_language()
    # Our own fragment, using what CMSSW's deepMETSonicProducer_cff.py uses: the generated
    # cfi cloned with Client = dict(...) and plain values.
    (tmp_path / "my_deepmet_cff.py").write_text(
        textwrap.dedent("""
        import FWCore.ParameterSet.Config as cms
        from RecoMET.METPUSubtraction.deepMETSonicProducer_cfi import deepMETSonicProducer as _producer

        myDeepMET = _producer.clone(
            Client = dict(
                timeout = 30,
                mode = "Async",
                modelName = "deepmet",
                modelConfigPath = "models/deepmet/config.pbtxt",
                modelVersion = "1",
            ),
            pf_src = "PFCands",
        )
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("my_deepmet_cff").myDeepMET
    desc = cms.ParameterSetDescription()
    DeepMETSonicProducer.fill_descriptions(desc)
    params = desc.validate(module, "module 'myDeepMET' (type DeepMETSonicProducer)")
    assert (params.Client.mode, params.Client.timeout, params.pf_src.getModuleLabel()) == ("Async", 30, "PFCands")


def test_triton_service_cff_enables_the_fallback_under_enable_sonic_triton(monkeypatch):
    cms_ = _cmssw_config_language()
    modifiers = importlib.import_module("Configuration.ProcessModifiers.enableSonicTriton_cff")
    enableSonicTriton = modifiers.enableSonicTriton

    def load(process):  # as in a fresh cmsRun: the fragment runs (a module runs once per interpreter)
        for name in (
            "HeterogeneousCore.SonicTriton.TritonService_cff",
            "HeterogeneousCore.SonicTriton.TritonService_cfi",
        ):
            monkeypatch.delitem(sys.modules, name, raising=False)
        process.load("HeterogeneousCore.SonicTriton.TritonService_cff")
        return process

    assert not load(cms_.Process("PLAIN")).TritonService.fallback.enable
    cms_.Process._firstProcess = True  # a fresh cmsRun may choose Modifiers again (CMSSW)
    assert load(cms_.Process("ENABLED", enableSonicTriton)).TritonService.fallback.enable


# -- TritonIdentityProducer against a real tritonserver --------------------------------------

IDENTITY_PY = textwrap.dedent("""
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]
                )
                for r in requests
            ]
""")


class Received(EDAnalyzer):
    entries: list[list[np.ndarray]] = []

    @classmethod
    def fill_descriptions(cls, desc):
        desc.add("src", cms.InputTag("TritonIdentityProducer"))

    def __init__(self, params):
        self.src = self.consumes(params.src)

    def analyze(self, event):
        Received.entries.append(event.get(self.src))


framework.register_type("testIdentityReceived", Received)


@pytest.fixture(scope="module")
def ragged_server(tmp_path_factory, start_server):
    """A Python-backend stand-in for CMSSW's ragged_io: INPUT0 -> OUTPUT0, FP32 [-1], ragged."""
    repo = tmp_path_factory.mktemp("ragged")
    folder = write_python_model(
        repo,
        "ragged_io",
        IDENTITY_PY,
        inputs=[TensorConfig("INPUT0")],
        outputs=[TensorConfig("OUTPUT0")],
        max_batch_size=4,
        extra="dynamic_batching { }",
    )
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace("dims: [ -1 ] }", "dims: [ -1 ] allow_ragged_batch: true }", 1))
    assert "allow_ragged_batch: true" in config.read_text()
    return repo, start_server(repo)


@pytest.mark.parametrize("mode", ["PseudoAsync", "Async", "Sync"])
async def test_triton_identity_producer_sends_ragged_entries_and_reads_them_back(ragged_server, mode, caplog):
    repo, server = ragged_server
    host, port = server.grpc_address.rsplit(":", 1)
    process = cms.Process("tritonTest")
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = 4
    process.TritonService = cms.Service(
        "TritonService",
        verbose=cms.untracked.bool(True),
        servers=cms.untracked.VPSet(
            cms.PSet(
                name=cms.untracked.string("default"),
                address=cms.untracked.string(host),
                port=cms.untracked.uint32(int(port)),
            )
        ),
        fallback=cms.PSet(enable=cms.untracked.bool(False)),
    )
    # The Client as CMSSW's tritonTest_cfg.py writes it.
    process.TritonIdentityProducer = cms.EDProducer(
        "TritonIdentityProducer",
        Client=cms.PSet(
            mode=cms.string(mode),
            preferredServer=cms.untracked.string(""),
            timeout=cms.untracked.uint32(30),
            modelName=cms.string("ragged_io"),
            modelVersion=cms.string(""),
            modelConfigPath=cms.FileInPath(str(repo / "ragged_io" / "config.pbtxt")),
            verbose=cms.untracked.bool(True),
            allowedTries=cms.untracked.uint32(0),
            useSharedMemory=cms.untracked.bool(True),
            compression=cms.untracked.string(""),
        ),
    )
    process.received = cms.EDAnalyzer("testIdentityReceived")
    process.p = cms.Path(process.TritonIdentityProducer + process.received)
    Received.entries = []
    with caplog.at_level(logging.INFO):
        await run_job(build_job(process))
    sizes = [BATCH_SIZES[i % len(BATCH_SIZES)] for i in range(4)]  # 1, 2, 0, 1
    assert [len(entries) for entries in Received.entries] == sizes
    for entries, size in zip(Received.entries, sizes, strict=True):
        for got, sent in zip(entries, RAGGED_ENTRIES[:size], strict=True):
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got, np.asarray(sent, np.float32))
    messages = "\n".join(r.getMessage() for r in caplog.records)
    # Client.verbose: the model at the start, then per call the server-side statistics.
    assert "Model inputs:\n  INPUT0" in messages and "Model outputs:\n  OUTPUT0" in messages
    assert messages.count("server-side statistics of the call") == sum(1 for s in sizes if s)
    assert "Successful request count: " in messages and "compute infer" in messages
    assert "output 1 (4): 4 4 4 4" in messages  # the module's own log, as CMSSW's


async def test_triton_identity_producer_with_cmssws_ragged_io_on_the_fallback(monkeypatch, tmp_path):
    """CMSSW's own ragged_io (ONNX, checksum agent, ragged batching), found as CMSSW finds it
    and served unchanged by the fallback server: every entry comes back as sent."""
    monkeypatch.setenv("CMSSW_SEARCH_PATH", str(cms_models()))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the generated models, not the user's cache
    process = cms.Process("tritonTest", cms.Modifier())
    process.source = cms.Source("EmptySource")
    process.maxEvents.input = 8
    process.options.numberOfStreams = 4
    process.TritonService = cms.Service("TritonService", fallback=cms.PSet(enable=cms.untracked.bool(True)))
    process.TritonIdentityProducer = cms.EDProducer(
        "TritonIdentityProducer",
        Client=cms.PSet(
            mode=cms.string("PseudoAsync"),
            timeout=cms.untracked.uint32(60),
            modelName=cms.string("ragged_io"),
            modelVersion=cms.string(""),
            modelConfigPath=cms.FileInPath("HeterogeneousCore/SonicTriton/data/models/ragged_io/config.pbtxt"),
        ),
    )
    process.received = cms.EDAnalyzer("testIdentityReceived")
    process.p = cms.Path(process.TritonIdentityProducer + process.received)
    Received.entries = []
    await run_job(build_job(process))
    sizes = sorted(len(entries) for entries in Received.entries)  # streams finish in any order
    assert sizes == sorted(BATCH_SIZES[i % len(BATCH_SIZES)] for i in range(8))
    for entries in Received.entries:
        for got, sent in zip(entries, RAGGED_ENTRIES, strict=False):
            np.testing.assert_array_equal(got, np.asarray(sent, np.float32))
