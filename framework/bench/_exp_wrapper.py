"""Benchmark: the generated ONNX wrapper against the stand-ins' former per-model ``model.py``.

``cmsbench wrapper``: the stand-ins (``data/models``) are now ordinary ONNX models
that the server's repository translation wraps (``framework/serving/_repository.py``: a
generated ``model.py`` and a translated config). Before, each had a hand-written
Python-backend ``config.pbtxt`` (``backend: "python"``, ``runner``/``onnx_file``
parameters) and a committed two-line ``1/model.py``. Both forms are served by ONE server
(the former one rebuilt in a temporary folder, named ``<model>_model_py``), and the same
requests alternate between them point by point: the ratio of served throughput is measured
in one run (target: no regression, ratio >= 0.95).
"""

from __future__ import annotations

import functools
import statistics
import time
from typing import Any

import numpy as np
import trio

from framework.utilities import default_model_repository

from ._harness import median_of, temporary_folder

MS = 1e3
MODELS = ("particlenet_ak4", "facile")
IN_FLIGHT = (1, 8)
ROWS = {"particlenet_ak4": 8, "facile": 16000}  # rows per request: jets of an event, HCAL channels

FORMER_MODEL_PY = (
    "# Triton Python-backend entry point: the framework's model (ONNX runner on CPU instances,\n"
    "# torch runner on GPU instances; see framework/serving/python_backend.py).\n"
    "from framework.serving.python_backend import TritonPythonModel  # noqa: F401\n"
)


def write_former_model(folder: Any, name: str) -> Any:
    """The stand-in ``name`` in its former hand-written Python-backend form, under ``folder/<name>_model_py``."""
    from google.protobuf import text_format

    from framework.serving import read_model_config

    source = default_model_repository() / name
    config = read_model_config(source)
    config.name = f"{name}_model_py"
    config.ClearField("platform")
    config.ClearField("model_repository_agents")
    config.backend = "python"
    config.parameters["onnx_file"].string_value = "model.onnx"
    target = folder / config.name
    (target / "1").mkdir(parents=True)
    for item in ("model.onnx", "model.pt"):
        (target / "1" / item).symlink_to(source / "1" / item)
    (target / "1" / "model.py").write_text(FORMER_MODEL_PY)
    (target / "config.pbtxt").write_text(text_format.MessageToString(config))
    return target


def _inputs(name: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    from framework.serving import read_model_config

    config = read_model_config(default_model_repository() / name)
    arrays = {}
    for tensor in config.input:
        shape = (ROWS[name], *tensor.dims)
        arrays[tensor.name] = rng.normal(size=shape).astype(np.float32)
    return arrays


async def _measure(client: Any, inputs: dict[str, np.ndarray], in_flight: int, calls: int) -> dict[str, float]:
    latencies: list[float] = []

    async def worker(count: int) -> None:
        for _ in range(count):
            request = client.new_request()
            for key, array in inputs.items():
                request.input[key].to_server(array)
            t0 = time.perf_counter()
            await request.infer_async()
            latencies.append(time.perf_counter() - t0)
            for output in request.output.values():
                output.from_server()

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for index in range(in_flight):
            nursery.start_soon(worker, calls // in_flight + (index < calls % in_flight))
    return {"p50": statistics.median(latencies), "wall": time.perf_counter() - t0}


def _paired_run(clients: dict[str, Any], inputs: dict[str, np.ndarray], in_flight: int, calls: int) -> dict[str, float]:
    """One run of each form in turn (the forms alternate, run after run): p50 [ms], requests/s,
    and the run's own throughput ratio generated / model.py."""
    run = {}
    for form, client in clients.items():
        measured = trio.run(_measure, client, inputs, in_flight, calls)
        run[f"{form}_ms"] = measured["p50"] * MS
        run[f"{form}_per_s"] = calls / measured["wall"]
    run["throughput_ratio"] = run["generated_per_s"] / run["model_py_per_s"]
    return run


def generated_vs_model_py(quick: bool, repeat: int) -> dict[str, Any]:
    """Served throughput and p50 latency, generated wrapper vs former ``model.py``, one server."""
    from framework.serving.testing import serving
    from framework.sonic import ServerInfo, TritonClient, client_description

    calls = 8 if quick else 200
    rng = np.random.default_rng(16)
    rows = []
    with temporary_folder("wrapper") as folder:
        sources = {name: default_model_repository() / name for name in MODELS}
        sources |= {f"{name}_model_py": write_former_model(folder, name) for name in MODELS}
        with serving(sources, timeout=120.0) as server:
            for name in MODELS:
                inputs = _inputs(name, rng)
                clients = {}
                for form, model in (("generated", name), ("model_py", f"{name}_model_py")):
                    # each form's own config (the former one has no checksum agent)
                    params = client_description().validate(
                        {"modelName": model, "timeout": 120, "modelConfigPath": str(sources[model] / "config.pbtxt")},
                        "Client",
                    )
                    clients[form] = TritonClient(params, debug_name=f"{form}Bench")
                    clients[form].connect(ServerInfo("bench", server.grpc_address))
                try:
                    for n in IN_FLIGHT:
                        for client in clients.values():
                            trio.run(_measure, client, inputs, n, max(n, 2))  # warm-up

                        measure = functools.partial(_paired_run, clients, inputs, n, calls)
                        rows.append({"model": name, "in_flight": n, **median_of(repeat, measure)})
                finally:
                    for client in clients.values():
                        client.close()
    worst = min(r["throughput_ratio"] for r in rows)
    return {
        "experiment": "wrapper",
        "title": "Generated ONNX wrapper vs the former per-model model.py, one server",
        "settings": {
            "models": list(MODELS),
            "in_flight": list(IN_FLIGHT),
            "calls": calls,
            "rows": ROWS,
        },
        "rows": rows,
        "columns": [
            ("model", "model", "s"),
            ("in_flight", "N", "d"),
            ("generated_ms", "generated p50 [ms]", ".2f"),
            ("model_py_ms", "model.py p50 [ms]", ".2f"),
            ("generated_per_s", "generated [req/s]", ".1f"),
            ("model_py_per_s", "model.py [req/s]", ".1f"),
            ("throughput_ratio", "generated/model.py", ".3f"),
        ],
        "targets": [
            {
                "name": "served throughput, generated wrapper / former model.py (worst point)",
                "value": worst,
                "target": 0.95,
                "met": worst >= 0.95,
                "note": "no regression; the two forms alternate against one server in one run",
            }
        ],
        "notes": [
            "SONIC client, Async, one local server serving both forms of each model (CPU instances)",
            "each figure is the median of the point's runs (the ratio: of each run's own ratio); "
            "every run is kept in the row's runs, with the load",
            "both forms run the same runtime (framework/serving/python_backend.py); what differs is the "
            "generated config and model.py, and the symlinked files",
        ],
    }
