"""``gpu-ak8``: CMS's real ParticleNet AK8 (TorchScript, ``particlenet_PT``) served on the GPU.

The other GPU experiments (:mod:`._exp_gpu`) use the project's untrained stand-ins; this one
serves CMS's own model file, unchanged, found as CMSSW finds it (``CMSSW_SEARCH_PATH``:
``RecoBTag/Combined/data/models/particlenet_PT``; ``scripts/gpu/pack.sh`` packs it):

* bare tritonclient processes (``framework/bench/_load.py``) keep 1 ... 256 requests in
  flight against ONE instance, Triton's dynamic batcher on (CMS's config: preferred batch 80)
  and off: jets/s, p50/p99, the clients' CPU per request (measured: ``time.process_time`` of
  the load processes over the requests they completed), requests per execution;
* one GPU in CPU threads: onnxruntime with one thread runs CMS's ONNX file of the same
  network (``models/particlenet``) on the same requests in this process; the best served
  jets/s divided by that rate is the number of such threads one GPU replaces.

Requests are real: the 24 fat jets of ``pfnano.root`` (CMSSW's tag infos, built as the AK8
job builds them, ``preprocess_PT.json``), all padded to one length (the longest jet's,
clamped as the preprocess file says) so that requests have one shape and the dynamic
batcher may merge them, ``JETS_PER_REQUEST`` jets each (the AK8 job sends an event's fat
jets, 2.4 on average here). On a machine without a GPU the same code runs on the CPU
(``PYSONIC_BENCH_DEVICE``), which is how the tests exercise it with ``--quick``.
"""

from __future__ import annotations

import pathlib
import time
from typing import Any

import numpy as np

from ._exp_gpu import MS, _per_execution, gpu_server, sweep_in_flight, with_and_without_batching
from ._harness import median_of, temporary_folder
from ._load import save_requests

COMBINED = "RecoBTag/Combined/data"
TORCHSCRIPT = f"{COMBINED}/models/particlenet_PT/config.pbtxt"
ONNX = f"{COMBINED}/models/particlenet/1/model.onnx"
PREPROCESS = f"{COMBINED}/ParticleNetAK8/General/V01/preprocess_PT.json"
JETS_PER_REQUEST = 2
COLLECTIONS = ("FatJet", "FatJetPFCands", "PFCands", "FatJetSVs", "SV")


def cms_file(relative: str) -> pathlib.Path:
    """A CMS file on ``CMSSW_SEARCH_PATH`` (``cms.FileInPath``; its one-line error if absent)."""
    import framework.config as cms

    return pathlib.Path(cms.FileInPath(relative).fullPath())


def real_jets() -> dict[str, np.ndarray]:
    """The inputs of every fat jet of ``pfnano.root`` with features: name -> float32
    (jets, variables, length), one length per input for all jets (``preprocess_PT.json``)."""
    import uproot

    from framework.io.samples import locate_sample
    from modules.particlenet_ak8_inputs import PreprocessParams, build_tag_infos

    with uproot.open(locate_sample("pfnano.root")) as f:
        events = f["Events"].arrays(filter_name=[f"{c}_*" for c in COLLECTIONS])
    tag_infos = []
    for event in events:
        tables = [
            {b[len(c) + 1 :]: np.asarray(event[b]) for b in event.fields if b.startswith(c + "_")} for c in COLLECTIONS
        ]
        tag_infos += [t for t in build_tag_infos(*tables) if t]
    return PreprocessParams(str(cms_file(PREPROCESS))).make_inputs(tag_infos, "gpu-ak8")


def as_requests(jets: dict[str, np.ndarray], per_request: int) -> list[dict[str, np.ndarray]]:
    """Consecutive groups of ``per_request`` jets (a last, smaller group is dropped)."""
    n = len(next(iter(jets.values()))) // per_request
    return [{k: v[i * per_request : (i + 1) * per_request] for k, v in jets.items()} for i in range(n)]


def onnxruntime_jets_per_s(requests: list[dict[str, np.ndarray]], seconds: float) -> float:
    """Jets/s of onnxruntime with one CPU thread on CMS's ONNX ParticleNet, the requests in turn
    (input names without the TorchScript ``__i`` suffix)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(cms_file(ONNX)), options, providers=["CPUExecutionProvider"])
    feeds = [{k.rsplit("__", 1)[0]: v for k, v in r.items()} for r in requests]
    session.run(None, feeds[0])  # first call: allocations
    jets, i, t0 = 0, 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        feed = feeds[i % len(feeds)]
        session.run(None, feed)
        jets += len(next(iter(feed.values())))
        i += 1
    return jets / (time.perf_counter() - t0)


VARIANTS = {"on": "particlenet_PT", "off": "particlenet_PT_nobatching"}
"""The served models: CMS's config (dynamic batching, preferred batch 80) and the same without batching."""


def _figures(load: dict[str, Any], counters: dict[str, float]) -> dict[str, Any]:
    return {
        "jets_per_s": load["throughput"] * JETS_PER_REQUEST,
        "client_cpu_ms_per_request": load["cpu_s"] / max(load["requests"], 1) * MS,
        "p50_ms": load["p50_ms"],
        "p99_ms": load["p99_ms"],
        "errors": load["errors"],
        "requests_per_execution": _per_execution(counters, "requests"),
        "exec_ms": _per_execution(counters, "exec_s") * MS,
    }


def gpu_ak8(quick: bool, repeat: int) -> dict[str, Any]:
    """CMS's ParticleNet AK8 (TorchScript) on one GPU instance: bare clients, 1 ... 256 in flight,
    batching on vs off, and one GPU expressed in onnxruntime CPU threads."""
    # quick (tests, on a CPU: ~0.1 s per execution of the real model): points long enough to
    # complete requests inside the measured window
    concurrency = (2,) if quick else (1, 2, 4, 8, 16, 32, 64, 128, 256)
    seconds = 1.5 if quick else 2.5
    jets = real_jets()
    requests = as_requests(jets, JETS_PER_REQUEST)
    with temporary_folder("ak8") as folder:
        inputs = save_requests(folder / "ak8_inputs.npz", requests)
        variants = with_and_without_batching(VARIANTS, "particlenet_PT")
        with gpu_server(variants, instances=1, source=cms_file(TORCHSCRIPT).parent.parent) as server:
            rows = sweep_in_flight(
                server.grpc_address, VARIANTS, inputs, concurrency, seconds, folder, repeat, _figures
            )
    ort_rate = median_of(repeat, lambda: {"jets_per_s": onnxruntime_jets_per_s(requests, 0.3 if quick else 3.0)})
    best = max(rows, key=lambda r: r["jets_per_s"])
    device = server.device.upper()
    return {
        "experiment": "gpu-ak8",
        "title": f"CMS's ParticleNet AK8 (TorchScript particlenet_PT) on one {device} instance, bare clients",
        "settings": {
            "model": str(cms_file(TORCHSCRIPT).parent),
            "onnx_model": str(cms_file(ONNX)),
            "jets": len(next(iter(jets.values()))),
            "jets_per_request": JETS_PER_REQUEST,
            "lengths": {k: int(v.shape[2]) for k, v in jets.items()},
            "concurrency": list(concurrency),
            "seconds": seconds,
            "instances": 1,
            "server_device": server.device,
            "onnxruntime_1_thread_jets_per_s": ort_rate["jets_per_s"],
        },
        "rows": rows,
        "columns": [
            ("batching", "batching", "s"),
            ("in_flight", "in flight", "d"),
            ("jets_per_s", "jets/s", ".0f"),
            ("client_cpu_ms_per_request", "client CPU [ms/req]", ".3f"),
            ("p50_ms", "p50 [ms]", ".2f"),
            ("p99_ms", "p99 [ms]", ".2f"),
            ("requests_per_execution", "req/exec", ".1f"),
            ("exec_ms", "exec [ms]", ".2f"),
        ],
        "targets": [
            {
                "name": f"one {device} instance in onnxruntime CPU threads (same model, same jets)",
                "value": best["jets_per_s"] / ort_rate["jets_per_s"],
                "target": None,
                "met": None,
                "note": f"{best['jets_per_s']:.0f} jets/s served (batching {best['batching']}, "
                f"{best['in_flight']} in flight) / {ort_rate['jets_per_s']:.1f} jets/s with 1 thread",
            }
        ],
        "notes": [
            f"one request = {JETS_PER_REQUEST} real fat jets of pfnano.root, all padded to one length",
            "client CPU = the load processes' CPU time over the requests they completed",
            "exec = Triton's compute input + infer + output per execution (batch_stats)",
        ],
    }


EXPERIMENTS = {"gpu-ak8": gpu_ak8}
"""Run by ``cmsbench gpu`` with the other GPU experiments."""
