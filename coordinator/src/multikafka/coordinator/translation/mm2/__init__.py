"""MirrorMaker 2 as a failover translation: its records read as MM2 writes
them (no wiring yet).

* :mod:`.records`: ``OffsetSync`` and ``Checkpoint``, Kafka's struct encoding.
"""

from multikafka.coordinator.translation.mm2.records import (
    CHECKPOINT_VERSION,
    Checkpoint,
    OffsetSync,
)

__all__ = ["CHECKPOINT_VERSION", "Checkpoint", "OffsetSync"]
