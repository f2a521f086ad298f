"""The access policy in force on a replica, kept in line with its file.

The file (``--access-policy``) is read every ``interval_s`` and parsed
when its digest changed (a Kubernetes Secret update swaps a symlink: the
path then reads the new content). A new file that parses replaces the policy at
once: the next call of every caller is decided by it, and listeners (the
agents' link) end what the new policy no longer allows. A file that does
not parse is refused with a log line naming its line and the reason, and
``multikafka_access_policy_valid`` 0; the last good policy stays. A replica
that never had a good file refuses every call but health (fail closed).

The token files (``--admin-token-file``, ``--reader-token-file``) and, with
no policy file, ``--tls-client-ca`` add their built-in principals
(:func:`~.policy.built_in_entries`). With none of these, nothing is
checked (:data:`~.policy.EVERYTHING`). Without a policy file, a service
none of these guards stays open as before (:meth:`AccessControl.open_to_all`):
the Admin service without an admin token, the Planner and Reader services
without a reader token or client certificates.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable

from multikafka.coordinator.access.audit import audit
from multikafka.coordinator.access.parse import MAX_POLICY_BYTES, PolicyError, parse_policy
from multikafka.coordinator.access.policy import (
    EVERYTHING,
    Grant,
    Identity,
    Policy,
    Principal,
    Rights,
    Role,
    built_in_entries,
)
from multikafka.coordinator.metrics import Metrics
from multikafka.core.exceptions import UnavailableError

__all__ = ["AccessControl"]

logger = logging.getLogger(__name__)


class AccessControl:
    """What a replica checks calls against (one per replica)."""

    def __init__(
        self,
        policy_file: str = "",
        *,
        admin_token: str = "",
        reader_token: str = "",
        any_certificate: bool = False,
        metrics: Metrics | None = None,
    ) -> None:
        self.path = policy_file
        self._metrics = metrics
        self._extra: tuple[list[Principal], list[Grant]] = built_in_entries(
            admin_token=admin_token,
            reader_token=reader_token,
            any_certificate=any_certificate and not policy_file,
        )
        #: gRPC service prefixes anyone may call (no policy file, and no
        #: credential configured for them: as before access policies).
        self._open: tuple[str, ...] = ()
        if not policy_file and (admin_token or reader_token or any_certificate):
            self._open = (
                *(() if admin_token else ("/multikafka.v1.Admin/",)),
                *(
                    ()
                    if reader_token or any_certificate
                    else ("/multikafka.v1.Planner/", "/multikafka.v1.Reader/")
                ),
            )
        #: The policy in force (None: a file is configured but none was ever
        #: good: every call is refused).
        self.policy: Policy | None = None
        #: Bumped at every policy change (what cached decisions compare).
        self.version = 0
        #: Why the file in place is not in force ("" while it is).
        self.problem = ""
        #: The digest of the file last read (a refused one too).
        self._seen = ""
        self._listeners: list[Callable[[], None]] = []
        if not policy_file:
            self.policy = Policy({}, ()).with_entries(*self._extra)

    @property
    def enabled(self) -> bool:
        """Whether calls are checked at all."""
        return bool(self.path) or bool(self._extra[0])

    def open_to_all(self, method: str) -> bool:
        """Whether anyone may call ``method`` unchecked (see the module docstring)."""
        return method.startswith(self._open) if self._open else False

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every policy change."""
        self._listeners.append(listener)

    def rights(self, identity: Identity) -> Rights:
        """The rights of a caller; :class:`AuthenticationError` for an
        unknown one, :class:`UnavailableError` while no policy is in force."""
        if not self.enabled:
            return EVERYTHING
        policy = self.policy
        if policy is None:
            raise UnavailableError(
                f"no valid access policy is loaded from {self.path} yet, so every call is "
                f"refused: {self.problem or 'the file was not read yet'}"
            )
        return policy.principals_of(identity)

    def denied(self, role: Role, service: str) -> None:
        """Count a refused call (``role``: the one it needed)."""
        if self._metrics is not None:
            self._metrics.denied.labels(role.label, service).inc()

    def grants(self) -> list[Grant]:
        """Every grant in force (admins list them)."""
        return list(self.policy.grants) if self.policy is not None else []

    # -- the file -------------------------------------------------------------------

    def load(self) -> bool:
        """Read the file if it changed since it was last looked at; True if
        the policy changed."""
        if not self.path:
            return False
        # Read and hashed every time: a stat can miss a rewrite (an inode
        # reused within one tick of the file system's clock), and a policy
        # file is small.
        try:
            with open(self.path, "rb") as f:
                data = f.read(MAX_POLICY_BYTES + 1)
        except OSError as exc:
            return self._refused(f"cannot read {self.path}: {exc.strerror}", None)
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._seen:
            return False
        self._seen = digest
        if self.policy is not None and digest == self.policy.digest:
            self._valid()
            return False
        try:
            policy = parse_policy(data, self.path)
        except PolicyError as exc:
            return self._refused(str(exc), exc.line)
        first = self.policy is None
        self.policy = policy.with_entries(*self._extra)
        self.version += 1
        self._valid()
        if self._metrics is not None:
            self._metrics.policy_reloads.labels("loaded").inc()
        counts = {
            "principals": len(policy.principals),
            "grants": len(policy.grants),
            "admins": sum(1 for g in policy.grants if g.role is Role.ADMIN),
            "digest": digest[:16],
        }
        logger.info(
            "access policy %s from %s: %d principals, %d grants",
            "loaded" if first else "reloaded",
            self.path,
            counts["principals"],
            counts["grants"],
        )
        audit("policy-reload", principal="(file)", request={"file": self.path, **counts})
        for listener in self._listeners:
            listener()
        return True

    async def watch(self, interval_s: float) -> None:
        """:meth:`load` every ``interval_s`` (until cancelled)."""
        while True:
            await asyncio.to_thread(self.load)
            await asyncio.sleep(interval_s)

    def _valid(self) -> None:
        self.problem = ""
        if self._metrics is not None:
            self._metrics.policy_valid.set(1)

    def _refused(self, problem: str, line: int | None) -> bool:
        if problem == self.problem:
            return False  # said once per new problem, not every interval
        self.problem = problem
        kept = "the last good policy stays in force" if self.policy else "every call is refused"
        logger.error("access policy refused (%s): %s", kept, problem)
        if self._metrics is not None:
            self._metrics.policy_reloads.labels("refused").inc()
            self._metrics.policy_valid.set(0)
        audit(
            "policy-reload",
            principal="(file)",
            request={"file": self.path, "line": line or 0},
            outcome=f"refused: {problem}",
            level=logging.ERROR,
        )
        return False
