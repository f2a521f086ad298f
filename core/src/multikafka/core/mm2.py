"""MirrorMaker 2 in a stream document: a cluster that is MM2's mirror of
another (:class:`Mm2Mirror`, the cluster's ``mm2`` block), and MM2's topic
names: its internal topics and the remote topics a replication policy gives
source topics (apache/kafka ``connect/mirror-client``:
``DefaultReplicationPolicy``, ``IdentityReplicationPolicy``; where the
offset-syncs topic lives: ``MirrorCheckpointConfig.offsetSyncsTopic``).

Only MM2's defaults are known here: the separator ``.`` and internal topics
named with it (``replication.policy.separator`` and
``replication.policy.internal.topic.separator.enabled`` left unset).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: ``DefaultReplicationPolicy.SEPARATOR_DEFAULT``.
SEPARATOR = "."
#: ``ReplicationPolicy.heartbeatsTopic()``: even ``identity`` prefixes it.
HEARTBEATS_TOPIC = "heartbeats"


class ReplicationPolicy(str, enum.Enum):
    #: ``DefaultReplicationPolicy``: remote topic ``<source_alias>.<topic>``.
    DEFAULT = "default"
    #: ``IdentityReplicationPolicy``: remote topic ``<topic>`` (but heartbeats).
    IDENTITY = "identity"


class SyncsLocation(str, enum.Enum):
    """``offset-syncs.topic.location``: the cluster holding the offset syncs."""

    #: MM2's default: on the source, named for the target alias.
    SOURCE = "source"
    #: KIP-716: on the target, named for the source alias.
    TARGET = "target"


def offset_syncs_topic(alias: str) -> str:
    """``mm2-offset-syncs.<alias>.internal`` (``offsetSyncsTopic``)."""
    return f"mm2-offset-syncs{SEPARATOR}{alias}{SEPARATOR}internal"


def checkpoints_topic(alias: str) -> str:
    """``<alias>.checkpoints.internal`` (``checkpointsTopic``), on the target,
    named for the source alias."""
    return f"{alias}{SEPARATOR}checkpoints{SEPARATOR}internal"


def offset_syncs_topic_of(location: SyncsLocation, source_alias: str, target_alias: str) -> str:
    """The offset-syncs topic of a source -> target replication: named for the
    cluster it does not live on (``MirrorCheckpointConfig.offsetSyncsTopic``)."""
    return offset_syncs_topic(target_alias if location is SyncsLocation.SOURCE else source_alias)


def remote_topic(policy: ReplicationPolicy, source_alias: str, topic: str) -> str:
    """The name ``topic`` of the source cluster has on the target
    (``formatRemoteTopic``). ``identity`` keeps the name, except for topics
    ending in ``heartbeats``, as ``IdentityReplicationPolicy.looksLikeHeartbeat``."""
    if policy is ReplicationPolicy.IDENTITY and not topic.endswith(HEARTBEATS_TOPIC):
        return topic
    return f"{source_alias}{SEPARATOR}{topic}"


def mirror_topic_problems(
    policy: ReplicationPolicy,
    source_alias: str,
    source_topics: Iterable[str],
    mirror_topics: Iterable[str],
) -> list[str]:
    """What keeps a mirror cluster's topics of a stream from being the remote
    topics of the source cluster's under ``policy`` (empty: they are)."""
    expected = {remote_topic(policy, source_alias, t): t for t in source_topics}
    mirror = set(mirror_topics)
    problems = [
        f"{t!r} on the source is {r!r} on the mirror ({policy.value} policy), "
        f"which the mirror does not list"
        for r, t in sorted(expected.items())
        if r not in mirror
    ]
    problems += [
        f"{m!r} on the mirror is no source topic's remote topic ({policy.value} policy, "
        f"source alias {source_alias!r})"
        for m in sorted(mirror - expected.keys())
    ]
    return problems


@dataclass(frozen=True)
class Mm2Mirror:
    """A cluster's ``mm2`` block: the cluster is MM2's replica of ``source``
    (another cluster of the same stream), its topics the remote topics of the
    source's under ``replication_policy``."""

    #: The stream's cluster MM2 copies from.
    source: str
    #: MM2's alias of the source cluster (names remote topics and the
    #: checkpoints topic).
    source_alias: str
    #: MM2's alias of this cluster (names the offset-syncs topic on the source).
    target_alias: str
    replication_policy: ReplicationPolicy = ReplicationPolicy.DEFAULT
    offset_syncs_topic_location: SyncsLocation = SyncsLocation.SOURCE

    @property
    def offset_syncs_topic(self) -> str:
        """The offset-syncs topic of this replication."""
        return offset_syncs_topic_of(
            self.offset_syncs_topic_location, self.source_alias, self.target_alias
        )

    @property
    def checkpoints_topic(self) -> str:
        """The checkpoints topic of this replication (on this cluster)."""
        return checkpoints_topic(self.source_alias)

    def syncs_cluster(self, mirror: str) -> str:
        """The cluster holding the offset syncs: the source, or ``mirror``
        (this cluster) under KIP-716's ``target`` location."""
        return self.source if self.offset_syncs_topic_location is SyncsLocation.SOURCE else mirror

    def remote_topic(self, topic: str) -> str:
        """The name on this cluster of the source's ``topic``."""
        return remote_topic(self.replication_policy, self.source_alias, topic)

    def source_topic(self, remote: str, source_topics: Iterable[str]) -> str | None:
        """Which of ``source_topics`` is copied as ``remote`` here (None: none)."""
        return next((t for t in source_topics if self.remote_topic(t) == remote), None)

    def to_document(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "source_alias": self.source_alias,
            "target_alias": self.target_alias,
            "replication_policy": self.replication_policy.value,
            "offset_syncs_topic_location": self.offset_syncs_topic_location.value,
        }
