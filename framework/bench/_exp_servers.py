"""Benchmark: one model served by one vs two local servers (TritonService spreads the requests).

``cmsbench servers``: the ``tiny`` identity model, one instance per server, no dynamic
batching, with a fixed amount of server work per request: ``sleep`` (the server's time is
spent elsewhere, as on a coprocessor: the two servers do not compete for this machine's
cores) and ``burn`` (a CPU-bound server: the two servers and the client share the 2
cores). The job (``tiny_sonic_cfg.py``, 16 streams, one request per event, batching off)
names one server, then both; TritonService sends each request to the server of least
``(outstanding + 1) x latency`` (``framework/sonic/_routing.py``). The gain is the ratio
of the two events/s, measured in the same run.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pathlib
from typing import Any

from ._harness import local_server, median_of, run_config, run_records, temporary_folder

MS = 1e3

WORK_MODEL_PY = """\
# The "tiny" identity model with a fixed amount of work per request (cmsbench servers).
import time

import triton_python_backend_utils as pb_utils

WORK, SECONDS = {work!r}, {seconds!r}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            if WORK == "sleep":
                time.sleep(SECONDS)
            else:  # burn: busy CPU
                end = time.perf_counter() + SECONDS
                while time.perf_counter() < end:
                    pass
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x)]))
        return responses
"""


def write_work_repository(folder: pathlib.Path, work: str, seconds: float) -> pathlib.Path:
    """A repository with ``tiny`` (x float32 (batch, -1) -> y = x) doing ``work`` for ``seconds`` per request."""
    model = folder / "tiny"
    (model / "1").mkdir(parents=True, exist_ok=True)
    (model / "1" / "model.py").write_text(WORK_MODEL_PY.format(work=work, seconds=seconds))
    (model / "config.pbtxt").write_text(
        'name: "tiny"\nbackend: "python"\nmax_batch_size: 64\n'
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )
    return folder


def servers_per_model(quick: bool, repeat: int) -> dict[str, Any]:
    """Events/s of one job whose model is served by one, then two local servers."""
    variants: tuple[tuple[str, float], ...] = (("sleep", 0.005),) if quick else (("sleep", 0.005), ("burn", 0.002))
    streams = 16
    rows: list[dict[str, Any]] = []
    for work, seconds in variants:
        events = 30 if quick else int(min(3000, 6 / seconds))
        with temporary_folder(f"servers-{work}") as folder, contextlib.ExitStack() as stack:
            repository = write_work_repository(folder, work, seconds)
            servers = [stack.enter_context(local_server(repository)) for _ in range(2)]
            for count in (1, 2):
                address = ",".join(server.grpc_address for server in servers[:count])
                result = median_of(
                    repeat,
                    functools.partial(
                        run_config,
                        "tiny_sonic_cfg.py",
                        warmup=streams,
                        server=address,
                        modelConfig=repository / "tiny" / "config.pbtxt",
                        events=events,
                        streams=streams,
                        cpuTime=0,
                    ),
                )
                model = result["services"].get("TritonService", {}).get("models", {}).get("tiny", {})
                rows.append(
                    {
                        "server_work": f"{work} {seconds * MS:g} ms",
                        "servers": count,
                        "events": events,
                        "throughput": result["throughput"],
                        "p50_ms": result["latency"]["p50"] * MS,
                        "per_server": model.get("servers", {}),
                        "bound": count / seconds,
                        "runs": run_records(result, "throughput", "latency"),
                    }
                )
    targets = []
    for work, seconds in variants:
        name = f"{work} {seconds * MS:g} ms"
        one, two = (next(r for r in rows if r["server_work"] == name and r["servers"] == n) for n in (1, 2))
        two["gain"] = gain = two["throughput"] / one["throughput"]
        spread = ", ".join(f"{k}: {v}" for k, v in sorted(two["per_server"].items()))
        note = (
            f"requests per server {spread}"
            if work == "sleep"
            else f"requests per server {spread}; two CPU-bound servers and the client share {os.cpu_count()} cores"
        )
        targets.append(
            {
                "name": f"two servers / one, server work {name}",
                "value": gain,
                "target": 1.6,
                "met": gain >= 1.6,
                "note": note,
            }
        )
    return {
        "experiment": "servers",
        "title": "One model, one vs two local servers (least outstanding x latency)",
        "settings": {
            "streams": streams,
            "variants": [f"{w} {s * MS:g} ms" for w, s in variants],
            "threads": 1,
            "batching": "off (one request per event)",
        },
        "rows": rows,
        "columns": [
            ("server_work", "server work/request", "s"),
            ("servers", "servers", "d"),
            ("throughput", "events/s", ".1f"),
            ("bound", "servers' bound", ".0f"),
            ("gain", "gain", ".2f"),
            ("p50_ms", "p50 [ms]", ".1f"),
        ],
        "targets": targets,
        "notes": [
            "one instance per server and no dynamic batching: a server does one request at a time, so "
            "its bound is 1 / (work per request)",
            "sleep: the servers' time is not this machine's CPU (a coprocessor's); burn: CPU-bound servers "
            "on the same 2 cores as the client, which bounds the gain",
        ],
    }
