"""Cluster operations through the admin API: drain, fail, activate,
failover; their preconditions and errors (real etcd and brokers)."""

from __future__ import annotations

import pytest

from multikafka import NotFoundError, PreconditionError, ValidationError
from multikafka.core.admin_client import AdminClient
from multikafka.core.planner_client import PlannerClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.v1 import common_pb2
from tests.conftest import KafkaClusters
from tests.helpers import produce_sequence, stream_doc, uid

pytestmark = pytest.mark.integration

STATE = common_pb2.ClusterState


def _stream(admin: AdminClient, kafka: KafkaClusters, *, standby: bool = True) -> tuple[str, str]:
    a, b = kafka.shared(2)
    topic = uid("ops")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 2})
    produce_sequence(a.bootstrap, topic, 2, "a", range(10))
    name = uid("ops")
    doc = stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])})
    if standby:
        doc["clusters"]["b"]["state"] = "STANDBY"
    admin.put_stream(doc)
    return name, topic


def test_drain_captures_end_offsets(admin: AdminClient, kafka: KafkaClusters) -> None:
    name, topic = _stream(admin, kafka)
    info = admin.drain(name, "a")
    status = {c.cluster: c for c in info.clusters}
    assert status["a"].state == common_pb2.DRAINING
    assert dict(status["a"].drain_offsets) == {f"a/{topic}/0": 6, f"a/{topic}/1": 6}
    assert admin.drain(name, "a").version == info.version  # idempotent
    with pytest.raises(PreconditionError, match="only an ACTIVE cluster"):
        admin.drain(name, "b")  # STANDBY
    assert [e.kind for e in admin.history(name)][-2:] == ["reconcile", "drain"]


def test_drain_of_an_unreachable_cluster_is_refused(
    admin: AdminClient, kafka: KafkaClusters
) -> None:
    down = kafka.private("drain-down")
    topic = uid("ops")
    create_topics(down.bootstrap, {topic: 1})
    name = uid("ops")
    admin.put_stream(stream_doc(name, {"a": (down.bootstrap, [topic])}))
    down.require_process().process.pause()
    try:
        with pytest.raises(PreconditionError, match="use failover"):
            admin.drain(name, "a")
    finally:
        down.require_process().process.resume()
    assert {c.cluster: STATE.Name(c.state) for c in admin.get_stream(name).clusters} == {
        "a": "ACTIVE"
    }


def test_failover_validation(admin: AdminClient, kafka: KafkaClusters) -> None:
    name, _ = _stream(admin, kafka)
    with pytest.raises(ValidationError, match="unknown strategy"):
        admin.failover(name, "a", "b", strategy="magic")
    with pytest.raises(ValidationError, match="must differ"):
        admin.failover(name, "a", "a")
    with pytest.raises(ValidationError, match="margin_ms"):
        admin.failover(name, "a", "b", margin_ms=-5)
    with pytest.raises(NotFoundError, match="no cluster 'zz'"):
        admin.failover(name, "a", "zz")
    with pytest.raises(NotFoundError):
        admin.failover(uid("nostream"), "a", "b")
    info = admin.failover(name, "a", "b", strategy="identity", margin_ms=0, reason="drill")
    assert {c.cluster: STATE.Name(c.state) for c in info.clusters} == {"a": "FAILED", "b": "ACTIVE"}
    # The failover's entry is written as its change is, beside the reconcile
    # of the states it set.
    history = admin.history(name)
    assert [e.kind for e in history].count("failover") == 1
    entry = next(e for e in history[-2:] if e.kind == "failover")
    assert "strategy identity" in entry.detail
    assert "drill" in entry.detail
    assert entry.generation == info.generation


def test_failed_cluster_activates_only_after_queries_retired_it(
    admin: AdminClient, coordinator: CoordinatorThread, kafka: KafkaClusters
) -> None:
    name, topic = _stream(admin, kafka, standby=False)
    planner = PlannerClient(coordinator.address, timeout_s=5)
    try:
        holding = {f"a/{topic}/0": 3, f"a/{topic}/1": 3, f"b/{topic}/0": 0, f"b/{topic}/1": 0}
        planner.commit(name, "q-hold", holding, "")
        admin.fail(name, "a")
        with pytest.raises(PreconditionError, match="q-hold"):
            admin.activate(name, "a")
        # The query's next batch retires a's splits; then a may come back.
        planner.commit(name, "q-hold", {f"b/{topic}/0": 0, f"b/{topic}/1": 0}, "")
        info = admin.activate(name, "a")
    finally:
        planner.close()
    assert {c.cluster: STATE.Name(c.state) for c in info.clusters}["a"] == "ACTIVE"
    assert [e.kind for e in admin.history(name)][-1] == "activate"
