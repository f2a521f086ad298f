"""The cluster lifecycle's own checks (``coordinator/lifecycle.py``) over the fake
etcd and Kafka, one ``check`` at a time: automatic failover once the ACTIVE cluster has
been unreachable for the stream's window (and not before, not without a
STANDBY standby, not without ``auto_failover``); drain offsets captured once a
DRAINING cluster that was down answers; ``drain-complete`` recorded once,
when every running query has retired the drained splits; ``check_all`` going
on with the other streams when one stream's check fails."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from multikafka.coordinator.clusters.discovery import Health
from multikafka.core.exceptions import PreconditionError
from multikafka.core.model import ClusterState, FailoverStrategy
from multikafka.devstack.stack import stream_doc
from tests.fakes import Parts

INTERNALS = ("multikafka.coordinator.clusters.discovery",)


AUTO = {"standby": "b", "unreachable_after_ms": 60_000, "strategy": "identity", "margin_ms": 2_000}


@pytest.fixture
def parts(parts: Parts) -> Parts:
    """Clusters h:1, h:2 and h:3 with topic t: two partitions, ending at 5 and 7."""
    for bootstrap in ("h:1", "h:2", "h:3"):
        c = parts.kafka.cluster(bootstrap)
        c.counts = {"t": 2}
        c.latest = {("t", 0): 5, ("t", 1): 7}
    return parts


def doc(name: str = "s", states: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    """Stream ``name``: cluster a on h:1 and b on h:2, both reading topic t."""
    return stream_doc(
        name, {"a": ("h:1", ["t"]), "b": ("h:2", ["t"])}, states=states or {}, **extra
    )


def health(parts: Parts, cluster: str, stream: str = "s") -> Health:
    cc = parts.discovery.client(stream, cluster)
    assert cc is not None
    return cc.health


def down_for(parts: Parts, cluster: str, seconds: float, stream: str = "s") -> None:
    """Make the outage of ``cluster`` (already unreachable) ``seconds`` old."""
    h = health(parts, cluster, stream)
    assert not h.reachable
    h.unreachable_since = time.monotonic() - seconds


async def check(parts: Parts, stream: str = "s") -> None:
    await parts.lifecycle.check(parts.store.get(stream))


# -- automatic failover ----------------------------------------------------------------


async def test_no_failover_before_the_window_then_failover_once_it_passed(
    parts: Parts,
) -> None:
    await parts.put(doc(states={"b": "STANDBY"}, auto_failover=AUTO))
    parts.kafka.cluster("h:1").down = True

    await check(parts)  # notices the outage: it starts now
    assert not health(parts, "a").reachable
    assert health(parts, "a").unreachable_since is not None
    down_for(parts, "a", 59.0)
    await check(parts)

    view = parts.store.get("s")
    assert view.spec.clusters["a"].state is ClusterState.ACTIVE
    assert view.spec.clusters["b"].state is ClusterState.STANDBY
    assert view.status.failovers == ()
    assert parts.kinds() == []

    down_for(parts, "a", 61.0)
    await check(parts)

    view = parts.store.get("s")
    assert view.spec.clusters["a"].state is ClusterState.FAILED
    assert view.spec.clusters["b"].state is ClusterState.ACTIVE
    [record] = view.status.failovers
    assert (record.from_cluster, record.to_cluster) == ("a", "b")
    assert (record.strategy, record.margin_ms, record.automatic) == (
        FailoverStrategy.IDENTITY,
        2_000,
        True,
    )
    assert re.fullmatch(
        r"a unreachable for 61\.\ds \(window 60\.0s\): cluster down", record.reason
    ), record.reason
    [entry] = [e for e in parts.history.entries("s") if e.kind != "reconcile"]
    assert (entry.kind, entry.cluster) == ("auto-failover", "a")
    assert entry.detail == f"a -> b, strategy identity, margin 2000 ms: {record.reason}"
    labels = {"stream": "s", "from_cluster": "a", "to_cluster": "b", "mode": "automatic"}
    assert parts.sample("multikafka_failovers_total", **labels) == 1.0


async def test_later_checks_do_not_fail_over_again(parts: Parts) -> None:
    await parts.put(doc(states={"b": "STANDBY"}, auto_failover=AUTO))
    parts.kafka.cluster("h:1").down = True
    await check(parts)
    down_for(parts, "a", 120.0)
    await check(parts)
    failed_over = parts.store.get("s")

    await check(parts)

    assert parts.store.get("s") == failed_over
    assert len(failed_over.status.failovers) == 1
    assert parts.kinds() == ["auto-failover"]


async def test_a_cluster_back_within_the_window_is_not_failed_over(parts: Parts) -> None:
    await parts.put(doc(states={"b": "STANDBY"}, auto_failover=AUTO))
    parts.kafka.cluster("h:1").down = True
    await check(parts)
    down_for(parts, "a", 30.0)
    parts.kafka.cluster("h:1").down = False

    await check(parts)  # the probe finds it again: the outage is over
    assert health(parts, "a").reachable
    assert health(parts, "a").unreachable_since is None
    await check(parts)

    view = parts.store.get("s")
    assert view.spec.clusters["a"].state is ClusterState.ACTIVE
    assert view.status.failovers == ()


@pytest.mark.parametrize("standby_state", ["ACTIVE", "FAILED", "DRAINING"])
async def test_no_automatic_failover_when_the_standby_is_not_standby(
    parts: Parts, standby_state: str
) -> None:
    await parts.put(doc(states={"b": standby_state}, auto_failover=AUTO))
    parts.kafka.cluster("h:1").down = True
    await parts.discovery.discover_all()  # the outage is noticed
    await parts.settle()
    down_for(parts, "a", 600.0)
    before = parts.store.get("s")

    await check(parts)

    view = parts.store.get("s")
    assert view.spec == before.spec
    assert view.status.failovers == ()
    assert "auto-failover" not in parts.kinds()


async def test_no_automatic_failover_without_auto_failover(parts: Parts) -> None:
    await parts.put(doc(states={"b": "STANDBY"}))
    parts.kafka.cluster("h:1").down = True
    await parts.discovery.discover_all()
    down_for(parts, "a", 600.0)
    before = parts.store.get("s")

    await check(parts)

    assert parts.store.get("s") == before
    assert parts.kinds() == []


# -- drains ------------------------------------------------------------------------------


async def test_a_draining_cluster_without_offsets_gets_them_once_it_answers(
    parts: Parts,
) -> None:
    parts.kafka.cluster("h:1").down = True
    # Set DRAINING in the document directly: the reconciler tries to capture
    # the offsets and cannot, the cluster being down.
    await parts.put(doc(states={"a": "DRAINING"}))
    await parts.settle()
    assert "a" not in parts.store.get("s").status.drains

    with pytest.raises(PreconditionError, match="unreachable"):
        await check(parts)
    assert "a" not in parts.store.get("s").status.drains

    parts.kafka.cluster("h:1").down = False
    await check(parts)

    view = parts.store.get("s")
    assert dict(view.status.drains) == {"a": {"a/t/0": 5, "a/t/1": 7}}
    assert view.spec.clusters["a"].state is ClusterState.DRAINING
    assert parts.kinds() == ["drain"]
    labels = {"stream": "s", "cluster": "a"}
    assert parts.sample("multikafka_drains_total", **labels) == 1.0


async def test_drain_complete_is_recorded_once_every_running_query_retired_the_splits(
    parts: Parts,
) -> None:
    await parts.put(doc())
    await parts.lifecycle.drain("s", "a")
    q = parts.queries

    await check(parts)  # no running query: nothing to say yet
    assert "drain-complete" not in parts.kinds()

    await q.commit("q1", "s", {"a/t/0": 5, "a/t/1": 7, "b/t/0": 1})
    await q.commit("q2", "s", {"b/t/0": 1, "b/t/1": 2})
    await check(parts)  # q1 still holds both drained splits
    assert "drain-complete" not in parts.kinds()

    await q.commit("q1", "s", {"a/t/1": 7, "b/t/0": 3})
    await check(parts)  # q1 still holds one
    assert "drain-complete" not in parts.kinds()

    await q.commit("q1", "s", {"b/t/0": 4, "b/t/1": 2})
    await check(parts)

    [entry] = [e for e in parts.history.entries("s") if e.kind == "drain-complete"]
    view = parts.store.get("s")
    assert (entry.cluster, entry.generation) == ("a", view.generation)
    assert "every query (2)" in entry.detail

    await check(parts)
    await check(parts)
    assert parts.kinds().count("drain-complete") == 1


async def test_a_query_that_stopped_running_does_not_hold_up_drain_complete(
    parts: Parts,
) -> None:
    await parts.put(doc())
    await parts.lifecycle.drain("s", "a")
    await parts.queries.commit("gone", "s", {"a/t/0": 2})
    gone = parts.queries.get("gone")
    assert gone is not None
    gone.updated_ms = int((time.time() - 2 * 3600) * 1000)  # last commit two hours ago
    await parts.queries.commit("live", "s", {"b/t/0": 1})

    await check(parts)

    [entry] = [e for e in parts.history.entries("s") if e.kind == "drain-complete"]
    assert "every query (1)" in entry.detail


# -- check_all -------------------------------------------------------------------------------


async def test_check_all_goes_on_after_one_streams_check_fails(parts: Parts) -> None:
    # "s1" (checked first) has a DRAINING cluster that cannot be captured.
    parts.kafka.cluster("h:3").down = True
    await parts.put(stream_doc("s1", {"x": ("h:3", ["t"])}, states={"x": "DRAINING"}))
    await parts.settle()
    with pytest.raises(PreconditionError):
        await check(parts, "s1")
    # "s2" is due for an automatic failover.
    parts.kafka.cluster("h:1").down = True
    await parts.put(doc("s2", states={"b": "STANDBY"}, auto_failover=AUTO))
    down_for(parts, "a", 120.0, stream="s2")
    assert [v.name for v in parts.store.views()] == ["s1", "s2"]

    await parts.lifecycle.check_all()

    s2 = parts.store.get("s2")
    assert s2.spec.clusters["a"].state is ClusterState.FAILED
    assert s2.spec.clusters["b"].state is ClusterState.ACTIVE
    assert parts.kinds("s2") == ["auto-failover"]
    assert "x" not in parts.store.get("s1").status.drains


async def test_drain_complete_is_not_recorded_again_after_an_unrelated_document_change(
    parts: Parts,
) -> None:
    """One drain is its captured offsets: an edit of the document while it
    runs (here: topic u added to cluster b) does not record ``drain-complete``
    again (it used to, keyed on the document's revision)."""
    await parts.put(doc())
    await parts.lifecycle.drain("s", "a")
    await parts.queries.commit("q1", "s", {"b/t/0": 1})
    await check(parts)
    assert parts.kinds().count("drain-complete") == 1

    edited = doc(states={"a": "DRAINING"})
    edited["clusters"]["b"]["topics"] = ["t", "u"]
    await parts.put(edited)
    assert dict(parts.store.get("s").status.drains) == {"a": {"a/t/0": 5, "a/t/1": 7}}
    await check(parts)

    assert parts.kinds().count("drain-complete") == 1
