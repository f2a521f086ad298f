"""MM2's topic names: its internal topics and the remote topics a replication
policy gives source topics (apache/kafka ``connect/mirror-client``:
``DefaultReplicationPolicy``, ``IdentityReplicationPolicy``; where the
offset-syncs topic lives: ``MirrorCheckpointConfig.offsetSyncsTopic``).

Only MM2's defaults are known here: the separator ``.`` and internal topics
named with it (``replication.policy.separator`` and
``replication.policy.internal.topic.separator.enabled`` left unset).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

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
