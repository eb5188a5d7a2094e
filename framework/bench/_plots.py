"""PNG figures of the benchmark results (matplotlib, the ``bench`` extra; Agg backend, no display)."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence
from typing import Any

DPI = 80  # small files: they are committed under docs/performance/


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _latency(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    rtts = sorted({r["rtt_ms"] for r in rows})
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, rtt in enumerate(rtts):
        colour = f"C{i}"
        for mode, style in (("Async", "-o"), ("Sync", "--s")):
            pts = sorted((r for r in rows if r["rtt_ms"] == rtt and r["mode"] == mode), key=lambda r: r["streams"])
            n = [r["streams"] for r in pts]
            ax_t.plot(n, [r["throughput"] for r in pts], style, color=colour, label=f"{mode}, L = {rtt} ms", ms=4)
            if mode == "Async":
                ax_l.plot(n, [r["p50_ms"] for r in pts], "-o", color=colour, ms=4, label=f"p50, L = {rtt} ms")
                ax_l.plot(n, [r["p99_ms"] for r in pts], ":", color=colour, label=f"p99, L = {rtt} ms")
            if "expected" in (pts[0] if pts else {}) and mode == "Async":
                ax_t.plot(n, [0.8 * r["expected"] for r in pts], ":", color=colour, lw=1)
    for ax in (ax_t, ax_l):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("streams N")
        ax.grid(alpha=0.3)
    ax_t.set_yscale("log")
    ax_t.set_ylabel("events / s")
    ax_t.set_title("throughput (dotted: 0.8 x bound)")
    ax_l.set_ylabel("event latency [ms] (Async)")
    ax_l.set_title("latency")
    ax_t.legend(fontsize=7, ncol=2)
    ax_l.legend(fontsize=7, ncol=2)
    return fig


def _grouped_bars(
    ax: Any, labels: list[str], series: dict[str, list[float]], width: float | None = None, tick_size: float | None = 8
) -> None:
    """Bars on ``ax``: one group per label (its tick), one bar per series side by side, in order;
    ``width`` of one bar (default: a group fills 0.8 of a label's slot)."""
    import numpy as np

    x = np.arange(len(labels))
    width = width or 0.8 / max(len(series), 1)
    for i, (name, values) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=name)
    ax.set_xticks(x, labels, fontsize=tick_size)


def _bars(
    labels: list[str], series: dict[str, list[float]], ylabel: str, title: str, plt: Any, reference: float | None = None
) -> Any:
    fig, ax = plt.subplots(figsize=(8, 4))
    _grouped_bars(ax, labels, series)
    if reference is not None:
        ax.axhline(reference, color="k", lw=1, ls="--")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return fig


def _client_overhead(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    labels = [f"N = {r['streams']}" for r in rows]
    series = {"SONIC producer": [r["sonic"] for r in rows], "bare async_infer": [r["bare"] for r in rows]}
    if all("sonic_batched" in r for r in rows):
        series["SONIC, cross-event batching"] = [r["sonic_batched"] for r in rows]
    return _bars(labels, series, "events (requests) / s", "client overhead (tiny model)", plt)


def _servers(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    kinds = list(dict.fromkeys(r["server_work"] for r in rows))
    labels = [f"{kind}" for kind in kinds]
    series = {
        f"{n} server{'s' if n > 1 else ''}": [
            next(r["throughput"] for r in rows if r["server_work"] == kind and r["servers"] == n) for kind in kinds
        ]
        for n in sorted({r["servers"] for r in rows})
    }
    return _bars(labels, series, "events / s", "one model, one vs two local servers", plt)


def _batching(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    sizes = sorted({r["rows"] for r in rows})
    fig, axes = plt.subplots(1, len(sizes), figsize=(5.5 * len(sizes), 4), squeeze=False)
    for ax, size in zip(axes[0], sizes, strict=True):
        pts = [r for r in rows if r["rows"] == size]
        labels = [r["batching"] for r in pts]
        ax.bar(labels, [r["gain"] for r in pts], color="C0", label="throughput gain")
        ax.plot(labels, [r["p99_cost"] for r in pts], "o-", color="C3", label="p99 latency ratio")
        ax.axhline(1.0, color="k", lw=1, ls="--")
        ax.set_title(f"FACILE, {size} rows/event")
        ax.set_ylabel("ratio to batching off")
        ax.tick_params(axis="x", labelsize=8)
        ax.legend(fontsize=8)
    return fig


def _direct(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    fig, (ax_ms, ax_ratio) = plt.subplots(1, 2, figsize=(11, 4))
    labels = [r["model"] for r in rows]
    series = {
        "direct (here)": [r["direct_ms"] for r in rows],
        "SONIC, local (here)": [r["sonic_ms"] for r in rows],
        "CMS MiniAOD, seed 001": [r["seed_ms"] or 0 for r in rows],
    }
    _grouped_bars(ax_ms, labels, series, width=0.27, tick_size=None)
    ax_ms.set_ylabel("ms per event")
    ax_ms.set_yscale("log")
    ax_ms.legend(fontsize=8)
    ax_ms.set_title("model time per event")
    ax_ratio.bar(labels, [r["latency_ratio"] for r in rows], color="C1", label="latency SONIC / direct")
    ax_ratio.plot(labels, [r["throughput_ratio"] for r in rows], "o", color="C2", label="throughput SONIC / direct")
    ax_ratio.axhline(1.0, color="k", lw=1, ls="--")
    ax_ratio.set_title("ratios (same events, same server)")
    ax_ratio.legend(fontsize=8)
    return fig


def _overhead(result: dict[str, Any], plt: Any) -> Any:
    rows = [r for r in result["rows"] if r["modules"]]
    labels = [f"{r['modules']} modules, {r['streams']} str." for r in rows]
    return _bars(
        labels,
        {"us per module call": [r["us_per_module_call"] for r in rows]},
        "microseconds",
        "framework overhead per module call (dashed: 10 us target)",
        plt,
        reference=10.0,
    )


def _source(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    files = list(dict.fromkeys(r["file"] for r in rows))
    readers = list(dict.fromkeys(r["reader"] for r in rows))
    series = {
        reader: [next(r["events_per_s"] for r in rows if r["file"] == f and r["reader"] == reader) for f in files]
        for reader in readers
    }
    fig = _bars(files, series, "events / s", "source throughput, same branches", plt)
    fig.axes[0].set_yscale("log")
    return fig


def _miniaod(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    return _bars(
        [r["variant"] for r in rows],
        {"events/s": [r["throughput"] for r in rows]},
        "events / s",
        "MiniAOD-like demonstrator (models ~10 % of the event)",
        plt,
    )


def _clients(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(10, 4))
    n = [r["clients"] for r in rows]
    ax_t.plot(n, [r["server_throughput"] for r in rows], "-o", label="server (sum of jobs)")
    ax_t.plot(n, [rows[0]["per_client"] * k for k in n], ":", color="k", label="linear")
    ax_t.set_xlabel("client jobs N")
    ax_t.set_ylabel("events / s")
    ax_t.legend(fontsize=8)
    ax_l.plot(n, [r["p50_ms"] for r in rows], "-o", label="p50")
    ax_l.plot(n, [r["p99_ms"] for r in rows], "-s", label="p99")
    ax_l.set_xlabel("client jobs N")
    ax_l.set_ylabel("event latency per job [ms]")
    ax_l.legend(fontsize=8)
    for ax in (ax_t, ax_l):
        ax.grid(alpha=0.3)
    return fig


def _gpu_direct(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    labels = [r["model"] for r in rows]
    fig = _bars(
        labels,
        {
            "direct, 1 CPU thread": [r["direct_ms"] for r in rows],
            "SONIC: in the server": [r["server_ms"] for r in rows],
            "SONIC: outside the server": [r["transfer_ms"] for r in rows],
        },
        "ms per event",
        "per-event model time, direct vs as a service",
        plt,
    )
    fig.axes[0].set_yscale("log")
    return fig


def _in_flight_sweep(
    rows: list[dict[str, Any]],
    left: tuple[str, str],
    right: Sequence[tuple[str, str | None, str]],
    plt: Any,
    reference: tuple[float, str] | None = None,
) -> tuple[Any, Any, Any]:
    """Two panels of a bare-client sweep against the requests in flight (log2 axis), one line per
    batching setting (on: solid, off: dashed) and figure: ``left`` = (key, label) on the left
    panel, each (key, line style or None for the setting's, label) of ``right`` on the right
    one; ``{batching}`` in a label is the setting. ``reference`` = (value, label): a dotted
    grey line across the left panel. Returns (figure, left axes, right axes)."""
    fig, (ax_left, ax_right) = plt.subplots(1, 2, figsize=(11, 4))
    for batching, style in (("on", "-o"), ("off", "--s")):
        pts = sorted((r for r in rows if r["batching"] == batching), key=lambda r: r["in_flight"])
        n = [r["in_flight"] for r in pts]
        ax_left.plot(n, [r[left[0]] for r in pts], style, label=left[1].format(batching=batching))
        for key, own_style, label in right:
            ax_right.plot(n, [r[key] for r in pts], own_style or style, label=label.format(batching=batching))
    if reference is not None:
        ax_left.axhline(reference[0], color="grey", ls=":", label=reference[1])
    for ax in (ax_left, ax_right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("requests in flight")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig, ax_left, ax_right


def _gpu_batching(result: dict[str, Any], plt: Any) -> Any:
    fig, ax_t, ax_l = _in_flight_sweep(
        result["rows"],
        ("throughput", "dynamic batching {batching}"),
        [("p99_ms", None, "p99, batching {batching}"), ("p50_ms", ":", "p50, batching {batching}")],
        plt,
    )
    ax_t.set_ylabel("events / s")
    ax_l.set_ylabel("latency [ms]")
    ax_l.set_yscale("log")
    return fig


def _gpu_ak8(result: dict[str, Any], plt: Any) -> Any:
    fig, ax_t, ax_c = _in_flight_sweep(
        result["rows"],
        ("jets_per_s", "dynamic batching {batching}"),
        [("client_cpu_ms_per_request", None, "batching {batching}")],
        plt,
        reference=(result["settings"]["onnxruntime_1_thread_jets_per_s"], "onnxruntime, 1 CPU thread"),
    )
    ax_t.set_ylabel("jets / s")
    ax_t.set_yscale("log")
    ax_c.set_ylabel("client CPU per request [ms]")
    return fig


def _gpu_peak(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    labels = [f"{r['instances']} inst., {r['processes']} client cores" for r in rows] + ["raw limit"]
    return _bars(
        labels,
        {"events/s": [r["throughput"] for r in rows] + [result["settings"]["raw_limit"]]},
        "events / s",
        "ParticleNet served (dashed: 0.5 x raw limit)",
        plt,
        reference=0.5 * result["settings"]["raw_limit"],
    )


def _gpu_clients(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    fig, (ax_t, ax_l) = plt.subplots(1, 2, figsize=(10, 4))
    for i, batching in enumerate(dict.fromkeys(r["batching"] for r in rows)):
        pts = [r for r in rows if r["batching"] == batching]
        n = [r["clients"] for r in pts]
        ax_t.plot(n, [r["server_throughput"] for r in pts], "-o", color=f"C{i}", label=f"batching {batching}")
        ax_t.plot(n, [pts[0]["per_client"] * k for k in n], ":", color=f"C{i}", lw=1)
        ax_l.plot(n, [r["p50_ms"] for r in pts], "-o", color=f"C{i}", label=f"p50, batching {batching}")
        ax_l.plot(n, [r["p99_ms"] for r in pts], "--s", color=f"C{i}", label=f"p99, batching {batching}")
    ax_t.set_ylabel("events / s (sum of jobs; dotted: linear)")
    ax_l.set_ylabel("event latency per job [ms]")
    for ax in (ax_t, ax_l):
        ax.set_xlabel("client jobs N (one core each)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def _gpu_miniaod(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    return _bars(
        [r["variant"] for r in rows],
        {
            "per job core": [r["per_client_core"] for r in rows],
            "per core, server CPU counted": [r["per_core_all"] for r in rows],
        },
        "events / s per CPU core",
        "MiniAOD-like demonstrator (models ~10 % of the event)",
        plt,
    )


def _plan(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    return _bars(
        [f"batching {r['batching']}" for r in rows],
        {
            "predicted knee": [r["predicted_knee"] or 0 for r in rows],
            "measured knee": [r["measured_knee"] or 0 for r in rows],
        },
        "client cores one server sustains (0: beyond the range)",
        "capacity planner",
        plt,
    )


def _scale(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    fig, (ax_t, ax_o) = plt.subplots(1, 2, figsize=(10, 4))
    for i, config in enumerate(dict.fromkeys(r["config"] for r in rows)):
        pts = [r for r in rows if r["config"] == config]
        n = [r["workers"] for r in pts]
        ax_t.plot(n, [r["throughput"] for r in pts], "-o", color=f"C{i}", label=config)
        ax_t.plot(n, [pts[0]["throughput"] * k / pts[0]["workers"] for k in n], ":", color=f"C{i}", lw=1)
        ax_o.bar(
            [f"{config}\n{r['workers']} w" for r in pts],
            [r["overhead_ms"] + r["scheduling_ms"] for r in pts],
            color=f"C{i}",
        )
    ax_t.set_xlabel("Dask workers")
    ax_t.set_ylabel("events / s (dotted: linear)")
    ax_t.legend(fontsize=8)
    ax_o.set_ylabel("overhead + scheduling per unit [ms]")
    for ax in (ax_t, ax_o):
        ax.grid(alpha=0.3)
    return fig


def _shm(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    fig, (ax_ms, ax_mb) = plt.subplots(1, 2, figsize=(11, 4))
    for i, n in enumerate(sorted({r["in_flight"] for r in rows})):
        pts = sorted((r for r in rows if r["in_flight"] == n), key=lambda r: r["input_mb"])
        mb = [r["input_mb"] for r in pts]
        for mode, style in (("shm", "-o"), ("grpc", "--s")):
            label = f"{'shared memory' if mode == 'shm' else 'gRPC payload'}, N = {n}"
            ax_ms.plot(mb, [r[f"{mode}_ms"] for r in pts], style, color=f"C{i}", ms=4, label=label)
            ax_mb.plot(mb, [r[f"{mode}_ms_per_mb"] for r in pts], style, color=f"C{i}", ms=4, label=label)
    for ax in (ax_ms, ax_mb):
        ax.set_xscale("log")
        ax.set_xlabel("input per call [MB]")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax_ms.set_ylabel("p50 latency per call [ms]")
    ax_mb.set_ylabel("p50 latency per MB [ms/MB]")
    return fig


def _wrapper(result: dict[str, Any], plt: Any) -> Any:
    rows = result["rows"]
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = [f"{r['model']}\nN = {r['in_flight']}" for r in rows]
    series = {
        "generated wrapper": [r["generated_per_s"] for r in rows],
        "former model.py": [r["model_py_per_s"] for r in rows],
    }
    _grouped_bars(ax, labels, series)
    ax.set_ylabel("served requests/s")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return fig


def _cpu(result: dict[str, Any], plt: Any) -> Any:
    import numpy as np

    rows = result["rows"]
    fig, (ax_job, ax_client) = plt.subplots(1, 2, figsize=(11, 4.2))
    variants = (
        ("direct", "direct"),
        ("sonic", "SONIC gRPC"),
        ("sonic_http", "SONIC HTTP"),
        ("sonic_batched_http", "SONIC HTTP batched"),
        ("noinference", "no inference"),
    )
    x = np.arange(len(rows))
    width = 0.8 / len(variants)
    middle = (len(variants) - 1) / 2
    for i, (key, label) in enumerate(variants):
        ax_job.bar(x + (i - middle) * width, [r[f"{key}_cpu_ms_per_event"] for r in rows], width, label=label)
        ax_job.scatter(  # each run, beside its median
            [xi + (i - middle) * width for xi, r in zip(x, rows, strict=True) for _ in r["all_runs"]],
            [run[key]["cpu_ms_per_event"] for r in rows for run in r["all_runs"]],
            s=6,
            color="k",
            zorder=3,
        )
    ax_job.set_xticks(x, [r["config"] for r in rows], fontsize=8)
    ax_job.set_ylabel("job CPU per event [ms]")
    ax_job.set_title("the job's own CPU (bars: medians; dots: runs)")
    ax_job.legend(fontsize=7)
    client = [
        ("client_ms_per_request", "SONIC gRPC client per request"),
        ("http_client_ms_per_request", "SONIC HTTP client per request"),
        ("bare_cpu_ms_per_request", "bare gRPC async_infer per request"),
        ("bare_http_cpu_ms_per_request", "bare HTTP async_infer per request"),
        ("floor_cpu_ms_per_request", "floor (prebuilt bytes) per request"),
    ]
    width = 0.8 / len(client)
    middle = (len(client) - 1) / 2
    from ._exp_cpu import client_resolved

    # A client figure whose runs disagree on its sign (the jobs' noise is larger: the
    # MiniAOD-like config) is not drawn; the bare loop's is.
    resolved = [client_resolved(r) for r in rows]
    for i, (key, label) in enumerate(client):
        loops = key.startswith(("bare", "floor"))  # measured on their own: always drawn
        heights = [r.get(key, 0.0) if ok or loops else 0.0 for r, ok in zip(rows, resolved, strict=True)]
        ax_client.bar(x + (i - middle) * width, heights, width, label=label)
    for xi, ok in zip(x, resolved, strict=True):
        if not ok:
            ax_client.text(
                xi,
                0.5,
                "SONIC client not resolved:\nthe runs disagree on its sign",
                ha="center",
                fontsize=7,
                transform=ax_client.get_xaxis_transform(),  # x in data, y in axes fraction
            )
    ax_client.set_xticks(x, [r["config"] for r in rows], fontsize=8)
    ax_client.set_ylabel("client CPU [ms]")
    ax_client.set_title("the client's CPU vs bare tritonclient loops")
    ax_client.legend(fontsize=7)
    for ax in (ax_job, ax_client):
        ax.grid(axis="y", alpha=0.3)
    return fig


PLOTTERS: dict[str, Callable[[dict[str, Any], Any], Any]] = {
    "wrapper": _wrapper,
    "latency": _latency,
    "client-overhead": _client_overhead,
    "dynamic-batching": _batching,
    "direct": _direct,
    "overhead": _overhead,
    "source": _source,
    "miniaod": _miniaod,
    "clients": _clients,
    "servers": _servers,
    "gpu-direct": _gpu_direct,
    "gpu-batching": _gpu_batching,
    "gpu-peak": _gpu_peak,
    "gpu-clients": _gpu_clients,
    "gpu-miniaod": _gpu_miniaod,
    "gpu-ak8": _gpu_ak8,
    "plan": _plan,
    "scale": _scale,
    "shm": _shm,
    "cpu": _cpu,
}


def plot(result: dict[str, Any], path: pathlib.Path) -> pathlib.Path:
    """Write the figure of ``result`` (an experiment's dict) to ``path`` (PNG)."""
    plt = _pyplot()
    fig = PLOTTERS[result["experiment"]](result, plt)
    fig.suptitle(result["title"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
