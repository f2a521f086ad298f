"""MirrorMaker 2 as a failover translation: its records read as MM2 writes
them, and its topic names (no wiring yet).

* :mod:`.records`: ``OffsetSync`` and ``Checkpoint``, Kafka's struct encoding;
* :mod:`.topics`: internal and remote topic names, replication policies.
"""

from multikafka.coordinator.translation.mm2.records import (
    CHECKPOINT_VERSION,
    Checkpoint,
    OffsetSync,
)
from multikafka.coordinator.translation.mm2.topics import (
    ReplicationPolicy,
    SyncsLocation,
    checkpoints_topic,
    mirror_topic_problems,
    offset_syncs_topic,
    offset_syncs_topic_of,
    remote_topic,
)

__all__ = [
    "CHECKPOINT_VERSION",
    "Checkpoint",
    "OffsetSync",
    "ReplicationPolicy",
    "SyncsLocation",
    "checkpoints_topic",
    "mirror_topic_problems",
    "offset_syncs_topic",
    "offset_syncs_topic_of",
    "remote_topic",
]
