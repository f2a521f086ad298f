"""The coordinator on an etcd that requires TLS with client certificates and
a user with a password (real etcd, certificates made here): it works with
the right CA, certificate and password; a wrong password or a missing
certificate stops it with one line that does not show the password. The
lease keeper's own blocking client renews over the same TLS and user."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from multikafka.coordinator import CoordinatorConfig
from multikafka.coordinator.config import EtcdConfig, etcd_from
from multikafka.coordinator.state.etcd import Etcd
from multikafka.coordinator.state.leases import LeaseRenewals
from multikafka.core.admin_client import AdminClient
from multikafka.core.exceptions import UnavailableError
from multikafka.devstack import CoordinatorThread, EtcdServer
from tests.certs import Certs, make_certs
from tests.conftest import KafkaClusters
from tests.helpers import one_line, run_coordinator, stream_doc, uid

INTERNALS = (
    "multikafka.coordinator.config",
    "multikafka.coordinator.state.etcd",
    "multikafka.coordinator.state.leases",
)


pytestmark = pytest.mark.integration

PASSWORD = "etcd-pw-7Qz"


@dataclass
class SecureEtcd:
    server: EtcdServer
    certs: Certs
    password_file: Path

    def flags(self, *, password_file: Path | None = None, client_cert: bool = True) -> list[str]:
        flags = ["--etcd", self.server.url, "--etcd-ca", str(self.certs.ca.cert_path)]
        if client_cert:
            flags += ["--etcd-cert", str(self.certs.client.cert_path)]
            flags += ["--etcd-key", str(self.certs.client.key_path)]
        flags += ["--etcd-user", "root"]
        flags += ["--etcd-password-file", str(password_file or self.password_file)]
        return [*flags, "--etcd-wait", "2"]

    def config(self, *, password_file: Path | None = None) -> EtcdConfig:
        """The same settings as :meth:`flags`, as the coordinator's config."""
        return etcd_from(
            self.server.url,
            ca=str(self.certs.ca.cert_path),
            cert=str(self.certs.client.cert_path),
            key=str(self.certs.client.key_path),
            username="root",
            password_file=str(password_file or self.password_file),
        )


@pytest.fixture(scope="module")
def secure_etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureEtcd]:
    work = tmp_path_factory.mktemp("secure-etcd")
    certs = make_certs(work / "certs")
    server = EtcdServer(
        work,
        name="secure",
        tls=(
            str(certs.server.cert_path),
            str(certs.server.key_path),
            str(certs.client_ca.cert_path),
        ),
        fsync=False,
    ).start()
    etcdctl = [
        str(Path(sys.executable).parent / "etcdctl"),
        "--endpoints", server.url,
        "--cacert", str(certs.ca.cert_path),
        "--cert", str(certs.client.cert_path),
        "--key", str(certs.client.key_path),
    ]  # fmt: skip
    for args in (["user", "add", f"root:{PASSWORD}"], ["auth", "enable"]):
        subprocess.run([*etcdctl, *args], check=True, capture_output=True, timeout=30)
    password_file = work / "etcd-password"
    password_file.write_text(PASSWORD + "\n")
    try:
        yield SecureEtcd(server, certs, password_file)
    finally:
        server.stop()


def test_the_coordinator_works_over_tls_with_a_password(
    secure_etcd: SecureEtcd, kafka: KafkaClusters
) -> None:
    config = CoordinatorConfig(
        etcd=secure_etcd.config(),
        etcd_prefix=f"/secure-{uid('p')}",
        listen="127.0.0.1:0",
        # The subject is TLS and the password, not lease timing: a long lease
        # keeps a new etcd slow to fsync its first writes from deposing it.
        lease_ttl_s=30.0,
    )
    assert PASSWORD not in repr(config)
    thread = CoordinatorThread(config).start()
    try:
        assert thread.coordinator is not None
        assert thread.coordinator.is_leader
        (a,) = kafka.shared(1)
        name = uid("s")
        with AdminClient(thread.address) as admin:
            info = admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [uid("t")])}))
            assert info.name == name
            status = admin.status()
        assert status.etcd.reachable
        assert status.etcd.connected == secure_etcd.server.url
        assert status.etcd.endpoints == [secure_etcd.server.url]
    finally:
        thread.stop()


async def test_the_lease_keepers_client_renews_over_tls_with_a_password(
    secure_etcd: SecureEtcd, tmp_path: Path
) -> None:
    etcd = Etcd(secure_etcd.config())
    await etcd.connect()
    lease = await etcd.grant_lease(30)
    key = f"/{uid('renewals')}/leader"
    try:
        created, kv = await etcd.create_if_absent(key, b"me", lease)
        assert created
        assert kv is not None
        renewals = LeaseRenewals(secure_etcd.config())
        try:
            assert renewals.keep_alive(lease, 5.0) > 0
            assert renewals.create_revision(key, 5.0) == kv.create_revision
        finally:
            renewals.close()
        wrong = tmp_path / "wrong-password"
        wrong.write_text("not-the-password")
        refused = LeaseRenewals(secure_etcd.config(password_file=wrong))
        with pytest.raises(UnavailableError) as caught:
            refused.keep_alive(lease, 5.0)
        refused.close()
        assert "authentication failed" in str(caught.value)
        assert "not-the-password" not in str(caught.value)
    finally:
        await etcd.revoke_lease(lease)
        await etcd.close()


def test_a_wrong_password_stops_the_coordinator_in_one_line(
    secure_etcd: SecureEtcd, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password")
    result = run_coordinator(*secure_etcd.flags(password_file=wrong), cwd=tmp_path)
    assert result.returncode == 1
    assert one_line(result.stderr).startswith("multikafka")
    assert "Traceback" not in result.stderr
    assert "not-the-password" not in result.stderr
    assert PASSWORD not in result.stderr


def test_without_a_client_certificate_etcd_refuses(secure_etcd: SecureEtcd, tmp_path: Path) -> None:
    result = run_coordinator(*secure_etcd.flags(client_cert=False), cwd=tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert secure_etcd.server.url.split("//")[1] in result.stderr


def test_a_missing_certificate_file_is_named(secure_etcd: SecureEtcd, tmp_path: Path) -> None:
    flags = secure_etcd.flags()
    flags[flags.index("--etcd-cert") + 1] = str(tmp_path / "nowhere.pem")
    result = run_coordinator(*flags, cwd=tmp_path)
    assert result.returncode == 2  # click: the file given does not exist
    assert "nowhere.pem" in result.stderr
