"""framework.bench and the benchmark modules: the delaying proxy, the DeepTau and FACILE
inputs on the real files, direct vs SONIC producers, and every experiment on ``--quick``.

Policy: 127.0.0.1 only; Triton servers come from ``framework.bench``'s pool and are
stopped by a module fixture. No measured time is asserted, except two bounds of the proxy
that a loaded machine cannot break: a round trip through it takes at least the added L
(a delay only lengthens it), and 10 parallel round trips take less than 10 x L (they take
about 1 x L). Quick experiments are checked for their outputs, not for their numbers.
"""

from __future__ import annotations

import functools
import json
import math
import os
import statistics
import time

import numpy as np
import pytest
import trio
import uproot

import framework
import framework.config as cms
from framework import EDAnalyzer
from framework.bench import _cli, serve_delay_proxy
from framework.bench._harness import CONFIGS, SERVERS, combine_runs, config_args, median_of, run_records
from framework.core import build_job, run_job
from framework.io import SourceStatistics
from framework.io.samples import locate_sample
from modules.deeptau_inputs import (
    BLOCKS,
    INNER_CELLS,
    N_CELL_FEATURES,
    OUTER_CELLS,
    TAU_FEATURES,
    build_deeptau_inputs,
    input_bytes_per_tau,
)
from modules.facile_inputs import FACILE_FEATURES, FACILE_N_CHANNELS, build_facile_inputs

RTT = 0.1  # seconds added by the proxy in the proxy tests


@pytest.fixture(scope="module", autouse=True)
def stop_bench_servers():
    yield
    SERVERS.close()


# ----------------------------------------------------------------------------------------
# The delaying proxy


async def _echo(stream: trio.SocketStream) -> None:
    async with stream:
        try:
            async for data in stream:
                await stream.send_all(data)
        except trio.BrokenResourceError:
            pass


async def _round_trip(port: int, payload: bytes) -> tuple[float, bytes]:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        t0 = time.perf_counter()
        await stream.send_all(payload)
        received = b""
        while len(received) < len(payload):
            received += await stream.receive_some(1 << 16)
        return time.perf_counter() - t0, received


async def _with_proxy(test) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, _echo, listeners)
        target = ("127.0.0.1", listeners[0].socket.getsockname()[1])
        port = await nursery.start(functools.partial(serve_delay_proxy, target, RTT / 2))
        await test(port)
        nursery.cancel_scope.cancel()


async def test_proxy_adds_its_delay_to_every_round_trip():
    async def test(port: int) -> None:
        for payload in (b"ping", bytes(range(256)) * 8192):  # 4 bytes, then 2 MB in many chunks
            elapsed, echoed = await _round_trip(port, payload)
            assert echoed == payload  # in order, nothing lost
            assert elapsed >= RTT

    await _with_proxy(test)


async def test_proxy_does_not_serialize_connections():
    k = 10

    async def test(port: int) -> None:
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for i in range(k):
                nursery.start_soon(_round_trip, port, b"x" * (i + 1))
        # Serialized connections would take k x RTT; concurrent ones take about 1 x RTT.
        assert time.perf_counter() - t0 < k * RTT

    await _with_proxy(test)


# ----------------------------------------------------------------------------------------
# Statistics: every reported figure is the median of all its runs


def _runs(*results):
    """A measure function returning ``results`` one after the other."""
    it = iter(results)
    return lambda: next(it)


def test_median_of_takes_the_median_of_every_key_at_every_depth():
    # the last run is not the median of any figure: a median_of that returned it would fail
    runs = [
        {"throughput": 30.0, "wall_time": 1.0, "events": 100, "latency": {"p50": 0.1}, "modules": {"m": {"mean": 1}}},
        {"throughput": 20.0, "wall_time": 2.0, "events": 100, "latency": {"p50": 0.3}, "modules": {"m": {"mean": 5}}},
        {"throughput": 10.0, "wall_time": 3.0, "events": 100, "latency": {"p50": 0.5}, "modules": {"m": {"mean": 9}}},
    ]
    result = median_of(3, _runs(*runs))
    assert result["throughput"] == 20.0 and result["wall_time"] == 2.0
    assert result["latency"] == {"p50": 0.3} and result["modules"] == {"m": {"mean": 5}}
    assert result["events"] == 100 and isinstance(result["events"], int)  # equal in every run: kept as it is
    assert [r["throughput"] for r in result["runs"]] == [30.0, 20.0, 10.0]


def test_median_of_keeps_every_run_with_the_load():
    runs = [{"events_per_s": float(x), "label": "a"} for x in (4, 1, 3, 2)]
    result = median_of(4, _runs(*runs))
    assert result["events_per_s"] == 2.5  # even count: the mean of the two middle runs
    assert [r["events_per_s"] for r in result["runs"]] == [4.0, 1.0, 3.0, 2.0]
    assert all(len(r["loadavg"]) == 3 and all(x >= 0 for x in r["loadavg"]) for r in result["runs"])
    records = run_records(result, "events_per_s")
    assert [r["events_per_s"] for r in records] == [4.0, 1.0, 3.0, 2.0] and all("loadavg" in r for r in records)
    once = median_of(0, _runs({"x": 1.0}, {"x": 5.0}))  # at least one run
    assert once["x"] == 1.0 and len(once["runs"]) == 1


def test_combine_runs_chooses_nothing_silently():
    assert combine_runs([{"a": 1.0}, {"a": 3.0, "b": 7.0}]) == {"a": 2.0, "b": 7.0}  # b: the run that has it
    assert combine_runs(["shm", "gRPC", "shm"]) == ["shm", "gRPC", "shm"]  # differing non-numbers: all of them
    assert combine_runs([True, False, True]) == [True, False, True]  # bools are not averaged
    assert combine_runs([(1, 2), (1, 2)]) == (1, 2)
    # records keep their type, field by field (PoolSource.statistics(): what was opened, read)
    stats = [SourceStatistics(("a.root",), n, n, 0, ("x",), (float(n),), {}) for n in (10, 30, 20)]
    combined = combine_runs(stats)
    assert isinstance(combined, SourceStatistics) and combined.entries_read == 20 and combined.branches == ("x",)
    assert combined.inputs == [(10.0,), (30.0,), (20.0,)]
    with pytest.raises(ValueError, match="no runs"):
        combine_runs([])


# ----------------------------------------------------------------------------------------
# Inputs of the new models on the real files


def _event(arrays, prefix: str, i: int) -> dict[str, np.ndarray]:
    return {k[len(prefix) :]: np.asarray(arrays[k][i]) for k in arrays.fields if k.startswith(prefix)}


@pytest.fixture(scope="module")
def tt_events():
    tree = uproot.open(locate_sample("nano_tt_v15.root"))["Events"]
    return tree.arrays(
        filter_name=["nTau", "Tau_*", "PFCand_*", "Jet_pt", "Jet_eta", "Jet_phi", "Jet_mass"], entry_stop=30
    )


@pytest.fixture(scope="module")
def pfnano_events():
    tree = uproot.open(locate_sample("pfnano.root"))["Events"]
    return tree.arrays(filter_name=["nTau", "Tau_*", "PFCands_*", "Jet_pt", "Jet_eta", "Jet_phi", "Jet_mass"])


def test_deeptau_inputs_of_real_taus_have_the_documented_shapes(tt_events):
    assert input_bytes_per_tau() == 4 * ((11 * 11 + 21 * 21) * 188 + 16) == 422_688
    assert N_CELL_FEATURES == sum(BLOCKS.values()) == 188
    seen = 0
    for i in range(len(tt_events)):
        inputs = build_deeptau_inputs(_event(tt_events, "Tau_", i), _event(tt_events, "PFCand_", i), event_id=(1, 1, i))
        n = int(tt_events["nTau"][i])
        seen += n
        assert inputs["inner"].shape == (n, N_CELL_FEATURES, INNER_CELLS, INNER_CELLS)
        assert inputs["outer"].shape == (n, N_CELL_FEATURES, OUTER_CELLS, OUTER_CELLS)
        assert inputs["tau_features"].shape == (n, len(TAU_FEATURES))
        assert all(a.dtype == np.float32 for a in inputs.values())
        assert sum(a.nbytes for a in inputs.values()) == n * input_bytes_per_tau()
        np.testing.assert_array_equal(inputs["tau_features"][:, 0], np.asarray(tt_events["Tau_pt"][i], np.float32))
    assert seen > 0


def test_deeptau_jet_seeds_fill_grids_from_real_pf_candidates(pfnano_events):
    assert int(np.sum(pfnano_events["nTau"])) == 0  # why jet seeds exist (module docstring)
    for i in range(3):
        taus, pf, jets = (_event(pfnano_events, p, i) for p in ("Tau_", "PFCands_", "Jet_"))
        inputs = build_deeptau_inputs(taus, pf, jets, min_taus=3, event_id=(1, 1, i))
        assert len(inputs["tau_features"]) == 3
        assert sum(a.nbytes for a in inputs.values()) == 3 * input_bytes_per_tau()  # 1.27 MB, near the seeds' 1.18
        # The leading jet seeds the first candidate; real candidates occupy cells around it.
        lead = np.argmax(jets["pt"])
        assert inputs["tau_features"][0, 0] == np.float32(jets["pt"][lead])
        valid = inputs["outer"][:, [0, BLOCKS["egamma"], BLOCKS["egamma"] + BLOCKS["muon"]]]
        assert set(np.unique(valid)) <= {0.0, 1.0} and valid.sum() > 0
        again = build_deeptau_inputs(taus, pf, jets, min_taus=3, event_id=(1, 1, i))
        assert all(np.array_equal(inputs[k], again[k]) for k in inputs)  # deterministic
        other = build_deeptau_inputs(taus, pf, jets, min_taus=3, event_id=(1, 1, i + 100))
        assert not np.array_equal(inputs["outer"], other["outer"])  # the synthesized part follows the id


def test_facile_inputs_are_synthesized_per_event_id():
    rows = build_facile_inputs((1, 2, 3))
    assert rows.shape == (FACILE_N_CHANNELS, len(FACILE_FEATURES)) and rows.dtype == np.float32
    assert rows.nbytes == 960_000
    np.testing.assert_array_equal(rows, build_facile_inputs((1, 2, 3)))
    other = build_facile_inputs((1, 2, 4))
    np.testing.assert_array_equal(rows[:, :5], other[:, :5])  # same channel geometry
    assert not np.array_equal(rows[:, 7:], other[:, 7:])  # other charges
    assert build_facile_inputs((1, 2, 3), n_channels=256).shape == (256, 15)


# ----------------------------------------------------------------------------------------
# Direct producers equal SONIC producers


class Collect(EDAnalyzer):
    """Keeps every product of ``labels`` per event id (class attribute ``seen``)."""

    seen: dict = {}

    @classmethod
    def fill_descriptions(cls, desc):
        desc.add("labels", cms.vstring(), "module labels")

    def __init__(self, params):
        self.tokens = {label: self.consumes(label) for label in params.labels}

    def analyze(self, event):
        Collect.seen[tuple(event.id)] = {label: event.get(token) for label, token in self.tokens.items()}


def _products(backend: str, address: str) -> dict:
    framework.register_type("testBenchCollect", Collect)
    models = ["particlenet", "deepmet", "deeptau", "facile"]
    process = cms.load_config(
        CONFIGS / "models_cfg.py",
        config_args(backend=backend, server=address, repeat=1, events=3, streams=2, threads=2, nChannels=2000),
    )
    process.collect = cms.EDAnalyzer("testBenchCollect", labels=cms.vstring(*models))
    process.check = cms.EndPath(process.collect)
    Collect.seen = {}
    trio.run(run_job, build_job(process))
    return dict(Collect.seen)


def test_direct_producers_equal_sonic_producers():
    address = SERVERS.models_server().grpc_address
    direct, sonic = _products("direct", address), _products("sonic", address)
    assert len(direct) == 3 and direct.keys() == sonic.keys()
    for event_id, products in direct.items():
        for label, product in products.items():
            other = sonic[event_id][label]
            assert product.keys() == other.keys(), label
            for field, value in product.items():
                np.testing.assert_allclose(value, other[field], rtol=1e-4, atol=1e-6, err_msg=f"{label}.{field}")
    assert len(direct[next(iter(direct))]["deeptau"]["probtau"]) == 3  # minTaus = 3 on pfnano.root


def test_noinference_backend_converts_as_direct_without_calling_onnxruntime(monkeypatch):
    """backend=noinference (the direct twins with runInference = False): the same products
    as the direct job, field by field and shape by shape, made from zeros; onnxruntime's
    session is never run."""
    from framework.serving.onnx_backend import OnnxRunner

    address = SERVERS.models_server().grpc_address
    direct = _products("direct", address)

    def never(self, arrays):
        raise AssertionError("runInference = False ran onnxruntime")

    monkeypatch.setattr(OnnxRunner, "__call__", never)
    zeros = _products("noinference", address)
    assert zeros.keys() == direct.keys()
    for event_id, products in direct.items():
        for label, product in products.items():
            for field, value in product.items():
                other = zeros[event_id][label][field]
                assert np.shape(other) == np.shape(value), f"{label}.{field}"
    assert not np.any(zeros[event_id]["facile"]["energy"])  # zeros, not the model's energies
    assert np.any(direct[event_id]["facile"]["energy"])


# ----------------------------------------------------------------------------------------
# Every experiment on quick settings


@pytest.mark.parametrize("name", [n for n in _cli.EXPERIMENTS if n != "cpu"])  # cpu: its own test below
def test_quick_experiment_writes_json_and_png(name, tmp_path):
    console = _cli.Console(file=open("/dev/null", "w"), width=120)  # noqa: SIM115 - closed with the test
    result = _cli.run_experiment(name, quick=True, repeat=1, out=tmp_path, console=console)
    saved = json.loads((tmp_path / f"{name}.json").read_text())
    assert saved["experiment"] == name and saved["rows"] and saved["settings"]["quick"] is True
    assert all(set(t) >= {"name", "value", "target", "met", "note"} for t in saved["targets"])
    assert saved["machine"]["cpus"] and len(result["rows"]) == len(saved["rows"])
    assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_experiment_reports_the_median_of_all_its_runs_and_keeps_them():
    """cmsbench source, quick, 2 runs per point: each row's time is the median of the two
    runs it keeps (with their load), and every reader opened the file as often as PoolSource."""
    from framework.bench._exp_local import source_throughput

    result = source_throughput(quick=True, repeat=2)
    for row in result["rows"]:
        assert len(row["runs"]) == 2 and all(len(run["loadavg"]) == 3 for run in row["runs"])
        times = [run.get("wall_time", run.get("total_time")) for run in row["runs"]]
        assert row["wall_time"] == pytest.approx(statistics.median(times))
    opens = {row["reader"]: row["file_opens"] for row in result["rows"] if row["file_opens"] is not None}
    assert len(opens) == 4 and set(opens.values()) == {1}, opens


def test_wrapper_experiment_keeps_every_run_with_its_load(monkeypatch):
    """cmsbench wrapper, quick, 2 runs of one point: the row keeps both runs (each with both
    forms, its own ratio and the load), and each figure is the median of the two."""
    from framework.bench import _exp_wrapper

    monkeypatch.setattr(_exp_wrapper, "MODELS", ("facile",))
    monkeypatch.setattr(_exp_wrapper, "IN_FLIGHT", (1,))
    (row,) = _exp_wrapper.generated_vs_model_py(quick=True, repeat=2)["rows"]
    assert len(row["runs"]) == 2 and all(len(run["loadavg"]) == 3 for run in row["runs"])
    for key in ("generated_ms", "model_py_per_s", "throughput_ratio"):
        assert row[key] == pytest.approx(statistics.median(run[key] for run in row["runs"]))
    for run in row["runs"]:
        assert run["throughput_ratio"] == pytest.approx(run["generated_per_s"] / run["model_py_per_s"])


def test_cpu_experiment_keeps_every_run_with_its_load(tmp_path):
    """cmsbench cpu --quick: the jobs' CPU from the OS, every transport side by side (gRPC and
    HTTP, payloads and shared memory, beside a GIL-busy thread or not), every run kept."""
    from framework.bench import _exp_cpu

    console = _cli.Console(file=open("/dev/null", "w"), width=120)  # noqa: SIM115 - closed with the test
    _cli.run_experiment("cpu", quick=True, repeat=1, out=tmp_path, console=console)
    saved = json.loads((tmp_path / "cpu.json").read_text())
    (row,) = saved["rows"]
    assert row["runs"] == 1 and len(row["all_runs"]) == 1 and len(row["loadavg"]) == 1
    assert saved["machine"]["cpu_model"] and saved["machine"]["loadavg"]
    (run,) = row["all_runs"]
    for variant in _exp_cpu.QUICK_VARIANTS:  # one of each kind (--quick)
        low, high = run[variant]["jobs"]
        assert 0 < low["cpu_s"] < high["cpu_s"] * 10  # the OS's accounting of a real child
        for job in (low, high):  # the job's own split of its event loop's CPU (summary "cpu")
            assert job["event_loop_cpu_s"] > 0 and job["other_threads_cpu_s"] >= 0
            assert job["event_loop_cpu_s"] + job["other_threads_cpu_s"] < job["cpu_s"]  # start-up outside
            assert (job["busy_cpu_s"] > 0) == variant.endswith("_busy")  # the busy thread ran, and was subtracted
    assert run["sonic"]["calls_per_event"] == 1  # one model, one request per event
    assert run["noinference"]["calls_per_event"] == 0  # no inference at all
    # each side used the transport it is named for: DeepMET's 198 kB per event go through
    # shared memory in the _shm jobs only (above SHM_MIN_BYTES), over HTTP in the _http ones
    for variant in _exp_cpu.QUICK_VARIANTS:
        if variant.startswith("sonic"):
            calls = run[variant]["calls_per_event"]
            assert run[variant]["http_calls_per_event"] == (calls if "http" in variant else 0), variant
            assert (run[variant]["shm_calls_per_event"] > 0) == ("shm" in variant), variant
    for side in _exp_cpu.QUICK_SIDES:
        assert all(job["cpu_s"] > 0 for job in run[side]["jobs"])  # --quick: 4 events apart, a noisy difference
        assert all((job["busy_cpu_s"] > 0) == side.endswith("_busy") for job in run[side]["jobs"])
    for key in (
        "client_vs_bare",
        "http_client_vs_bare",
        "http_shm_client_ms_per_request",
        "http_busy_rise",
        "bare_http_busy_rise",
    ):
        assert row[key] == run[key]  # the median of the one run
    names = [t["name"] for t in saved["targets"]]
    assert any(n.startswith("HTTP: client CPU per request / the bare") for n in names)
    assert any("GIL-busy" in n for n in names) and any(n.startswith("gRPC payloads") for n in names)
    assert row["client_resolved"] == (run["client_ms_per_event"] > 0)  # flagged where the runs disagree on its sign


@pytest.mark.parametrize("figures", [3, 14])
def test_wide_results_print_turned_and_readable_in_80_columns(figures):
    """Many figures for few rows (cmsbench cpu): one line per figure, every header and
    value whole at 80 characters; few figures: one line per row, as before."""
    import io

    columns = [("config", "config", "s")] + [(f"k{i}", f"figure number {i} [ms]", ".2f") for i in range(figures)]
    rows = [
        {"config": name, **{f"k{i}": 1000 * n + i for i in range(figures)}} for n, name in ((1, "four"), (2, "aod"))
    ]
    out = io.StringIO()
    console = _cli.Console(file=out, width=80)
    _cli.print_result({"title": "t", "columns": columns, "rows": rows, "targets": []}, console)
    lines = out.getvalue().splitlines()
    if figures > _cli.WIDE:
        for i in range(figures):
            (line,) = [x for x in lines if f"figure number {i} [ms]" in x]
            assert f"{1000 + i:.2f}" in line and f"{2000 + i:.2f}" in line
    else:
        (line,) = [x for x in lines if "four" in x]
        assert all(f"{1000 + i:.2f}" in line for i in range(figures))


def test_cli_runs_an_experiment_and_reports_failures(tmp_path, monkeypatch):
    assert _cli.main(["overhead", "--quick", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "overhead.json").exists()

    def broken(quick, repeat):
        raise RuntimeError("no server")

    monkeypatch.setitem(_cli.EXPERIMENTS, "overhead", broken)
    assert _cli.main(["overhead", "--quick", "--out", str(tmp_path)]) == 1


# ----------------------------------------------------------------------------------------
# The GPU machine's experiments, run here on the CPU (quick), and the capacity planner


def test_gpu_experiments_run_on_the_cpu_and_feed_the_planner(tmp_path):
    """gpu-batching and gpu-clients on quick settings (CPU server), then plan from their JSON."""
    console = _cli.Console(file=open("/dev/null", "w"), width=120)  # noqa: SIM115 - closed with the test
    for name in ("gpu-batching", "gpu-clients", "plan"):
        _cli.run_experiment(name, quick=True, repeat=1, out=tmp_path, console=console)
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    batching = json.loads((tmp_path / "gpu-batching.json").read_text())
    assert {r["batching"] for r in batching["rows"]} == {"on", "off"}
    assert all(r["throughput"] > 0 and r["errors"] == 0 and r["exec_ms"] > 0 for r in batching["rows"])
    assert all(r["requests_per_execution"] == 1.0 for r in batching["rows"] if r["batching"] == "off")
    clients = json.loads((tmp_path / "gpu-clients.json").read_text())
    assert [(r["batching"], r["clients"]) for r in clients["rows"]] == [("on", 1), ("on", 2), ("off", 1), ("off", 2)]
    assert clients["settings"]["client_cpu_s_per_event"] > 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert [r["batching"] for r in plan["rows"]] == ["on", "off"]
    assert all(r["predicted_capacity"] > 0 for r in plan["rows"])


def _cms_particlenet_pt_found() -> bool:
    from framework.bench._exp_gpu_ak8 import ONNX, PREPROCESS, TORCHSCRIPT

    try:
        return all(cms.FileInPath(f).fullPath() for f in (TORCHSCRIPT, ONNX, PREPROCESS))
    except Exception:  # noqa: BLE001 - not on CMSSW_SEARCH_PATH
        return False


@pytest.mark.skipif(not _cms_particlenet_pt_found(), reason="CMS's particlenet_PT is not on CMSSW_SEARCH_PATH")
def test_gpu_ak8_runs_on_the_cpu(tmp_path):
    """gpu-ak8 (CMS's TorchScript ParticleNet AK8) on quick settings: its code paths on a CPU server."""
    console = _cli.Console(file=open("/dev/null", "w"), width=120)  # noqa: SIM115 - closed with the test
    assert "gpu-ak8" in _cli.GROUPS["gpu"]
    _cli.run_experiment("gpu-ak8", quick=True, repeat=1, out=tmp_path, console=console)
    assert (tmp_path / "gpu-ak8.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = json.loads((tmp_path / "gpu-ak8.json").read_text())
    assert result["settings"]["jets"] == 24 and result["settings"]["onnxruntime_1_thread_jets_per_s"] > 0
    assert [(r["batching"], r["in_flight"]) for r in result["rows"]] == [("on", 2), ("off", 2)]
    assert all(r["jets_per_s"] > 0 and r["errors"] == 0 and r["client_cpu_ms_per_request"] > 0 for r in result["rows"])
    assert all(r["requests_per_execution"] == 1.0 for r in result["rows"] if r["batching"] == "off")
    assert result["targets"][0]["value"] > 0


def test_capacity_plan_finds_where_clients_meet_the_server():
    from framework.bench._exp_gpu import capacity_plan, measured_knee

    # one instance, 10 requests per execution of 10 ms at any concurrency: 1,000 requests/s
    flat = [{"in_flight": c, "requests_per_execution": 10, "exec_ms": 10.0} for c in (1, 16, 256)]
    plan = capacity_plan(0.01, flat, instances=1, requests_in_flight_per_client=4)  # 100 events/s per client
    assert plan["knee"] == pytest.approx(10.0) and plan["capacity"] == pytest.approx(1000.0)
    # batching that improves with load moves the knee out; two instances double it
    rising = [
        {"in_flight": 4, "requests_per_execution": 1, "exec_ms": 5.0},
        {"in_flight": 64, "requests_per_execution": 16, "exec_ms": 10.0},
    ]
    assert capacity_plan(0.01, rising, 2, 4)["knee"] > capacity_plan(0.01, rising, 1, 4)["knee"] > 1
    assert capacity_plan(0.01, flat, 1, 4, max_clients=5)["knee"] is None

    def rows(rates):
        return [{"clients": n, "per_client": r / n, "server_throughput": r} for n, r in rates]

    assert measured_knee(rows([(1, 100), (2, 200), (4, 300), (8, 310)]))["knee"] == pytest.approx(3.1)
    assert measured_knee(rows([(1, 100), (2, 200), (4, 400)]))["knee"] is None  # still scaling


def test_cpu_experiment_full_figures_and_targets_from_stand_in_jobs(monkeypatch):
    """The bookkeeping of a full ``cmsbench cpu`` run (every variant, side, config and the
    AK8 row), its jobs replaced by stand-ins whose CPU grows with the events: every
    transport's figures, the medians and each issue's targets come out (the real jobs:
    the --quick test above; the full run takes the better part of an hour)."""
    import itertools

    from framework.bench import _exp_cpu

    counter = itertools.count(1)

    def job(variant, events, server, folder, models, chunks):
        busy = 0.5 if variant.endswith("_busy") else 0.0
        calls = 0 if variant.startswith(("noinference", "direct")) else events / (4 if "batched" in variant else 1)
        cpu = events * (0.02 + 0.001 * len(variant)) + next(counter) * 1e-6
        return {
            "cpu_s": cpu, "wall_s": 1.0, "server_cpu_s": events * 0.01, "busy_cpu_s": busy,
            "event_loop_cpu_s": cpu / 2, "other_threads_cpu_s": cpu / 4, "calls": calls,
            "shm_calls": calls if "shm" in variant else 0, "http_calls": calls if "http" in variant else 0,
            "requests": events if calls else 0,
        }  # fmt: skip

    def bare(events, server, folder, models, side):
        return {"cpu_s": events * (0.01 + 0.001 * len(side)), "busy_cpu_s": 0.0, "wall_s": 1.0, "server_cpu_s": 0.0}

    def ak8(repeat, folder, cores):
        return {
            "config": "ParticleNet AK8 (CMS)", "sonic_vs_direct": 0.26, "http_sonic_vs_direct": 0.19,
            "direct_cpu_ms_per_event": 37.5, "sonic_cpu_ms_per_event": 9.8, "sonic_http_cpu_ms_per_event": 7.1,
        }  # fmt: skip

    class Server:
        pid = os.getpid()
        grpc_address, http_address = "127.0.0.1:1", "127.0.0.1:2"

    monkeypatch.setattr(_exp_cpu, "_job", job)
    monkeypatch.setattr(_exp_cpu, "_bare", bare)
    monkeypatch.setattr(_exp_cpu, "_ak8_row", ak8)
    monkeypatch.setattr(_exp_cpu, "_child", lambda *args, **kwargs: (0.0, 0.0))
    monkeypatch.setattr(_exp_cpu, "chunks_for", lambda seconds: 1)
    monkeypatch.setattr(_exp_cpu.SERVERS, "models_server", lambda: Server())
    monkeypatch.setattr(_exp_cpu, "_pin_tree", lambda pid, cores: None)
    result = _exp_cpu.cpu(quick=False, repeat=3)
    four, miniaod = result["rows"]
    assert four["runs"] == miniaod["runs"] == 3
    for prefix in _exp_cpu.TRANSPORTS:
        for key in ("client_vs_bare", "client_vs_floor", "batched_client_vs_bare", "sonic_vs_direct", "busy_rise"):
            assert math.isfinite(four[f"{prefix}{key}"]), prefix + key
    assert "http_client_vs_bare" in miniaod and "shm_client_vs_bare" not in miniaod  # payloads only there
    names = [t["name"] for t in result["targets"]]
    assert len(names) == 7 + 10  # HTTP's seven; gRPC's of both sides (4 each), the floor, AK8
    assert all(isinstance(t["met"], bool) and math.isfinite(t["value"]) for t in result["targets"])
    assert [t["met"] for t in result["targets"] if "AK8 job over HTTP" in t["name"]] == [True]
