"""MirrorMaker 2 as a failover translation (the ``mm2`` strategy): its
records read as MM2 writes them, and its offset translation. Topic names and
a stream document's ``mm2`` block are in :mod:`multikafka.core.mm2`.

* :mod:`.records`: ``OffsetSync`` and ``Checkpoint``, Kafka's struct encoding;
* :mod:`.syncs`: the syncs kept per partition and the translation rule;
* :mod:`.tracker`: the leader's tail of every mirror's offset syncs.
"""

from multikafka.coordinator.translation.mm2.records import (
    CHECKPOINT_VERSION,
    Checkpoint,
    OffsetSync,
)
from multikafka.coordinator.translation.mm2.syncs import MAX_SYNCS, SyncStore
from multikafka.core.mm2 import (
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
    "MAX_SYNCS",
    "Checkpoint",
    "OffsetSync",
    "ReplicationPolicy",
    "SyncStore",
    "SyncsLocation",
    "checkpoints_topic",
    "mirror_topic_problems",
    "offset_syncs_topic",
    "offset_syncs_topic_of",
    "remote_topic",
]
