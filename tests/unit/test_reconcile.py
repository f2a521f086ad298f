"""Reconciliation over the fakes (:mod:`multikafka.coordinator.agents.reconcile`): the events a
metadata change pushes to subscribed agents (generation, per-cluster desired
state, removals; before partition discovery), snapshots, per-stream and
per-cluster metrics, what a deleted stream leaves behind (nothing), reconcile
latency and fan-out time across agents (acknowledgement and expiry), invalid
documents written to etcd directly, drain offsets captured for a cluster set
DRAINING in the document, and :func:`describe`'s history texts."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from multikafka.coordinator.agents import reconcile
from multikafka.coordinator.agents.reconcile import describe, desired_of
from multikafka.coordinator.agents.registry import Mailbox
from multikafka.coordinator.state.metadata import MetadataChange
from multikafka.coordinator.state.stream_status import FailoverRecord, StreamStatus, StreamView
from multikafka.coordinator.translation.marks import Mark
from multikafka.core.model import FailoverStrategy
from multikafka.core.validation import parse_stream
from multikafka.devstack.stack import stream_doc
from multikafka.v1 import reader_pb2
from tests.fakes import FakeMetadataClient, Parts

INTERNALS = (
    "multikafka.coordinator.agents.reconcile",
    "multikafka.coordinator.agents.registry",
    "multikafka.coordinator.state.metadata",
    "multikafka.coordinator.state.stream_status",
    "multikafka.coordinator.translation.marks",
)


REMOVED = "REMOVED"
LATENCY_COUNT = "multikafka_reconcile_latency_seconds_count"


def two_clusters(states: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """Stream ``s``: ``a`` (h:1) ACTIVE and ``b`` (h:2) STANDBY unless ``states`` says otherwise."""
    return stream_doc(
        "s",
        {"a": ("h:1", ["t"]), "b": ("h:2", ["t"])},
        states={"b": "STANDBY", **(states or {})},
        **extra,
    )


def fingerprint(doc: dict[str, Any], cluster: str) -> str:
    return parse_stream(doc).clusters[cluster].connection(cluster).fingerprint


def desired(stream: str, cluster: str, fp: str, state: str) -> reader_pb2.ClusterDesired:
    return reader_pb2.ClusterDesired(stream=stream, cluster=cluster, fingerprint=fp, state=state)


def pending(mailbox: Mailbox) -> list[reader_pb2.ReconcileEvent]:
    """What an agent's subscription has yet to send (events it did not send
    yet are merged into one), as the agent will decode it."""
    item = mailbox.take()
    return [] if item is None else [reader_pb2.ReconcileEvent.FromString(item.payload)]


async def subscribed(parts: Parts, agent_id: str) -> Mailbox:
    await parts.registry.register(agent_id, "host", 1)
    return parts.registry.subscribe(agent_id)


# -- events --------------------------------------------------------------------


async def test_a_new_stream_sends_one_event_with_every_cluster_at_its_revision(
    parts: Parts,
) -> None:
    queue = await subscribed(parts, "agent")
    doc = two_clusters()
    rev = await parts.put(doc)

    [event] = pending(queue)
    assert event.generation == rev
    assert not event.snapshot
    assert list(event.clusters) == [
        desired("s", "a", fingerprint(doc, "a"), "ACTIVE"),
        desired("s", "b", fingerprint(doc, "b"), "STANDBY"),
    ]
    assert fingerprint(doc, "a") != fingerprint(doc, "b")
    assert parts.reconciler.generation == rev
    assert parts.sample("multikafka_metadata_generation", stream="s") == rev
    assert parts.sample("multikafka_reconcile_events_total", stream="s") == 2
    [entry] = parts.history.entries("s")
    assert (entry.kind, entry.generation) == ("reconcile", rev)
    assert entry.detail == "a: added (ACTIVE, topics t), b: added (STANDBY, topics t)"


async def test_a_snapshot_carries_every_cluster_of_every_stream(parts: Parts) -> None:
    doc_s = two_clusters()
    doc_u = stream_doc("u", {"x": ("h:3", ["v"])})
    await parts.put(doc_s)
    rev = await parts.put(doc_u)

    snap = parts.reconciler.snapshot()
    assert snap.snapshot
    assert snap.generation == rev
    assert sorted((d.stream, d.cluster) for d in snap.clusters) == [
        ("s", "a"),
        ("s", "b"),
        ("u", "x"),
    ]
    by_key = {(d.stream, d.cluster): d for d in snap.clusters}
    assert by_key["s", "b"] == desired("s", "b", fingerprint(doc_s, "b"), "STANDBY")
    assert by_key["u", "x"] == desired("u", "x", fingerprint(doc_u, "x"), "ACTIVE")
    assert dict(desired_of(parts.store.get("s"))) == {
        "a": by_key["s", "a"],
        "b": by_key["s", "b"],
    }


async def test_the_serialized_snapshot_follows_every_change(parts: Parts) -> None:
    await parts.put(two_clusters())
    first = parts.reconciler.snapshot_payload()
    assert parts.reconciler.snapshot_payload() is first  # built once per generation
    rev = await parts.put(stream_doc("u", {"x": ("h:3", ["v"])}))
    snap = reader_pb2.ReconcileEvent.FromString(parts.reconciler.snapshot_payload())
    assert snap.generation == rev
    assert snap.snapshot
    assert sorted((d.stream, d.cluster) for d in snap.clusters) == [
        ("s", "a"),
        ("s", "b"),
        ("u", "x"),
    ]


async def test_a_connection_or_state_change_sends_only_that_cluster(parts: Parts) -> None:
    doc = two_clusters()
    await parts.put(doc)
    queue = await subscribed(parts, "agent")

    doc["clusters"]["b"]["bootstrap_servers"] = "h:9"
    rev = await parts.put(doc)
    [event] = pending(queue)
    assert event.generation == rev
    assert list(event.clusters) == [desired("s", "b", fingerprint(doc, "b"), "STANDBY")]
    assert parts.history.entries("s")[-1].detail == "b: connection changed"

    old_a = fingerprint(doc, "a")
    doc["clusters"]["a"]["properties"]["socket.timeout.ms"] = "5000"
    rev = await parts.put(doc)
    [event] = pending(queue)
    assert event.generation == rev
    assert list(event.clusters) == [desired("s", "a", fingerprint(doc, "a"), "ACTIVE")]
    assert event.clusters[0].fingerprint != old_a

    doc["clusters"]["b"]["state"] = "ACTIVE"
    rev = await parts.put(doc)
    [event] = pending(queue)
    assert event.generation == rev
    assert list(event.clusters) == [desired("s", "b", fingerprint(doc, "b"), "ACTIVE")]
    assert parts.history.entries("s")[-1].detail == "b: STANDBY -> ACTIVE"


async def test_a_topics_only_change_sends_an_event_without_clusters(parts: Parts) -> None:
    doc = two_clusters()
    await parts.put(doc)
    queue = await subscribed(parts, "agent")

    doc["clusters"]["a"]["topics"] = ["t", "u"]
    rev = await parts.put(doc)

    [event] = pending(queue)
    assert event.generation == rev
    assert list(event.clusters) == []
    assert parts.reconciler.generation == rev
    assert parts.sample("multikafka_metadata_generation", stream="s") == rev
    assert parts.history.entries("s")[-1].detail == "a: topics +u"


async def test_a_removed_cluster_is_sent_as_removed_and_its_metrics_go(parts: Parts) -> None:
    parts.kafka.cluster("h:1").counts = {"t": 2}
    parts.kafka.cluster("h:2").counts = {"t": 3}
    doc = two_clusters()
    await parts.put(doc)
    assert parts.sample("multikafka_cluster_partitions", stream="s", cluster="a") == 2
    assert parts.sample("multikafka_cluster_partitions", stream="s", cluster="b") == 3
    queue = await subscribed(parts, "agent")

    del doc["clusters"]["b"]
    rev = await parts.put(doc)

    [event] = pending(queue)
    assert event.generation == rev
    assert list(event.clusters) == [desired("s", "b", "", REMOVED)]
    assert parts.sample("multikafka_cluster_partitions", stream="s", cluster="b") is None
    assert parts.sample("multikafka_cluster_partitions", stream="s", cluster="a") == 2
    assert [(d.stream, d.cluster) for d in parts.reconciler.snapshot().clusters] == [("s", "a")]
    assert parts.history.entries("s")[-1].detail == "b: removed"


async def test_each_clusters_state_is_a_state_set_that_follows_the_document(
    parts: Parts,
) -> None:
    def states(cluster: str) -> dict[str, float | None]:
        return {
            state: parts.sample(
                "multikafka_cluster_state", stream="s", cluster=cluster, state=state
            )
            for state in ("ACTIVE", "STANDBY", "DRAINING", "FAILED")
        }

    def only(state: str) -> dict[str, float]:
        return {s: 1 if s == state else 0 for s in ("ACTIVE", "STANDBY", "DRAINING", "FAILED")}

    doc = two_clusters()
    await parts.put(doc)
    assert (states("a"), states("b")) == (only("ACTIVE"), only("STANDBY"))

    doc["clusters"]["a"]["state"] = "FAILED"
    doc["clusters"]["b"]["state"] = "ACTIVE"
    await parts.put(doc)
    assert (states("a"), states("b")) == (only("FAILED"), only("ACTIVE"))

    del doc["clusters"]["a"]
    await parts.put(doc)
    assert set(states("a").values()) == {None}
    assert states("b") == only("ACTIVE")

    assert await parts.store.delete_stream("s")
    await parts.store.wait_applied(parts.etcd.revision)
    assert set(states("b").values()) == {None}


async def test_deleting_a_stream_removes_every_cluster_and_its_generation_gauge(
    parts: Parts,
) -> None:
    rev = await parts.put(two_clusters())
    await parts.put(stream_doc("u", {"x": ("h:3", ["v"])}))
    assert parts.sample("multikafka_metadata_generation", stream="s") == rev
    queue = await subscribed(parts, "agent")

    assert await parts.store.delete_stream("s")
    deleted = parts.etcd.revision
    await parts.store.wait_applied(deleted)

    [event] = pending(queue)
    assert event.generation == deleted
    assert list(event.clusters) == [desired("s", "a", "", REMOVED), desired("s", "b", "", REMOVED)]
    assert parts.sample("multikafka_metadata_generation", stream="s") is None
    assert parts.sample("multikafka_cluster_partitions", stream="s", cluster="a") is None
    assert [(d.stream, d.cluster) for d in parts.reconciler.snapshot().clusters] == [("u", "x")]


async def test_a_deleted_stream_leaves_no_state_behind(parts: Parts) -> None:
    """Its event counter, history (in memory and in etcd), read marks, and
    what agents were known to hold and to have counted of it all go; the
    other stream's stay. Deleted here as an operator would, in etcd."""
    parts.kafka.cluster("h:1").counts = {"t": 1}
    await parts.put(two_clusters())
    await parts.put(stream_doc("u", {"x": ("h:3", ["v"])}))
    await subscribed(parts, "agent")
    parts.registry.hold("agent", "s", {"a/t/0"})
    parts.registry.hold("agent", "u", {"x/v/0"})
    agent = parts.registry.get("agent")
    assert agent is not None
    agent.counted = {"s/a": (3, 0), "u/x": (4, 0)}
    parts.marks.add("s", "a/t/0", 3, 1000)
    parts.marks.add("u", "x/v/0", 4, 1000)
    await parts.history.flush()
    assert parts.sample("multikafka_reconcile_events_total", stream="s") == 2

    rev = await parts.etcd.delete("/t/streams/s")
    assert rev
    await parts.store.wait_applied(parts.etcd.revision)
    await parts.history.flush()
    await parts.marks.flush()

    assert parts.sample("multikafka_reconcile_events_total", stream="s") is None
    assert parts.sample("multikafka_reconcile_events_total", stream="u") == 1
    assert parts.history.entries("s") == []
    assert parts.history.entries("u") != []
    kvs, _ = await parts.etcd.get_prefix("/t/history/")
    assert [kv.key for kv in kvs] == ["/t/history/u"]
    assert parts.marks.at_or_before("s", "a/t/0", 10) is None
    assert parts.marks.at_or_before("u", "x/v/0", 10) == Mark(4, 1000)
    assert set(agent.holdings) == {"u"}
    assert agent.held("u") == ["x/v/0"]
    assert agent.counted == {"u/x": (4, 0)}


async def test_agents_get_the_event_without_waiting_for_partition_discovery(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Agents need nothing discovery finds: the event is on its way while
    the cluster's partition counts are still being asked for."""
    await parts.put(two_clusters())
    mailbox = await subscribed(parts, "agent")
    release = threading.Event()
    asked = threading.Event()
    counts = FakeMetadataClient.partition_counts

    def slow_counts(
        self: FakeMetadataClient, topics: Sequence[str], timeout_s: float
    ) -> dict[str, int]:
        asked.set()
        release.wait(10)
        return counts(self, topics, timeout_s)

    monkeypatch.setattr(FakeMetadataClient, "partition_counts", slow_counts)
    doc = two_clusters()
    doc["clusters"]["a"]["bootstrap_servers"] = "h:7"
    write = asyncio.ensure_future(parts.put(doc))
    try:
        for _ in range(500):
            if asked.is_set():
                break
            await asyncio.sleep(0.01)
        assert asked.is_set()
        [event] = pending(mailbox)
        assert list(event.clusters) == [desired("s", "a", fingerprint(doc, "a"), "ACTIVE")]
    finally:
        release.set()
        rev = await write
    assert event.generation == rev


# -- latency ---------------------------------------------------------------------


async def test_latency_is_recorded_once_every_subscribed_agent_applied_the_generation(
    parts: Parts,
) -> None:
    await subscribed(parts, "one")
    await subscribed(parts, "two")
    assert parts.sample(LATENCY_COUNT) == 0

    rev = await parts.put(two_clusters())
    parts.registry.heartbeat("one", rev, [])
    assert parts.sample(LATENCY_COUNT) == 0  # "two" has not applied it yet
    assert list(parts.reconciler.latencies) == []
    parts.registry.heartbeat("two", rev - 1, [])
    assert parts.sample(LATENCY_COUNT) == 0  # an older generation does not count

    parts.registry.heartbeat("two", rev + 1, [])  # applied a later one: this one too
    assert parts.sample(LATENCY_COUNT) == 1
    assert len(parts.reconciler.latencies) == 1

    parts.registry.heartbeat("one", rev + 1, [])
    assert parts.sample(LATENCY_COUNT) == 1  # settled once


async def test_an_agent_that_never_applies_does_not_make_the_reconciler_grow(
    parts: Parts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reconcile, "MAX_PENDING", 3)
    await subscribed(parts, "stuck")
    doc = two_clusters()
    revs = []
    for i in range(6):
        doc["clusters"]["a"]["topics"] = [f"t{i}"]
        revs.append(await parts.put(doc))
    assert sorted(parts.reconciler._pending) == revs[-3:]


async def test_fan_out_time_is_recorded_once_every_subscription_sent_the_event(
    parts: Parts,
) -> None:
    one = await subscribed(parts, "one")
    two = await subscribed(parts, "two")
    await parts.put(two_clusters())
    first, second = one.take(), two.take()
    assert first is not None
    assert second is not None
    parts.reconciler.sent(first)
    assert list(parts.reconciler.fanouts) == []
    parts.reconciler.sent(second)
    assert len(parts.reconciler.fanouts) == 1


async def test_an_agent_that_expires_settles_what_it_owed(parts: Parts) -> None:
    await subscribed(parts, "alive")
    await subscribed(parts, "gone")

    rev = await parts.put(two_clusters())
    parts.registry.heartbeat("alive", rev, [])
    assert parts.sample(LATENCY_COUNT) == 0

    agent = parts.registry.get("gone")
    assert agent is not None
    agent.last_heartbeat = time.monotonic() - 10 * 60  # missed every heartbeat for its TTL
    await parts.registry._keepalive()  # the registry's periodic expiry check

    assert parts.registry.get("gone") is None
    assert parts.sample(LATENCY_COUNT) == 1
    assert len(parts.reconciler.latencies) == 1
    assert parts.reconciler._pending == {}  # nothing waits for it any more
    kvs, _ = await parts.etcd.get_prefix("/t/readers/")
    assert [kv.key for kv in kvs] == ["/t/readers/alive"]


# -- documents written to etcd directly -----------------------------------------------


async def test_an_invalid_document_in_etcd_is_counted_and_recorded_and_the_last_good_stays(
    parts: Parts,
) -> None:
    doc = two_clusters()
    good = await parts.put(doc)
    queue = await subscribed(parts, "agent")

    bad = json.loads(json.dumps(doc))
    del bad["clusters"]["b"]["bootstrap_servers"]
    rev = await parts.etcd.put("/t/streams/s", json.dumps(bad).encode())
    await parts.store.wait_applied(rev)

    assert parts.sample("multikafka_metadata_rejected_total", stream="s") == 1
    entry = parts.history.entries("s")[-1]
    assert (entry.kind, entry.generation) == ("rejected", rev)
    assert entry.detail == (
        f"invalid document at revision {rev} ignored: clusters.b.bootstrap_servers: required"
    )
    view = parts.store.get("s")
    assert view.spec == parse_stream(doc)
    assert view.spec_revision == good
    assert pending(queue) == []  # nothing changed for agents
    assert parts.reconciler.generation == good


async def test_a_cluster_set_draining_in_the_document_gets_its_drain_offsets_captured(
    parts: Parts,
) -> None:
    """The watch only wakes the lifecycle (it never writes from inside the
    watch); the lifecycle's check captures the offsets."""
    cluster = parts.kafka.cluster("h:1")
    cluster.add_records("t", 0, [1000] * 5)
    cluster.add_records("t", 1, [1000] * 9)
    await parts.put(two_clusters())
    assert parts.store.get("s").status.drains == {}
    assert not parts.lifecycle.woken

    await parts.put(two_clusters(states={"a": "DRAINING"}))
    assert parts.lifecycle.woken
    assert parts.store.get("s").status.drains == {}  # nothing written from the watch

    await parts.settle()
    view = parts.store.get("s")
    assert view.status.drains == {"a": {"a/t/0": 5, "a/t/1": 9}}
    assert view.spec.clusters["a"].state.value == "DRAINING"
    assert [e.kind for e in parts.history.entries("s")].count("drain") == 1
    assert parts.sample("multikafka_drains_total", stream="s", cluster="a") == 1


# -- describe ------------------------------------------------------------------------


def view(doc: dict[str, Any], revision: int = 1, status: StreamStatus | None = None) -> StreamView:
    return StreamView(parse_stream(doc), revision, status or StreamStatus(), 0)


def change(old: dict[str, Any] | None, new: dict[str, Any] | None) -> str:
    return describe(
        MetadataChange("s", view(old) if old is not None else None, view(new) if new else None, 2)
    )


def test_describe_added_and_removed_clusters() -> None:
    one = stream_doc("s", {"a": ("h:1", ["t"])})
    three = stream_doc(
        "s",
        {"a": ("h:1", ["t"]), "c": ("h:3", ["u", "v"]), "b": ("h:2", ["t"])},
        states={"b": "STANDBY"},
    )
    assert change(None, one) == "a: added (ACTIVE, topics t)"
    assert change(one, three) == "b: added (STANDBY, topics t), c: added (ACTIVE, topics u, v)"
    assert change(three, one) == "b: removed, c: removed"
    assert change(one, None) == "stream deleted"


def test_describe_state_connection_and_topic_changes() -> None:
    before = two_clusters()
    assert change(before, two_clusters(states={"a": "DRAINING", "b": "ACTIVE"})) == (
        "a: ACTIVE -> DRAINING, b: STANDBY -> ACTIVE"
    )

    moved = two_clusters()
    moved["clusters"]["a"]["bootstrap_servers"] = "h:7"
    assert change(before, moved) == "a: connection changed"
    props = two_clusters()
    props["clusters"]["b"]["properties"]["socket.timeout.ms"] = "5000"
    assert change(before, props) == "b: connection changed"

    topics = two_clusters()
    topics["clusters"]["a"]["topics"] = ["u", "v"]
    assert change(before, topics) == "a: topics +u, +v; topics -t"

    both = two_clusters(states={"b": "ACTIVE"})
    both["clusters"]["b"]["bootstrap_servers"] = "h:8"
    both["clusters"]["b"]["topics"] = ["t", "w"]
    assert change(before, both) == "b: connection changed; STANDBY -> ACTIVE; topics +w"


def test_describe_auto_failover_change_and_other_changes() -> None:
    before = two_clusters()
    auto = two_clusters(auto_failover={"standby": "b", "unreachable_after_ms": 60_000})
    assert change(before, auto) == "auto_failover changed"
    later = two_clusters(auto_failover={"standby": "b", "unreachable_after_ms": 90_000})
    assert change(auto, later) == "auto_failover changed"

    starting = two_clusters()
    starting["clusters"]["b"]["starting"] = "latest"
    assert change(before, starting) == "no cluster changed"


def test_describe_is_empty_for_a_status_only_change() -> None:
    doc = two_clusters()
    record = FailoverRecord("a", "b", FailoverStrategy.TIMESTAMP, 1000, 1)
    status = StreamStatus(drains={"a": {"a/t/0": 3}}, failovers=(record,))
    old = view(doc, 5)
    new = StreamView(old.spec, 5, status, 6)
    assert describe(MetadataChange("s", old, new, 6)) == ""
