"""Who may do what to which stream: principals, roles and grants, decided in
one place.

A caller is an :class:`Identity` (the SHA-256 of the bearer token it sent,
the subject of its verified client certificate, or both). The
:class:`Policy` maps it to the principals it proves (:meth:`Policy.principals_of`),
and :class:`Rights` answer (role, stream) for that set of principals:

* ``reader``: the Planner and Reader services, for the streams granted;
* ``operator``: a reader's rights, plus documents, cluster operations,
  history, queries, readers, for the streams granted;
* ``admin``: everything, every stream, the grants of every principal.

Stream patterns are globs (``orders-*``). A principal defined by both a
token hash and a certificate subject is proved only by a call that carries
both. Tokens are looked up by their hash and compared in constant time; a
token that is not known says nothing of which principals exist.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from multikafka.core.exceptions import AuthenticationError, PermissionDeniedError, shown

__all__ = [
    "ADMIN_TOKEN_PRINCIPAL",
    "CLIENT_CERT_PRINCIPAL",
    "READER_TOKEN_PRINCIPAL",
    "Grant",
    "Identity",
    "Policy",
    "Principal",
    "Rights",
    "Role",
    "token_sha256",
]


class Role(enum.IntEnum):
    """Roles, each holding the rights of those below it."""

    READER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


#: The principals ``--admin-token-file``, ``--reader-token-file`` and
#: ``--tls-client-ca`` (without a policy) stand for (names a policy cannot use).
ADMIN_TOKEN_PRINCIPAL = "--admin-token-file"
READER_TOKEN_PRINCIPAL = "--reader-token-file"
CLIENT_CERT_PRINCIPAL = "--tls-client-ca"
#: A certificate subject that any verified client certificate proves.
ANY_CERTIFICATE = "*"


def token_sha256(token: str) -> str:
    """The hex SHA-256 of a token, as a policy names it."""
    return hashlib.sha256(token.encode()).hexdigest()


def normal_subject(subject: str) -> str:
    """A certificate subject as compared: ``CN=a,O=b`` with attribute names
    in capitals, no spaces around separators, in the order written (gRPC
    and OpenSSL print RFC 2253 order, most specific first, as policies do)."""
    parts = [p.strip() for p in re.split(r"(?<!\\)[,/]", subject) if p.strip()]
    out = []
    for p in parts:
        name, sep, value = p.partition("=")
        out.append(f"{name.strip().upper()}={value.strip()}" if sep else p)
    return ",".join(out)


@dataclass(frozen=True)
class Identity:
    """What a call proves: its bearer token's SHA-256 and its verified client
    certificate's subject ("" where it has none)."""

    token_sha256: str = ""
    cert_subject: str = ""
    #: Whether the call carried a verified client certificate at all.
    has_certificate: bool = False

    @classmethod
    def of(cls, token: str, cert_subject: str = "", *, has_certificate: bool = False) -> Identity:
        return cls(
            token_sha256(token) if token else "",
            normal_subject(cert_subject) if cert_subject else "",
            has_certificate or bool(cert_subject),
        )


@dataclass(frozen=True)
class Principal:
    name: str
    #: Hex SHA-256 of its bearer token ("" if it has none).
    token_sha256: str = ""
    #: Subject of its client certificate ("" if it has none; ``*``: any verified one).
    cert_subject: str = ""


@dataclass(frozen=True)
class Grant:
    principal: str
    role: Role
    #: Stream globs (empty for ``admin``: every stream).
    streams: tuple[str, ...] = ()
    #: Globs of the ConfigProvider references (``/path/*``, ``env:NAME*``)
    #: documents an operator puts may use (admins: any).
    references: tuple[str, ...] = ()
    #: Line of the policy file it was written on (for messages).
    line: int = 0

    def covers(self, stream: str) -> bool:
        return self.role is Role.ADMIN or any(fnmatchcase(stream, p) for p in self.streams)


class Rights:
    """What one set of principals may do (decisions cached per stream)."""

    __slots__ = ("_by_stream", "admin", "grants", "name")

    def __init__(self, name: str, grants: Sequence[Grant]) -> None:
        #: The principals, as shown in audit lines and history.
        self.name = name
        self.grants = tuple(grants)
        self.admin = any(g.role is Role.ADMIN for g in self.grants)
        self._by_stream: dict[str, Role | None] = {}

    def role_on(self, stream: str) -> Role | None:
        """The highest role held on ``stream`` (None: none)."""
        if self.admin:
            return Role.ADMIN
        known = self._by_stream.get(stream, 0)
        if known != 0:
            return known  # type: ignore[return-value]
        roles = [g.role for g in self.grants if g.covers(stream)]
        best = max(roles) if roles else None
        if len(self._by_stream) > 10_000:
            self._by_stream.clear()
        self._by_stream[stream] = best
        return best

    def may(self, role: Role, stream: str) -> bool:
        held = self.role_on(stream)
        return held is not None and held >= role

    def scope(self) -> frozenset[tuple[Role, tuple[str, ...]]]:
        """What it grants: (role, stream globs) of each grant."""
        return frozenset((g.role, g.streams) for g in self.grants)

    def holds(self, role: Role) -> bool:
        """Whether ``role`` (or a higher one) is held on some stream."""
        return any(g.role >= role for g in self.grants)

    def references_allowed(self, stream: str) -> tuple[str, ...] | None:
        """Globs of the references documents of ``stream`` may use (None: any)."""
        if self.admin:
            return None
        return tuple(
            p
            for g in self.grants
            if g.role >= Role.OPERATOR and g.covers(stream)
            for p in g.references
        )

    def require(self, role: Role, stream: str) -> None:
        """:class:`PermissionDeniedError` naming ``stream`` and ``role``
        unless held (never another stream, never a secret)."""
        if not self.may(role, stream):
            raise PermissionDeniedError(
                f"{self.name} may not do this on stream {shown(stream)}: it needs the "
                f"{role.label} role there, which the access policy does not grant"
            )


#: The rights of everyone where nothing is checked (no policy, no token).
EVERYTHING = Rights("anonymous (no access control)", [Grant("", Role.ADMIN)])


@dataclass(frozen=True)
class Policy:
    """Principals and grants, as one file states them (immutable: a reload
    makes a new one)."""

    principals: Mapping[str, Principal]
    grants: tuple[Grant, ...]
    #: Where it came from ("" for the built-in one of the token files).
    source: str = ""
    #: The digest of the file it was read from (what the reload compares).
    digest: str = ""
    _by_token: dict[str, tuple[Principal, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _by_subject: dict[str, tuple[Principal, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _rights: dict[tuple[str, ...], Rights] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        by_token: dict[str, list[Principal]] = {}
        by_subject: dict[str, list[Principal]] = {}
        for p in self.principals.values():
            if p.token_sha256:
                by_token.setdefault(p.token_sha256, []).append(p)
            elif p.cert_subject:
                by_subject.setdefault(p.cert_subject, []).append(p)
        self._by_token.update({k: tuple(v) for k, v in by_token.items()})
        self._by_subject.update({k: tuple(v) for k, v in by_subject.items()})

    def with_entries(self, principals: Iterable[Principal], grants: Iterable[Grant]) -> Policy:
        """This policy and more principals and grants (the token files')."""
        more = {p.name: p for p in principals}
        return Policy(
            {**self.principals, **more}, (*self.grants, *grants), self.source, self.digest
        )

    def principals_of(self, identity: Identity) -> Rights:
        """The rights of what ``identity`` proves. :class:`AuthenticationError`
        when it proves no principal (a token given but not known, or nothing)."""
        found: list[Principal] = []
        if identity.token_sha256:
            holders = self._by_token.get(identity.token_sha256, ())
            for p in holders:
                # Looked up by its hash; compared in constant time all the same.
                if hmac.compare_digest(p.token_sha256, identity.token_sha256) and (
                    not p.cert_subject or self._proves_subject(p, identity)
                ):
                    found.append(p)
            if not holders:
                raise AuthenticationError(
                    "the bearer token given is not known to this coordinator (a token "
                    "the access policy names by its SHA-256, or a token file's)"
                )
        if identity.has_certificate:
            for subject in (identity.cert_subject, ANY_CERTIFICATE):
                found += self._by_subject.get(subject, ())
        if not found:
            if identity.token_sha256:
                raise AuthenticationError(
                    "the bearer token given belongs to a principal that also needs its "
                    "client certificate; connect with it (mutual TLS)"
                )
            raise AuthenticationError(
                "this call needs 'authorization: Bearer <token>' or a client certificate "
                "the access policy names"
                + (
                    f"; the certificate's subject {shown(identity.cert_subject)} is not one"
                    if identity.has_certificate
                    else ""
                )
            )
        names = tuple(sorted({p.name for p in found}))
        rights = self._rights.get(names)
        if rights is None:
            rights = Rights(
                f"principal {', '.join(names)}", [g for g in self.grants if g.principal in names]
            )
            if len(self._rights) > 10_000:
                self._rights.clear()
            self._rights[names] = rights
        return rights

    @staticmethod
    def _proves_subject(p: Principal, identity: Identity) -> bool:
        return identity.has_certificate and p.cert_subject in (
            identity.cert_subject,
            ANY_CERTIFICATE,
        )


def built_in_entries(
    *, admin_token: str = "", reader_token: str = "", any_certificate: bool = False
) -> tuple[list[Principal], list[Grant]]:
    """The principals and grants of the token files and of ``--tls-client-ca``."""
    principals, grants = [], []
    if admin_token:
        principals.append(Principal(ADMIN_TOKEN_PRINCIPAL, token_sha256(admin_token)))
        grants.append(Grant(ADMIN_TOKEN_PRINCIPAL, Role.ADMIN))
    if reader_token:
        principals.append(Principal(READER_TOKEN_PRINCIPAL, token_sha256(reader_token)))
        grants.append(Grant(READER_TOKEN_PRINCIPAL, Role.READER, ("*",)))
    if any_certificate:
        principals.append(Principal(CLIENT_CERT_PRINCIPAL, cert_subject=ANY_CERTIFICATE))
        grants.append(Grant(CLIENT_CERT_PRINCIPAL, Role.READER, ("*",)))
    return principals, grants
