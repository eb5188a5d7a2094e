"""Command lines of configs as CMSSW's: VarParsing's semantics, and sys.argv for argparse configs.

``cmsrun cfg.py ARGS`` and ``python cfg.py ARGS`` give the config the same arguments.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import framework.config
from framework.cmsrun._main import _parser, _split_arguments
from framework.config import ConfigurationError
from FWCore.ParameterSet.VarParsing import VarParsing

LIST_CFG = """
    import FWCore.ParameterSet.Config as cms
    from FWCore.ParameterSet.VarParsing import VarParsing
    options = VarParsing("analysis")
    options.register("models", "first", VarParsing.multiplicity.list, VarParsing.varType.string, "models")
    options.register("unittest", False, VarParsing.multiplicity.singleton, VarParsing.varType.bool, "test mode")
    options.parseArguments()
    if options.unittest:
        options.models = "appended"  # CMSSW: assigning to a list option appends
    process = cms.Process("VP")
    process.keep = cms.PSet(
        models=cms.vstring(options.models),
        out=cms.string(options.outputFile),
        maxEvents=cms.int32(options.maxEvents),
    )
    if __name__ == "__main__":
        print(process.keep.models.value(), process.keep.out.value())
"""


def _write(folder, text, name="vp_cfg.py"):
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def test_list_option_scalar_default_append_and_output_tags(tmp_path):
    path = _write(tmp_path, LIST_CFG)
    keep = framework.config.load_config(path).keep
    assert keep.models.value() == ["first"] and keep.out.value() == "output.root" and keep.maxEvents == -1
    keep = framework.config.load_config(path, ["models=a,b", "models=c", "unittest=1", "maxEvents=10"]).keep
    assert keep.models.value() == ["a", "b", "c", "appended"]  # the command line replaced the default
    assert keep.out.value() == "output_numEvent10.root"  # CMSSW's analysis tags
    keep = framework.config.load_config(path, ["outputFile=out.root", "maxEvents=2", "tag=v1"]).keep
    assert keep.out.value() == "out_numEvent2_v1.root"


def test_python_cfg_parses_the_same_arguments(tmp_path):
    path = _write(tmp_path, LIST_CFG)
    result = subprocess.run(
        [sys.executable, str(path), "models=x", "unittest=true", "maxEvents=3"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "['x', 'appended'] output_numEvent3.root"


def test_varparsing_api():
    options = VarParsing("analysis")
    options.parseArguments()  # imported, not run as a script, not under load_config: nothing to parse
    assert options.inputFiles == [] and options.maxEvents == -1 and options.outputFile == "output.root"
    options.inputFiles = "a.root"
    options.inputFiles = ["b.root", "c.root"]
    assert options.inputFiles == ["a.root", "b.root", "c.root"]
    options.setDefault("inputFiles", "d.root")
    assert options.inputFiles == ["d.root"]
    options.clearList("inputFiles")
    assert options.inputFiles == [] and options.has_key("tag") and "section" in options
    options.register("n", 0, VarParsing.multiplicity.list, VarParsing.varType.int)
    assert options.n == [0]  # a scalar default of a list option is its one element
    options.maxEvents = 5
    assert options.outputFile == "output_numEvent5.root"
    assert "maxEvents (int) = 5" in str(options)
    with pytest.raises(ConfigurationError, match="VarParsing 'n': expected int, got 'x'"):
        options.n = "x"


def test_no_default_clear_and_no_comma_split(tmp_path):
    path = _write(
        tmp_path,
        """
        import FWCore.ParameterSet.Config as cms
        from FWCore.ParameterSet.VarParsing import VarParsing
        options = VarParsing()
        options.register("keep", ["k"], VarParsing.multiplicity.list, VarParsing.varType.string)
        options.register("raw", [], VarParsing.multiplicity.list, VarParsing.varType.string)
        options.setNoDefaultClear("keep")
        options.setNoCommaSplit("raw")
        options.parseArguments()
        process = cms.Process("VP")
        process.keep = cms.PSet(keep=cms.vstring(options.keep), raw=cms.vstring(options.raw))
        """,
    )
    keep = framework.config.load_config(path, ["keep=a", "raw=x,y"]).keep
    assert keep.keep.value() == ["k", "a"] and keep.raw.value() == ["x,y"]


ARGPARSE_CFG = """
    import argparse
    import sys
    import FWCore.ParameterSet.Config as cms
    parser = argparse.ArgumentParser(prog=sys.argv[0])
    parser.add_argument("--modules", nargs="+", default=["A"])
    parser.add_argument("--maxEvents", type=int, default=-1)
    args = parser.parse_args()
    process = cms.Process("AP")
    process.keep = cms.PSet(modules=cms.vstring(args.modules), maxEvents=cms.int32(args.maxEvents))
"""


def test_argparse_configs_read_their_arguments_from_sys_argv(tmp_path):
    path = _write(tmp_path, ARGPARSE_CFG)
    argv_before = list(sys.argv)
    keep = framework.config.load_config(path, ["--modules", "X", "Y", "--maxEvents", "2"]).keep
    assert keep.modules.value() == ["X", "Y"] and keep.maxEvents == 2
    assert sys.argv == argv_before  # restored
    with pytest.raises(SystemExit) as info:  # the config's argparse exits, as under cmsRun
        framework.config.load_config(path, ["--nope"])
    assert info.value.code == 2 and sys.argv == argv_before


def test_arguments_for_a_config_that_reads_none(tmp_path):
    path = _write(tmp_path, "import FWCore.ParameterSet.Config as cms\nprocess = cms.Process('A')\n")
    with pytest.raises(ConfigurationError, match="does not take arguments .*: a=1"):
        framework.config.load_config(path, ["a=1"])


@pytest.mark.parametrize(
    "argv, own, config",
    [
        (["cfg.py", "a=1", "-n", "5", "b=2"], ["cfg.py", "-n", "5"], ["a=1", "b=2"]),
        (["-j", "2", "cfg.py", "--modules", "X", "Y"], ["-j", "2", "cfg.py"], ["--modules", "X", "Y"]),
        (["cfg.py", "--dataset=f.yaml", "--", "-n", "3"], ["cfg.py", "--dataset=f.yaml"], ["-n", "3"]),
        (["cfg.py", "--no-progress", "x=1"], ["cfg.py", "--no-progress"], ["x=1"]),
    ],
)
def test_cmsrun_splits_its_options_from_the_configs(argv, own, config):
    assert _split_arguments(_parser(), argv) == (own, config)


def test_list_suffixes_clear_and_load(tmp_path):
    listing = tmp_path / "files.txt"
    listing.write_text("a.root\n\n# a comment\nb.root  # trailing comment\n")
    path = _write(tmp_path, LIST_CFG)
    keep = framework.config.load_config(path, ["models=x", "models_clear", f"models_load={listing}"]).keep
    assert keep.models.value() == ["a.root", "b.root"]
    with pytest.raises(ConfigurationError, match="models_load=.*nosuch.txt': cannot read the file"):
        framework.config.load_config(path, [f"models_load={tmp_path / 'nosuch.txt'}"])


@pytest.mark.parametrize(
    ("config", "output"),
    [("sonic_pfnano_cfg.py", "sonic_pfnano.root"), ("particlenet_ak8_cfg.py", "particlenet_ak8.root")],
)
def test_pfnano_jobs_take_the_analysis_options_and_a_server(config, output):
    """configs/pfnanoSonic_cff.py: CMSSW's "analysis" options (secondaryInputFiles too) with
    the job's own output name, untagged by maxEvents; server=host:port becomes the service's
    server "remote"; a server without a port is a one-line error naming it."""
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "configs" / config
    process = framework.config.load_config(
        path, ["maxEvents=10", "server=localhost:8001", "secondaryInputFiles=a.root"]
    )
    assert process.out.fileName.value() == output  # not the preset's output_numEvent10.root
    assert process.maxEvents.input.value() == 10
    assert process.source.fileNames.value()[0].endswith("pfnano.root")  # the real sample by default
    (server,) = process.TritonService.servers
    assert (server.name.value(), server.address.value(), server.port.value()) == ("remote", "localhost", 8001)
    assert not framework.config.load_config(path, []).TritonService.servers
    # pysonic's extension: the server's HTTP endpoint too (httpPort)
    (server,) = framework.config.load_config(
        path, ["server=localhost:8001,http://localhost:8000"]
    ).TritonService.servers
    assert (server.port.value(), server.httpPort.value()) == (8001, 8000)
    with pytest.raises(ConfigurationError, match=r"argument 'server=nope': expected host:port"):
        framework.config.load_config(path, ["server=nope"])
    with pytest.raises(ConfigurationError, match=r"'server=127.0.0.1:117611'.*\(1-65535\)"):
        framework.config.load_config(path, ["server=127.0.0.1:117611"])


def test_a_config_changing_a_loaded_fragment_does_not_change_the_next_config():
    """A fragment imported before (here by this test) is fresh for each config: the first
    load's server does not reach the second load (it did when the test files ran in order)."""
    import pathlib

    import HeterogeneousCore.SonicTriton.TritonService_cff as imported  # noqa: F401 - imported before

    path = pathlib.Path(__file__).resolve().parents[1] / "configs" / "sonic_pfnano_cfg.py"
    assert framework.config.load_config(path, ["server=localhost:8001"]).TritonService.servers
    assert not framework.config.load_config(path, []).TritonService.servers
    assert not imported.TritonService.servers  # the imported module's own objects are untouched
