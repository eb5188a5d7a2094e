"""``--scheduler ADDRESS``: is a Dask scheduler there? Answered within a bounded time.

``distributed.Client(address)`` waits 30 s (Dask's connect timeout) for a port where
nothing listens, then raises two chained tracebacks, and waits for good where something
else listens (an HTTP server reads the Dask handshake as the start of a request and
waits for the rest). :func:`check_scheduler` asks first, in one line each:

* a malformed address (``notaurl``, no port): a usage error (exit 2);
* nothing listens (connection refused, host unknown, no answer within
  :data:`SCHEDULER_TIMEOUT`): a FrameworkError;
* something listens but does not answer Dask's ``identity`` as a scheduler within the
  timeout: a FrameworkError saying so.

The waits are asyncio's on the calling thread (``asyncio.wait_for``): nothing of them runs in
C without returning to the loop.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from distributed.comm import connect
from distributed.comm.addressing import parse_address, parse_host_port

from framework.utilities import FrameworkError, UsageError

__all__ = ["SCHEDULER_TIMEOUT", "check_scheduler"]

SCHEDULER_TIMEOUT = 10.0  # seconds for the TCP connection and, apart, for the scheduler's answer


def check_scheduler(address: str, timeout: float | None = None) -> None:
    """Raise unless a Dask scheduler answers at ``address`` within ``timeout`` seconds
    (default :data:`SCHEDULER_TIMEOUT`) for the connection and again for its answer
    (``tcp://`` addresses, the default scheme; ``tls://`` is checked for a listener only,
    other schemes not at all).

    Raises:
        UsageError: ``address`` is not of the form ``[tcp://]HOST:PORT``.
        FrameworkError: nothing answers there, or something that is not a Dask scheduler.
    """
    what = f"--scheduler {address}"
    timeout = SCHEDULER_TIMEOUT if timeout is None else timeout
    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location) if scheme in ("tcp", "tls") else (None, None)
    except ValueError as exc:
        raise UsageError(f"{what}: not a Dask scheduler address ([tcp://]HOST:PORT): {exc}") from None
    if host is None or port is None:
        return
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except TimeoutError:
        raise FrameworkError(f"{what}: no answer within {timeout:.0f} s", category="ExternalFailure") from None
    except OSError as exc:
        raise FrameworkError(
            f"{what}: no Dask scheduler there ({exc.strerror or exc})", category="ExternalFailure"
        ) from None
    if scheme != "tcp":
        return
    try:
        reply = asyncio.run(asyncio.wait_for(_identity(f"tcp://{location}", timeout), timeout))
    except TimeoutError:
        reply = None
    except Exception as exc:  # noqa: BLE001 - whatever the other side did, it was not a scheduler's answer
        raise FrameworkError(
            f"{what}: something listens there, but it is not a Dask scheduler ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})",
            category="ExternalFailure",
        ) from None
    if not (isinstance(reply, dict) and reply.get("type") == "Scheduler"):
        answer = f"answered {reply.get('type')!r}" if isinstance(reply, dict) else f"no answer within {timeout:.0f} s"
        raise FrameworkError(
            f"{what}: something listens there, but it is not a Dask scheduler (to Dask's identity request: {answer})",
            category="ExternalFailure",
        )


async def _identity(address: str, timeout: float) -> Any:
    comm = await connect(address, timeout=timeout)
    try:
        await comm.write({"op": "identity", "reply": True})
        return await comm.read()
    finally:
        comm.abort()
