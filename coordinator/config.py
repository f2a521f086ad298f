"""Coordinator configuration: one frozen dataclass, one docstring per field."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlparse

from multikafka_core import env
from multikafka_core.exceptions import ValidationError


@dataclass(frozen=True)
class EtcdEndpoint:
    """Where etcd listens."""

    host: str = "127.0.0.1"
    port: int = 2379

    @classmethod
    def parse(cls, url: str) -> EtcdEndpoint:
        """``http://host:port`` or ``host:port`` (the first of a comma list)."""
        first = url.split(",")[0].strip()
        parsed = urlparse(first if "://" in first else f"http://{first}")
        if not parsed.hostname:
            raise ValidationError("etcd", f"{url!r} is not an etcd URL like http://127.0.0.1:2379")
        return cls(parsed.hostname, parsed.port or 2379)

    def __str__(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for serving gRPC over TLS."""

    #: Server certificate chain.
    cert: str
    #: Server private key.
    key: str
    #: CA that client certificates must chain to (mTLS); empty: no client certs.
    client_ca: str = ""


@dataclass(frozen=True)
class CoordinatorConfig:
    """Everything the coordinator needs to run."""

    #: The etcd that holds stream metadata, status, query progress, readers.
    etcd: EtcdEndpoint = field(default_factory=EtcdEndpoint)
    #: Key prefix of everything multikafka keeps in etcd.
    etcd_prefix: str = "/multikafka"
    #: ``host:port`` to serve gRPC on; port 0 picks a free port.
    listen: str = "127.0.0.1:7070"
    #: ``host:port`` for the Prometheus endpoint; empty: metrics are only
    #: served on the gRPC port's sibling when set.
    metrics_listen: str = ""
    #: Bearer token the Admin service requires; empty: no token needed.
    admin_token: str = field(default="", repr=False)
    #: Serve gRPC over TLS with these files (``None``: plaintext).
    tls: TlsFiles | None = None
    #: How often partitions of every cluster are re-discovered (seconds).
    discovery_interval_s: float = 5.0
    #: Timeout of one metadata/offsets request to a cluster (seconds).
    cluster_timeout_s: float = 3.0
    #: After a failed request, a cluster is not asked again for this long
    #: (seconds); it contributes no new range meanwhile.
    unreachable_backoff_s: float = 2.0
    #: Agents that miss heartbeats for this long are dropped (seconds).
    reader_ttl_s: float = 15.0
    #: How often agents heartbeat (seconds).
    heartbeat_interval_s: float = 2.0
    #: Entries kept per stream in the change history.
    history_size: int = 200
    #: Threads for blocking Kafka client calls.
    kafka_threads: int = 8

    @classmethod
    def from_env(cls, **overrides: object) -> CoordinatorConfig:
        """Defaults, then ``MULTIKAFKA_*`` variables, then ``overrides``
        (``None`` values are ignored)."""
        values: dict[str, object] = {}
        if env.get(env.ETCD):
            values["etcd"] = EtcdEndpoint.parse(env.get(env.ETCD))
        if env.get(env.ETCD_PREFIX):
            values["etcd_prefix"] = env.get(env.ETCD_PREFIX)
        if env.get(env.LISTEN):
            values["listen"] = env.get(env.LISTEN)
        if env.get(env.METRICS_LISTEN):
            values["metrics_listen"] = env.get(env.METRICS_LISTEN)
        if env.get(env.ADMIN_TOKEN):
            values["admin_token"] = env.get(env.ADMIN_TOKEN)
        if env.get(env.TLS_CERT) and env.get(env.TLS_KEY):
            values["tls"] = TlsFiles(env.get(env.TLS_CERT), env.get(env.TLS_KEY))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]
