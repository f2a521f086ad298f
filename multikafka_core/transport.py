"""gRPC channels to the coordinator, built in one place: every client (the
admin client, the planner client, the reader agents' link) gets its channel
here, with the same keepalive and TLS handling."""

from __future__ import annotations

from pathlib import Path

import grpc

#: Keep idle connections alive through NATs and load balancers, and notice a
#: dead peer within seconds instead of at the next call.
KEEPALIVE_OPTIONS = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
)


def read_ca(path: str) -> bytes | None:
    """The PEM bytes of the CA file at ``path`` (``None`` for an empty path)."""
    return Path(path).read_bytes() if path else None


def channel(address: str, *, tls_ca: bytes | None = None) -> grpc.Channel:
    """A channel to ``host:port``: TLS verified against ``tls_ca`` when given,
    plaintext otherwise."""
    if tls_ca is not None:
        creds = grpc.ssl_channel_credentials(tls_ca)
        return grpc.secure_channel(address, creds, options=KEEPALIVE_OPTIONS)
    return grpc.insecure_channel(address, options=KEEPALIVE_OPTIONS)


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying ``token`` (none for an empty token)."""
    return (("authorization", f"Bearer {token}"),) if token else ()
