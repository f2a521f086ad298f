"""Every environment variable multikafka reads, in one place, all ``MULTIKAFKA_*``,
and how secrets given as files are read.

Values are read when needed (never at import time, never as default argument
values), through :func:`get`. A secret (token, password) comes from a file or
an environment variable, never from a command line.
"""

from __future__ import annotations

import os
from pathlib import Path

from multikafka.core.exceptions import ValidationError

PREFIX = "MULTIKAFKA_"

#: etcd endpoints of the coordinator, comma-separated, e.g.
#: ``https://etcd-0:2379,https://etcd-1:2379``.
ETCD = "MULTIKAFKA_ETCD"
#: Key prefix of everything multikafka keeps in etcd (default ``/multikafka``).
ETCD_PREFIX = "MULTIKAFKA_ETCD_PREFIX"
#: PEM file of the CA of etcd's server certificates.
ETCD_CA = "MULTIKAFKA_ETCD_CA"
#: PEM files of a client certificate and key for etcd.
ETCD_CERT = "MULTIKAFKA_ETCD_CERT"
ETCD_KEY = "MULTIKAFKA_ETCD_KEY"
#: etcd user; its password is read from the file named by ETCD_PASSWORD_FILE.
ETCD_USER = "MULTIKAFKA_ETCD_USER"
ETCD_PASSWORD_FILE = "MULTIKAFKA_ETCD_PASSWORD_FILE"
#: ``HOST:PORT`` the coordinator serves gRPC on.
LISTEN = "MULTIKAFKA_LISTEN"
#: ``HOST:PORT`` clients and other replicas reach this coordinator at.
ADVERTISE = "MULTIKAFKA_ADVERTISE"
#: ``HOST:PORT`` of the coordinator's HTTP listener: ``/metrics`` and the
#: probes ``/healthz``, ``/readyz``, ``/leader`` (empty: off).
METRICS_LISTEN = "MULTIKAFKA_METRICS_LISTEN"
#: Seconds the leader's etcd lease lives without renewal (default 5).
LEASE_TTL = "MULTIKAFKA_LEASE_TTL"
#: Admin bearer token (the coordinator requires it; the admin CLI sends it),
#: or a file holding it.
ADMIN_TOKEN = "MULTIKAFKA_ADMIN_TOKEN"
ADMIN_TOKEN_FILE = "MULTIKAFKA_ADMIN_TOKEN_FILE"
#: Reader token (the Planner and Reader services require it; Spark jobs and
#: the standalone reader send it), or a file holding it.
READER_TOKEN = "MULTIKAFKA_READER_TOKEN"
READER_TOKEN_FILE = "MULTIKAFKA_READER_TOKEN_FILE"
#: The coordinator's access policy file (principals, grants per stream glob),
#: re-read when it changes.
ACCESS_POLICY = "MULTIKAFKA_ACCESS_POLICY"
#: Coordinator address(es) for the admin CLI and clients, comma-separated.
COORDINATOR = "MULTIKAFKA_COORDINATOR"
#: Log level of the CLI (``INFO`` by default).
LOG_LEVEL = "MULTIKAFKA_LOG_LEVEL"
#: How readers convert Kafka messages into Arrow: ``auto`` (default: the
#: compiled converter when built, else Python), ``python``, ``c``, ``c-accessors``.
CONVERTER = "MULTIKAFKA_CONVERTER"
#: CONVERTER's earlier name, still read when CONVERTER is not set.
CONVERTER_EARLIER = "MULTIKAFKA_DECODER"
#: PEM files for TLS: the server's certificate and key, the CA of client
#: certificates (mutual TLS), and the CA clients verify the server with.
TLS_CERT = "MULTIKAFKA_TLS_CERT"
TLS_KEY = "MULTIKAFKA_TLS_KEY"
TLS_CLIENT_CA = "MULTIKAFKA_TLS_CLIENT_CA"
TLS_CA = "MULTIKAFKA_TLS_CA"


def get(name: str, default: str = "") -> str:
    """Return the value of ``name`` (one of this module's constants) or ``default``."""
    if not name.startswith(PREFIX):
        raise ValueError(f"{name} is not a multikafka environment variable")
    return os.environ.get(name, default)


def read_secret(path: str, what: str) -> str:
    """The stripped content of a secret file; a clear error (naming the file,
    never its content) when it is missing or empty."""
    try:
        value = Path(path).read_text().strip()
    except OSError as exc:
        raise ValidationError(what, f"cannot read {path}: {exc.strerror}") from None
    if not value:
        raise ValidationError(what, f"{path} is empty")
    return value


def secret(variable: str, file_variable: str, *, file: str = "", what: str = "") -> str:
    """A secret from ``file`` (a file named by a flag or option, ``what``),
    else ``variable`` (its value) or ``file_variable`` (a file holding it);
    both variables set is an error."""
    if file:
        return read_secret(file, what)
    value, path = get(variable), get(file_variable)
    if value and path:
        raise ValidationError(variable, f"set either {variable} or {file_variable}, not both")
    return read_secret(path, file_variable) if path else value
