"""Test certificates made with ``cryptography``: CAs, a server certificate
valid for ``127.0.0.1`` and ``localhost`` (IP and DNS SANs), and client
certificates, written as PEM files into a directory.

:func:`make_certs` makes the usual set: a server CA and the server's
certificate, a separate client CA with a client certificate (mutual TLS),
and a stranger CA with a client certificate of its own (what a coordinator
must refuse).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_ONE_DAY = datetime.timedelta(days=1)


@dataclass(frozen=True)
class Issued:
    """A certificate and its key, in memory and as PEM files."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey
    cert_path: Path
    key_path: Path

    @property
    def cert_pem(self) -> bytes:
        return self.cert_path.read_bytes()

    @property
    def key_pem(self) -> bytes:
        return self.key_path.read_bytes()


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "multikafka tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Issued:
    directory.mkdir(parents=True, exist_ok=True)
    cert_path = directory / f"{stem}.pem"
    key_path = directory / f"{stem}-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return Issued(cert, key, cert_path, key_path)


def make_ca(directory: Path, stem: str, common_name: str = "") -> Issued:
    """A self-signed CA (``<stem>.pem``, ``<stem>-key.pem``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name or f"{stem} CA")
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _ONE_DAY)
        .not_valid_after(now + 30 * _ONE_DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _write(directory, stem, cert, key)


def issue(
    ca: Issued,
    directory: Path,
    stem: str,
    *,
    server: bool,
    hosts: tuple[str, ...] = ("localhost",),
    ips: tuple[str, ...] = ("127.0.0.1",),
) -> Issued:
    """A leaf certificate signed by ``ca``: a server certificate (serverAuth,
    with ``hosts`` as DNS and ``ips`` as IP SANs) or a client certificate
    (clientAuth)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0] if server and hosts else stem))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _ONE_DAY)
        .not_valid_after(now + 30 * _ONE_DAY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
    )
    if server:
        sans: list[x509.GeneralName] = [x509.DNSName(h) for h in hosts]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca.key, hashes.SHA256())
    return _write(directory, stem, cert, key)


@dataclass(frozen=True)
class Certs:
    """Everything a TLS test needs, as PEM files in ``directory``."""

    directory: Path
    #: CA of the coordinator's certificate (what clients verify it with).
    ca: Issued
    #: The coordinator's certificate: 127.0.0.1 and localhost.
    server: Issued
    #: CA of client certificates (the coordinator's ``client_ca``).
    client_ca: Issued
    #: A client certificate signed by ``client_ca``.
    client: Issued
    #: A CA nobody trusts, and a client certificate it signed.
    stranger_ca: Issued
    stranger: Issued


def make_certs(directory: Path) -> Certs:
    """The set described in the module docstring, written into ``directory``."""
    ca = make_ca(directory, "ca", "multikafka test server CA")
    client_ca = make_ca(directory, "client-ca", "multikafka test client CA")
    stranger_ca = make_ca(directory, "stranger-ca", "an untrusted CA")
    return Certs(
        directory=directory,
        ca=ca,
        server=issue(ca, directory, "server", server=True),
        client_ca=client_ca,
        client=issue(client_ca, directory, "client", server=False),
        stranger_ca=stranger_ca,
        stranger=issue(stranger_ca, directory, "stranger", server=False),
    )
