"""The caller of the call being served, as the services ask about it.

The auth interceptor (:mod:`multikafka.coordinator.api.auth`) identifies
the caller and sets it for the call; a service asks :func:`caller` where it
parses a request's stream: ``caller().require(Role.OPERATOR, stream)``
before anything is looked up (so a refusal never tells whether a stream
exists), ``caller().may(Role.READER, name)`` to leave what is not granted
out of a list. Decisions follow the policy in force at each question: a
long call (a stream of LatestOffsets requests) meets a revoked grant at
its next request. Where nothing is checked, the caller may do everything.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

from multikafka.coordinator.access.audit import audit
from multikafka.coordinator.access.live import AccessControl
from multikafka.coordinator.access.policy import EVERYTHING, Identity, Rights, Role
from multikafka.core.exceptions import AuthenticationError, MultikafkaError

__all__ = ["OPEN", "Caller", "caller", "serving"]


class Caller:
    """One call's caller: its identity, and its rights under the policy in force."""

    __slots__ = ("_access", "_rights", "_version", "identity", "method", "service")

    def __init__(self, access: AccessControl | None, identity: Identity, method: str = "") -> None:
        self._access = access
        self.identity = identity
        #: ``/multikafka.v1.Service/Method``, and ``Service``.
        self.method = method
        self.service = method.split("/")[1].rsplit(".", 1)[-1] if method.count("/") == 2 else ""
        self._version = -1
        self._rights: Rights = EVERYTHING

    @property
    def rights(self) -> Rights:
        """Its rights now (:class:`AuthenticationError` once the policy no
        longer knows it)."""
        access = self._access
        if access is None:
            return EVERYTHING
        if self._version != access.version:
            self._rights = access.rights(self.identity)
            self._version = access.version
        return self._rights

    @property
    def name(self) -> str:
        """Who it is, for audit lines and history ("" where nothing is checked)."""
        if self._access is None or not self._access.enabled:
            return ""
        try:
            return self.rights.name.removeprefix("principal ")
        except MultikafkaError:
            return "(unknown)"

    @property
    def everything(self) -> bool:
        """Whether it may do everything (an admin, or nothing is checked)."""
        try:
            return self.rights.admin
        except MultikafkaError:
            return False

    def same_rights(self, before: Rights | None) -> bool:
        """Whether its rights now grant what ``before`` did (the same roles
        on the same stream globs), under the policy in force."""
        try:
            now = self.rights
        except MultikafkaError:
            return False
        if before is None or now is before:
            return now is before
        return now.admin == before.admin and now.scope() == before.scope()

    def may(self, role: Role, stream: str) -> bool:
        try:
            return self.rights.may(role, stream)
        except MultikafkaError:
            return False

    def require(self, role: Role, stream: str) -> None:
        """Refuse (PERMISSION_DENIED, or UNAUTHENTICATED once its credential
        is no longer known) unless it holds ``role`` on ``stream``; the
        refusal is counted and audited."""
        try:
            self.rights.require(role, stream)
        except AuthenticationError as exc:
            self.refused(role, stream, str(exc))
            raise

    def refused(self, role: Role, stream: str, why: str) -> None:
        """Count and audit a refusal of this call."""
        if self._access is not None:
            self._access.denied(role, self.service)
        audit(
            "denied",
            principal=self.name or "(unknown)",
            method=self.method,
            stream=stream,
            request={"role_needed": role.label},
            outcome=f"denied: {why}",
            level=logging.WARNING,
        )


#: The caller where nothing is checked: it may do everything.
OPEN = Caller(None, Identity())
_CURRENT: ContextVar[Caller | None] = ContextVar("multikafka_caller", default=None)


def caller(access: AccessControl | None = None) -> Caller:
    """The caller of the call being served. Outside a call the interceptor
    checked: everything is allowed where ``access`` checks nothing (or is
    not given), and nothing where it does (fail closed: a handler reached
    without the interceptor proves nobody)."""
    current = _CURRENT.get()
    if current is not None:
        return current
    if access is None or not access.enabled:
        return OPEN
    return Caller(access, Identity())


def serving(c: Caller) -> object:
    """Make ``c`` the caller of the call being served (returns the token
    to reset it with)."""
    return _CURRENT.set(c)


def done(token: object) -> None:
    _CURRENT.reset(token)  # type: ignore[arg-type]
