"""The client's CPU per event, A/B between source trees, their jobs interleaved.

    git worktree add /tmp/changed HEAD          # then change the client there
    python scripts/ab_client.py --trees .,/tmp/changed --models particlenet --events 2000 --repeat 3

For each tree in turn, in every round: the SONIC job of ``framework/bench/configs/models_cfg.py``
and the same job with a null consumer (``backend=noinference``), each at 10 and
``10 + events`` events (start-up cancels in the difference), the job on core 0 and one
``LocalTritonServer`` of ``data/models`` on core 1, gRPC payloads unless
``--shared-memory`` (``--http``: over HTTP). Per event: the job's CPU (``os.wait4``), its
event loop's thread and its other threads (the summary's ``cpu``); the client = SONIC - null consumer, medians of
the rounds. The children of a tree import that tree's ``framework`` and ``modules``.

A tool for changing the client (``docs/performance.md``, "The client's CPU by
elimination", was measured with it), not a benchmark of record: ``cmsbench cpu`` is.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from framework.bench import _children, _exp_cpu  # noqa: E402 - after the path
from framework.bench._harness import local_server  # noqa: E402

START = 10  # the lower event count


def job(
    tree: pathlib.Path, variant: str, events: int, server: Any, folder: pathlib.Path, args: Any
) -> dict[str, float]:
    """One cmsrun child of ``tree``'s config (``cmsbench cpu``'s job of ``variant``): its CPU
    seconds, all threads and by thread."""
    _children.REPO = tree  # child_env puts the tree first on PYTHONPATH
    _exp_cpu.CONFIGS = tree / "framework" / "bench" / "configs"  # the tree's models_cfg.py
    if variant == "sonic":
        variant = ("sonic_batched" if args.batched else "sonic") + ("_http" if args.http else "")
        variant += "_shm" if args.shared_memory else ""
    out = _exp_cpu._job(variant, events, server, folder, tuple(args.models), 0)
    return {"cpu": out["cpu_s"], "loop": out["event_loop_cpu_s"], "other": out["other_threads_cpu_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trees", default=".", help="comma-separated source trees (git worktrees)")
    parser.add_argument("--models", default="particlenet,deepmet,deeptau,facile")
    parser.add_argument("--events", type=int, default=600, help="events between the two counts")
    parser.add_argument("--repeat", type=int, default=3, help="rounds")
    parser.add_argument("--shared-memory", action="store_true", help="Client.useSharedMemory (default: payloads)")
    parser.add_argument("--batched", action="store_true", help="cross-event batching on")
    parser.add_argument("--http", action="store_true", help="Client.transport = http (default: gRPC)")
    args = parser.parse_args()
    args.models = args.models.split(",")
    trees = [pathlib.Path(t).resolve() for t in args.trees.split(",")]
    figures: dict[tuple[str, str], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="pysonic-ab-") as name:
        folder = pathlib.Path(name)
        names = [_exp_cpu.TRITON_NAMES[m] for m in args.models]
        with local_server(REPO / "data" / "models", names) as server:
            _exp_cpu._pin_tree(server.pid, {1})
            for round_ in range(args.repeat):
                for tree in trees:
                    for variant in ("sonic", "noinference"):
                        low = job(tree, variant, START, server, folder, args)
                        high = job(tree, variant, START + args.events, server, folder, args)
                        per = {k: (high[k] - low[k]) / args.events * 1e3 for k in low}
                        figures.setdefault((str(tree), variant), []).append(per)
                        print(
                            f"round {round_}  {tree}  {variant:12s}", "  ".join(f"{k} {v:6.2f}" for k, v in per.items())
                        )
    print("medians, ms of CPU per event: all threads, the event loop's, the others'")
    for tree in trees:
        medians = {
            v: {k: statistics.median(f[k] for f in figures[(str(tree), v)]) for k in ("cpu", "loop", "other")}
            for v in ("sonic", "noinference")
        }
        client = {k: medians["sonic"][k] - medians["noinference"][k] for k in ("cpu", "loop", "other")}
        print(
            f"{tree}: SONIC {medians['sonic']['cpu']:.2f}, null consumer {medians['noinference']['cpu']:.2f}; "
            f"client {client['cpu']:.2f} (loop {client['loop']:.2f}, others {client['other']:.2f}), "
            f"{client['cpu'] / len(args.models):.3f} per request"
        )


if __name__ == "__main__":
    main()
