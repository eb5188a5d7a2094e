"""A delaying TCP proxy on loopback: every chunk is held for a fixed time in each direction.

``tc netem`` is not available here, so the benchmarks put the Triton server behind this
proxy to add a round-trip time ``L``: client -> proxy -> server, each chunk released
``L / 2`` after it arrived, in each direction. There is no limit on concurrency: every
connection has its own pair of pumps, and inside a pump a reader keeps reading while
a writer releases chunks in arrival order at ``arrival + L / 2`` (a pipeline, not
one chunk at a time), so a chunk is never held longer than ``L / 2`` plus the time to
write the chunks ahead of it. Bandwidth is not limited. TCP flow control still applies
end to end, as on a real long link.

Run it in its own process, so that its CPU use does not take the client's GIL::

    python -m framework.bench._proxy --target 127.0.0.1:8001 --rtt-ms 20
    # prints "listening 127.0.0.1:PORT" on stdout, serves until SIGTERM

or in-process with :func:`serve_delay_proxy` (tests), or as a context manager
:class:`DelayProxy` that runs the subprocess. Listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import functools
import math
import signal
import subprocess
import sys
from typing import Any

import trio

__all__ = ["DelayProxy", "serve_delay_proxy"]

LOCALHOST = "127.0.0.1"
CHUNK = 1 << 16  # bytes per read
START_TIMEOUT = 30.0  # seconds for the proxy process to announce its port


async def _pump(source: trio.SocketStream, sink: trio.SocketStream, delay: float) -> None:
    """Copy ``source`` to ``sink``, each chunk released ``delay`` seconds after it arrived."""
    send, receive = trio.open_memory_channel(math.inf)

    async def reader() -> None:
        async with send:
            try:
                while data := await source.receive_some(CHUNK):
                    send.send_nowait((trio.current_time() + delay, data))
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass  # the peer is gone: what arrived is still delivered, then EOF

    async def writer() -> None:
        async with receive:
            async for release, data in receive:
                await trio.sleep_until(release)
                await sink.send_all(data)
        await trio.sleep_until(trio.current_time() + delay)  # the EOF travels too
        try:
            await sink.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        nursery.start_soon(writer)


async def _handle(client: trio.SocketStream, target: tuple[str, int], delay: float) -> None:
    try:
        server = await trio.open_tcp_stream(*target)
    except OSError:
        await client.aclose()
        return
    async with client, server:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_pump, client, server, delay)
                nursery.start_soon(_pump, server, client, delay)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # a reset connection ends this pair only, never the proxy


async def serve_delay_proxy(
    target: tuple[str, int], one_way_delay: float, *, port: int = 0, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """Serve the proxy until cancelled; ``await nursery.start(...)`` returns the listen port.

    Args:
        target: (host, port) of the server behind the proxy.
        one_way_delay: seconds each chunk is held, in each direction (L / 2).
        port: listen port on 127.0.0.1; 0 = a free one.
    """
    if one_way_delay < 0:
        raise ValueError(f"delay proxy: one_way_delay {one_way_delay} s must be >= 0")
    listeners = await trio.open_tcp_listeners(port, host=LOCALHOST)
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(functools.partial(_handle, target=target, delay=one_way_delay), listeners)


class DelayProxy:
    """The proxy in a subprocess: ``with DelayProxy("127.0.0.1:8001", rtt=0.02) as p: p.address``.

    Args:
        target: ``"host:port"`` of the server.
        rtt: added round-trip time L, seconds (each direction holds L / 2).

    Raises:
        RuntimeError: the process did not announce its port within ``START_TIMEOUT``.
    """

    def __init__(self, target: str, rtt: float) -> None:
        self.target, self.rtt = target, rtt
        self.address = ""
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> DelayProxy:
        self._process = subprocess.Popen(
            # -c, not -m framework.bench._proxy: the package imports this module first (runpy warns)
            [
                sys.executable,
                "-c",
                "import sys; from framework.bench._proxy import main; main(sys.argv[1:])",
                "--target",
                self.target,
                "--rtt-ms",
                str(self.rtt * 1e3),
            ],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        line = _read_line(self._process, START_TIMEOUT)
        if not line.startswith("listening "):
            self.__exit__()
            raise RuntimeError(f"delay proxy to {self.target}: no port announced (got {line!r})")
        self.address = line.split()[1]
        return self

    def __exit__(self, *exc_info: object) -> None:
        process, self._process = self._process, None
        if process is not None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _read_line(process: subprocess.Popen, timeout: float) -> str:
    import threading

    lines: list[str] = []
    stdout = process.stdout
    assert stdout is not None  # started with stdout=PIPE
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return lines[0].strip() if lines else ""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Delaying TCP proxy on 127.0.0.1 (benchmarks)")
    parser.add_argument("--target", required=True, help="host:port of the server")
    parser.add_argument("--rtt-ms", type=float, required=True, help="added round-trip time, ms (L/2 each way)")
    parser.add_argument("--port", type=int, default=0, help="listen port (0 = free)")
    ns = parser.parse_args(argv)
    host, _, port = ns.target.rpartition(":")

    async def run() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                listen = await nursery.start(
                    functools.partial(serve_delay_proxy, (host, int(port)), ns.rtt_ms / 2e3, port=ns.port)
                )
                print(f"listening {LOCALHOST}:{listen}", flush=True)
                async for _ in signals:  # stop cleanly on SIGTERM / Ctrl-C
                    nursery.cancel_scope.cancel()
                    break

    trio.run(run)


if __name__ == "__main__":
    main()
