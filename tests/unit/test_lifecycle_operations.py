"""Cluster operations an admin asks for (``coordinator/lifecycle.py``) over the fake
etcd and Kafka: drain captures every split's end offset into the status before the
document turns DRAINING; fail, activate and failover change states and record
history and metrics; activating a FAILED cluster waits until no running query
holds its splits; invalid requests are refused; every write is conditional, so
a document changed behind the coordinator's back is never overwritten."""

from __future__ import annotations

import time

import pytest

from multikafka.coordinator.state.stream_status import FailoverRecord
from multikafka.core.exceptions import (
    ConflictError,
    NotFoundError,
    PreconditionError,
    ValidationError,
)
from multikafka.core.model import ClusterState, FailoverStrategy
from multikafka.core.validation import parse_stream
from multikafka.devstack.stack import stream_doc
from tests.fakes import Parts

INTERNALS = ("multikafka.coordinator.state.stream_status",)


#: End offsets of cluster a's two partitions of topic t (on "h:1").
A_LATEST = {("t", 0): 5, ("t", 1): 7}
A_DRAIN = {"a/t/0": 5, "a/t/1": 7}


@pytest.fixture
def parts(parts: Parts) -> Parts:
    """Cluster a (h:1) with two partitions of topic t, b (h:2) with one."""
    a = parts.kafka.cluster("h:1")
    a.counts = {"t": 2}
    a.latest = dict(A_LATEST)
    b = parts.kafka.cluster("h:2")
    b.counts = {"t": 1}
    b.latest = {("t", 0): 3}
    return parts


def two_clusters(**states: str) -> dict[str, object]:
    """Stream "s": cluster a on h:1 and b on h:2, both reading topic t."""
    return stream_doc("s", {"a": ("h:1", ["t"]), "b": ("h:2", ["t"])}, states=states)


def state(parts: Parts, cluster: str, stream: str = "s") -> ClusterState:
    return parts.store.get(stream).spec.clusters[cluster].state


# -- drain ----------------------------------------------------------------------


async def test_drain_captures_every_split_end_offset_before_marking_draining(
    parts: Parts,
) -> None:
    await parts.put(two_clusters())

    view = await parts.lifecycle.drain("s", "a")

    assert view.spec.clusters["a"].state is ClusterState.DRAINING
    assert view.spec.clusters["b"].state is ClusterState.ACTIVE
    assert dict(view.status.drains) == {"a": A_DRAIN}
    # The status (with the offsets) and the document's state: one transaction.
    assert 0 < view.status_revision == view.spec_revision
    status_kv = parts.etcd.kv(parts.store.status_prefix + "s")
    doc_kv = parts.etcd.kv(parts.store.streams_prefix + "s")
    assert status_kv is not None
    assert doc_kv is not None
    assert status_kv.mod_revision == view.status_revision
    assert doc_kv.mod_revision == view.spec_revision
    assert parts.sample("multikafka_drains_total", stream="s", cluster="a") == 1.0
    drains = [e for e in parts.history.entries("s") if e.kind == "drain"]
    assert len(drains) == 1
    assert drains[0].cluster == "a"
    assert drains[0].generation == view.spec_revision
    assert drains[0].detail == (
        "reading up to 12 records' end offsets captured over 2 splits, then retiring"
    )
    assert parts.store.get("s") == view


async def test_draining_again_is_a_no_op_returning_the_same_view(parts: Parts) -> None:
    await parts.put(two_clusters())
    first = await parts.lifecycle.drain("s", "a")
    puts = parts.etcd.puts
    parts.kafka.cluster("h:1").latest[("t", 0)] = 50  # new records must not move the drain end

    again = await parts.lifecycle.drain("s", "a")

    assert again == first
    assert parts.etcd.puts == puts
    assert dict(again.status.drains) == {"a": A_DRAIN}
    assert parts.kinds().count("drain") == 1
    assert parts.sample("multikafka_drains_total", stream="s", cluster="a") == 1.0


@pytest.mark.parametrize("refused", ["FAILED", "STANDBY"])
async def test_drain_refuses_a_cluster_that_is_not_active(parts: Parts, refused: str) -> None:
    await parts.put(two_clusters(a=refused))
    before = parts.store.get("s")

    with pytest.raises(PreconditionError, match=f"cluster 'a' is {refused}"):
        await parts.lifecycle.drain("s", "a")

    assert parts.store.get("s") == before
    assert "drain" not in parts.kinds()
    assert parts.sample("multikafka_drains_total", stream="s", cluster="a") is None


async def test_drain_refuses_an_unreachable_cluster_and_points_to_failover(
    parts: Parts,
) -> None:
    await parts.put(two_clusters())
    before = parts.store.get("s")
    parts.kafka.cluster("h:1").down = True

    with pytest.raises(PreconditionError, match="unreachable") as info:
        await parts.lifecycle.drain("s", "a")

    assert "use failover" in str(info.value)
    assert parts.store.get("s") == before
    assert state(parts, "a") is ClusterState.ACTIVE
    assert "a" not in parts.store.get("s").status.drains
    assert parts.sample("multikafka_drains_total", stream="s", cluster="a") is None


async def test_operations_on_an_unknown_stream_or_cluster_are_not_found(parts: Parts) -> None:
    await parts.put(two_clusters())
    ops = parts.lifecycle

    with pytest.raises(NotFoundError, match="nope"):
        await ops.drain("nope", "a")
    with pytest.raises(NotFoundError, match="'zz'"):
        await ops.drain("s", "zz")
    with pytest.raises(NotFoundError, match="'zz'"):
        await ops.fail("s", "zz")
    with pytest.raises(NotFoundError, match="'zz'"):
        await ops.activate("s", "zz")
    with pytest.raises(NotFoundError, match="'zz'"):
        await ops.failover("s", "zz", "b")
    assert state(parts, "a") is ClusterState.ACTIVE
    assert state(parts, "b") is ClusterState.ACTIVE


# -- fail, activate ---------------------------------------------------------------


async def test_fail_marks_failed_and_records_the_reason(parts: Parts) -> None:
    await parts.put(two_clusters())

    view = await parts.lifecycle.fail("s", "a", "disk on fire")

    assert view.spec.clusters["a"].state is ClusterState.FAILED
    assert view.spec.clusters["b"].state is ClusterState.ACTIVE
    assert parts.store.get("s") == view
    [entry] = [e for e in parts.history.entries("s") if e.kind == "fail"]
    assert (entry.cluster, entry.detail, entry.generation) == (
        "a",
        "disk on fire",
        view.spec_revision,
    )


async def test_fail_without_a_reason_says_the_admin_did_it(parts: Parts) -> None:
    await parts.put(two_clusters())

    await parts.lifecycle.fail("s", "b")

    [entry] = [e for e in parts.history.entries("s") if e.kind == "fail"]
    assert (entry.cluster, entry.detail) == ("b", "marked FAILED by admin")


async def test_activate_marks_a_draining_cluster_active_and_keeps_other_drains(
    parts: Parts,
) -> None:
    await parts.put(two_clusters())
    await parts.lifecycle.drain("s", "a")
    await parts.lifecycle.drain("s", "b")

    view = await parts.lifecycle.activate("s", "a")
    await parts.settle()

    assert view.spec.clusters["a"].state is ClusterState.ACTIVE
    assert view.spec.clusters["b"].state is ClusterState.DRAINING
    assert parts.store.get("s").status.drains["b"] == {"b/t/0": 3}
    [entry] = [e for e in parts.history.entries("s") if e.kind == "activate"]
    assert (entry.cluster, entry.generation) == ("a", view.spec_revision)


async def test_activate_standby(parts: Parts) -> None:
    await parts.put(two_clusters(b="STANDBY"))

    view = await parts.lifecycle.activate("s", "b")

    assert view.spec.clusters["b"].state is ClusterState.ACTIVE
    assert parts.kinds() == ["activate"]


async def test_activating_a_failed_cluster_waits_until_no_running_query_holds_its_splits(
    parts: Parts,
) -> None:
    await parts.put(two_clusters(b="STANDBY"))
    await parts.queries.commit("q1", "s", {"a/t/0": 3, "a/t/1": 7})
    await parts.queries.commit("q2", "s", {"b/t/0": 1})  # holds none of a's splits
    await parts.lifecycle.failover("s", "a", "b")

    with pytest.raises(PreconditionError, match="queries q1 still hold splits of 'a'"):
        await parts.lifecycle.activate("s", "a")
    assert state(parts, "a") is ClusterState.FAILED
    assert "activate" not in parts.kinds()

    # q1's next batch retired a's splits: a may come back.
    await parts.queries.commit("q1", "s", {"b/t/0": 2})
    view = await parts.lifecycle.activate("s", "a")

    assert view.spec.clusters["a"].state is ClusterState.ACTIVE
    assert parts.kinds()[-1] == "activate"


async def test_a_query_that_stopped_running_does_not_block_activation(parts: Parts) -> None:
    await parts.put(two_clusters())
    await parts.queries.commit("old", "s", {"a/t/0": 3})
    progress = parts.queries.get("old")
    assert progress is not None
    progress.updated_ms = int((time.time() - 2 * 3600) * 1000)  # last commit two hours ago
    await parts.lifecycle.fail("s", "a")

    view = await parts.lifecycle.activate("s", "a")

    assert view.spec.clusters["a"].state is ClusterState.ACTIVE


# -- failover ---------------------------------------------------------------------


async def test_failover_records_the_decision_and_swaps_states(parts: Parts) -> None:
    await parts.put(two_clusters(b="STANDBY"))
    before_ms = int(time.time() * 1000)

    view = await parts.lifecycle.failover(
        "s",
        "a",
        "b",
        strategy=FailoverStrategy.IDENTITY,
        margin_ms=5_000,
        reason="maintenance",
    )

    after_ms = int(time.time() * 1000)
    assert view.spec.clusters["a"].state is ClusterState.FAILED
    assert view.spec.clusters["b"].state is ClusterState.ACTIVE
    [record] = view.status.failovers
    assert before_ms <= record.at_ms <= after_ms
    assert record == FailoverRecord(
        "a", "b", FailoverStrategy.IDENTITY, 5_000, record.at_ms, "maintenance", False
    )
    assert view.status.failover_into("b") == record
    # The record is in the status before the states change.
    assert 0 < view.status_revision == view.spec_revision  # one transaction
    assert parts.store.get("s") == view
    labels = {"stream": "s", "from_cluster": "a", "to_cluster": "b"}
    assert parts.sample("multikafka_failovers_total", **labels, mode="admin") == 1.0
    assert parts.sample("multikafka_failovers_total", **labels, mode="automatic") is None
    [entry] = [e for e in parts.history.entries("s") if e.kind == "failover"]
    assert (entry.cluster, entry.generation) == ("a", view.spec_revision)
    assert entry.detail == "a -> b, strategy identity, margin 5000 ms: maintenance"


async def test_failover_defaults_to_timestamp_with_a_30s_margin(parts: Parts) -> None:
    await parts.put(two_clusters(b="STANDBY"))

    view = await parts.lifecycle.failover("s", "a", "b")

    [record] = view.status.failovers
    assert (record.strategy, record.margin_ms, record.reason, record.automatic) == (
        FailoverStrategy.TIMESTAMP,
        30_000,
        "",
        False,
    )


async def test_failover_into_a_draining_cluster_makes_it_active(parts: Parts) -> None:
    await parts.put(two_clusters())
    await parts.lifecycle.drain("s", "b")

    view = await parts.lifecycle.failover("s", "a", "b")
    await parts.settle()

    assert view.spec.clusters["b"].state is ClusterState.ACTIVE
    assert view.spec.clusters["a"].state is ClusterState.FAILED
    assert parts.store.get("s").spec == view.spec


async def test_repeating_a_failover_is_a_no_op(parts: Parts) -> None:
    await parts.put(two_clusters(b="STANDBY"))
    first = await parts.lifecycle.failover("s", "a", "b", reason="once")
    puts = parts.etcd.puts

    again = await parts.lifecycle.failover("s", "a", "b", reason="twice")

    assert again == first
    assert parts.etcd.puts == puts
    assert len(again.status.failovers) == 1
    assert again.status.failovers[0].reason == "once"
    assert parts.kinds().count("failover") == 1
    labels = {"stream": "s", "from_cluster": "a", "to_cluster": "b", "mode": "admin"}
    assert parts.sample("multikafka_failovers_total", **labels) == 1.0


async def test_automatic_failover_is_recorded_and_counted_as_automatic(parts: Parts) -> None:
    await parts.put(two_clusters(b="STANDBY"))

    view = await parts.lifecycle.failover("s", "a", "b", reason="down", automatic=True)

    [record] = view.status.failovers
    assert record.automatic is True
    assert parts.kinds() == ["auto-failover"]
    labels = {"stream": "s", "from_cluster": "a", "to_cluster": "b"}
    assert parts.sample("multikafka_failovers_total", **labels, mode="automatic") == 1.0
    assert parts.sample("multikafka_failovers_total", **labels, mode="admin") is None


async def test_failover_refuses_invalid_requests(parts: Parts) -> None:
    await parts.put(two_clusters(b="STANDBY"))
    before = parts.store.get("s")
    ops = parts.lifecycle

    with pytest.raises(ValidationError, match="to_cluster"):
        await ops.failover("s", "a", "a")
    with pytest.raises(ValidationError, match="margin_ms"):
        await ops.failover("s", "a", "b", margin_ms=-1)
    with pytest.raises(NotFoundError, match="no cluster 'c'"):
        await ops.failover("s", "a", "c")

    assert parts.store.get("s") == before
    assert parts.kinds() == []


async def test_a_zero_margin_is_allowed(parts: Parts) -> None:
    await parts.put(two_clusters(b="STANDBY"))

    view = await parts.lifecycle.failover("s", "a", "b", margin_ms=0)

    assert view.status.failovers[0].margin_ms == 0


# -- conditional writes ---------------------------------------------------------------


async def _change_behind_the_coordinators_back(parts: Parts) -> bytes:
    """Write a newer version of stream "s" (b gets topic u) straight to etcd,
    with watches held so the coordinator has not applied it; return it."""
    parts.etcd.hold_watches()
    newer = parse_stream(
        stream_doc("s", {"a": ("h:1", ["t"]), "b": ("h:2", ["t", "u"])}, states={"b": "STANDBY"})
    )
    raw = newer.to_json(redact=False).encode()
    await parts.etcd.put(parts.store.streams_prefix + "s", raw)
    return raw


@pytest.mark.parametrize(
    "operation",
    ["drain", "fail", "activate", "failover"],
)
async def test_an_operation_on_a_stale_document_conflicts_and_keeps_the_newer_one(
    parts: Parts, operation: str
) -> None:
    await parts.put(two_clusters(b="STANDBY"))
    ops = parts.lifecycle
    newer = await _change_behind_the_coordinators_back(parts)
    key = parts.store.streams_prefix + "s"

    call = {
        "drain": lambda: ops.drain("s", "a"),
        "fail": lambda: ops.fail("s", "a"),
        "activate": lambda: ops.activate("s", "b"),
        "failover": lambda: ops.failover("s", "a", "b"),
    }[operation]

    with pytest.raises(ConflictError):
        await call()

    assert parts.etcd.value(key) == newer
    assert parts.kinds() == []
    # Once the watch catches up, the newer document is in force, states untouched.
    parts.etcd.release_watches()
    kv = parts.etcd.kv(key)
    assert kv is not None
    await parts.store.wait_applied(kv.mod_revision)
    view = parts.store.get("s")
    assert view.spec.clusters["b"].topics == ("t", "u")
    assert view.spec.clusters["a"].state is ClusterState.ACTIVE
    assert view.spec.clusters["b"].state is ClusterState.STANDBY


# -- races and repeats (each was a bug these tests found) ------------------------------


async def test_a_second_outage_fails_over_again_after_the_cluster_came_back(
    parts: Parts,
) -> None:
    """A failover is a repeat only when its record is the latest into ``to``
    and the states are what it left: here a failed over to b, came back
    (activate), b was parked as STANDBY again, then a failed again; the
    second failover must act (it used to be taken for the first one)."""
    await parts.put(two_clusters(b="STANDBY"))
    await parts.lifecycle.failover("s", "a", "b", reason="first outage")
    await parts.lifecycle.activate("s", "a")
    await parts.put(two_clusters(b="STANDBY"))  # b back to standby duty
    await parts.lifecycle.fail("s", "a", "second outage")

    view = await parts.lifecycle.failover("s", "a", "b", reason="second outage")

    assert view.spec.clusters["b"].state is ClusterState.ACTIVE
    assert [r.reason for r in view.status.failovers] == ["first outage", "second outage"]


async def test_a_drain_that_loses_a_race_writes_no_offsets(
    parts: Parts,
) -> None:
    """Status and document are one conditional transaction: a drain whose
    document write conflicts leaves no offsets behind, so a later DRAINING
    captures the end offsets of then (stale ones would stop the read early:
    records written since would never be read)."""
    await parts.put(two_clusters(b="STANDBY"))
    await _change_behind_the_coordinators_back(parts)
    with pytest.raises(ConflictError):
        await parts.lifecycle.drain("s", "a")  # offsets at 5 and 7
    parts.etcd.release_watches()
    await parts.store.wait_applied(parts.etcd.revision)
    parts.kafka.cluster("h:1").latest = {("t", 0): 50, ("t", 1): 70}  # producers go on

    await parts.put(two_clusters(a="DRAINING", b="STANDBY"))
    await parts.settle()
    await parts.lifecycle.check(parts.store.get("s"))

    assert dict(parts.store.get("s").status.drains) == {"a": {"a/t/0": 50, "a/t/1": 70}}


async def test_activate_drops_the_drain_offsets_for_good(
    parts: Parts,
) -> None:
    """activate writes the status without a's drain offsets and the document
    with a ACTIVE at one revision, and the reconciler sees both at once. It
    used to see the new status with the old document (a DRAINING, no
    offsets), start a drain, and write the old offsets back."""
    await parts.put(two_clusters())
    await parts.lifecycle.drain("s", "a")

    await parts.lifecycle.activate("s", "a")
    await parts.settle()

    view = parts.store.get("s")
    assert view.spec.clusters["a"].state is ClusterState.ACTIVE
    assert dict(view.status.drains) == {}


async def test_failover_clears_the_drain_of_its_target_for_good(
    parts: Parts,
) -> None:
    """As with activate: the reconciler never sees b's drain offsets gone
    while b is still DRAINING, so it does not capture them again."""
    await parts.put(two_clusters())
    await parts.lifecycle.drain("s", "b")

    await parts.lifecycle.failover("s", "a", "b")
    await parts.settle()

    view = parts.store.get("s")
    assert view.spec.clusters["b"].state is ClusterState.ACTIVE
    assert dict(view.status.drains) == {}
