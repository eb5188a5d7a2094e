"""``python -m framework.bench``: run the benchmarks, print tables, write JSON and PNG.

    python -m framework.bench all [--quick] [--repeat N] [--out results/]
    python -m framework.bench EXPERIMENT [--quick] [--repeat N]   # one of EXPERIMENTS below: latency,
        client-overhead, dynamic-batching, direct, overhead, source, miniaod, clients, servers, scale, shm,
        wrapper, cpu
    python -m framework.bench gpu [--out results/]      # on a GPU machine: gpu-direct ... gpu-ak8, then plan
    python -m framework.bench plan [--out results/]     # the capacity planner from gpu-batching/gpu-clients JSON

Each experiment writes ``<out>/<name>.json`` (settings, every measured point, targets
and whether they are met, machine, CPU model and load) and ``<out>/<name>.png``.
``--repeat N`` runs each point N times: every figure of the point is the median of its
N runs (``_harness.median_of``), and the point's ``runs`` keep each run with its load.
``--quick`` uses tiny settings (seconds per experiment: for tests; its numbers mean nothing).
Exit code 0 when every experiment ran,
whether or not its targets are met (targets are for the documentation, not pass/fail);
1 when an experiment failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import os
import pathlib
import platform
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import _exp_cpu, _exp_gpu, _exp_gpu_ak8, _exp_local, _exp_scale, _exp_servers, _exp_shm, _exp_sonic, _exp_wrapper
from ._harness import SERVERS

EXPERIMENTS: dict[str, Callable[[bool, int], dict[str, Any]]] = {
    "latency": _exp_sonic.latency_hiding,
    "client-overhead": _exp_sonic.client_overhead,
    "dynamic-batching": _exp_sonic.dynamic_batching,
    "direct": _exp_local.direct_vs_service,
    "overhead": _exp_local.framework_overhead,
    "source": _exp_local.source_throughput,
    "miniaod": _exp_local.miniaod,
    "clients": _exp_sonic.clients_per_server,
    "servers": _exp_servers.servers_per_model,
    "scale": _exp_scale.scale,
    "shm": _exp_shm.shared_memory_vs_payloads,
    "wrapper": _exp_wrapper.generated_vs_model_py,
    "cpu": _exp_cpu.cpu,
}
"""Experiment name -> function(quick, repeat) -> result dict; ``all`` runs these."""

GROUPS: dict[str, list[str]] = {
    "all": list(EXPERIMENTS),
    "gpu": [*_exp_gpu.GPU_EXPERIMENTS, *_exp_gpu_ak8.EXPERIMENTS, "plan"],
}
"""Names that run several experiments. ``gpu`` is for a machine with a GPU
(``docs/performance-gpu.md``); elsewhere it runs on the CPU and its numbers mean little."""


def machine() -> dict[str, Any]:
    """Where and when: date (UTC), CPUs (count and model), platform, Python, load average
    (1, 5, 15 min), and the NVIDIA GPUs with their driver (``nvidia-smi``; [] if none)."""
    cpu_model = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "loadavg": list(os.getloadavg()),
        "gpus": _gpus(),
    }


def _read(path: str) -> str:
    try:
        return pathlib.Path(path).read_text()
    except OSError:
        return ""


def _gpus() -> list[dict[str, str]]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    keys = ("name", "driver", "memory")
    # Not strict: a line of nvidia-smi's own error text has fewer fields; it is kept as it is.
    return [
        dict(zip(keys, (f.strip() for f in line.split(",")), strict=False)) for line in out.splitlines() if line.strip()
    ]


def _format(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "s":
        return str(value)
    try:
        return format(value, fmt)
    except (TypeError, ValueError):
        return str(value)


WIDE = 10
"""Above this many columns, the rows table is printed turned: one line per figure, one
column per row (``cmsbench cpu`` has ~20 figures for 2 configs: unreadable side by side)."""


def print_result(result: dict[str, Any], console: Console) -> None:
    """The rows table and the targets table of one experiment."""
    table = Table(title=result["title"], title_justify="left")
    columns, rows = result["columns"], result["rows"]
    if len(columns) > WIDE and len(rows) < len(columns):
        (first, header, fmt), *figures = columns
        table.add_column(Text(header))  # Text: "[ms/ev]" is a unit, not rich's markup
        for row in rows:
            table.add_column(Text(_format(row.get(first), fmt)), justify="right")
        for key, header, fmt in figures:
            table.add_row(Text(header), *(_format(row.get(key), fmt) for row in rows))
    else:
        for _, header, _ in columns:
            table.add_column(Text(header), justify="right")
        for row in rows:
            table.add_row(*(_format(row.get(key), fmt) for key, _, fmt in columns))
    console.print(table)
    if result["targets"]:
        targets = Table(title="targets", title_justify="left")
        for col in ("target", "measured", "wanted", "met", "note"):
            targets.add_column(col)
        for t in result["targets"]:
            met = {True: "[green]yes[/green]", False: "[red]no[/red]", None: "-"}[t["met"]]
            targets.add_row(t["name"], _format(t["value"], ".3g"), _format(t["target"], ".3g"), met, t["note"])
        console.print(targets)


def experiments(out: pathlib.Path) -> dict[str, Callable[[bool, int], dict[str, Any]]]:
    """Every experiment by name; ``plan`` reads its inputs from ``out``."""
    return {
        **EXPERIMENTS,
        **_exp_gpu.GPU_EXPERIMENTS,
        **_exp_gpu_ak8.EXPERIMENTS,
        "plan": lambda quick, repeat: _exp_gpu.plan(quick, repeat, results=out),
    }


def run_experiment(name: str, quick: bool, repeat: int, out: pathlib.Path, console: Console) -> dict[str, Any]:
    """Run one experiment; write ``<out>/<name>.json`` and ``.png``; return its result."""
    from ._plots import plot

    console.rule(f"[bold]{name}")
    before = machine()
    t0 = time.perf_counter()
    result = experiments(out)[name](quick, repeat)
    result["settings"].update(quick=quick, repeat=repeat)  # how it ran, in every saved result
    result["duration_s"] = time.perf_counter() - t0
    result["machine"] = {**before, "loadavg_after": list(os.getloadavg())}
    (out / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
    plot(result, out / f"{name}.png")
    print_result(result, console)
    console.print(f"{name}: {result['duration_s']:.0f} s -> {out / (name + '.json')}, {out / (name + '.png')}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m framework.bench",
        description="Benchmarks of the framework and of SONIC (see docs/performance.md)",
    )
    parser.add_argument(
        "experiment",
        nargs="+",
        choices=[*experiments(pathlib.Path()), *GROUPS],
        help="what to run (several may be named)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny settings (tests): seconds, meaningless numbers")
    parser.add_argument("--repeat", type=int, default=1, help="runs per point; the median is reported")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results"), help="output folder")
    ns = parser.parse_args(argv)
    console = Console()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    ns.out.mkdir(parents=True, exist_ok=True)
    names = [n for name in ns.experiment for n in GROUPS.get(name, [name])]
    failed = []
    try:
        for name in names:
            try:
                run_experiment(name, ns.quick, ns.repeat, ns.out, console)
            except Exception as exc:  # noqa: BLE001 - report and go on with the other experiments
                failed.append(name)
                console.print(f"[bold red]{name} failed: {type(exc).__name__}: {exc}[/bold red]")
                if os.environ.get("PYSONIC_TRACEBACK"):
                    traceback.print_exc()
    finally:
        SERVERS.close()
    if failed:
        console.print(f"[bold red]failed experiments: {', '.join(failed)}[/bold red]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
