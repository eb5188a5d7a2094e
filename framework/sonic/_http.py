"""Triton's inference over HTTP/1.1, written and read on trio's own sockets.

The Open Inference Protocol's REST ``infer`` (KServe's "V2" protocol as Triton serves it,
``docs/protocol/extension_binary_data.md`` of triton-inference-server/server):

* request: ``POST /v2/models/<model>[/versions/<v>]/infer``; the body is a JSON header
  (``inputs``: name, shape, datatype, ``parameters.binary_data_size``; ``outputs``: name,
  ``parameters.binary_data``) followed by each input's bytes, in order; the header
  ``Inference-Header-Content-Length`` gives the JSON's length, ``Content-Length`` the body's;
* response: the same layout (outputs with ``binary_data_size``), or a 4xx/5xx status whose
  body is ``{"error": "<message>"}``.

Why: grpcio completes every call on a Python thread of its own, which must take the GIL
from the job's trio thread (``docs/performance.md``); a request written and read on a
socket that trio's own loop waits on has no foreign thread at all. What is fixed per model
(the request line, the headers, the JSON header's names, datatypes and parameters) is
made once (:class:`HttpPlan`, per endpoint :class:`HttpEndpoint`); per call only the
shapes and sizes are written, and the arrays go to the socket after the JSON header
without being joined (``sendmsg`` of all the buffers). The response is read into one
buffer of the body's size (``recv_into``) and its outputs are numpy views of it.

Connections: one keep-alive connection per request in flight per server (HTTP/1.1 does
not multiplex), kept per trio run and reused; a connection the server closed while idle
is reopened once within the same try (inference is idempotent); a request cancelled or
failed mid-flight closes its connection (never reused half-read). Framing: responses with
``Content-Length``, ``Transfer-Encoding: chunked`` and ``Connection: close`` (read to
the end). The blocking twin (``Sync`` and ``PseudoAsync`` modes) reads and writes the
same bytes with the socket module.

Errors are :class:`~framework.ExternalFailure` with the model, the server and a gRPC
status name (the project's vocabulary of failures, which the retry policy reads): the
HTTP statuses Triton's HTTP frontend answers for its errors, inverted (``INVALID_ARG``
-> 400, ``NOT_FOUND`` -> 404, ``INTERNAL`` -> 500, ``UNSUPPORTED`` -> 501,
``UNAVAILABLE`` -> 503: ``http_server.cc``), a connection that fails ``UNAVAILABLE``,
a deadline ``DEADLINE_EXCEEDED``.

The framing (status line, headers, ``Content-Length``, chunks) is written here, not with
h11 (``docs/performance.md`` gives the measurement that decided).
"""

from __future__ import annotations

import json
import math
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Generator, Sequence
from typing import Any

import numpy as np
import trio

from framework.utilities import ExternalFailure

from ._server_info import ServerInfo, ssl_context
from ._wire import RAW_DATATYPES, StackedRows, check_raw_datatypes

__all__ = [
    "HttpEndpoint",
    "HttpPlan",
    "HttpResponse",
    "close_idle_connections",
    "http_endpoint",
    "http_status",
]

READ_SIZE = 256 * 1024  # bytes asked of the socket at once while the size is unknown
MAX_HEAD = 64 * 1024  # bytes of a response's status line and headers at most
CONNECT_TIMEOUT = 10.0  # seconds to open a connection when the call has no deadline

# Triton's HTTP frontend answers its errors with these statuses (http_server.cc,
# HttpCodeFromError); proxies add the others. HTTP status -> the gRPC status name.
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_RETRYABLE = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "RESOURCE_EXHAUSTED"})


def http_status(code: int) -> str:
    """The gRPC status name of an HTTP error status (``"UNKNOWN"`` for one not listed:
    any other 5xx, an unexpected 4xx)."""
    return _STATUS.get(code, "INTERNAL" if code >= 500 else "UNKNOWN")


_PARAMETERS = ',"parameters":{'


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class HttpPlan:
    """What is fixed for one model's HTTP requests; :meth:`header` writes a call's JSON header.

    The JSON is tritonclient.http's (``InferInput._get_tensor`` and
    ``InferRequestedOutput._get_tensor``, compact separators), so a request's body is the
    one ``tritonclient.http`` sends for the same tensors (``tests/test_http.py``).

    Args:
        model_name, model_version: the model ("" = the server's choice of version).
        inputs: (name, datatype) of each input, in the order the arrays come; each
            datatype one of :data:`~framework.sonic._wire.RAW_DATATYPES`.
        outputs: the requested outputs' names; empty = all (``binary_data_output``).

    Raises:
        ValueError: a datatype not in ``RAW_DATATYPES``.
    """

    __slots__ = ("path", "names", "_inputs", "_binary", "_output_names")

    def __init__(
        self, model_name: str, model_version: str, inputs: Sequence[tuple[str, str]], outputs: Sequence[str]
    ) -> None:
        check_raw_datatypes(inputs)
        model = urllib.parse.quote(model_name, safe="")
        version = f"/versions/{urllib.parse.quote(model_version, safe='')}" if model_version else ""
        self.path = f"/v2/models/{model}{version}/infer".encode()
        self.names = tuple(name for name, _ in inputs)
        # Per input: '{"name":N,"shape":[' ... '],"datatype":D,"parameters":{' ... '}}'
        self._inputs = [
            (f'{{"name":{_dumps(name)},"shape":[', f'],"datatype":{_dumps(dt)},"parameters":{{') for name, dt in inputs
        ]
        self._output_names = tuple(outputs)
        binary = ",".join(f'{{"name":{_dumps(n)},"parameters":{{"binary_data":true}}}}' for n in outputs)
        self._binary = f'],"outputs":[{binary}]}}' if outputs else '],"parameters":{"binary_data_output":true}}'

    def header(self, arrays: Sequence[np.ndarray[Any, Any] | StackedRows]) -> bytes:
        """The JSON header of a call of ``arrays`` (one per input, the plan's order), their
        bytes sent after it (``binary_data_size``)."""
        parts = ['{"inputs":[']
        for index, ((head, middle), array) in enumerate(zip(self._inputs, arrays, strict=True)):
            if index:
                parts.append(",")
            parts += (head, ",".join(map(str, array.shape)), middle, f'"binary_data_size":{array.nbytes}}}}}')
        parts.append(self._binary)
        return "".join(parts).encode()

    def json_body(self, arrays: Sequence[np.ndarray[Any, Any] | StackedRows]) -> bytes:
        """The whole body of a call for a server without Triton's binary tensor extension
        (Seldon MLServer): every input's values in its JSON (``data``, row-major), every
        output asked for as JSON."""
        inputs = []
        for (head, middle), array in zip(self._inputs, arrays, strict=True):
            values = array.join() if isinstance(array, StackedRows) else array
            data = _dumps(values.reshape(-1).tolist())
            datatype = middle.removesuffix(_PARAMETERS)  # '],"datatype":D'
            inputs.append(f'{head}{",".join(map(str, array.shape))}{datatype},"data":{data}}}')
        outputs = ",".join(f'{{"name":{_dumps(n)}}}' for n in self._output_names)
        return f'{{"inputs":[{",".join(inputs)}],"outputs":[{outputs}]}}'.encode()

    def header_shared_memory(
        self,
        region: str,
        inputs: Sequence[tuple[Sequence[int], int, int]],
        outputs: Sequence[tuple[str, int, int]] | None,
    ) -> bytes:
        """The JSON header of a call whose inputs are in the Triton system shared-memory
        ``region`` (registered; written): Triton's ``shared_memory_region``,
        ``shared_memory_byte_size`` and, if not 0, ``shared_memory_offset`` per tensor.

        Args:
            inputs: (shape, offset, byte size) of each input, in the plan's order.
            outputs: (name, offset, byte size) of each requested output placed in the
                region; None: the outputs come back in the response (binary data).
        """
        where = f'"shared_memory_region":{_dumps(region)}'
        parts = ['{"inputs":[']
        for index, ((head, middle), (shape, offset, nbytes)) in enumerate(zip(self._inputs, inputs, strict=True)):
            if index:
                parts.append(",")
            parts += (head, ",".join(map(str, shape)), middle, _shm_parameters(where, offset, nbytes), "}")
        if outputs is None:
            parts.append(self._binary)
        else:
            placed = ",".join(
                f'{{"name":{_dumps(name)},"parameters":{{"binary_data":false,{_shm_parameters(where, offset, nbytes)}}}'
                for name, offset, nbytes in outputs
            )
            parts.append(f'],"outputs":[{placed}]}}')
        return "".join(parts).encode()


def _shm_parameters(where: str, offset: int, nbytes: int) -> str:
    # tritonclient.http's order: region, byte size, offset (only when not 0)
    text = f'{where},"shared_memory_byte_size":{nbytes}'
    return text + (f',"shared_memory_offset":{offset}}}' if offset else "}")


class HttpResponse:
    """A successful ``infer`` response: its JSON header and its outputs as numpy views.

    Attributes:
        header: the JSON header (``model_name``, ``outputs``: name, datatype, shape,
            ``parameters``).
        body: the response's body (the outputs' bytes follow the JSON header).
    """

    __slots__ = ("header", "body", "_start", "_views")

    def __init__(self, header: dict[str, Any], body: bytearray, start: int) -> None:
        self.header = header
        self.body = body
        self._start = start  # where the binary data begin
        self._views: dict[str, np.ndarray[Any, Any] | None] | None = None

    def outputs(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """name -> (datatype, shape) of each output in the JSON header."""
        return {o["name"]: (o["datatype"], tuple(o["shape"])) for o in self.header.get("outputs", ())}

    def as_numpy(self, name: str) -> np.ndarray[Any, Any] | None:
        """Output ``name``: a read-only view of the body (no copy), None if missing; a
        datatype not in ``RAW_DATATYPES`` (never requested here) maps to None.

        Raises:
            ValueError: binary sizes that do not fill the outputs' shapes or the body;
                an output given as JSON data (a server without the binary extension).
        """
        if self._views is None:
            self._views = self._decode()
        return self._views.get(name)

    def _decode(self) -> dict[str, np.ndarray[Any, Any] | None]:
        views: dict[str, np.ndarray[Any, Any] | None] = {}
        data = memoryview(self.body).toreadonly()
        at = self._start
        for output in self.header.get("outputs", ()):
            name, datatype, shape = output["name"], output["datatype"], tuple(output["shape"])
            size = (output.get("parameters") or {}).get("binary_data_size")
            dtype = RAW_DATATYPES.get(datatype)
            if size is None:
                if "data" in output and dtype is not None:  # a server without the binary extension
                    values = np.array(output["data"], dtype).reshape(shape)
                    values.flags.writeable = False
                    views[name] = values
                else:
                    views[name] = None  # in a shared-memory region
                continue
            count = math.prod(shape)
            if dtype is None or size != count * dtype.itemsize or at + size > len(data):
                raise ValueError(f"output '{name}': {size} bytes of binary data for shape {list(shape)} of {datatype}")
            views[name] = np.frombuffer(data, dtype, count, at).reshape(shape)
            at += size
        if at != len(data):
            raise ValueError(
                f"the response's binary data are {len(data) - self._start} bytes, the outputs {at - self._start}"
            )
        return views


# ----------------------------------------------------------------------------------------
# Reading a response: a generator that asks its driver (trio or blocking) for bytes


class _Buffer:
    """A connection's read-ahead: bytes received beyond what the last response used."""

    __slots__ = ("data", "start", "end")

    def __init__(self) -> None:
        self.data = bytearray(READ_SIZE)
        self.start = 0
        self.end = 0

    def space(self) -> memoryview:
        """Free room at the end (moving what is unread to the front first)."""
        if self.start:
            unread = self.end - self.start
            self.data[:unread] = self.data[self.start : self.end]
            self.start, self.end = 0, unread
        if self.end == len(self.data):
            self.data.extend(bytes(len(self.data)))
        return memoryview(self.data)[self.end :]


class _Closed(Exception):
    """The server closed the connection; ``started``: after some of the response came."""

    def __init__(self, started: bool) -> None:
        super().__init__("the server closed the connection" + (" mid-response" if started else ""))
        self.started = started


# A step of a reader: fill this view; the driver sends back how many bytes came (0: EOF).
Reader = Generator[memoryview, int, Any]


def _fill(buffer: _Buffer, started: bool) -> Reader:
    """Receive more bytes into the read-ahead."""
    space = buffer.space()
    n = yield space
    if n == 0:
        raise _Closed(started)
    buffer.end += n


def _read_line(buffer: _Buffer) -> Reader:
    while (end := buffer.data.find(b"\r\n", buffer.start, buffer.end)) < 0:
        if buffer.end - buffer.start > MAX_HEAD:
            raise ValueError("a line of the response is too long")
        yield from _fill(buffer, True)
    line = bytes(buffer.data[buffer.start : end])
    buffer.start = end + 2
    return line


def read_response(buffer: _Buffer) -> Reader:
    """One HTTP/1.1 response: returns (status, headers (lower-case names), body, keep_alive).

    Raises:
        _Closed: the connection ended before the response did.
        ValueError: not an HTTP/1.x response, or malformed framing.
    """
    while (end := buffer.data.find(b"\r\n\r\n", buffer.start, buffer.end)) < 0:
        if buffer.end - buffer.start > MAX_HEAD:
            raise ValueError("the response's head exceeds 64 kB")
        yield from _fill(buffer, buffer.end > buffer.start)
    head = bytes(buffer.data[buffer.start : end]).decode("latin-1")
    buffer.start = end + 4
    status_line, *lines = head.split("\r\n")
    version, _, rest = status_line.partition(" ")
    if not version.startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x response: {status_line[:80]!r}")
    status = int(rest[:3])
    headers: dict[str, str] = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = yield from _read_chunked(buffer)
    elif "content-length" in headers:
        body = yield from _read_exactly(buffer, int(headers["content-length"]))
    elif status in (204, 304) or 100 <= status < 200:
        body = bytearray()
    else:  # no framing: the body ends with the connection (Connection: close)
        body, keep_alive = (yield from _read_to_end(buffer)), False
    return status, headers, body, keep_alive


def _read_exactly(buffer: _Buffer, size: int) -> Reader:
    """``size`` bytes into a new buffer: the read-ahead's, then straight from the socket."""
    body = bytearray(size)
    have = min(size, buffer.end - buffer.start)
    body[:have] = buffer.data[buffer.start : buffer.start + have]
    buffer.start += have
    view = memoryview(body)
    while have < size:
        n = yield view[have:]
        if n == 0:
            raise _Closed(True)
        have += n
    return body


def _read_chunked(buffer: _Buffer) -> Reader:
    body = bytearray()
    while True:
        line = yield from _read_line(buffer)
        size = int(line.split(b";", 1)[0], 16)
        if size == 0:
            while (yield from _read_line(buffer)) != b"":  # trailers, then the empty line
                pass
            return body
        body += yield from _read_exactly(buffer, size)
        if (yield from _read_line(buffer)) != b"":
            raise ValueError("a chunk does not end with CRLF")


def _read_to_end(buffer: _Buffer) -> Reader:
    while True:
        space = buffer.space()
        n = yield space
        if n == 0:
            body = bytearray(buffer.data[buffer.start : buffer.end])
            buffer.start = buffer.end
            return body
        buffer.end += n


# ----------------------------------------------------------------------------------------
# Connections: trio's (Async) and the socket module's (Sync, PseudoAsync)


class _TrioConnection:
    """A keep-alive connection on trio's sockets: plain (``sendmsg``, ``recv_into`` on the
    socket itself) or TLS (``trio.SSLStream``)."""

    __slots__ = ("stream", "sock", "buffer")

    def __init__(self, stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]) -> None:
        self.stream = stream
        self.sock = stream.socket if isinstance(stream, trio.SocketStream) else None
        self.buffer = _Buffer()

    async def send(self, buffers: list[Any]) -> None:
        if self.sock is None:
            for data in buffers:
                await self.stream.send_all(_octets(data))
            return
        while buffers:
            sent = await self.sock.sendmsg(buffers)
            buffers = _advance(buffers, sent)

    async def receive(self, reader: Reader) -> Any:
        view = next(reader)
        try:
            while True:
                if self.sock is not None:
                    n = await self.sock.recv_into(view)
                else:
                    data = await self.stream.receive_some(len(view))
                    n = len(data)
                    view[:n] = data
                view = reader.send(n)
        except StopIteration as stop:
            return stop.value

    def close(self) -> None:
        # Forceful: no TLS close_notify (an idle or abandoned connection; never blocks).
        stream = self.stream
        sock = stream.socket if isinstance(stream, trio.SocketStream) else stream.transport_stream.socket
        sock.close()


class _BlockingConnection:
    """The same on a blocking socket (the ``socket`` and ``ssl`` modules)."""

    __slots__ = ("sock", "buffer")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = _Buffer()

    def send(self, buffers: list[Any], deadline: float) -> None:
        sock = self.sock
        sock.settimeout(_remaining(deadline))
        if isinstance(sock, ssl.SSLSocket):
            for data in buffers:
                sock.sendall(_octets(data))
            return
        while buffers:
            buffers = _advance(buffers, sock.sendmsg(buffers))

    def receive(self, reader: Reader, deadline: float) -> Any:
        view = next(reader)
        try:
            while True:
                self.sock.settimeout(_remaining(deadline))
                view = reader.send(self.sock.recv_into(view))
        except StopIteration as stop:
            return stop.value

    def close(self) -> None:
        self.sock.close()


def _remaining(deadline: float) -> float | None:
    if deadline == math.inf:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("deadline exceeded")
    return left


def _octets(data: Any) -> memoryview:
    """``data`` (bytes or a C-contiguous array) as a flat memoryview of bytes."""
    if isinstance(data, np.ndarray):
        data = data.reshape(-1).view(np.uint8)
    return memoryview(data)


def _advance(buffers: list[Any], sent: int) -> list[Any]:
    """What is left of ``buffers`` once ``sent`` bytes of them went."""
    for index, data in enumerate(buffers):
        size = memoryview(data).nbytes
        if sent < size:
            rest = buffers[index:]
            if sent:
                rest[0] = _octets(data)[sent:]
            return rest
        sent -= size
    return []


# ----------------------------------------------------------------------------------------
# One server's HTTP endpoint: its connections and requests


class HttpEndpoint:
    """A server's HTTP endpoint: its fixed request headers and its keep-alive connections.

    Trio's connections are kept per trio run (a ``RunVar``: sockets of a finished run are
    never used again), closed when the run ends; the blocking ones (``Sync`` and
    ``PseudoAsync``) in a pool guarded by a lock. One connection carries one request at a
    time: as many connections as requests in flight.

    Args:
        server: the server (``http_address``, ``ssl``: TLS options, ``metadata``: sent as
            HTTP headers: ``headers`` and the bearer token of its ``servers`` entry).

    Raises:
        ValueError: ``server`` has no HTTP endpoint.
    """

    def __init__(self, server: ServerInfo) -> None:
        if not server.http_address:
            raise ValueError(f"{server.describe()} has no HTTP endpoint")
        self.server = server
        host, _, port = server.http_address.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        headers = [f"Host: {server.http_address}", "Content-Type: application/octet-stream"]
        headers += [f"{key}: {value}" for key, value in server.metadata]
        self._fixed = ("\r\n".join(headers) + "\r\n").encode("latin-1")
        self._heads: dict[bytes, bytes] = {}  # plan path -> request line and fixed headers
        self._ssl: ssl.SSLContext | None = None
        self._idle: trio.lowlevel.RunVar[list[_TrioConnection]] = trio.lowlevel.RunVar(f"http {server.http_address}")
        self._blocking: list[_BlockingConnection] = []
        self._lock = threading.Lock()
        self.binary = True  # the server has Triton's binary tensor extension (check_binary)
        self.opened = 0  # connections opened so far (trio and blocking)
        self.reopened = 0  # requests sent again on a new connection after an idle one was found closed

    def _context(self) -> ssl.SSLContext | None:
        if self.server.ssl is not None and self._ssl is None:
            self._ssl = ssl_context(self.server.ssl)
        return self._ssl

    def request_head(self, plan: HttpPlan, header: bytes, body_size: int) -> bytes:
        """The request line and headers of a call of ``plan`` whose JSON header is ``header``
        and whose body (the header and the binary data) is ``body_size`` bytes."""
        fixed = self._heads.get(plan.path)
        if fixed is None:
            fixed = self._heads[plan.path] = b"POST " + plan.path + b" HTTP/1.1\r\n" + self._fixed
        return b"%sInference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (
            fixed,
            len(header),
            body_size,
        )

    def json_head(self, plan: HttpPlan, body_size: int) -> bytes:
        """The request line and headers of a call whose body is all JSON (:meth:`HttpPlan.json_body`)."""
        head = self.request_head(plan, b"", body_size).replace(b"application/octet-stream", b"application/json")
        return head.replace(b"Inference-Header-Content-Length: 0\r\n", b"")

    def check_binary(self, timeout: float | None) -> bool:
        """Ask the server (``GET /v2``, its metadata: blocking) whether it has Triton's binary
        tensor extension (``extensions`` holds ``binary_tensor_data``); without it (Seldon
        MLServer) calls carry their tensors as JSON. Kept in :attr:`binary`; a server that
        does not answer keeps the default (True: Triton).

        Returns:
            :attr:`binary`.
        """
        head = f"GET /v2 HTTP/1.1\r\n{self._fixed.decode('latin-1')}\r\n".encode("latin-1")
        deadline = time.monotonic() + (timeout or CONNECT_TIMEOUT)
        try:
            status, _headers, body = self.exchange_blocking([head], deadline)
            if status == 200:
                self.binary = "binary_tensor_data" in json.loads(body).get("extensions", ())
        except Exception:  # noqa: BLE001 - no answer: the first call will tell
            pass
        return self.binary

    # -- trio --------------------------------------------------------------------------

    def _idle_connections(self) -> list[_TrioConnection]:
        try:
            return self._idle.get()
        except LookupError:
            idle: list[_TrioConnection] = []
            self._idle.set(idle)
            trio.lowlevel.spawn_system_task(_close_at_run_end, idle, name=f"HTTP connections to {self.server.name}")
            return idle

    async def _connect(self) -> _TrioConnection:
        stream: Any = await trio.open_tcp_stream(self.host, self.port)
        context = self._context()
        if context is not None:
            stream = trio.SSLStream(stream, context, server_hostname=self.host, https_compatible=True)
            try:
                await stream.do_handshake()
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
        self.opened += 1
        return _TrioConnection(stream)

    async def exchange(self, buffers: list[Any]) -> tuple[int, dict[str, str], bytearray]:
        """Send one request (``buffers``: its head, then its body's parts) and read its
        response, on an idle connection or a new one; a reused connection the server had
        closed is replaced once. The caller's cancel scope is the deadline.

        Returns:
            (status, headers, body).

        Raises:
            OSError, trio.BrokenResourceError, ssl.SSLError, _Closed, ValueError: the
                connection or the response failed (the connection is closed).
            trio.Cancelled: the connection is closed, never reused half-read.
        """
        idle = self._idle_connections()
        while True:
            reused = bool(idle)
            connection = idle.pop() if reused else await self._connect()
            try:
                await connection.send(buffers)
                status, headers, body, keep_alive = await connection.receive(read_response(connection.buffer))
            except BaseException as exc:
                connection.close()
                if reused and _stale(exc):  # closed by the server while idle: once more, on a new one
                    self.reopened += 1
                    for other in idle:  # idle as long or longer: closed too, most likely (a restart)
                        other.close()
                    idle.clear()
                    continue
                raise
            if keep_alive:
                idle.append(connection)
            else:
                connection.close()
            return status, headers, body

    # -- blocking ----------------------------------------------------------------------

    def _connect_blocking(self, deadline: float) -> _BlockingConnection:
        timeout = _remaining(deadline) if deadline != math.inf else CONNECT_TIMEOUT
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        context = self._context()
        if context is not None:
            try:
                sock = context.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
        with self._lock:
            self.opened += 1
        return _BlockingConnection(sock)

    def exchange_blocking(self, buffers: list[Any], deadline: float) -> tuple[int, dict[str, str], bytearray]:
        """:meth:`exchange` on the calling thread; ``deadline`` on ``time.monotonic``'s clock
        (``math.inf``: none).

        Raises:
            TimeoutError: past the deadline; else as :meth:`exchange`.
        """
        while True:
            with self._lock:
                connection = self._blocking.pop() if self._blocking else None
            reused = connection is not None
            if connection is None:
                connection = self._connect_blocking(deadline)
            try:
                connection.send(buffers, deadline)
                status, headers, body, keep_alive = connection.receive(read_response(connection.buffer), deadline)
            except BaseException as exc:
                connection.close()
                if reused and _stale(exc):  # once more, on a new connection (the others idle: closed)
                    self.close_idle()
                    with self._lock:
                        self.reopened += 1
                    continue
                raise
            if keep_alive:
                with self._lock:
                    self._blocking.append(connection)
            else:
                connection.close()
            return status, headers, body

    def close_idle(self) -> None:
        """Close the idle connections: the blocking ones, and the current trio run's when
        called on its thread (the others close with their run). Never raises.

        Before a server the job started is stopped: Triton waits for its open HTTP
        connections up to its exit timeout (30 s) before it exits."""
        with self._lock:
            connections: list[Any] = self._blocking
            self._blocking = []
        try:
            idle = self._idle.get()
        except (LookupError, RuntimeError):  # none in this run, or not in a trio run
            pass
        else:
            connections += idle
            idle.clear()
        for connection in connections:
            connection.close()

    # -- a call ------------------------------------------------------------------------

    def response(self, status: int, body: bytearray, headers: dict[str, str], model: str) -> HttpResponse:
        """The :class:`HttpResponse` of a 200; for any other status the server's error as
        an :class:`~framework.ExternalFailure` (raised).

        Raises:
            ExternalFailure: a 4xx/5xx (its JSON ``error``, the HTTP status, the gRPC
                status name), or a malformed body.
        """
        if status != 200:
            try:
                message = str(json.loads(body)["error"])
            except (ValueError, KeyError, TypeError):
                message = bytes(body[:200]).decode("utf-8", "replace").strip() or "(no message)"
            grpc = http_status(status)
            raise ExternalFailure(
                f"HTTP {status}: {message}",
                model=model,
                server=self.server.name,
                status=grpc,
                retryable=grpc in _RETRYABLE,
            )
        try:
            length = int(headers.get("inference-header-content-length", len(body)))
            header = json.loads(bytes(body[:length]))
        except ValueError as exc:
            raise ExternalFailure(
                f"a malformed response to an HTTP infer request: {exc}", model=model, server=self.server.name
            ) from None
        return HttpResponse(header, body, length)

    def failure(self, exc: BaseException, model: str) -> ExternalFailure:
        """The :class:`~framework.ExternalFailure` of a request whose connection failed
        (``UNAVAILABLE``, retryable), or that ran past its deadline (``DEADLINE_EXCEEDED``)."""
        if isinstance(exc, ExternalFailure):
            return exc
        if isinstance(exc, TimeoutError):
            return ExternalFailure(
                "no answer before the deadline (Client.timeout)",
                model=model,
                server=self.server.name,
                status="DEADLINE_EXCEEDED",
                retryable=True,
            )
        if isinstance(exc, ValueError):  # a malformed response: the server's fault, not retried
            return ExternalFailure(f"a malformed HTTP response: {exc}", model=model, server=self.server.name)
        detail = f"{type(exc).__name__}: {exc}"
        if exc.__cause__ is not None:  # trio's BrokenResourceError wraps the OSError or SSLError
            detail += f" ({type(exc.__cause__).__name__}: {exc.__cause__})"
        return ExternalFailure(
            f"HTTP connection to {self.server.http_address} failed: {detail}",
            model=model,
            server=self.server.name,
            status="UNAVAILABLE",
            retryable=True,
        )


def _stale(exc: BaseException) -> bool:
    """Whether a failure on a reused connection means the server had closed it while it was
    idle (nothing of a response came): worth one try on a new connection."""
    if isinstance(exc, _Closed):
        return not exc.started
    return isinstance(exc, (BrokenPipeError, ConnectionResetError, trio.BrokenResourceError))


async def _close_at_run_end(idle: list[_TrioConnection]) -> None:
    # A system task: cancelled when the run ends; then closes what is idle. Never raises.
    try:
        await trio.sleep_forever()
    finally:
        for connection in idle:
            connection.close()
        idle.clear()


_endpoints: dict[tuple[str, Any, Any], HttpEndpoint] = {}
_endpoints_lock = threading.Lock()


def http_endpoint(server: ServerInfo) -> HttpEndpoint:
    """The process's :class:`HttpEndpoint` of ``server`` (one per HTTP address, TLS options
    and headers: every client of a job shares its connections to a server)."""
    key = (server.http_address, server.ssl, server.metadata)
    endpoint = _endpoints.get(key)
    if endpoint is None:
        with _endpoints_lock:
            endpoint = _endpoints.get(key)
            if endpoint is None:
                endpoint = _endpoints[key] = HttpEndpoint(server)
    return endpoint


def close_idle_connections() -> None:
    """Close every idle HTTP connection of this process: the blocking ones and the current
    trio run's (end of job, before the fallback server stops). Never raises."""
    with _endpoints_lock:
        endpoints = list(_endpoints.values())
    for endpoint in endpoints:
        endpoint.close_idle()
