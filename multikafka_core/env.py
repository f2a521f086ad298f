"""Every environment variable multikafka reads, in one place, all ``MULTIKAFKA_*``.

Values are read when needed (never at import time, never as default argument
values), through :func:`get`.
"""

from __future__ import annotations

import os

PREFIX = "MULTIKAFKA_"

#: etcd endpoint(s) of the coordinator, e.g. ``http://127.0.0.1:2379``.
ETCD = "MULTIKAFKA_ETCD"
#: Key prefix of everything multikafka keeps in etcd (default ``/multikafka``).
ETCD_PREFIX = "MULTIKAFKA_ETCD_PREFIX"
#: ``HOST:PORT`` the coordinator serves gRPC on.
LISTEN = "MULTIKAFKA_LISTEN"
#: ``HOST:PORT`` the coordinator serves Prometheus metrics on (empty: off).
METRICS_LISTEN = "MULTIKAFKA_METRICS_LISTEN"
#: Bearer token required by the Admin service (empty: admin is open).
ADMIN_TOKEN = "MULTIKAFKA_ADMIN_TOKEN"
#: ``HOST:PORT`` of the coordinator, for the admin CLI and agents.
COORDINATOR = "MULTIKAFKA_COORDINATOR"
#: Log level of the CLI (``INFO`` by default).
LOG_LEVEL = "MULTIKAFKA_LOG_LEVEL"
#: PEM files for TLS: server certificate/key, and the CA clients verify with.
TLS_CERT = "MULTIKAFKA_TLS_CERT"
TLS_KEY = "MULTIKAFKA_TLS_KEY"
TLS_CA = "MULTIKAFKA_TLS_CA"


def get(name: str, default: str = "") -> str:
    """Return the value of ``name`` (one of this module's constants) or ``default``."""
    if not name.startswith(PREFIX):
        raise ValueError(f"{name} is not a multikafka environment variable")
    return os.environ.get(name, default)
