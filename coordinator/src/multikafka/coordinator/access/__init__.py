"""Access control: principals, roles and grants per stream glob (the policy
file every replica re-reads), the caller of each call, and the audit trail.
Services ask :func:`caller` where they parse a request's stream; the auth
interceptor (``api.auth``) is the only place that looks at credentials."""

from multikafka.coordinator.access.audit import AUDIT_LOGGER, audit
from multikafka.coordinator.access.caller import Caller, caller
from multikafka.coordinator.access.live import AccessControl
from multikafka.coordinator.access.parse import PolicyError, parse_policy
from multikafka.coordinator.access.policy import (
    Grant,
    Identity,
    Policy,
    Principal,
    Rights,
    Role,
    token_sha256,
)

__all__ = [
    "AUDIT_LOGGER",
    "AccessControl",
    "Caller",
    "Grant",
    "Identity",
    "Policy",
    "PolicyError",
    "Principal",
    "Rights",
    "Role",
    "audit",
    "caller",
    "parse_policy",
    "token_sha256",
]
