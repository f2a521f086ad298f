"""Flink dynamic-source parity through the real coordinator (real etcd, tansu):
per-cluster stopping offsets (exact, and by time) cap every plan, and a
cluster removed from a stream and added back within the stream's
``removed_cluster_retention`` resumes each query where it left the cluster,
a coordinator restart included; after the window it starts afresh."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from typing import Any

import pytest

from multikafka.core.admin_client import AdminClient
from multikafka.core.planner_client import PlannerClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.v1 import planner_pb2
from tests.conftest import Cluster, KafkaClusters
from tests.helpers import eventually, produce_sequence, run_admin_cli, stream_doc, uid

pytestmark = pytest.mark.integration
Position = planner_pb2.Position
EARLIEST = Position(kind=Position.EARLIEST)
LATEST = Position(kind=Position.LATEST)


@pytest.fixture
def planner(coordinator: CoordinatorThread) -> Iterator[PlannerClient]:
    client = PlannerClient(coordinator.address, timeout_s=10)
    yield client
    client.close()


def latest(planner: PlannerClient, stream: str, query: str, start: Any) -> dict[str, int]:
    return dict(
        planner.latest(stream, query, start, max_records=0, cap=None, fail_on_data_loss=True)
    )


# -- stopping offsets -----------------------------------------------------------


def test_stopping_offsets_cap_every_plan(
    admin: AdminClient, coordinator: CoordinatorThread, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    a, b = kafka.shared(2)
    topic = uid("stop")
    create_topics(a.bootstrap, {topic: 2})
    create_topics(b.bootstrap, {topic: 1})
    produce_sequence(a.bootstrap, topic, 2, "a", range(20))  # 10 + a fence per partition
    produce_sequence(b.bootstrap, topic, 1, "b", range(5))
    name = uid("s")
    doc = stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])})
    doc["clusters"]["a"]["stopping"] = {"offsets": {f"{topic}/0": 4}}  # partition 1 unbounded
    admin.put_stream(doc)

    # A batch read's end (endingOffsets=latest) and a query's "latest".
    end, _ = planner.resolve(name, LATEST)
    assert end == {f"a/{topic}/0": 4, f"a/{topic}/1": 11, f"b/{topic}/0": 6}
    start, _ = planner.resolve(name, EARLIEST)
    first = latest(planner, name, "q", start)
    assert first == end
    # The stopped split gets no more data; the others do (once the
    # coordinator's shared watermarks are renewed: at most 0.1 s later).
    produce_sequence(a.bootstrap, topic, 2, "a", range(20, 24))
    moved = {f"a/{topic}/0": 4, f"a/{topic}/1": 14, f"b/{topic}/0": 6}
    eventually(lambda: latest(planner, name, "q", first) == moved, timeout_s=10)
    # Tasks never reach past the stop.
    plan = planner.plan(name, "q", start, first, min_partitions=1, max_records_per_partition=1000)
    ranges = {(r.cluster, r.partition): (r.start, r.until) for t in plan.tasks for r in t}
    assert ranges[("a", 0)] == (0, 4)

    # Shown by `admin streams get`, in text and JSON, and kept on a round trip.
    info = admin.get_stream(name)
    stored = json.loads(info.document_json)
    assert stored["clusters"]["a"]["stopping"] == {"offsets": {f"{topic}/0": 4}}
    result = run_admin_cli(
        ["--coordinator", coordinator.address, "streams", "get", name], env={"COLUMNS": "250"}
    )
    assert result.exit_code == 0, result.output
    assert f"stops at {topic}/0@4" in result.stdout
    assert "removed clusters remembered 7d" in result.stdout
    as_json = run_admin_cli(
        ["--coordinator", coordinator.address, "streams", "get", name, "--json"]
    )
    assert as_json.exit_code == 0, as_json.output
    shown = json.loads(as_json.stdout)["document"]
    assert shown["clusters"]["a"]["stopping"] == {"offsets": {f"{topic}/0": 4}}
    admin.put_stream(shown)
    assert json.loads(admin.get_stream(name).document_json) == stored


def test_stop_by_time_ends_before_the_first_record_at_or_after_it(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    (a,) = kafka.shared(1)
    topic = uid("stopts")
    create_topics(a.bootstrap, {topic: 1})
    produce_sequence(a.bootstrap, topic, 1, "a", range(10))  # offsets 0-10 (with the fence)
    # tansu stamps records with their append time: records appended after
    # this moment are at or after it.
    cut = int(time.time() * 1000) + 1
    eventually(lambda: time.time() * 1000 > cut + 1)
    name = uid("s")
    doc = stream_doc(name, {"a": (a.bootstrap, [topic])})
    doc["clusters"]["a"]["stopping"] = {"timestamp": cut}
    admin.put_stream(doc)
    # No record at or after the time yet: nothing to stop at, read on.
    assert planner.resolve(name, LATEST)[0] == {f"a/{topic}/0": 11}
    produce_sequence(a.bootstrap, topic, 1, "a", range(10, 20))  # offsets 11-21
    assert planner.resolve(name, LATEST)[0] == {f"a/{topic}/0": 11}
    start, _ = planner.resolve(name, EARLIEST)
    assert latest(planner, name, "q", start) == {f"a/{topic}/0": 11}
    # A stop in the future stops nothing yet.
    doc["clusters"]["a"]["stopping"] = {"timestamp": int(time.time() * 1000) + 3_600_000}
    admin.put_stream(doc)
    assert planner.resolve(name, LATEST)[0] == {f"a/{topic}/0": 22}


def test_invalid_stopping_is_refused_with_what_to_fix(
    admin: AdminClient, kafka: KafkaClusters
) -> None:
    from multikafka import ValidationError

    (a,) = kafka.shared(1)
    name = uid("s")
    doc = stream_doc(name, {"a": (a.bootstrap, ["orders"])})
    doc["clusters"]["a"]["stopping"] = {"offsets": {"payments/0": 5}}
    with pytest.raises(ValidationError, match=r"clusters\.a\.stopping\.offsets\.payments/0: topic"):
        admin.put_stream(doc)
    doc["clusters"]["a"]["stopping"] = {"offsets": {"orders/0": -5}}
    with pytest.raises(ValidationError, match="whole number >= 0"):
        admin.put_stream(doc)


# -- removed clusters -----------------------------------------------------------


def _two_clusters(
    admin: AdminClient, kafka: KafkaClusters, **extra: Any
) -> tuple[str, str, Cluster, Cluster, dict[str, Any]]:
    """Stream ``a`` + ``b`` (1 partition each, 11 records with the fence), b
    starting at latest, so an entry at b's starting position shows."""
    a, b = kafka.shared(2)
    topic = uid("rm")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 1})
        produce_sequence(c.bootstrap, topic, 1, c.name, range(10))
    name = uid("s")
    doc = stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])}, **extra)
    doc["clusters"]["b"]["starting"] = "latest"
    admin.put_stream(doc)
    return name, topic, a, b, doc


def _without_b(doc: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(json.dumps(doc))
    del out["clusters"]["b"]
    return out


def _read_then_remove_b(
    admin: AdminClient,
    planner: PlannerClient,
    name: str,
    topic: str,
    b: Cluster,
    doc: dict[str, Any],
) -> dict[str, int]:
    """The query reads everything (b to 11) and commits; b gets 11 more
    records; b is removed and the query plans and commits a batch without
    it. Returns that batch's end."""
    start, _ = planner.resolve(name, EARLIEST)
    end = latest(planner, name, "q", start)
    assert end == {f"a/{topic}/0": 11, f"b/{topic}/0": 11}
    planner.commit(name, "q", end, "")
    produce_sequence(b.bootstrap, topic, 1, b.name, range(10, 20))  # b to 22
    admin.put_stream(_without_b(doc))
    without = latest(planner, name, "q", end)
    assert without == {f"a/{topic}/0": 11}
    planner.commit(name, "q", without, "")
    return without


def test_cluster_added_back_within_the_window_resumes_where_the_query_left_it(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    name, topic, _, b, doc = _two_clusters(admin, kafka)
    without = _read_then_remove_b(admin, planner, name, topic, b, doc)
    # Back, reached another way (same cluster id): still the query's own
    # position, not b's starting position (latest: 22).
    port = b.bootstrap.rsplit(":", 1)[1]
    doc["clusters"]["b"]["bootstrap_servers"] = f"localhost:{port}"
    admin.put_stream(doc)
    back = eventually(lambda: latest(planner, name, "q", without), timeout_s=20)
    assert back == {f"a/{topic}/0": 11, f"b/{topic}/0": 11}
    resumed = [e for e in admin.history(name) if e.kind == "resumed"]
    assert len(resumed) == 1
    assert f"b/{topic}/0@11" in resumed[0].detail
    planner.commit(name, "q", back, "")
    assert latest(planner, name, "q", back) == {f"a/{topic}/0": 11, f"b/{topic}/0": 22}
    # Another query, which never read b: b is new to it (its starting position).
    fresh = latest(planner, name, "other", {f"a/{topic}/0": 11})
    assert fresh == {f"a/{topic}/0": 11, f"b/{topic}/0": 22}


def test_cluster_added_back_after_the_window_starts_at_its_starting_position(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    name, topic, _, b, doc = _two_clusters(admin, kafka, removed_cluster_retention_ms=300)
    without = _read_then_remove_b(admin, planner, name, topic, b, doc)
    removed_at = time.monotonic()
    eventually(lambda: time.monotonic() - removed_at > 0.4, timeout_s=5)
    admin.put_stream(doc)
    back = eventually(lambda: latest(planner, name, "q", without), timeout_s=20)
    assert back == {f"a/{topic}/0": 11, f"b/{topic}/0": 22}  # b's starting position: latest
    assert not [e for e in admin.history(name) if e.kind == "resumed"]


def test_window_zero_forgets_at_once(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    name, topic, _, b, doc = _two_clusters(admin, kafka, removed_cluster_retention="0s")
    without = _read_then_remove_b(admin, planner, name, topic, b, doc)
    admin.put_stream(doc)
    back = eventually(lambda: latest(planner, name, "q", without), timeout_s=20)
    assert back[f"b/{topic}/0"] == 22


def test_remembered_positions_survive_a_coordinator_restart(
    make_coordinator: Callable[..., CoordinatorThread], kafka: KafkaClusters
) -> None:
    prefix = f"/multikafka-test/{uid('restart')}"
    first = make_coordinator(etcd_prefix=prefix)
    with AdminClient(first.address) as admin, closing(PlannerClient(first.address)) as planner:
        name, topic, _, b, doc = _two_clusters(admin, kafka)
        without = _read_then_remove_b(admin, planner, name, topic, b, doc)
    first.stop()
    second = make_coordinator(etcd_prefix=prefix)
    with AdminClient(second.address) as admin, closing(PlannerClient(second.address)) as planner:
        admin.put_stream(doc)
        back = eventually(lambda: latest(planner, name, "q", without), timeout_s=30)
        assert back == {f"a/{topic}/0": 11, f"b/{topic}/0": 11}


# -- per-cluster starting position ---------------------------------------------------


def test_a_cluster_added_to_a_running_query_starts_at_its_starting_time(
    admin: AdminClient, kafka: KafkaClusters, planner: PlannerClient
) -> None:
    """``"starting": {"timestamp": t}``: a cluster that joins a stream while
    a query reads it enters that query at its first record at or after t
    (Flink's per-cluster starting offsets); the query's other clusters go on
    where they were."""
    a, b = kafka.shared(2)
    topic = uid("st")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 1})
    produce_sequence(a.bootstrap, topic, 1, "a", range(10))  # a to 11
    produce_sequence(b.bootstrap, topic, 1, "b", range(10))  # b's offsets 0-10: before t
    t = int(time.time() * 1000) + 1
    eventually(lambda: time.time() * 1000 > t + 1, timeout_s=5)
    produce_sequence(b.bootstrap, topic, 1, "b", range(10, 20))  # from offset 11: after t
    name = uid("s")
    doc = stream_doc(name, {"a": (a.bootstrap, [topic])})
    admin.put_stream(doc)
    start, _ = planner.resolve(name, EARLIEST)
    first = latest(planner, name, "q", start)
    assert first == {f"a/{topic}/0": 11}

    both = stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])})
    both["clusters"]["b"]["starting"] = {"timestamp": t}
    admin.put_stream(both)

    def with_b() -> dict[str, int] | None:
        end = latest(planner, name, "q", first)
        return end if f"b/{topic}/0" in end else None

    entered = eventually(with_b, timeout_s=20)
    assert entered == {f"a/{topic}/0": 11, f"b/{topic}/0": 11}
    assert latest(planner, name, "q", entered) == {f"a/{topic}/0": 11, f"b/{topic}/0": 22}
    shown = run_admin_cli(["--coordinator", planner.address, "streams", "get", name, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout)["document"]["clusters"]["b"]["starting"] == {"timestamp": t}
