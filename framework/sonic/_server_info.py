"""Server descriptions: where a Triton server listens and how to open a channel to it.

The bottom of framework.sonic: it imports no other file of the package. The client, the
retry policy and TritonService all speak of servers as :class:`ServerInfo`.

Request metadata (a pysonic extension of CMSSW's ``servers`` entries): a server behind an
authenticating proxy (SuperSONIC's Envoy checks a JWT) gets gRPC metadata with every call:
fixed ``headers`` and a bearer token read from a file or an environment variable
(:func:`request_metadata`). The token is never part of a message, a repr or ``--describe``.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import ssl
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from framework.utilities import ConfigurationError

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = [
    "CHANNEL_ARGS",
    "FALLBACK_SERVER",
    "Metadata",
    "ServerInfo",
    "SslOptions",
    "request_metadata",
    "ssl_context",
]

FALLBACK_SERVER = "fallback"  # server name of the local fallback server (CMSSW: "fallback")

# tritonclient's default channel options (unlimited messages, its keepalive defaults) plus
# a short reconnect backoff: gRPC's default grows to 120 s, so a server back after a
# restart would stay unused for up to two minutes.
CHANNEL_ARGS = [
    ("grpc.max_send_message_length", 2**31 - 1),
    ("grpc.max_receive_message_length", 2**31 - 1),
    ("grpc.keepalive_time_ms", 2**31 - 1),
    ("grpc.keepalive_timeout_ms", 20000),
    ("grpc.keepalive_permit_without_calls", False),
    ("grpc.http2.max_pings_without_data", 2),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


@dataclasses.dataclass(frozen=True)
class SslOptions:
    """PEM files for a TLS gRPC channel (None: gRPC's defaults / no client certificate).

    Only the paths are kept; tritonclient reads the files when a channel is opened, so no
    key material is held here or shown in messages.
    """

    root_certificates: str | None = None
    private_key: str | None = None
    certificate_chain: str | None = None


def ssl_context(options: SslOptions) -> ssl.SSLContext:
    """The client ``ssl.SSLContext`` of the HTTP transport for ``options``, as gRPC's channel
    credentials read them: the server verified against ``root_certificates`` (None: the
    system's trusted roots) and its host name; a client certificate (mutual TLS) when both
    ``private_key`` and ``certificate_chain`` are given.

    Raises:
        OSError, ssl.SSLError: a file cannot be read or is not PEM (the path is in the
            message, never the contents).
    """
    context = ssl.create_default_context(cafile=options.root_certificates)
    if options.certificate_chain and options.private_key:
        context.load_cert_chain(options.certificate_chain, options.private_key)
    context.set_alpn_protocols(["http/1.1"])
    return context


Metadata = tuple[tuple[str, str], ...]
"""gRPC metadata: (key, value) pairs, keys in lower case, as ``grpc`` takes ``metadata=``."""

# gRPC's rule for a metadata key (lower case; "-bin" keys carry bytes, not text) and for a
# text value (printable ASCII); "grpc-" keys are gRPC's own.
_KEY = re.compile(r"[0-9a-z_.-]+")
_VALUE = re.compile(r"[\x20-\x7e]*")
_TOKEN = re.compile(r"[\x21-\x7e]+")  # a bearer token: printable ASCII, no space (RFC 6750)


def request_metadata(
    where: str, headers: Sequence[str] = (), token_file: str = "", token_variable: str = ""
) -> Metadata:
    """The metadata of every call to one server: ``headers`` and ``authorization: Bearer <token>``.

    Args:
        where: who configures it, for messages (``"TritonService: servers 'name'"``).
        headers: ``"key: value"`` entries (the key is case-insensitive, sent in lower case).
        token_file: a file whose contents, without surrounding white space, are the token.
        token_variable: the environment variable that holds the token. At most one of
            ``token_file``/``token_variable``; both "" = no token. The token is read now, once.

    Raises:
        ConfigurationError: a malformed or reserved header, a header given twice, an
            unreadable or empty token file, an unset or empty variable, a token that is not
            printable ASCII without spaces, or both sources. The message names the
            parameter and the header's key, never a value or the token.
    """
    pairs: dict[str, str] = {}
    for number, entry in enumerate(headers):
        key, colon, value = entry.partition(":")
        key, value = key.strip().lower(), value.strip()
        if not colon or not _KEY.fullmatch(key) or key.startswith("grpc-") or key.endswith("-bin"):
            raise ConfigurationError(
                f"{where}: headers[{number}] is not 'key: value' with a key of letters, digits, '-', '_' or '.' "
                "(not 'grpc-...' nor '...-bin')"
            )
        if not _VALUE.fullmatch(value):
            raise ConfigurationError(f"{where}: headers[{number}] ('{key}'): the value is not printable ASCII")
        if key in pairs:
            raise ConfigurationError(f"{where}: headers: '{key}' is given twice")
        pairs[key] = value
    if token_file and token_variable:
        raise ConfigurationError(f"{where}: bearerTokenFile and bearerTokenVariable are both set (one token source)")
    token, source = None, ""
    if token_file:
        source = f"bearerTokenFile '{token_file}'"
        try:
            token = pathlib.Path(token_file).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"{where}: {source} cannot be read: {type(exc).__name__}") from None
    elif token_variable:
        source = f"bearerTokenVariable '{token_variable}'"
        token = os.environ.get(token_variable, "").strip()
        if not token:
            raise ConfigurationError(f"{where}: {source}: the environment variable is not set or empty")
    if token is not None:
        if not _TOKEN.fullmatch(token):
            raise ConfigurationError(
                f"{where}: {source}: not a bearer token (empty, or other than printable ASCII without spaces)"
            )
        if "authorization" in pairs:
            raise ConfigurationError(f"{where}: headers has 'authorization' and a bearer token is set too")
        pairs["authorization"] = f"Bearer {token}"
    return tuple(pairs.items())


class _MetadataPlugin:
    """tritonclient's client plugin that adds a server's metadata to every call it makes
    (each RPC of ``InferenceServerClient`` asks its plugin for the call's headers)."""

    def __init__(self, metadata: Metadata) -> None:
        self._metadata = dict(metadata)

    def __call__(self, request: Any) -> None:
        # A new dict: the caller's ``headers=`` dict (tritonclient's Request keeps it) stays as given.
        request.headers = {**request.headers, **self._metadata}

    def __repr__(self) -> str:
        return f"<request metadata: {', '.join(self._metadata)}>"  # the keys, never a value


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """A Triton server as the TritonService knows it.

    Attributes:
        name: the ``servers`` entry name, or ``"fallback"`` for the local fallback server.
        address: gRPC ``"host:port"``.
        ssl: TLS options (of both endpoints); None for a plain channel.
        metadata: gRPC metadata of every call to it (:func:`request_metadata`; it may
            hold a token: kept out of the repr); the HTTP transport sends them as headers.
        http_address: ``"host:port"`` of its HTTP endpoint (the Open Inference Protocol's
            REST API), "" = none (a pysonic extension: ``httpPort`` of a ``servers`` entry;
            the fallback and ``cmstriton`` servers have one).
    """

    name: str
    address: str
    ssl: SslOptions | None = None
    metadata: Metadata = dataclasses.field(default=(), repr=False)
    http_address: str = ""

    def describe(self) -> str:
        """``"server 'name' (host:port)"`` for messages; the bare address if it is the name."""
        return f"server '{self.name}' ({self.address})" if self.name != self.address else self.address

    def open_client(self, verbose: bool = False) -> grpcclient.InferenceServerClient:
        """A new ``InferenceServerClient`` for this server (the caller closes it); every call
        it makes carries :attr:`metadata` (a tritonclient client plugin). ``verbose`` (the
        client prints each call with its metadata) is ignored for a server with metadata."""
        import tritonclient.grpc as grpcclient

        ssl = self.ssl or SslOptions()
        client = grpcclient.InferenceServerClient(
            self.address,
            verbose=verbose and not self.metadata,
            ssl=self.ssl is not None,
            root_certificates=ssl.root_certificates,
            private_key=ssl.private_key,
            certificate_chain=ssl.certificate_chain,
            channel_args=CHANNEL_ARGS,
        )
        if self.metadata:
            client.register_plugin(_MetadataPlugin(self.metadata))
        return client
