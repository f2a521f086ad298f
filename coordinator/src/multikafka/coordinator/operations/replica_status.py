"""A replica's own status, as ``multikafka admin status`` shows it: its role
and the leader, etcd as it sees it, and every replica that announces itself.
:class:`ServingReplica` is what the Admin service asks for it (the
coordinator process answers, :class:`multikafka.coordinator.Coordinator`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["EtcdHealth", "PeerReplica", "ReplicaStatus", "ServingReplica"]


@dataclass(frozen=True)
class EtcdHealth:
    #: Every endpoint configured, and the one the client uses now.
    endpoints: list[str]
    connected: str
    reachable: bool = False
    version: str = ""
    #: Why etcd did not answer (when it did not).
    error: str = ""


@dataclass(frozen=True)
class PeerReplica:
    """A replica announced under ``<prefix>/replicas/``."""

    id: str
    address: str
    #: "leader" or "standby".
    role: str
    since_ms: int


@dataclass(frozen=True)
class ReplicaStatus:
    #: "leader" or "standby".
    role: str
    #: The leader's address ("" while there is none).
    leader: str
    id: str
    address: str
    etcd: EtcdHealth
    #: The metadata generation this replica applied.
    generation: int
    #: Times this replica was elected since it started.
    elections: int
    replicas: list[PeerReplica] = field(default_factory=list)


class ServingReplica(Protocol):
    """The replica serving the Admin service."""

    async def status(self) -> ReplicaStatus: ...
