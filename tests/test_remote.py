"""Remote input with real servers: XRootD (Debian's ``xrootd``) and HTTP (werkzeug, through
pytest-httpserver), both on 127.0.0.1 only, started and stopped here.

The XRootD server serves a copy of the real ``pfnano.root`` as ``/store/mc/pfnano.root``.
It listens on a socket bound here to 127.0.0.1 and handed to it through systemd's socket
activation (``LISTEN_FDS``; xrootd itself would listen on every interface), so a test can
stop the server and start another one on the same port. As root it must run as another
user (``-R nobody``): its folders are made readable and writable for that user. Tests that
freeze, kill or restart it have a server (and port) of their own (``own_xrootd``), so that
neither the server nor this process's XRootD client connection to it carries what they did
into the next test; a start waits for that start's own "initialization completed" line;
a failed test shows the running servers' last log lines. Tests
that need it are skipped, saying so, only where the ``xrootd`` binary is missing (``.ci/run``
installs it).

The HTTP server is pytest-httpserver: werkzeug's ``send_file(conditional=True)`` answers
single ``Range`` requests (206) and refuses multi-range ones (416), after which uproot's
HTTP source reads ranges one by one, as it does from such servers in the field.

What is checked: a job over ``root://`` (and over ``http://``) gives the local run's events
and products, event by event; a ``/store/...`` name is opened through the redirectors, in
order, past a closed port and a server that never answers; an unreachable server (a closed
port; a socket that accepts but never answers) fails within ``openTimeout`` with one line
naming file and server; SIGTERM during a hanging open ends cmsrun within 5 s with nothing
left behind; a missing remote file gives the server's message in one line; a read from a
server that stops answering fails within ``timeout``; transient read errors are retried
and counted; the XRootD client missing gives one line saying what to install.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import trio
import uproot

from framework import FileOpenError, FileReadError
from framework.cmsrun import main as cmsrun_main
from framework.io import PoolSource, RemoteAccess, _remote
from framework.io.samples import locate_sample
from framework.serving._processes import TAG_VARIABLE

from support import free_port

XROOTD = shutil.which("xrootd")
needs_xrootd = pytest.mark.skipif(
    XROOTD is None, reason="the xrootd server binary is not installed (apt-get install xrootd-server; .ci/run does it)"
)
LFN = "/store/mc/pfnano.root"
SIGNAL_BOUND = 5.0  # seconds from SIGTERM to cmsrun's exit (the bound)
SLACK = 3.0  # seconds on top of a configured timeout: XRootD checks its timeouts every second
# The server's last line of a start, after every part's own ("------ xrootd anon@vm:1094 ...").
INITIALIZED = re.compile(r"^------ xrootd \S+ initialization (completed|failed)", re.MULTILINE)

JOB = """
import framework.config as cms
V = cms.VarParsing
options = V()
options.register("inputFiles", [], V.multiplicity.list, V.varType.string, "inputs")
options.register("redirectors", [], V.multiplicity.list, V.varType.string, "redirectors")
options.register("openTimeout", 30.0, V.multiplicity.singleton, V.varType.float, "openTimeout")
options.register("timeout", 30.0, V.multiplicity.singleton, V.varType.float, "timeout")
options.register("outputFile", "out.root", V.multiplicity.singleton, V.varType.string, "output")
options.parseArguments()
process = cms.Process("REMOTE")
process.source = cms.Source("PoolSource", fileNames=cms.untracked.vstring(*options.inputFiles),
                            redirectors=cms.untracked.vstring(*options.redirectors),
                            openTimeout=cms.untracked.double(options.openTimeout),
                            timeout=cms.untracked.double(options.timeout))
process.options.numberOfStreams = 2
process.jetHT = cms.EDProducer("JetHTProducer", minPt=cms.double(30.0))
process.p = cms.Path(process.jetHT)
process.out = cms.OutputModule("NanoAODOutputModule", fileName=cms.untracked.string(options.outputFile),
    outputCommands=cms.untracked.vstring("drop *", "keep Jet_*", "keep PFCands_pt", "keep PFCands_eta",
                                         "keep MET_*", "keep jetHT"))
process.e = cms.EndPath(process.out)
"""


# -- servers --------------------------------------------------------------------------------


class XRootDServer:
    """A real ``xrootd`` on 127.0.0.1:``port`` exporting ``folder`` (``/store/...`` inside)."""

    def __init__(self, folder: pathlib.Path) -> None:
        self.folder = folder
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.url = f"root://127.0.0.1:{self.port}//"
        self.process: subprocess.Popen[bytes] | None = None
        # The session's tag in the command line: conftest fails the session on a server left running.
        tag = os.environ.get(TAG_VARIABLE, "notag")
        self.config = folder / f"pysonic-{tag}-xrootd.cfg"
        run = folder / "run"
        run.mkdir()
        self.log = run / "xrootd.log"
        self.stderr = run / "xrootd.stderr"
        self.config.write_text(
            f"xrd.port {self.port}\nall.export /store\noss.localroot {folder / 'export'}\n"
            f"xrd.allow host 127.0.0.1\nall.adminpath {run}\nall.pidpath {run}\n"
        )
        if os.geteuid() == 0:
            shutil.chown(run, "nobody")

    def start(self) -> None:
        """Start xrootd and return once *this* start logged its initialization as completed
        (the log is appended to by every start, so only what follows its current end counts);
        fails the test with the log's last lines, the exit code and stderr if it failed, exited
        or took 30 s (a start that wrote nothing at all is tried once more first)."""
        offset = self.log.stat().st_size if self.log.exists() else 0
        fd = self.listener.fileno()
        user = ["-R", "nobody"] if os.geteuid() == 0 else []
        # systemd's socket activation: the socket as fd 3, LISTEN_PID = the server's own pid.
        command = f"LISTEN_PID=$$ LISTEN_FDS=1 exec {XROOTD} {' '.join(user)} -c {self.config} -l {self.log} 3<&{fd}"
        # bash, not sh: dash's redirections take single-digit descriptors only.
        for attempt in (1, 2):
            with self.stderr.open("ab") as stderr:
                self.process = subprocess.Popen(
                    ["bash", "-c", command],
                    pass_fds=(fd,),
                    start_new_session=True,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                )
            started = time.monotonic()
            while (outcome := self._initialization(offset)) is None:
                if self.process.poll() is not None or time.monotonic() > started + 30:
                    break
                time.sleep(0.05)
            if outcome == "completed":
                return
            code = self.process.poll()
            elapsed = time.monotonic() - started
            self.stop()
            stderr_text = self.stderr.read_text(errors="replace")[-400:]
            why = (
                f"xrootd did not start on port {self.port} (attempt {attempt}, "
                f"{'exit code ' + str(code) if code is not None else 'still running'} after {elapsed:.1f} s): "
                f"log: {' | '.join(self.tail(8)) or 'empty'}; stderr: {stderr_text!r}"
            )
            if self._has_lines(offset):
                pytest.fail(why)  # it started and said why it failed: no second try
            # Nothing in its log at all (once in a clean-clone CI run, never reproduced):
            # it died or hung before its first line; say so and start it once more.
            print(why, file=sys.stderr)
        pytest.fail(why)

    def _has_lines(self, offset: int) -> bool:
        return self.log.exists() and self.log.stat().st_size > offset

    def _initialization(self, offset: int) -> str | None:
        """'completed' or 'failed' once the server's own last initialization line is in the
        log past ``offset`` ("------ xrootd anon@host:port initialization completed."; the
        lines of its parts, such as the checkpoints', say "initialization completed" earlier)."""
        if not self.log.exists():
            return None
        with self.log.open("rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
        found = INITIALIZED.search(text)
        return found.group(1) if found else None

    def tail(self, lines: int = 20) -> list[str]:
        """The log's last ``lines`` lines (logins, errors: what to read when a test failed)."""
        return self.log.read_text(errors="replace").splitlines()[-lines:] if self.log.exists() else ["no log"]

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                os.kill(self.process.pid, signal.SIGCONT)  # if a test left it stopped
                self.process.kill()
            self.process.wait(10)
            self.process = None

    def close(self) -> None:
        self.stop()
        self.listener.close()


@pytest.fixture(scope="module")
def pfnano() -> pathlib.Path:
    try:
        return locate_sample("pfnano.root", fetch=False)
    except FileOpenError as exc:
        pytest.skip(f"no local pfnano.root ({exc}); 'python -m framework.io.samples pfnano.root' fetches it")


@contextlib.contextmanager
def xrootd_server(pfnano: pathlib.Path) -> Iterator[XRootDServer]:
    """A started :class:`XRootDServer` serving a copy of ``pfnano`` as :data:`LFN`; stopped
    and its folder removed after."""
    if XROOTD is None:
        pytest.skip("the xrootd server binary is not installed (apt-get install xrootd-server; .ci/run does it)")
    # Not pytest's tmp_path: its folders are private to root, and the server runs as nobody.
    folder = pathlib.Path(tempfile.mkdtemp(prefix="pysonic-xrootd-"))
    folder.chmod(0o755)
    store = folder / "export" / LFN.lstrip("/")
    store.parent.mkdir(parents=True)
    shutil.copyfile(pfnano, store)
    for path in (folder / "export", folder / "export" / "store", store.parent):
        path.chmod(0o755)
    store.chmod(0o644)
    server = XRootDServer(folder)
    RUNNING.add(server)
    try:
        server.start()
        yield server
    finally:
        RUNNING.discard(server)
        server.close()
        shutil.rmtree(folder, ignore_errors=True)


RUNNING: set[XRootDServer] = set()  # whose logs a failed test shows


@pytest.fixture(scope="module")
def xrootd(pfnano: pathlib.Path) -> Iterator[XRootDServer]:
    """The module's server, for tests that leave it as they found it."""
    with xrootd_server(pfnano) as server:
        yield server


@pytest.fixture
def own_xrootd(pfnano: pathlib.Path) -> Iterator[XRootDServer]:
    """A server (and port) of the test's own, for tests that stop, freeze or restart it: what
    that does to the server, or to the XRootD client's connection to its port in this
    process, stays with the test."""
    with xrootd_server(pfnano) as server:
        yield server


@pytest.fixture(autouse=True)
def xrootd_logs_of_a_failed_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a failed test, the running XRootD servers' last log lines (in the report's
    captured stderr): whether the server started, saw the client's login, or gave an error."""
    yield
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        for server in RUNNING:
            print(
                f"xrootd on port {server.port}, last lines of {server.log}:",
                *server.tail(),
                sep="\n  ",
                file=sys.stderr,
            )


class Silent:
    """A socket on 127.0.0.1 that accepts connections and never answers (a hung server);
    ``connected`` is set at the first connection."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.connected = threading.Event()
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            self.connected.set()

    def close(self) -> None:
        for conn in self.held:
            conn.close()
        self.sock.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> pathlib.Path | None:
    """A self-signed certificate for 127.0.0.1 (its own CA), or None without ``openssl``."""
    if shutil.which("openssl") is None:
        return None
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "key.pem",
            "-out",
            "cert.pem",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        cwd=folder,
        check=True,
        capture_output=True,
    )
    return folder


@pytest.fixture(params=["http", "https"])
def http(request, pfnano: pathlib.Path, certificate: pathlib.Path | None, monkeypatch):
    """pytest-httpserver serving ``pfnano.root`` at ``/store/mc/pfnano.root`` (Range requests),
    over HTTP and over HTTPS (a self-signed certificate, trusted through ``SSL_CERT_FILE``);
    ``http.fail_next`` answers that many requests for ``Jet_pt``'s baskets with 503 first
    (the event data, not the metadata that opening the file reads); with ``http.hang`` set,
    such requests get no answer until the test ends."""
    import ssl

    from pytest_httpserver import HTTPServer
    from werkzeug import Response
    from werkzeug.utils import send_file

    context = None
    if request.param == "https":
        if certificate is None:
            pytest.skip("needs the openssl command for a test certificate")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(certificate / "cert.pem", certificate / "key.pem")
        monkeypatch.setenv("SSL_CERT_FILE", str(certificate / "cert.pem"))  # read by each new client context
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True, ssl_context=context)
    with uproot.open(pfnano) as f:
        branch = f["Events"]["Jet_pt"]
        baskets = [int(x) for x in branch.member("fBasketSeek")[: branch.num_baskets]]
    state = types.SimpleNamespace(fail_next=0, failed=0, lock=threading.Lock(), hang=False, release=threading.Event())

    def wants_baskets(header: str | None) -> bool:
        ranges = [r.split("-") for r in (header or "").removeprefix("bytes=").split(",") if "-" in r]
        return any(int(lo) <= seek <= int(hi) for lo, hi in ranges for seek in baskets)

    def handler(request):
        if request.path != LFN:
            return Response("not found", status=404)
        if state.hang and wants_baskets(request.headers.get("Range")):
            state.release.wait(60)
            return Response("too late", status=503)
        with state.lock:
            if state.fail_next > 0 and wants_baskets(request.headers.get("Range")):
                state.fail_next -= 1
                state.failed += 1
                return Response("busy", status=503)
        return send_file(pfnano, request.environ, conditional=True)

    server.expect_request(re.compile(".*")).respond_with_handler(handler)
    server.start()
    state.server, state.url = server, server.url_for(LFN)
    assert state.url.startswith(f"{request.param}://")
    yield state
    state.release.set()
    server.clear()
    server.stop()


# -- helpers -------------------------------------------------------------------------------


@pytest.fixture
def job(tmp_path: pathlib.Path) -> pathlib.Path:
    path = tmp_path / "remote_cfg.py"
    path.write_text(JOB)
    return path


@pytest.fixture
def cmsrun(capsys, monkeypatch):
    """``cmsrun(config, *args, cwd=...) -> (exit code, stderr)`` in this process."""
    monkeypatch.setattr(sys, "path", list(sys.path))

    def run(config: pathlib.Path, *args: str, cwd: pathlib.Path) -> tuple[int, str]:
        cwd.mkdir(exist_ok=True)
        monkeypatch.chdir(cwd)
        root = logging.getLogger()
        handlers, level = root.handlers[:], root.level
        capsys.readouterr()
        try:
            code = cmsrun_main([str(config), *args, "--no-progress"])  # name=value first: argparse's rule
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        return code, capsys.readouterr().err

    return run


def events(path: pathlib.Path) -> dict[tuple[int, int, int], dict[str, np.ndarray]]:
    """Event id -> every branch's values (a 1-D array per event), from an output file."""
    with uproot.open(path) as f:
        arrays = f["Events"].arrays(library="np")
    ids = zip(*(arrays[b].tolist() for b in ("run", "luminosityBlock", "event")), strict=True)
    return {event_id: {name: np.ravel(values[i]) for name, values in arrays.items()} for i, event_id in enumerate(ids)}


def assert_same_events(found: dict, expected: dict) -> None:
    """The same event ids, and per event the same branches with equal values (NaN == NaN:
    NanoAOD holds NaNs, which a remote read must give back as they are)."""
    assert found.keys() == expected.keys()
    for event_id, branches in expected.items():
        assert found[event_id].keys() == branches.keys(), event_id
        for name, values in branches.items():
            np.testing.assert_array_equal(found[event_id][name], values, err_msg=f"{name} of event {event_id}")


def fatal_line(stderr: str) -> str:
    lines = stderr.splitlines()
    return lines[lines.index("----- Begin Fatal Exception -----") + 1]


@pytest.fixture(scope="module")
def local_events(pfnano, tmp_path_factory):
    """The events of the job run over the local file (once for the module)."""
    folder = tmp_path_factory.mktemp("local")
    (folder / "remote_cfg.py").write_text(JOB)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setattr(sys, "path", list(sys.path))
        try:
            assert cmsrun_main([str(folder / "remote_cfg.py"), f"inputFiles={pfnano}", "--no-progress"]) == 0
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
    found = events(folder / "out.root")
    assert len(found) == 10
    return found


def make_source(name: str, **params) -> PoolSource:
    values = dict(
        fileNames=[name],
        skipEvents=0,
        treeName="Events",
        duplicateCheckMode="checkAllFilesOpened",
        eventsPerRead=0,
        redirectors=[],
        openTimeout=30.0,
        timeout=30.0,
        readRetries=2,
    )
    values.update(params)
    return PoolSource(types.SimpleNamespace(**values))


def read_jets(source: PoolSource) -> list[list[float]]:
    """Jet pT of every event, read by the source under trio (as the scheduler does)."""
    source.set_branch_request({"Jet": {"pt"}})
    found: list[list[float]] = []

    async def main() -> None:
        send, receive = trio.open_memory_channel[Any](100)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(source.run, send, -1)
            async for event in receive:
                found.append(np.asarray(event.collections["Jet"].pt).tolist())

    try:
        trio.run(main)
    except BaseExceptionGroup as group:
        raise group.exceptions[0] from None
    finally:
        source.close()
    return found


# -- XRootD --------------------------------------------------------------------------------


@needs_xrootd
def test_root_url_gives_the_local_events(xrootd, local_events, job, cmsrun, tmp_path):
    url = f"{xrootd.url}{LFN.lstrip('/')}"
    code, err = cmsrun(job, f"inputFiles={url}", "--summary-json", "summary.json", cwd=tmp_path / "remote")
    assert code == 0, err
    assert_same_events(events(tmp_path / "remote" / "out.root"), local_events)
    inputs = json.loads((tmp_path / "remote" / "summary.json").read_text())["source"]["inputs"]
    assert [(i["name"], i["served_by"], i["failed"]) for i in inputs] == [(url, f"127.0.0.1:{xrootd.port}", [])]


@needs_xrootd
def test_lfn_through_the_redirectors_past_dead_ones(xrootd, silent, local_events, job, cmsrun, tmp_path):
    closed = f"root://127.0.0.1:{free_port()}//"
    hung = f"root://127.0.0.1:{silent.port}//"
    code, err = cmsrun(
        job,
        f"inputFiles={LFN}",
        f"redirectors={closed},{hung},{xrootd.url}",
        "openTimeout=1",
        "--summary",
        "--summary-json",
        "summary.json",
        cwd=tmp_path / "lfn",
    )
    assert code == 0, err
    assert_same_events(events(tmp_path / "lfn" / "out.root"), local_events)
    (opened,) = json.loads((tmp_path / "lfn" / "summary.json").read_text())["source"]["inputs"]
    assert opened["served_by"] == xrootd.url and opened["url"] == f"{xrootd.url}store/mc/pfnano.root"
    assert opened["data_server"] == f"127.0.0.1:{xrootd.port}"
    first, second = opened["failed"]
    assert first.startswith(f"{closed}: ") and "Connection error" in first
    assert second == f"{hung}: no answer within openTimeout = 1 s"
    assert "Remote input files" in err and "Connection error" in err  # the summary's table


def test_lfn_without_redirectors_is_one_line(job, cmsrun, tmp_path):
    code, err = cmsrun(job, f"inputFiles={LFN}", cwd=tmp_path / "run")
    assert code == 1
    assert fatal_line(err) == (
        f"[FileOpenError] input file '{LFN}' is a logical file name (LFN) but PoolSource has "
        "no redirectors: set e.g. redirectors = cms.untracked.vstring('root://cms-xrd-global.cern.ch//')"
    )


@needs_xrootd
def test_missing_remote_file_gives_the_servers_message(xrootd, job, cmsrun, tmp_path):
    url = f"{xrootd.url}store/mc/nothere.root"
    code, err = cmsrun(job, f"inputFiles={url}", cwd=tmp_path / "run")
    assert code == 1
    assert fatal_line(err) == (
        f"[FileOpenError] cannot open input file '{url}' at server 127.0.0.1:{xrootd.port}: FileNotFoundError: file "
        "not found ([ERROR] Server responded with an error: [3011] Unable to open /store/mc/nothere.root; no such "
        "file or directory)"
    )
    assert not (tmp_path / "run" / "out.root").exists()


@pytest.mark.parametrize("scheme", ["root", "http"])
@pytest.mark.parametrize("server", ["closed port", "never answers"])
def test_unreachable_server_fails_within_the_open_timeout(scheme, server, silent, job, cmsrun, tmp_path):
    if scheme == "root" and XROOTD is None:
        pytest.skip("the xrootd server binary is not installed: its client is checked with it")
    port = free_port() if server == "closed port" else silent.port
    url = f"{scheme}://127.0.0.1:{port}/{'/' if scheme == 'root' else ''}store/mc/pfnano.root"
    start = time.monotonic()
    code, err = cmsrun(job, f"inputFiles={url}", "openTimeout=2", cwd=tmp_path / "run")
    elapsed = time.monotonic() - start
    assert code == 1
    line = fatal_line(err)
    assert line.startswith(f"[FileOpenError] cannot open input file '{url}' at server 127.0.0.1:{port}: "), line
    if server == "never answers":
        assert line.endswith("no answer within openTimeout = 2 s")
    assert elapsed < 2 + SLACK, f"{elapsed:.1f} s for an open bounded at 2 s"
    assert not list((tmp_path / "run").glob("out.root*"))


@needs_xrootd
def test_sigterm_during_a_hanging_open_stops_cmsrun(silent, job, tmp_path):
    url = f"root://127.0.0.1:{silent.port}//store/mc/pfnano.root"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "framework.cmsrun",
            str(job),
            f"inputFiles={url}",
            "openTimeout=600",
            "timeout=600",
            "--no-progress",
        ],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert silent.connected.wait(60), "cmsrun never connected"
        time.sleep(0.5)  # inside XRootD's open, waiting for the handshake
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            _, err = process.communicate(timeout=SIGNAL_BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"cmsrun still running {SIGNAL_BOUND} s after SIGTERM")
        assert time.monotonic() - sent < SIGNAL_BOUND
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 128 + signal.SIGTERM, err
    assert "interrupted (SIGTERM)" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["remote_cfg.py"]  # no output, not even a temporary one


@needs_xrootd
def test_sigterm_during_a_hanging_read_stops_cmsrun(own_xrootd, job, tmp_path):
    url = f"{own_xrootd.url}store/mc/pfnano.root"
    process = subprocess.Popen(
        [sys.executable, "-m", "framework.cmsrun", str(job), f"inputFiles={url}", "timeout=600", "--no-progress"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        log = ""
        while "opened input file" not in log:  # then the server stops answering: reads hang
            line = process.stderr.readline()
            assert line, f"cmsrun ended before opening its input: {log}"
            log += line
        os.kill(own_xrootd.process.pid, signal.SIGSTOP)
        time.sleep(1.0)
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        try:
            _, err = process.communicate(timeout=SIGNAL_BOUND)
        except subprocess.TimeoutExpired:
            pytest.fail(f"cmsrun still running {SIGNAL_BOUND} s after SIGTERM")
        assert time.monotonic() - sent < SIGNAL_BOUND
    finally:
        os.kill(own_xrootd.process.pid, signal.SIGCONT)
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 128 + signal.SIGTERM, log + err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["remote_cfg.py"]


@needs_xrootd
def test_a_read_from_a_server_that_stops_answering_fails_within_the_timeout(own_xrootd):
    source = make_source(f"{own_xrootd.url}store/mc/pfnano.root", timeout=2.0)
    source.collections()  # opened while the server answers
    os.kill(own_xrootd.process.pid, signal.SIGSTOP)
    try:
        start = time.monotonic()
        with pytest.raises(FileReadError) as info:
            read_jets(source)
        elapsed = time.monotonic() - start
    finally:
        os.kill(own_xrootd.process.pid, signal.SIGCONT)
    message = str(info.value)
    assert message.startswith(
        f"[FileReadError] cannot read entries [0, 10) of tree 'Events' in input file "
        f"'{own_xrootd.url}store/mc/pfnano.root' from 127.0.0.1:{own_xrootd.port}: no answer within "
        "timeout = 2 s"
    ), message
    assert "\n" not in message
    assert elapsed < 2 + SLACK


@needs_xrootd
def test_a_server_restarted_between_reads_is_read_again(own_xrootd, pfnano):
    expected = read_jets(make_source(str(pfnano), eventsPerRead=5))
    source = make_source(f"{own_xrootd.url}store/mc/pfnano.root", eventsPerRead=5)
    source.collections()
    own_xrootd.stop()  # the client's connection breaks; the same port serves again below
    own_xrootd.start()
    # XRootD's client reconnects and opens the file again by itself (its file state
    # recovery); PoolSource's own retry is for what it gives up on (tested over HTTP below).
    assert read_jets(source) == expected


def test_missing_xrootd_client_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "XRootD", None)  # import XRootD -> ImportError
    with pytest.raises(FileOpenError) as info:
        make_source("root://127.0.0.1:1//store/mc/pfnano.root").collections()
    assert str(info.value) == (
        "[FileOpenError] cannot open input file 'root://127.0.0.1:1//store/mc/pfnano.root': reading root:// needs "
        f"the XRootD client, which is not installed: {_remote.INSTALL_XROOTD}"
    )


# -- HTTP ----------------------------------------------------------------------------------


def test_http_url_gives_the_local_events(http, local_events, job, cmsrun, tmp_path):
    code, err = cmsrun(job, f"inputFiles={http.url}", cwd=tmp_path / "remote")
    assert code == 0, err
    assert_same_events(events(tmp_path / "remote" / "out.root"), local_events)


@pytest.mark.parametrize("http", ["http"], indirect=True)
def test_lfn_through_an_http_redirector(http, local_events, job, cmsrun, tmp_path):
    prefix = http.server.url_for("/")
    code, err = cmsrun(job, f"inputFiles={LFN}", f"redirectors={prefix}", cwd=tmp_path / "remote")
    assert code == 0, err
    assert_same_events(events(tmp_path / "remote" / "out.root"), local_events)


def test_missing_http_file_is_one_line(http, job, cmsrun, tmp_path):
    url = http.server.url_for("/store/mc/nothere.root")
    code, err = cmsrun(job, f"inputFiles={url}", cwd=tmp_path / "run")
    assert code == 1
    assert fatal_line(err).startswith(
        f"[FileOpenError] cannot open input file '{url}' at server "
        f"127.0.0.1:{http.server.port}: FileNotFoundError: file not found"
    ), err


def test_transient_http_errors_are_retried_and_counted(http, pfnano):
    expected = read_jets(make_source(str(pfnano)))
    source = make_source(http.url)
    source.collections()
    # The next two requests for baskets get 503 Service Unavailable. (uproot's HTTP source may
    # take the first for a refusal of multi-range requests and go on with single ranges.)
    http.fail_next = 2
    assert read_jets(source) == expected
    assert http.failed == 2
    retries = source.statistics().read_retries
    assert retries.keys() == {http.url} and 1 <= retries[http.url] <= 2


@pytest.mark.parametrize("http", ["http"], indirect=True)
def test_transient_errors_give_up_after_read_retries(http):
    source = make_source(http.url, readRetries=1)
    source.collections()
    http.fail_next = 100
    with pytest.raises(FileReadError) as info:
        read_jets(source)
    message = str(info.value)
    assert f"in input file '{http.url}' from 127.0.0.1:{http.server.port}: " in message
    assert "503" in message and message.endswith("(after 2 tries)") and "\n" not in message


def test_remote_access_is_validated_and_picklable():
    import pickle

    access = RemoteAccess(("root://a//", "https://b/data", "/mnt/site"), 5.0, 10.0, 1)
    assert pickle.loads(pickle.dumps(access)) == access
    assert access.places(LFN) == [
        ("root://a//store/mc/pfnano.root", "root://a//"),
        ("https://b/data/store/mc/pfnano.root", "https://b/data"),
        ("/mnt/site/store/mc/pfnano.root", "/mnt/site"),
    ]
    with pytest.raises(Exception, match="redirector 'site' is neither a URL"):
        RemoteAccess(("site",))
    with pytest.raises(Exception, match="openTimeout = 0.0 s, expected > 0"):
        RemoteAccess(open_timeout=0.0)


# -- datasets and work units ---------------------------------------------------------------

REMOTE_CFG = pathlib.Path(__file__).resolve().parents[1] / "configs" / "remote_cfg.py"


def histograms(path: pathlib.Path) -> dict[str, list[float]]:
    with uproot.open(path) as f:
        return {k: f[k].values(flow=True).tolist() for k in f.keys(cycle=False)}


@needs_xrootd
def test_fileset_of_urls_and_lfns(xrootd, pfnano, cmsrun, tmp_path):
    """The remote example of docs/scale-out.md: configs/remote_cfg.py over a fileset of a root:// URL and
    a /store/ name (preprocessed through the redirectors too), as with the local file."""
    fileset = tmp_path / "fileset.yaml"
    fileset.write_text(f"URL: ['{xrootd.url}{LFN.lstrip('/')}']\nLFN: {{files: {{'{LFN}': Events}}}}\n")
    code, err = cmsrun(REMOTE_CFG, f"redirectors={xrootd.url}", "--dataset", str(fileset), cwd=tmp_path / "remote")
    assert code == 0, err
    code, err = cmsrun(REMOTE_CFG, f"inputFiles={pfnano}", cwd=tmp_path / "local")
    assert code == 0, err
    local = events(tmp_path / "local" / "remote.root")
    for dataset in ("URL", "LFN"):
        assert_same_events(events(tmp_path / "remote" / f"remote_{dataset}.root"), local)
        assert histograms(tmp_path / "remote" / f"remote_hists_{dataset}.root") == histograms(
            tmp_path / "local" / "remote_hists.root"
        )


@needs_xrootd
def test_a_work_unit_of_an_lfn_runs_where_the_config_goes(xrootd, pfnano, tmp_path, monkeypatch):
    """What a Dask worker does: run_unit with the config; the redirectors come with it (no
    process-wide setting), from a thread other than the main one."""
    import framework.config as cms
    from framework.cmsrun import run_unit
    from framework.io import WorkUnit

    monkeypatch.chdir(tmp_path)
    process = cms.load_config(str(REMOTE_CFG), [f"redirectors=root://127.0.0.1:{free_port()}//,{xrootd.url}"])
    unit = WorkUnit("LFN", LFN, "Events", 2, 7)
    result: dict[str, object] = {}
    worker = threading.Thread(target=lambda: result.update(done=run_unit(process, unit)))
    worker.start()
    worker.join(60)
    assert "done" in result, "run_unit failed or hung (see the log)"
    assert result["done"].report.events == 5
    (part,) = [p for p in result["done"].parts if p.parent.name == "remote_LFN.root.parts"]
    with uproot.open(part) as f, uproot.open(pfnano) as g:
        got = f["Events"].arrays(["event", "Muon_pt"], library="np")
        want = g["Events"].arrays(["event", "Muon_pt"], entry_start=2, entry_stop=7, library="np")
    # Several streams: the part holds the unit's events in the order they finished.
    assert sorted(got["event"].tolist()) == sorted(want["event"].tolist())
    expected = dict(zip(want["event"].tolist(), want["Muon_pt"], strict=True))
    for number, muon_pt in zip(got["event"].tolist(), got["Muon_pt"], strict=True):
        np.testing.assert_array_equal(muon_pt, expected[number], err_msg=f"event {number}")


def test_an_http_read_without_answer_fails_within_the_timeout(http):
    source = make_source(http.url, timeout=2.0)
    source.collections()
    http.hang = True
    start = time.monotonic()
    with pytest.raises(FileReadError) as info:
        read_jets(source)
    elapsed = time.monotonic() - start
    message = str(info.value)
    assert message.startswith(
        f"[FileReadError] cannot read entries [0, 10) of tree 'Events' in input file "
        f"'{http.url}' from 127.0.0.1:{http.server.port}: no answer within timeout = 2 s"
    ), message
    assert "\n" not in message
    assert elapsed < 2 + SLACK
