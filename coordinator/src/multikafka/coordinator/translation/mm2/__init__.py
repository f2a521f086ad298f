"""MirrorMaker 2 as a failover translation (the ``mm2`` strategy): its offset
translation. MM2's naming (topic names, a stream document's ``mm2`` block)
is in :mod:`multikafka.core.mm2`, its records (``OffsetSync``,
``Checkpoint``, Kafka's struct encoding) in :mod:`multikafka.core.mm2_records`,
beside it: the dev stack writes them too. Both are re-exported here.

* :mod:`.syncs`: the syncs kept per partition and the translation rule;
* :mod:`.tracker`: the leader's tail of every mirror's offset syncs;
* :mod:`.bound`: how many records a translation reads again at most.
"""

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
from multikafka.core.mm2_records import (
    CHECKPOINT_VERSION,
    Checkpoint,
    OffsetSync,
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
