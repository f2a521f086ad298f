"""A coordinator serving TLS with an admin and a reader token (certificates
from :mod:`tests.certs`), and the clients a test makes for it."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from multikafka.coordinator import TlsFiles
from multikafka.core.admin_client import AdminClient
from multikafka.core.planner_client import PlannerClient
from multikafka.core.transport import ConnectConfig
from multikafka.devstack import CoordinatorThread
from tests.certs import Certs
from tests.helpers import eventually

#: Past every offset: the read mark of a split read at all is at or before it.
BIG_OFFSET = 2**62


def new_token(kind: str) -> str:
    """A new random token, ``<kind>-<hex>``."""
    return f"{kind}-{secrets.token_hex(16)}"


@dataclass
class Secure:
    """A coordinator serving TLS, with an admin and a reader token, also in
    files (as ``echo`` writes them)."""

    thread: CoordinatorThread
    certs: Certs
    admin_token: str
    reader_token: str
    admin_token_file: Path
    reader_token_file: Path

    @property
    def address(self) -> str:
        return self.thread.address

    @property
    def mtls(self) -> bool:
        """Whether the coordinator requires client certificates."""
        return self.thread.config.mtls

    def connect(
        self, token: str = "", *, ca: bytes | None = b"", client: str | None = None
    ) -> ConnectConfig:
        """``ca``: PEM of the CA to verify with (default the right one; None:
        plaintext); ``client``: "client" or "stranger" for a client
        certificate, "" for none (default: "client" under mutual TLS)."""
        if client is None:
            client = "client" if self.mtls else ""
        issued = getattr(self.certs, client) if client else None
        return ConnectConfig.parse(
            self.address,
            tls_ca=self.certs.ca.cert_pem if ca == b"" else ca,
            cert=issued.cert_pem if issued else None,
            key=issued.key_pem if issued else None,
            token=token,
        )

    def admin(self, token: str | None = None, **kw: Any) -> AdminClient:
        """An admin client, with the admin token unless ``token`` is given."""
        timeout_s = kw.pop("timeout_s", 10.0)
        return AdminClient(
            self.connect(self.admin_token if token is None else token, **kw), timeout_s=timeout_s
        )

    def planner(self, token: str | None = None, **kw: Any) -> PlannerClient:
        """A planner client, with the reader token unless ``token`` is given."""
        timeout_s = kw.pop("timeout_s", 10.0)
        return PlannerClient(
            self.connect(self.reader_token if token is None else token, **kw),
            timeout_s=timeout_s,
            call_timeout_s=timeout_s,
        )

    def wait_for_reports(self, stream: str, splits: Iterable[str], timeout_s: float = 30.0) -> None:
        """Until readers have reported reads of every split of ``splits``
        (read marks): they reached the coordinator."""
        duties = self.thread.coordinator.duties  # type: ignore[union-attr]
        assert duties is not None
        wanted = list(splits)
        eventually(
            lambda: all(
                duties.marks.at_or_before(stream, s, BIG_OFFSET) is not None for s in wanted
            ),
            timeout_s=timeout_s,
        )


def start_secure(
    make_coordinator: Callable[..., CoordinatorThread],
    certs: Certs,
    directory: Path,
    *,
    client_ca: bool = False,
    admin_token: str = "",
    reader_token: str = "",
    **overrides: Any,
) -> Secure:
    """A coordinator serving TLS with ``certs``' server certificate (and
    requiring client certificates of ``certs.client_ca`` if ``client_ca``),
    with the tokens given or new ones, written into files in ``directory``.
    ``overrides``: more coordinator settings."""
    admin_token = admin_token or new_token("admin")
    reader_token = reader_token or new_token("reader")
    directory.mkdir(parents=True, exist_ok=True)
    admin_file, reader_file = directory / "admin.token", directory / "reader.token"
    admin_file.write_text(admin_token + "\n")
    reader_file.write_text(reader_token + "\n")
    tls = TlsFiles(
        str(certs.server.cert_path),
        str(certs.server.key_path),
        str(certs.client_ca.cert_path) if client_ca else "",
    )
    thread = make_coordinator(
        tls=tls, admin_token=admin_token, reader_token=reader_token, **overrides
    )
    return Secure(thread, certs, admin_token, reader_token, admin_file, reader_file)
