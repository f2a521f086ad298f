"""Flink dynamic-source parity with a real Spark query (real etcd, tansu,
Spark): a cluster removed from a running query's stream and added back
within the retention window resumes where the query left it (nothing lost,
nothing read twice), and a batch read ends exactly at a cluster's stopping
offsets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from tests.conftest import KafkaClusters
from tests.e2e.spark_helpers import batch_source, sink_keys, source, start_to_parquet
from tests.helpers import assert_exactly_once, eventually, produce_sequence, stream_doc, uid

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_cluster_removed_and_added_back_resumes_without_loss_or_duplicates(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    a, b = kafka.shared(2)
    topic = uid("t")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 2})
        produce_sequence(c.bootstrap, topic, 2, c.name, range(300))
    name = uid("rmback")
    both = stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])})
    # Were b to start afresh when it comes back, "latest" would skip what
    # was written to it meanwhile.
    both["clusters"]["b"]["starting"] = "latest"
    both["removed_cluster_retention"] = "1h"
    only_a = json.loads(json.dumps(both))
    del only_a["clusters"]["b"]
    admin.put_stream(both)
    df = source(spark, coordinator.address, name, startingOffsets="earliest", queryId=name)
    query = start_to_parquet(df, tmp_path)
    run_id = query.runId

    def count(label: str) -> int:
        return len({k for k in sink_keys(spark, tmp_path) if k.startswith(f"{label}:")})

    eventually(lambda: count(a.name) == 300 and count(b.name) == 300, timeout_s=90)
    admin.put_stream(only_a)
    # Batches on a make the query plan (and commit) without b. Records keep
    # coming on both while b is out of the stream; b's once a batch planned
    # after the removal ran (a plan already under way when the removal
    # landed may still read what b holds then).
    produce_sequence(a.bootstrap, topic, 2, a.name, range(300, 350))
    eventually(lambda: count(a.name) == 350, timeout_s=60)
    produce_sequence(b.bootstrap, topic, 2, b.name, range(300, 500))
    produce_sequence(a.bootstrap, topic, 2, a.name, range(350, 400))
    eventually(lambda: count(a.name) == 400, timeout_s=60)
    eventually(
        lambda: (
            not any(
                s.startswith("b/") for s in {q.query_id: q for q in admin.queries()}[name].offsets
            )
        ),
        timeout_s=30,
    )
    assert count(b.name) == 300
    admin.put_stream(both)
    produce_sequence(b.bootstrap, topic, 2, b.name, range(500, 600))
    produce_sequence(a.bootstrap, topic, 2, a.name, range(400, 450))
    eventually(lambda: count(b.name) == 600 and count(a.name) == 450, timeout_s=90)
    assert_exactly_once(sink_keys(spark, tmp_path), {a.name: 450, b.name: 600})
    assert any(e.kind == "resumed" and e.cluster == "b" for e in admin.history(name))
    assert query.isActive
    assert query.runId == run_id
    assert query.exception() is None


def test_batch_read_ends_at_the_stopping_offsets(
    spark: SparkSession,
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
) -> None:
    a, b = kafka.shared(2)
    topic = uid("t")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 2})
        produce_sequence(c.bootstrap, topic, 2, c.name, range(200))  # 100 + a fence each
    name = uid("bounded")
    doc = stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])})
    doc["clusters"]["a"]["stopping"] = {"offsets": {f"{topic}/0": 40, f"{topic}/1": 75}}
    admin.put_stream(doc)
    produce_sequence(a.bootstrap, topic, 2, a.name, range(200, 260))  # past the stops

    rows = (
        batch_source(spark, coordinator.address, name)
        .select("cluster", "partition", "offset")
        .collect()
    )
    offsets: dict[tuple[str, int], list[int]] = {}
    for r in rows:
        offsets.setdefault((r["cluster"], r["partition"]), []).append(r["offset"])
    assert sorted(offsets[("a", 0)]) == list(range(40))
    assert sorted(offsets[("a", 1)]) == list(range(75))
    # b has no stop: everything.
    assert sorted(offsets[("b", 0)]) == list(range(101))
    assert sorted(offsets[("b", 1)]) == list(range(101))
