"""The ``mm2`` failover strategy against real brokers: MirrorMaker 2's offset
syncs written byte for byte as MM2 writes them into its offset-syncs topic on
the source, read by the leader while the source lives, and used after it
dies to start the mirror's splits exactly where MM2's rule says.

No Kafka Connect runs here: the mirror's records are copied by the test the
way MM2 copies them (in order, with the mirror's offsets shifted: the remote
topic already held older records), and the syncs are what MM2's
``OffsetSyncWriter`` would have written for those copies.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from multikafka.core.admin_client import AdminClient
from multikafka.core.mm2_records import Checkpoint, OffsetSync
from multikafka.core.planner_client import PlannerClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.devstack.mirror import OffsetSyncsTopic
from tests.conftest import KafkaClusters
from tests.helpers import eventually, produce_sequence, report_reads, stream_doc, uid

pytestmark = pytest.mark.integration


@pytest.fixture
def planner(coordinator: CoordinatorThread) -> Iterator[PlannerClient]:
    client = PlannerClient(coordinator.address, timeout_s=5)
    yield client
    client.close()


def test_failover_translates_with_the_syncs_read_while_the_source_lived(
    admin: AdminClient,
    kafka: KafkaClusters,
    planner: PlannerClient,
    coordinator: CoordinatorThread,
) -> None:
    (mirror,) = kafka.shared(1)
    source = kafka.private("mm2-source")
    topic = uid("mm2")
    remote = f"a.{topic}"  # MM2's default policy, source alias "a"
    syncs_topic = "mm2-offset-syncs.b.internal"  # on the source, named for the target alias
    create_topics(source.bootstrap, {topic: 2})
    create_topics(mirror.bootstrap, {remote: 2})
    # The source: 20 records and a fence per partition (offsets 0-20).
    produce_sequence(source.bootstrap, topic, 2, "r", range(40))
    # The mirror held older records: 5 and a fence on partition 0, a fence on
    # partition 1. Then MM2 copied the source in order: downstream = upstream
    # + 6 on partition 0 and + 1 on partition 1.
    produce_sequence(mirror.bootstrap, remote, 2, "old", range(0, 10, 2))
    produce_sequence(mirror.bootstrap, remote, 2, "r", range(40))
    OffsetSyncsTopic(source.bootstrap, syncs_topic).write(
        [
            OffsetSync(topic, 0, 0, 6),
            OffsetSync(topic, 1, 0, 1),
            OffsetSync(topic, 0, 10, 16),
            OffsetSync(topic, 1, 4, 5),
        ],
    )
    name = uid("s")
    doc = stream_doc(name, {"a": (source.bootstrap, [topic]), "b": (mirror.bootstrap, [remote])})
    doc["clusters"]["b"]["state"] = "STANDBY"
    doc["clusters"]["b"]["mm2"] = {"source": "a"}
    admin.put_stream(doc)

    coord = coordinator.coordinator
    assert coord is not None

    def lag(partition: int) -> float | None:
        return coord.metrics.registry.get_sample_value(
            "multikafka_mm2_upstream_lag_records",
            {"stream": name, "cluster": "b", "topic": topic, "partition": str(partition)},
        )

    # The leader read the syncs: 21 records on each partition, the newest
    # syncs of records 10 and 4, so 10 and 16 records follow them.
    eventually(lambda: (lag(0), lag(1)) == (10, 16), timeout_s=30)
    # A query read partition 0 up to 10 (record 10 unread) and partition 1
    # up to 7 (records 4-6 read); the source dies.
    start = {f"a/{topic}/0": 10, f"a/{topic}/1": 7}
    planner.commit(name, "q", start, "")
    report_reads(coordinator.address, name, "q", start)
    source.require_process().process.kill()
    admin.failover(name, "a", "b", strategy="mm2", margin_ms=1000, reason="test")
    end = planner.latest(name, "q", start, max_records=0, cap=None, fail_on_data_loss=True)
    # Partition 0: record 10's copy is 16, and it is read (17 would lose it).
    # Partition 1: record 4 (copy 5) was read, so on from 6; records 5 and 6
    # are read again (their copies may lie anywhere after 5).
    assert end[f"b/{remote}/0"] == 16
    assert end[f"b/{remote}/1"] == 6
    history = admin.history(name)
    failover = next(e for e in history if e.kind == "failover")
    assert "strategy mm2" in failover.detail
    assert "MM2 offset syncs known for 2 of 2 partitions" in failover.detail
    translated = next(e for e in history if e.kind == "translated")
    assert "by the sync 10 -> 16" in translated.detail


def test_a_query_s_commit_group_translates_by_mm2_s_checkpoint_without_syncs(
    admin: AdminClient,
    kafka: KafkaClusters,
    planner: PlannerClient,
    coordinator: CoordinatorThread,
) -> None:
    """No offset sync is known (the coordinator never saw any), but the query
    commits its positions to a consumer group, and MM2's checkpoint connector
    translated that group's offsets into ``<source_alias>.checkpoints.internal``
    on the mirror: the mirror's splits start there."""
    source, mirror = kafka.shared(2)
    topic = uid("mm2cp")
    remote = f"a.{topic}"
    create_topics(source.bootstrap, {topic: 1})
    create_topics(mirror.bootstrap, {remote: 1, "a.checkpoints.internal": 1})
    produce_sequence(source.bootstrap, topic, 1, "r", range(20))
    produce_sequence(mirror.bootstrap, remote, 1, "old", range(4))  # shift: 5
    produce_sequence(mirror.bootstrap, remote, 1, "r", range(20))
    name = uid("s")
    doc = stream_doc(name, {"a": (source.bootstrap, [topic]), "b": (mirror.bootstrap, [remote])})
    doc["clusters"]["b"]["state"] = "STANDBY"
    doc["clusters"]["b"]["mm2"] = {"source": "a"}
    admin.put_stream(doc)
    group = uid("g")
    start = {f"a/{topic}/0": 12}
    planner.commit(name, "q", start, group)  # commits 12 to the group on the source, too
    report_reads(coordinator.address, name, "q", start)
    # MM2's checkpoint of the group: it saw the group at 9 (it lags), 9 -> 14.
    producer = Producer({"bootstrap.servers": mirror.bootstrap, "batch.num.messages": 1})
    key, value = Checkpoint(group, remote, 0, 9, 14, "").encode()
    producer.produce("a.checkpoints.internal", key=key, value=value, partition=0)
    assert producer.flush(30) == 0
    coord = coordinator.coordinator
    assert coord is not None

    def checkpoint_read() -> bool:
        duties = coord.duties
        return (
            duties is not None and duties.syncs.checkpoint(name, "b", group, remote, 0) is not None
        )

    eventually(checkpoint_read, timeout_s=30)
    admin.failover(name, "a", "b", strategy="mm2", margin_ms=1000, reason="test")
    end = planner.latest(name, "q", start, max_records=0, cap=None, fail_on_data_loss=True)
    assert end[f"b/{remote}/0"] == 14
    translated = next(e for e in admin.history(name) if e.kind == "translated")
    assert f"by group {group}'s checkpoint 9 -> 14" in translated.detail
