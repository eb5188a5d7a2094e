"""``python -m framework.bench``: run the benchmarks, print tables, write JSON and PNG.

    python -m framework.bench all [--quick] [--repeat N] [--out results/]
    python -m framework.bench latency|client-overhead|dynamic-batching|direct|overhead|source|miniaod|clients

Each experiment writes ``<out>/<name>.json`` (settings, every measured point, targets
and whether they are met, machine and load) and ``<out>/<name>.png``. ``--repeat N``
takes the median of N runs per point. ``--quick`` uses tiny settings (seconds per
experiment: for tests; its numbers mean nothing). Exit code 0 when every experiment ran,
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
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from rich.console import Console
from rich.table import Table

from . import _exp_local, _exp_sonic
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
}
"""Experiment name -> function(quick, repeat) -> result dict."""


def machine() -> dict[str, Any]:
    """Where and when: date (UTC), CPUs, platform, Python, load average (1, 5, 15 min)."""
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "loadavg": list(os.getloadavg())}


def _format(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "s":
        return str(value)
    try:
        return format(value, fmt)
    except (TypeError, ValueError):
        return str(value)


def print_result(result: dict[str, Any], console: Console) -> None:
    """The rows table and the targets table of one experiment."""
    table = Table(title=result["title"], title_justify="left")
    for _, header, _ in result["columns"]:
        table.add_column(header, justify="right")
    for row in result["rows"]:
        table.add_row(*(_format(row.get(key), fmt) for key, _, fmt in result["columns"]))
    console.print(table)
    if result["targets"]:
        targets = Table(title="targets", title_justify="left")
        for col in ("target", "measured", "wanted", "met", "note"):
            targets.add_column(col)
        for t in result["targets"]:
            met = {True: "[green]yes[/green]", False: "[red]no[/red]", None: "-"}[t["met"]]
            targets.add_row(t["name"], _format(t["value"], ".3g"), _format(t["target"], ".3g"), met, t["note"])
        console.print(targets)


def run_experiment(name: str, quick: bool, repeat: int, out: pathlib.Path, console: Console) -> dict[str, Any]:
    """Run one experiment; write ``<out>/<name>.json`` and ``.png``; return its result."""
    from ._plots import plot

    console.rule(f"[bold]{name}")
    before = machine()
    t0 = time.perf_counter()
    result = EXPERIMENTS[name](quick, repeat)
    result["duration_s"] = time.perf_counter() - t0
    result["machine"] = {**before, "loadavg_after": list(os.getloadavg())}
    (out / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
    plot(result, out / f"{name}.png")
    print_result(result, console)
    console.print(f"{name}: {result['duration_s']:.0f} s -> {out / (name + '.json')}, {out / (name + '.png')}")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m framework.bench",
                                     description="Benchmarks of the framework and of SONIC (see docs/performance.md)")
    parser.add_argument("experiment", choices=[*EXPERIMENTS, "all"], help="what to run")
    parser.add_argument("--quick", action="store_true", help="tiny settings (tests): seconds, meaningless numbers")
    parser.add_argument("--repeat", type=int, default=1, help="runs per point; the median is reported")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results"), help="output folder")
    ns = parser.parse_args(argv)
    console = Console()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    ns.out.mkdir(parents=True, exist_ok=True)
    names = list(EXPERIMENTS) if ns.experiment == "all" else [ns.experiment]
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
