"""Test modules shared by several test files (``from support import ...``; pytest puts
``tests/`` on ``sys.path``). Fixtures live in ``conftest.py``; model repositories and
servers come from :mod:`framework.serving.testing`.

The fault jobs (``test_retry.py``, ``test_routing.py``): ``gate -> doubler -> recorder``
on EmptySource events, a SONIC ``double`` model (y = 2x) behind the doubler. A test sets
:class:`JobState` before a job and reads it after (one job at a time):

* :class:`Gate` (ExternalWork filter, always passes) holds each event numbered above
  ``after`` until that hold's ``trio.Event`` is set, for every ``(after, event)`` of
  ``JobState.holds``: the test's fault task does the damage at a known point, then opens;
* :class:`Doubler` sends 1 to 3 rows of the event number (``float32``, shape
  ``(1 + n % 3, 4)``) and puts the model's answer (``float32``, same shape);
* :class:`Recorder` appends ``(event number, the doubler's product)`` to
  ``JobState.records``, in completion order (duplicates kept, for the test to find).

Registered by name as ``testGate``, ``testDoubler``, ``testRecorder``.

:data:`CMS_MODELS` is where CMS's own models are, in CMSSW's data layout (for
``CMSSW_SEARCH_PATH``): ``$PYSONIC_CMS_MODELS``, else ``models/`` of the project's shared
folder (``framework.io.samples.shared_folder``: ``../shared`` beside the checkout, as CI lays
it out; ``PYSONIC_SHARED=`` hides it); :func:`cms_models` gives it or skips the test.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import subprocess
import sys
import threading
from typing import Any

import numpy as np
import pytest
import trio

import framework
from framework import EDAnalyzer, EDFilter, ExternalWork
from framework.io.samples import shared_folder
from framework.sonic import SonicEDProducer

CMS_MODELS = pathlib.Path(
    os.environ.get("PYSONIC_CMS_MODELS") or (shared_folder() or pathlib.Path("/nonexistent")) / "models"
)


def cms_models() -> pathlib.Path:
    """:data:`CMS_MODELS`, or skip the test where CMS's models are not on this machine."""
    if not (CMS_MODELS / "RecoBTag").is_dir():
        pytest.skip(f"CMS's models are not in {CMS_MODELS} (set PYSONIC_CMS_MODELS to a CMSSW data layout)")
    return CMS_MODELS


class JobState:
    """What the modules share with the running test (one job at a time)."""

    holds: list[tuple[int, trio.Event]] = []  # events numbered above n wait for the trio.Event
    records: list[tuple[int, np.ndarray]] = []


class Gate(ExternalWork, EDFilter):
    """Lets an event through once every gate for its number is open (always passes)."""

    def acquire(self, event: Any, holder: Any) -> None:
        holder.run_async(self._wait, event.id.event)

    @staticmethod
    async def _wait(number: int) -> None:
        for after, opened in JobState.holds:
            if number > after:
                await opened.wait()

    def filter(self, event: Any, result: Any) -> bool:  # type: ignore[override]  # ExternalWork: (event, result)
        return True


class Doubler(SonicEDProducer):
    """Sends 1 to 3 rows of the event number; puts the model's answer."""

    def __init__(self, params: Any) -> None:
        super().__init__(params)
        self.produces()

    def acquire(self, event: Any, input: Any) -> None:
        n = event.id.event
        input["x"].to_server(np.full((1 + n % 3, 4), n, np.float32))

    def produce(self, event: Any, output: Any) -> None:  # type: ignore[override]  # SONIC: (event, Triton map)
        event.put(np.array(output["y"].from_server()))


class Recorder(EDAnalyzer):
    """Appends (event number, the ``doubler`` product) to ``JobState.records``."""

    def __init__(self, params: Any) -> None:
        self.src = self.consumes("doubler")

    def analyze(self, event: Any) -> None:
        JobState.records.append((event.id.event, event.get(self.src)))


for _cls in (Gate, Doubler, Recorder):
    framework.register_type("test" + _cls.__name__, _cls)


def cmsrun_process(config: str | pathlib.Path, *args: str, cwd: pathlib.Path) -> subprocess.Popen[str]:
    """``cmsrun config --no-progress *args`` started in ``cwd`` in a session of its own (a
    test signals it as a terminal would), its stderr a text pipe, stdin and stdout closed."""
    return subprocess.Popen(
        [sys.executable, "-m", "framework.cmsrun", str(config), "--no-progress", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def processes_with_marker(marker: str) -> list[int]:
    """Live processes whose environment carries ``PYSONIC_TEST_MARKER=marker``.

    The fallback tritonserver inherits cmsrun's environment, so this finds it (even once
    reparented) without counting servers that other jobs on the machine run.
    """
    needle = f"PYSONIC_TEST_MARKER={marker}".encode()
    found = []
    for proc in pathlib.Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a server the test starts, or a closed port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def local_sample(name: str) -> str:
    """The real sample ``name`` on this machine (never fetched); the test is skipped, saying
    why, where it is absent."""
    from framework import FileOpenError
    from framework.io.samples import locate_sample

    try:
        return str(locate_sample(name, fetch=False))
    except FileOpenError as exc:
        pytest.skip(f"no local {name} ({exc})")


def kill_once_module(marker: pathlib.Path, record: str) -> str:
    """The text of a module file defining ``KillOnce``, an EDAnalyzer that SIGKILLs its own
    worker process at its 3rd event, once: before, it writes the value of the expression
    ``record`` (e.g. ``str(event.id)``, ``os.uname().nodename``) into ``marker``, which also
    says that it did. Written next to a config, it is importable as ``"<module>:KillOnce"``."""
    return f"""
import os, pathlib, signal
from framework import EDAnalyzer

MARKER = pathlib.Path({str(marker)!r})


class KillOnce(EDAnalyzer):
    \"\"\"SIGKILLs its own worker process at its 3rd event, once (the marker file says it did).\"\"\"

    def __init__(self, params):
        self.seen = 0

    def analyze(self, event):
        self.seen += 1
        if self.seen == 3 and not MARKER.exists():
            MARKER.write_text({record})
            os.kill(os.getpid(), signal.SIGKILL)
"""


class Relay:
    """A TCP relay on 127.0.0.1 in front of ``target`` (``host:port``), in threads: what a
    test needs between a client and a real server (a proxy or load balancer's part).

    ``ssl_context``: TLS is terminated here (a server-side context), plain bytes go on.
    :meth:`close_connections` closes every client connection (a server or proxy closing
    idle keep-alive connections); ``accepted`` counts the connections made to it;
    ``received`` holds the first 64 kB that clients sent (decrypted).
    Use as a context manager; ``address`` is where it listens.
    """

    def __init__(self, target: str, ssl_context: Any = None) -> None:
        self.received = bytearray()
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.ssl_context = ssl_context
        self.accepted = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._clients: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> Relay:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()
        self.close_connections()
        self._thread.join(5)

    def close_connections(self) -> None:
        with self._lock:
            clients, self._clients = self._clients, []
        for client in clients:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
            client.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            if self.ssl_context is not None:
                client = self.ssl_context.wrap_socket(client, server_side=True)
            upstream = socket.create_connection(self.target)
        except OSError:
            client.close()
            return
        with self._lock:
            self.accepted += 1
            self._clients.append(client)
        threading.Thread(target=_pump, args=(upstream, client), daemon=True).start()
        _pump(client, upstream, self.received)


def _pump(source: socket.socket, sink: socket.socket, record: bytearray | None = None) -> None:
    try:
        while data := source.recv(1 << 16):
            if record is not None and len(record) < 1 << 16:
                record += data
            sink.sendall(data)
    except OSError:
        pass
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)
        end.close()
