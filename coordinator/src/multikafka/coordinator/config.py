"""Coordinator configuration: frozen dataclasses, one docstring per field.

Secrets (tokens, the etcd password) are fields with ``repr=False``; on the
command line they only ever arrive as file paths (``--admin-token-file``,
``--reader-token-file``, ``--etcd-password-file``) or environment variables.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from multikafka.core import env
from multikafka.core.exceptions import ValidationError


@dataclass(frozen=True)
class EtcdEndpoint:
    """One etcd member's client URL."""

    host: str = "127.0.0.1"
    port: int = 2379
    #: ``https`` for TLS.
    scheme: str = "http"

    @classmethod
    def parse(cls, url: str) -> EtcdEndpoint:
        """``http://host:port``, ``https://host:port`` or ``host:port`` (the
        first of a comma list; :meth:`EtcdConfig.parse` takes them all)."""
        first = url.split(",")[0].strip()
        parsed = urlparse(first if "://" in first else f"http://{first}")
        if not parsed.hostname or parsed.scheme not in ("http", "https"):
            raise ValidationError(
                "etcd", f"{first[:200]!r} is not an etcd URL like http://127.0.0.1:2379"
            )
        return cls(parsed.hostname, parsed.port or 2379, parsed.scheme)

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


@dataclass(frozen=True)
class EtcdConfig:
    """How to reach etcd: its members (the client moves to the next when one
    fails), TLS and authentication."""

    endpoints: tuple[EtcdEndpoint, ...] = (EtcdEndpoint(),)
    #: PEM file of the CA that signed etcd's server certificates (TLS).
    ca: str = ""
    #: PEM files of a client certificate and its key (etcd's client-cert-auth).
    cert: str = ""
    key: str = ""
    #: etcd user (auth enabled); the password comes from a file or the env.
    username: str = ""
    password: str = field(default="", repr=False)

    @classmethod
    def parse(cls, urls: str, **options: str) -> EtcdConfig:
        """Comma-separated URLs (``https://a:2379,https://b:2379``)."""
        endpoints = tuple(EtcdEndpoint.parse(u) for u in urls.split(",") if u.strip())
        if not endpoints:
            raise ValidationError("etcd", "name at least one endpoint, like http://127.0.0.1:2379")
        return cls(endpoints, **options)

    @property
    def tls(self) -> bool:
        return bool(self.ca or self.cert) or any(e.scheme == "https" for e in self.endpoints)

    def __str__(self) -> str:
        return ",".join(str(e) for e in self.endpoints)


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

    #: The etcd that holds stream metadata, status, query progress, readers
    #: (an :class:`EtcdEndpoint` is taken as a config with that one endpoint).
    etcd: EtcdConfig = field(default_factory=EtcdConfig)
    #: Key prefix of everything multikafka keeps in etcd.
    etcd_prefix: str = "/multikafka"
    #: ``host:port`` to serve gRPC on; port 0 picks a free port.
    listen: str = "127.0.0.1:7070"
    #: ``host:port`` at which clients and the other replicas reach this one
    #: (told to clients that ask a standby); empty: derived from ``listen``.
    advertise: str = ""
    #: ``host:port`` of the HTTP listener (``/metrics``, ``/healthz``,
    #: ``/readyz``, ``/leader``); empty: none.
    metrics_listen: str = ""
    #: Bearer token the Admin service requires; empty: no token needed.
    admin_token: str = field(default="", repr=False)
    #: Bearer token the Planner and Reader services require (they hand out
    #: cluster connection settings); empty: none, unless client certificates.
    reader_token: str = field(default="", repr=False)
    #: The access policy file (YAML or JSON: principals and their grants per
    #: stream glob), re-read when it changes; empty: the tokens above alone
    #: (an admin, and a reader of every stream). See docs/deploy.md.
    access_policy: str = ""
    #: How often the access policy file is looked at (seconds): a change
    #: (a rotated token, a revoked grant) is in force within this.
    access_policy_interval_s: float = 1.0
    #: Serve gRPC over TLS with these files (``None``: plaintext).
    tls: TlsFiles | None = None
    #: Seconds the leader's etcd lease lives without a renewal: a dead
    #: leader is replaced about this long after it stopped renewing.
    lease_ttl_s: float = 5.0
    #: How often partitions of every cluster are re-discovered (seconds).
    discovery_interval_s: float = 5.0
    #: How old a cluster's high watermarks may be when a query plans a
    #: micro-batch with them (seconds; shared by every query of the stream,
    #: never older than a query's own position; 0: ask on every call).
    watermark_max_age_s: float = 0.1
    #: How often query progress is written to etcd (seconds), for all
    #: queries in one go; a new leader resumes from Spark's offsets anyway.
    progress_flush_s: float = 1.0
    #: Timeout of one metadata/offsets request to a cluster (seconds).
    cluster_timeout_s: float = 3.0
    #: After a failed request, a cluster is not asked again for this long
    #: (seconds); it contributes no new range meanwhile.
    unreachable_backoff_s: float = 2.0
    #: After a failover, how long a query's translation onto the new cluster
    #: waits for the report of the last record it read on the failed one
    #: (seconds): without it the query would resume after an earlier record
    #: and read the ones in between twice (docs/operations.md).
    translation_wait_s: float = 10.0
    #: Agents that miss heartbeats for this long are dropped (seconds).
    reader_ttl_s: float = 15.0
    #: How often agents heartbeat (seconds).
    heartbeat_interval_s: float = 2.0
    #: Entries kept per stream in the change history.
    history_size: int = 200
    #: Threads for blocking Kafka client calls.
    kafka_threads: int = 8

    def __post_init__(self) -> None:
        if isinstance(self.etcd, EtcdEndpoint):  # one endpoint given as such
            object.__setattr__(self, "etcd", EtcdConfig((self.etcd,)))

    @property
    def mtls(self) -> bool:
        """Whether clients must present a certificate."""
        return self.tls is not None and bool(self.tls.client_ca)

    @property
    def readers_authenticated(self) -> bool:
        """Whether Planner and Reader callers prove they are readers (the
        reader token or a client certificate): only then do task plans carry
        the clusters' secrets."""
        return bool(self.reader_token) or self.mtls or bool(self.access_policy)

    @property
    def access_checked(self) -> bool:
        """Whether calls are checked (an access policy, a token or client
        certificates); without any, every call is served."""
        return bool(self.access_policy or self.admin_token or self.reader_token or self.mtls)

    def advertised(self, port: int) -> str:
        """The address clients are told to use for this replica."""
        if self.advertise:
            host, _, given_port = self.advertise.rpartition(":")
            if ":" in host and not host.startswith("["):  # a bare IPv6 address
                host = f"[{host}]"
            return f"{host}:{given_port}"
        host = self.listen.rsplit(":", 1)[0]
        if host in ("0.0.0.0", "[::]", ""):
            host = socket.gethostname()
        return f"{host}:{port}"

    @classmethod
    def from_env(cls, **overrides: object) -> CoordinatorConfig:
        """Defaults, then ``MULTIKAFKA_*`` variables, then ``overrides``
        (``None`` values are ignored)."""
        values: dict[str, object] = {}
        etcd = etcd_settings()
        if etcd is not None:
            values["etcd"] = etcd
        for name, variable in (
            ("etcd_prefix", env.ETCD_PREFIX),
            ("listen", env.LISTEN),
            ("advertise", env.ADVERTISE),
            ("metrics_listen", env.METRICS_LISTEN),
            ("access_policy", env.ACCESS_POLICY),
        ):
            if env.get(variable):
                values[name] = env.get(variable)
        for name, variable, file_variable in (
            ("admin_token", env.ADMIN_TOKEN, env.ADMIN_TOKEN_FILE),
            ("reader_token", env.READER_TOKEN, env.READER_TOKEN_FILE),
        ):
            secret = env.secret(variable, file_variable)
            if secret:
                values[name] = secret
        tls = tls_files(env.get(env.TLS_CERT), env.get(env.TLS_KEY), env.get(env.TLS_CLIENT_CA))
        if tls is not None:
            values["tls"] = tls
        if env.get(env.LEASE_TTL):
            values["lease_ttl_s"] = _seconds(env.get(env.LEASE_TTL), env.LEASE_TTL)
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]


#: Where each etcd setting comes from when no flag gives it.
_ETCD_VARIABLES = {
    "urls": env.ETCD,
    "ca": env.ETCD_CA,
    "cert": env.ETCD_CERT,
    "key": env.ETCD_KEY,
    "username": env.ETCD_USER,
    "password_file": env.ETCD_PASSWORD_FILE,
}


def etcd_settings(**flags: str | None) -> EtcdConfig | None:
    """etcd settings, each from its flag (``urls``, ``ca``, ``cert``, ``key``,
    ``username``, ``password_file``) or else its ``MULTIKAFKA_ETCD*``
    variable; ``None`` when none is given (the default local etcd)."""
    values = {name: flags.get(name) or env.get(var) for name, var in _ETCD_VARIABLES.items()}
    if not any(values.values()):
        return None
    urls = values.pop("urls") or "http://127.0.0.1:2379"
    return etcd_from(urls, **values)


def etcd_from(
    urls: str,
    *,
    ca: str = "",
    cert: str = "",
    key: str = "",
    username: str = "",
    password_file: str = "",
) -> EtcdConfig:
    """An :class:`EtcdConfig` from flags: the password is read from its file."""
    password = env.read_secret(password_file, "etcd password file") if password_file else ""
    if bool(username) != bool(password):
        raise ValidationError(
            "etcd", "give both a user and a password file for etcd authentication, or neither"
        )
    if bool(cert) != bool(key):
        raise ValidationError("etcd", "give both --etcd-cert and --etcd-key, or neither")
    for what, path in (("CA", ca), ("client certificate", cert), ("client key", key)):
        if path and not Path(path).is_file():
            raise ValidationError("etcd", f"the etcd {what} file {path} does not exist")
    return EtcdConfig.parse(urls, ca=ca, cert=cert, key=key, username=username, password=password)


def tls_files(cert: str | None, key: str | None, client_ca: str | None) -> TlsFiles | None:
    """The server's TLS files: all of the certificate and its key (and, for
    mutual TLS, a client CA), or none. Half of them is refused: serving
    plaintext when TLS was meant is the one thing not to do quietly."""
    if not cert and not key and not client_ca:
        return None
    if not cert or not key:
        missing = "--tls-cert" if not cert else "--tls-key"
        raise ValidationError(
            "tls",
            f"{missing} ({env.TLS_CERT if not cert else env.TLS_KEY}) is missing: "
            "TLS needs both the server certificate and its key",
        )
    return TlsFiles(cert, key, client_ca or "")


def _seconds(raw: str, what: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValidationError(what, f"must be a number of seconds, got {raw[:50]!r}") from None
    if value <= 0:
        raise ValidationError(what, "must be more than zero")
    return value
