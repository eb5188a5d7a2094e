"""Server descriptions: where a Triton server listens and how to open a channel to it.

The bottom of framework.sonic: it imports no other file of the package. The client, the
retry policy and TritonService all speak of servers as :class:`ServerInfo`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tritonclient.grpc as grpcclient

__all__ = ["CHANNEL_ARGS", "FALLBACK_SERVER", "ServerInfo", "SslOptions"]

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


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    """A Triton server as the TritonService knows it.

    Attributes:
        name: the ``servers`` entry name, or ``"fallback"`` for the local fallback server.
        address: gRPC ``"host:port"``.
        ssl: TLS options; None for a plain channel.
    """

    name: str
    address: str
    ssl: SslOptions | None = None

    def describe(self) -> str:
        """``"server 'name' (host:port)"`` for messages; the bare address if it is the name."""
        return f"server '{self.name}' ({self.address})" if self.name != self.address else self.address

    def open_client(self, verbose: bool = False) -> grpcclient.InferenceServerClient:
        """A new ``InferenceServerClient`` for this server (the caller closes it)."""
        import tritonclient.grpc as grpcclient

        ssl = self.ssl or SslOptions()
        return grpcclient.InferenceServerClient(
            self.address,
            verbose=verbose,
            ssl=self.ssl is not None,
            root_certificates=ssl.root_certificates,
            private_key=ssl.private_key,
            certificate_chain=ssl.certificate_chain,
            channel_args=CHANNEL_ARGS,
        )
