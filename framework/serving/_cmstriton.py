"""``cmstriton``: start, check and stop a local Triton server that outlives the command.

The counterpart of CMSSW's ``cmsTriton`` script (HeterogeneousCore/SonicTriton/scripts),
without containers: the server is nvidia-pytriton's ``tritonserver`` binary, run by
``LocalTritonServer``. ``start`` returns once every model is ready and leaves the
server running; its process id and addresses (gRPC and HTTP: ``gRPC address: host:port``,
``HTTP address: host:port``) are printed and kept in a state folder::

    cmstriton start [--repository DIR] [--instances N] [--device cpu|gpu|auto] [--grpc-port P] [--wait S] [--dir D] [-v]
    cmstriton check [--dir D]
    cmstriton stop  [--dir D] [--timeout S]

State folder (``--dir``, default ``$PYSONIC_CMSTRITON_DIR`` or ``~/.cache/pysonic/cmstriton``):
``tritonserver.pid``, ``state.json`` (pid, its start time, ports, addresses, repository,
log path, models, the server's /dev/shm region prefix), ``tritonserver.log`` and ``work/``
(the served repository and the generated models: ``--repository`` is any standard Triton
model repository, ONNX, TorchScript or Python-backend models, served unchanged and never
written to; see ``_repository``).
Exit status: 0 on success, 1 on failure, 2 on a usage error (the reason is printed on stderr).

A server that died (killed by the out-of-memory killer, say) leaves its Python-backend
stub processes and their /dev/shm regions behind (see ``_processes``). ``check`` reports
them and fails; ``stop`` removes them; ``start`` removes those of the dead server first.
They are found by the region prefix kept in the state, so those of other servers are
never touched.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any

from framework.serving._repository import model_folders
from framework.serving._server import (
    LOCALHOST,
    LocalTritonServer,
    ServerRemains,
    default_cache_dir,
    default_model_repository,
    end_server_remains,
    pid_is_tritonserver,
    port_is_free,
    process_start_time,
    query_ready_models,
    server_remains,
    terminate_server,
)
from framework.utilities import PORT_RANGE, FrameworkError

PID_FILE = "tritonserver.pid"
STATE_FILE = "state.json"
LOG_FILE = "tritonserver.log"
WORK_DIR = "work"


def default_state_dir() -> pathlib.Path:
    """``$PYSONIC_CMSTRITON_DIR``, else ``~/.cache/pysonic/cmstriton``."""
    override = os.environ.get("PYSONIC_CMSTRITON_DIR")
    return pathlib.Path(override) if override else default_cache_dir() / "cmstriton"


def _write_atomic(path: pathlib.Path, text: str) -> None:
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(text)
    os.replace(scratch, path)


def _read_state(state_dir: pathlib.Path) -> dict[str, Any] | None:
    """The state of the last ``start`` (None if there is none or it is unreadable)."""
    try:
        state: dict[str, Any] = json.loads((state_dir / STATE_FILE).read_text())
        pid = int((state_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None
    state["pid"] = pid  # the PID file is the authority, as for cmsTriton
    return state


def _clear_state(state_dir: pathlib.Path) -> None:
    for name in (PID_FILE, STATE_FILE):
        (state_dir / name).unlink(missing_ok=True)
    shutil.rmtree(state_dir / WORK_DIR, ignore_errors=True)


def _is_running(state: dict[str, Any]) -> bool:
    """The server of ``state`` is alive (its pid, started when the state says: pids are reused)."""
    return pid_is_tritonserver(state["pid"], state.get("start_time"))


def _attribution(state: dict[str, Any]) -> tuple[str | None, int | None]:
    """(region prefix, process group) that find the server's stubs and regions: the prefix;
    the group (its pid) only for a state written before servers had a prefix."""
    prefix = state.get("region_prefix")
    return prefix, None if prefix else state["pid"]


def _end_remains(state: dict[str, Any]) -> ServerRemains:
    """SIGKILL the stubs of the dead server of ``state``, remove its /dev/shm regions."""
    return end_server_remains(*_attribution(state))


def _fail(message: str) -> int:
    print(f"cmstriton: {message}", file=sys.stderr)
    return 1


def _remove_made(made: list[pathlib.Path], state_dir: pathlib.Path) -> None:
    """After a failed start: remove its log (the error message holds its tail) and the
    folders this start made (innermost first)."""
    (state_dir / LOG_FILE).unlink(missing_ok=True)
    for folder in made:
        with contextlib.suppress(OSError):  # not empty: someone else's files appeared there
            folder.rmdir()


def _start(args: argparse.Namespace) -> int:
    state_dir: pathlib.Path = args.dir
    if state_dir.exists() and not state_dir.is_dir():
        return _fail(f"--dir {state_dir} is a file, not a folder")
    repository = pathlib.Path(args.repository)
    if not repository.is_dir():  # before the state folder is made
        problem = "is a file, not a folder" if repository.exists() else "does not exist"
        return _fail(f"--repository {args.repository} {problem}")
    state = _read_state(state_dir)
    if state is not None and _is_running(state):
        return _fail(
            f"a server is already running from {state_dir} (pid {state['pid']}, "
            f"gRPC {state.get('grpc_address')}): run 'cmstriton stop' first"
        )
    if state is not None and (remains := _end_remains(state)):
        print(f"removed {remains} left by the dead server pid {state['pid']}")
    _clear_state(state_dir)  # stale files of a server that died
    if args.grpc_port and not port_is_free(args.grpc_port):
        return _fail(
            f"--grpc-port {args.grpc_port} is already in use on {LOCALHOST} (use --grpc-port 0 for a free one)"
        )
    if pathlib.Path(args.repository).is_dir() and not model_folders(args.repository):
        return _fail(
            f"--repository {args.repository} holds no model (a model is a folder with a config.pbtxt, or with "
            "1/model.onnx): a server would start serving nothing"
        )
    made = [p for p in (state_dir, *state_dir.parents) if not p.exists()]  # removed again if start fails
    state_dir.mkdir(parents=True, exist_ok=True)
    server = LocalTritonServer(
        args.repository,
        instances=args.instances,
        device=args.device,
        grpc_port=args.grpc_port,
        log_path=state_dir / LOG_FILE,
        verbose=args.verbose,
        work_dir=state_dir / WORK_DIR,
        die_with_parent=False,  # it must outlive this command
    )
    started = time.monotonic()
    try:
        server.start(timeout=args.wait)
        models = server.ready_models()
    except FrameworkError as err:
        log_path, served = server.log_path, server.served_repository
        server.stop()
        _clear_state(state_dir)
        _remove_made(made, state_dir)
        # The log is gone with the failed start: the message holds its last lines, and names
        # the user's repository, not the server's copy of it.
        message = str(err).replace(f"; log {log_path}, last lines:", "; the last lines of its log:")
        return _fail(message.replace(str(served), str(args.repository)))
    pid = server.pid
    assert pid is not None  # started
    state = {
        "pid": pid,
        "start_time": process_start_time(pid),  # clock ticks after boot
        "ports": server.ports,
        "grpc_address": server.grpc_address,
        "http_address": server.http_address,
        "metrics_url": server.metrics_url,
        "repository": str(server.repository),
        "served_repository": str(server.served_repository),
        "instances": args.instances,
        "device": server.device,
        "log_path": str(server.log_path),
        "models": models,
        "region_prefix": server.region_prefix,
    }
    _write_atomic(state_dir / STATE_FILE, json.dumps(state, indent=2) + "\n")
    _write_atomic(state_dir / PID_FILE, f"{pid}\n")
    server.detach()
    print(f"tritonserver pid {state['pid']} ready in {time.monotonic() - started:.1f} s (models on {server.device})")
    print(f"gRPC address: {state['grpc_address']}")
    print(f"HTTP address: {state['http_address']}")
    print(f"ready models: {', '.join(models) or '(none)'}")
    print(f"log: {state['log_path']}")
    return 0


def _check(args: argparse.Namespace) -> int:
    state = _read_state(args.dir)
    if state is None:
        return _fail(f"no server was started from {args.dir}")
    if not _is_running(state):
        log = state.get("log_path")
        dead = f"server pid {state['pid']} from {args.dir} is not running (see its log {log})"
        remains = server_remains(*_attribution(state))
        if remains:
            return _fail(f"{dead}; it left {remains}: run 'cmstriton stop' to remove them")
        return _fail(dead)
    models = query_ready_models(state["grpc_address"])
    if models is None:
        return _fail(f"server pid {state['pid']} at {state['grpc_address']} is running but not ready")
    print(f"tritonserver pid {state['pid']} ready")
    print(f"gRPC address: {state['grpc_address']}")
    if state.get("http_address"):
        print(f"HTTP address: {state['http_address']}")
    print(f"ready models: {', '.join(models) or '(none)'}")
    return 0


def _stop(args: argparse.Namespace) -> int:
    state = _read_state(args.dir)
    if state is None:
        print(f"no server running from {args.dir}")
        _clear_state(args.dir)
        return 0
    pid = state["pid"]
    if not _is_running(state):
        # dead, or its pid now belongs to another program: never signal that one
        remains = _end_remains(state)
        _clear_state(args.dir)
        left = f"removed {remains} it left, and its state" if remains else "removed its state"
        print(f"server pid {pid} was not running; {left} from {args.dir}")
        return 0
    remains = terminate_server(pid, timeout=args.timeout, region_prefix=state.get("region_prefix"))
    _clear_state(args.dir)
    print(f"stopped tritonserver pid {pid}" + (f"; removed {remains} it left" if remains else ""))
    return 0


def _port(text: str) -> int:
    """``--grpc-port``'s value: 0 (a free port) or a TCP port (argparse names the option)."""
    port = int(text)  # ValueError: argparse's "invalid _port value"
    if port != 0 and not PORT_RANGE[0] <= port <= PORT_RANGE[1]:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port ({PORT_RANGE[0]}-{PORT_RANGE[1]}; 0: a free one)")
    return port


_port.__name__ = "port"  # argparse's "invalid port value: 'x'"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cmstriton", description="Start, check or stop a local Triton server (CMSSW's cmsTriton)."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{start,check,stop}")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--dir", type=pathlib.Path, default=default_state_dir(), help="state folder (default: %(default)s)"
    )

    start = commands.add_parser("start", parents=[common], help="start a server and wait for its models")
    start.add_argument(
        "--repository",
        type=pathlib.Path,
        default=default_model_repository(),
        help="a standard Triton model repository, only read (ONNX, TorchScript, Python models; "
        "checksum agents checked) (default: %(default)s)",
    )
    start.add_argument("--instances", type=int, default=0, help="instances per model (0: as configured)")
    start.add_argument(
        "--device",
        choices=("cpu", "gpu", "auto"),
        default="auto",
        help="where the models run: gpu = instances KIND_GPU (onnxruntime's CUDA provider, torch on CUDA); "
        "auto = gpu when one is visible (default: %(default)s)",
    )
    start.add_argument("--grpc-port", type=_port, default=0, help="gRPC port (0: a free one)")
    start.add_argument("--wait", type=float, default=60.0, help="seconds to wait for readiness")
    start.add_argument("-v", "--verbose", action="store_true", help="verbose server log")
    start.set_defaults(func=_start)

    check = commands.add_parser(
        "check", parents=[common], help="exit 0 if the server is ready; report what a dead one left"
    )
    check.set_defaults(func=_check)

    stop = commands.add_parser("stop", parents=[common], help="stop the server; remove what a dead one left")
    stop.add_argument("--timeout", type=float, default=30.0, help="seconds before SIGKILL")
    stop.set_defaults(func=_stop)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cmstriton`` console script; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse's usage error (2) or --help (0): returned, not raised
        return exc.code if isinstance(exc.code, int) else 2
    try:
        status: int = args.func(args)
        return status
    except FrameworkError as err:
        return _fail(str(err))


if __name__ == "__main__":
    sys.exit(main())
