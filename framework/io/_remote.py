"""Remote inputs: XRootD (``root://``) and HTTP(S) URLs, CMS logical file names (LFNs)
reached through redirectors, bounded waits and retries of transient read errors.

CMS jobs name logical files (``/store/...``) and reach them through redirectors: the
site's, then a regional one, then the global one (CMSSW's ``SiteLocalConfig`` and the
"any data, anytime, anywhere" (AAA) fallback of its ``XrdAdaptor``). Here the redirectors
are a PoolSource parameter (:class:`RemoteAccess`), tried in order per file, each open
bounded by ``openTimeout``; which one served each file goes to the end-of-job summary.

Which uproot source reads what:

* ``root://`` (``xroot://``): uproot's :class:`uproot.source.xrootd.XRootDSource` (the
  ``xrootd`` package, XRootD's own Python client), the only uproot source for XRootD
  that takes a timeout: uproot's default, fsspec-xrootd, is not given uproot's
  ``timeout`` option (``uproot.open`` keeps its own options from fsspec) and then waits
  for XRootD's defaults (a request timeout of 1,800 s; 5 connection tries of 120 s).
* ``http://``, ``https://``: uproot's :class:`uproot.source.http.HTTPSource` (socket
  timeouts; one multi-range GET, or single ranges in parallel if the server has no
  multipart ranges).
* other URLs (``s3://``, ...): uproot's default (fsspec), without a timeout of ours.

Bounds (seconds, wall clock): opening a file at one place (a URL, or one redirector) is
cut at ``openTimeout`` whatever the library does (the open runs on a daemon thread that
is abandoned then, and closes what it opened if it ever finishes); each read request
waits at most ``timeout`` (the libraries' own per-request timeouts; XRootD counts whole
seconds, checked every second here instead of every 15: ``TimeoutResolution``). XRootD's
client settings are process-wide (``XrdCl::DefaultEnv``); they are set from the first
PoolSource's parameters before its first XRootD open, except those given as ``XRD_*``
environment variables, which win (XRootD's own rule).
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import logging
import math
import os
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import stamina
import uproot

from framework.utilities import ConfigurationError, FileOpenError

__all__ = [
    "RemoteAccess",
    "OpenedFile",
    "is_lfn",
    "is_url",
    "is_remote",
    "server_of",
    "open_root_file",
    "is_transient",
    "read_with_retries",
    "close_in_background",
    "reason",
    "bounded",
]

log = logging.getLogger("pysonic.source")

T = TypeVar("T")

LFN_PREFIX = "/store/"  # CMS logical file names; what a site's trivial file catalog maps
XROOTD_SCHEMES = ("root", "xroot", "roots", "xroots")
HTTP_SCHEMES = ("http", "https")
INSTALL_XROOTD = "pip install xrootd fsspec-xrootd (both come with pysonic's own install: pip install -e .)"


def is_lfn(name: str) -> bool:
    """A CMS logical file name: ``/store/...`` (read through the redirectors, never locally)."""
    return name.startswith(LFN_PREFIX)


def is_url(name: str) -> bool:
    """A URL uproot reads remotely (``root://``, ``https://``, ...); ``file://`` is local."""
    return "://" in name and not name.startswith("file://")


def is_remote(name: str) -> bool:
    """A URL or an LFN: opened with bounded waits, read with retries."""
    return is_url(name) or is_lfn(name)


def server_of(url: str) -> str:
    """``host:port`` of a URL (``root://user@eos.cern.ch:1094//x`` -> ``eos.cern.ch:1094``)."""
    netloc = urllib.parse.urlsplit(url).netloc
    return netloc.rpartition("@")[2] or url


@dataclass(frozen=True)
class RemoteAccess:
    """How remote inputs are reached: PoolSource's ``redirectors``, ``openTimeout``,
    ``timeout`` and ``readRetries`` (picklable: a Dask worker's PoolSource gets the same).

    Attributes:
        redirectors: URL prefixes tried in order for an LFN, e.g. ``root://cmsxrootd.fnal.gov//``
            (``+ store/...``); ``http(s)://`` prefixes and local folders (a site's mount
            of ``/store``) work too.
        open_timeout: seconds an open may take at one place (a URL, each redirector).
        timeout: seconds each read request may wait for the server.
        read_retries: further tries after a transient read error (the file is opened
            again at the place that served it; timeouts are not retried).
    """

    redirectors: tuple[str, ...] = ()
    open_timeout: float = 30.0
    timeout: float = 30.0
    read_retries: int = 2

    def __post_init__(self) -> None:
        for name, value in (("openTimeout", self.open_timeout), ("timeout", self.timeout)):
            if not value > 0:
                raise ConfigurationError(f"PoolSource: {name} = {value} s, expected > 0")
        for r in self.redirectors:
            if not r or (not is_url(r) and not os.path.isabs(r.removeprefix("file:"))):
                raise ConfigurationError(
                    f"PoolSource: redirector '{r}' is neither a URL (root://host//, "
                    "https://host/path) nor an absolute local folder"
                )

    @classmethod
    def from_params(cls, params: Any) -> RemoteAccess:
        """From PoolSource's validated parameters (defaults for those absent: a source
        built by hand from a namespace)."""
        d = cls()
        return cls(
            tuple(str(r) for r in getattr(params, "redirectors", ())),
            float(getattr(params, "openTimeout", d.open_timeout)),
            float(getattr(params, "timeout", d.timeout)),
            int(getattr(params, "readRetries", d.read_retries)),
        )

    @classmethod
    def from_config(cls, source: Any) -> RemoteAccess:
        """From a config's ``cms.Source("PoolSource", ...)`` as written (defaults for what it omits)."""

        def value(name: str, default: Any) -> Any:
            return getattr(source, name).value() if name in source else default

        d = cls()
        return cls(
            tuple(str(r) for r in value("redirectors", ())),
            float(value("openTimeout", d.open_timeout)),
            float(value("timeout", d.timeout)),
            int(value("readRetries", d.read_retries)),
        )

    def places(self, name: str) -> list[tuple[str, str]]:
        """``(what to open, where it is served from)`` in the order to try.

        An LFN gives one per redirector (``root://host//`` + ``store/...``); a URL gives
        itself (served by its server); a local path gives itself (``local``).

        Raises:
            FileOpenError: an LFN and no redirectors.
        """
        if not is_lfn(name):
            return [(name, server_of(name) if is_url(name) else "local")]
        if not self.redirectors:
            raise FileOpenError(
                f"input file '{name}' is a logical file name (LFN) but PoolSource has no redirectors: set e.g. "
                f"redirectors = cms.untracked.vstring('root://cms-xrd-global.cern.ch//')",
                file=name,
            )
        return [(_join(r, name), r) for r in self.redirectors]


def _join(redirector: str, lfn: str) -> str:
    if not is_url(redirector):  # a local folder holding /store
        return os.path.join(redirector.removeprefix("file:"), lfn.lstrip("/"))
    # XRootD wants the path absolute after the host (root://host//store/...); HTTP one slash.
    separator = "//" if urllib.parse.urlsplit(redirector).scheme in XROOTD_SCHEMES else "/"
    return redirector.rstrip("/") + separator + lfn.lstrip("/")


@dataclass(frozen=True)
class OpenedFile:
    """Where one input file was opened (a row of the summary's input table).

    Attributes:
        name: the file as listed (path, URL or LFN).
        url: what was opened.
        served_by: ``local``, the URL's ``host:port``, or the redirector that served an LFN.
        data_server: for XRootD, the data server the redirector sent the client to (None: unknown).
        open_seconds: wall-clock time of the open that succeeded, including the tree's metadata.
        failed: ``"<place>: <reason>"`` for each place that did not serve it first.
    """

    name: str
    url: str
    served_by: str
    data_server: str | None
    open_seconds: float
    failed: tuple[str, ...] = ()


def reason(exc: BaseException, url: str | None = None) -> str:
    """``"Type: message"`` on one line, without uproot's repetitions of the URL (the caller
    names the file and server once) or its page on how to name files."""
    text = str(exc)
    if url:
        text = text.replace(f" in file {url}", "").replace(f"for URL {url}", "").replace(f"in file {url}", "")
    if isinstance(exc, FileNotFoundError):  # uproot's adds a page on how to name files
        text = text.split("\n\n", 1)[0]
    return f"{type(exc).__name__}: {' '.join(text.split())}".replace(" )", ")")


_xrootd_configured = threading.Lock()
_xrootd_done = False


def _xrootd_client(name: str, access: RemoteAccess) -> Any:
    """The XRootD client module, its process-wide settings made from ``access`` once."""
    global _xrootd_done
    try:
        from XRootD import client
    except ImportError:
        raise FileOpenError(
            f"cannot open input file '{name}': reading root:// needs the XRootD client, which "
            f"is not installed: {INSTALL_XROOTD}",
            file=name,
        ) from None
    with _xrootd_configured:
        if not _xrootd_done:
            settings = {
                "TimeoutResolution": 1,  # timeouts checked every second, not every 15
                # One connection try per open (default 5 x ConnectionWindow 120 s): a dead
                # redirector is left at once for the next one; reads are retried by us.
                "ConnectionRetry": 1,
                "ConnectionWindow": math.ceil(access.open_timeout),
                "RequestTimeout": math.ceil(access.timeout),  # requests made without a timeout
                # A broken stream is remembered this long (default 1,800 s): a retry may reconnect.
                "StreamErrorWindow": 1,
            }
            for key, value in settings.items():
                if f"XRD_{key.upper()}" not in os.environ:
                    client.EnvPutInt(key, value)
            _xrootd_done = True
    return client


def _handler(name: str, url: str, access: RemoteAccess) -> dict[str, Any]:
    """uproot.open options for ``url``: the source class and its per-request timeout."""
    scheme = urllib.parse.urlsplit(url).scheme.lower() if is_url(url) else ""
    if scheme in XROOTD_SCHEMES:
        _xrootd_client(name, access)
        # XRootD counts whole seconds, and 0 means "no timeout".
        return {"handler": uproot.source.xrootd.XRootDSource, "timeout": max(1, math.ceil(access.timeout))}
    if scheme in HTTP_SCHEMES:
        return {"handler": uproot.source.http.HTTPSource, "timeout": access.timeout}
    return {}


class DeadlinePassed(TimeoutError):
    """:func:`bounded` gave up waiting."""


def bounded(call: Callable[[], T], seconds: float | None, on_late: Callable[[T], None]) -> T:
    """``call()`` on a daemon thread, waited for at most ``seconds`` (wall clock; None: no bound).

    The wait is interruptible (Ctrl-C on the main thread), and neither it nor the
    abandoned thread holds the process at exit (daemon). A result that arrives after
    the caller gave up goes to ``on_late`` (to close a file opened too late).

    Raises:
        DeadlinePassed: ``call`` did not return within ``seconds``.
        whatever ``call`` raises.
    """
    done = threading.Event()
    lock = threading.Lock()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc
        with lock:
            done.set()
            late = box.get("abandoned", False)
        if late and "result" in box:
            on_late(box["result"])

    threading.Thread(target=run, name="pysonic-open", daemon=True).start()
    try:
        finished = done.wait(seconds)
    except BaseException:  # Ctrl-C while waiting (main thread): the call finishes alone
        with lock:
            box["abandoned"] = not done.is_set()
        raise
    if not finished:
        with lock:
            if not done.is_set():
                box["abandoned"] = True
                raise DeadlinePassed(f"no answer within {seconds:g} s")
    if "error" in box:
        raise box["error"]
    return box["result"]  # type: ignore[no-any-return]


def close_in_background(file: Any) -> None:
    """Close an uproot file without waiting: closing an XRootD file asks its server, which
    may not answer (a stopped job must not wait for that)."""
    threading.Thread(target=_close_quietly, args=(file,), name="pysonic-close", daemon=True).start()


def _close_quietly(file: Any) -> None:
    with contextlib.suppress(Exception):  # the server is gone: nothing left to release here
        file.close()


def _data_server(file: Any) -> str | None:
    try:
        source = file.file.source
        if isinstance(source, uproot.source.xrootd.XRootDSource):
            return server_of(str(source.resource.file.get_property("DataServer"))) or None
    except Exception:  # noqa: BLE001 - a detail for the summary only
        pass
    return None


def open_root_file(
    name: str, access: RemoteAccess, *, open_file: Callable[[str, dict[str, Any]], Any] | None = None
) -> tuple[Any, OpenedFile]:
    """Open ``name`` (local path, URL or LFN) with uproot; return the file and where it was opened.

    Each place (:meth:`RemoteAccess.places`) is tried in order; remote opens are cut at
    ``access.open_timeout``. ``open_file(url, options)`` opens one place (default:
    ``uproot.open(url, array_cache=None, **options)``).

    Raises:
        FileOpenError: one line naming the file and each server tried, with its reason
            (``[3011] ... no such file``, ``Connection error``, ``no answer within 30 s``);
            or the XRootD client is missing (says what to install); or an LFN without
            redirectors.
    """
    opener = open_file or (lambda url, options: uproot.open(url, array_cache=None, **options))
    places = access.places(name)
    failed: list[str] = []
    for url, served_by in places:
        options = _handler(name, url, access)
        start = time.monotonic()
        try:
            if is_url(url):
                file = bounded(functools.partial(opener, url, options), access.open_timeout, _close_quietly)
            else:
                file = opener(url, options)
        except DeadlinePassed:
            why = f"no answer within openTimeout = {access.open_timeout:g} s"
        except TimeoutError as exc:  # the library's own timeout (each request: timeout)
            why = f"no answer within timeout = {access.timeout:g} s ({reason(exc, url)})"
        except FileOpenError:
            raise
        except Exception as exc:  # noqa: BLE001 - the next place may serve it
            if not is_remote(name):
                raise
            why = reason(exc, url)
        else:
            if len(places) > 1 and failed:
                log.warning("input file %s: opened at %s after %d failed place(s)", name, served_by, len(failed))
            return file, OpenedFile(name, url, served_by, _data_server(file), time.monotonic() - start, tuple(failed))
        failed.append(f"{served_by if is_lfn(name) else server_of(url)}: {why}")
    if len(places) == 1:
        raise FileOpenError(f"cannot open input file '{name}' at server {failed[0]}", file=name)
    raise FileOpenError(
        f"cannot open input file '{name}' through any of its {len(places)} redirectors: {'; '.join(failed)}", file=name
    )


def is_transient(exc: BaseException) -> bool:
    """A read error worth another try: network and server errors, not a timeout (a server
    that did not answer within ``timeout`` is not asked again: the wait stays bounded), not
    a missing or forbidden file, not damaged data."""
    if isinstance(exc, (TimeoutError, FileNotFoundError, PermissionError)):
        return False
    return isinstance(exc, (OSError, http.client.HTTPException))


def read_with_retries(read: Callable[[], T], retries: int, reopen: Callable[[BaseException], None]) -> T:
    """``read()``, tried again up to ``retries`` times after a transient error
    (:func:`is_transient`), with ``reopen(error)`` before each new try (an XRootD file is
    closed by uproot after a failed read). Backoff: stamina's exponential one with
    jitter, from 0.2 s, at most 2 s.

    Raises:
        the last error (transient ones after ``retries`` further tries; others at once).
    """
    last: list[BaseException] = []

    def transient(exc: BaseException) -> bool:
        last[:] = [exc]
        return is_transient(exc)

    for attempt in stamina.retry_context(
        on=transient, attempts=retries + 1, timeout=None, wait_initial=0.2, wait_max=2.0, wait_jitter=0.2
    ):
        with attempt:
            if attempt.num > 1:
                reopen(last[0])
            return read()
    raise AssertionError("unreachable: stamina raises the last error")
