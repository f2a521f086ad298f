"""Two coordinator replicas on one etcd prefix: what each says about
leadership (admin status, metrics, gRPC health), what a standby answers
(read-only calls; everything else UNAVAILABLE naming the leader), and clients
given only the standby's address following it to the leader. Also: a
coordinator that cannot reach etcd at start says so in one line."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from multikafka.core._grpc_codes import LEADER_KEY
from multikafka.core.admin_client import AdminClient
from multikafka.core.planner_client import PlannerClient
from multikafka.devstack import CoordinatorThread, free_port
from multikafka.devstack.feed import create_topics
from multikafka.v1 import admin_pb2, admin_pb2_grpc, planner_pb2, planner_pb2_grpc
from tests.conftest import KafkaClusters, coordinator_config
from tests.helpers import (
    eventually,
    one_line,
    run_admin_cli,
    run_coordinator,
    stream_doc,
    uid,
)

INTERNALS = (
    "multikafka.coordinator.runtime.leader",
    "multikafka.core._grpc_codes",
)


pytestmark = pytest.mark.integration

Make = Callable[..., CoordinatorThread]


@pytest.fixture
def pair(make_coordinator: Make) -> tuple[CoordinatorThread, CoordinatorThread]:
    """(leader, standby) on one prefix."""
    prefix = f"/lead-{uid('p')}"
    first = make_coordinator(etcd_prefix=prefix)
    second = make_coordinator(etcd_prefix=prefix)
    assert first.coordinator is not None
    assert second.coordinator is not None
    if first.coordinator.is_leader:
        return first, second
    return second, first


def admin_json(address: str, *args: str) -> dict[str, object]:
    result = run_admin_cli(["--coordinator", address, *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_status_tells_each_replicas_role_the_leader_etcd_and_the_others(
    pair: tuple[CoordinatorThread, CoordinatorThread],
) -> None:
    leader, standby = pair
    on_leader = admin_json(leader.address, "--json", "status")
    on_standby = admin_json(standby.address, "--json", "status")
    assert on_leader["role"] == "leader"
    assert on_standby["role"] == "standby"
    assert on_leader["leader"] == on_standby["leader"] == leader.address
    assert on_standby["address"] == standby.address
    etcd = on_standby["etcd"]
    assert isinstance(etcd, dict)
    assert etcd["reachable"] is True
    assert etcd["endpoints"] == [str(e) for e in standby.config.etcd.endpoints]
    assert isinstance(on_leader["generation"], int)
    assert on_leader["elections"] == 1
    replicas = {r["address"]: r["role"] for r in on_standby["replicas"]}  # type: ignore[union-attr]
    assert replicas == {leader.address: "leader", standby.address: "standby"}


def test_metrics_and_health_say_who_leads(
    pair: tuple[CoordinatorThread, CoordinatorThread],
) -> None:
    leader, standby = pair
    assert leader.coordinator is not None
    assert standby.coordinator is not None
    for thread, expected in ((leader, 1.0), (standby, 0.0)):
        registry = thread.coordinator.metrics.registry  # type: ignore[union-attr]
        assert registry.get_sample_value("multikafka_leader") == expected
    assert leader.coordinator.metrics.registry.get_sample_value("multikafka_elections_total") == 1
    serving = health_pb2.HealthCheckResponse.SERVING
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING

    def health(address: str, service: str) -> int:
        with grpc.insecure_channel(address) as ch:
            req = health_pb2.HealthCheckRequest(service=service)
            return int(health_pb2_grpc.HealthStub(ch).Check(req, timeout=5).status)

    eventually(lambda: health(standby.address, "") == serving, timeout_s=10)
    assert health(leader.address, "") == serving
    assert health(leader.address, "multikafka.leader") == serving
    assert health(standby.address, "multikafka.leader") == not_serving
    assert health(standby.address, "multikafka.v1.Planner") == serving  # it answers: go there


def test_a_replica_whose_duties_are_still_loading_is_not_yet_the_leader(
    etcd_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Elected but its term's state still loading from etcd: it is not yet
    the leader (what ``/leader`` and the leader health check say), and
    ``start()`` waits for the duties, so a term that etcd fails under while
    it loads never passes for a leader (seen in CI: a test restarted etcd
    then, and the replica stepped down)."""
    from multikafka.coordinator.runtime.leader import LeaderDuties

    release = threading.Event()
    load = LeaderDuties.load

    async def slow_load(self: LeaderDuties) -> None:
        await asyncio.to_thread(release.wait, 60)
        await load(self)

    monkeypatch.setattr(LeaderDuties, "load", slow_load)
    thread = CoordinatorThread(coordinator_config(etcd_url, etcd_prefix=f"/lead-{uid('p')}"))
    started = threading.Thread(target=thread.start, daemon=True)
    started.start()
    try:
        eventually(lambda: thread.coordinator is not None and thread.coordinator.election)
        coordinator = thread.coordinator
        assert coordinator is not None
        election = coordinator.election
        assert election is not None
        eventually(lambda: election.is_leader)  # elected: the duties are loading
        assert not coordinator.is_leader
        assert started.is_alive()  # start() still waits
        # A call meanwhile is refused as on a takeover (clients retry), naming
        # this replica: never answered from a term that is not set up yet.
        with grpc.insecure_channel(coordinator.address) as channel:
            stub = planner_pb2_grpc.PlannerStub(channel)
            with pytest.raises(grpc.RpcError) as refused:
                stub.ResolveOffsets(planner_pb2.ResolveOffsetsRequest(stream="s"), timeout=10)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "just elected" in (refused.value.details() or "")
            assert dict(refused.value.trailing_metadata() or ())[LEADER_KEY] == coordinator.address
            release.set()
            started.join(30)
            assert not started.is_alive()
            assert coordinator.is_leader
            with pytest.raises(grpc.RpcError) as answered:
                stub.ResolveOffsets(planner_pb2.ResolveOffsetsRequest(stream="s"), timeout=10)
            assert answered.value.code() == grpc.StatusCode.NOT_FOUND  # the term answers
    finally:
        release.set()
        started.join(30)
        thread.stop()


def test_a_standby_serves_reads_and_names_the_leader_for_the_rest(
    pair: tuple[CoordinatorThread, CoordinatorThread], kafka: KafkaClusters
) -> None:
    leader, standby = pair
    (a,) = kafka.shared(1)
    topic = uid("t")
    create_topics(a.bootstrap, {topic: 1})
    name = uid("s")
    doc = stream_doc(name, {"a": (a.bootstrap, [topic])})
    with AdminClient(leader.address) as admin:
        info = admin.put_stream(doc)
    # reads: from the standby's own copy of the metadata, once it applied it
    with grpc.insecure_channel(standby.address) as ch:
        stub = admin_pb2_grpc.AdminStub(ch)
        got = eventually(
            lambda: _try(lambda: stub.GetStream(admin_pb2.GetStreamRequest(name=name))),
            timeout_s=10,
        )
        assert got.version == info.version
        assert "standby" in got.clusters[0].error  # reachability is the leader's to know
        # history: what the leader persisted, read from etcd
        eventually(
            lambda: (
                [
                    e.kind
                    for e in stub.StreamHistory(admin_pb2.StreamHistoryRequest(name=name)).entries
                ]
                == ["reconcile"]
            ),
            timeout_s=10,
        )
        # a write: UNAVAILABLE, naming the leader
        with pytest.raises(grpc.RpcError) as info_err:
            stub.PutStream(admin_pb2.PutStreamRequest(document_json=json.dumps(doc)))
        err = info_err.value
        assert err.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        assert f"the leader is at {leader.address}" in err.details()  # type: ignore[attr-defined]
        assert (LEADER_KEY, leader.address) in err.trailing_metadata()  # type: ignore[attr-defined]


def _try(call: Callable[[], object]) -> object:
    try:
        return call()
    except grpc.RpcError:
        return None


def test_clients_given_only_the_standby_move_to_the_leader(
    pair: tuple[CoordinatorThread, CoordinatorThread], kafka: KafkaClusters
) -> None:
    _leader, standby = pair
    (a,) = kafka.shared(1)
    topic = uid("t")
    create_topics(a.bootstrap, {topic: 1})
    name = uid("s")
    with AdminClient(standby.address) as admin:
        info = admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic])}))
    assert info.name == name  # written by the leader
    planner = PlannerClient(standby.address, timeout_s=10)
    try:
        offsets, _ = planner.resolve(name, planner_pb2.Position(kind=planner_pb2.Position.EARLIEST))
        assert offsets == {f"a/{topic}/0": 0}
    finally:
        planner.close()


def test_a_coordinator_that_cannot_reach_etcd_says_so_in_one_line(tmp_path: Path) -> None:
    closed = free_port()
    result = run_coordinator(
        "--etcd", f"http://127.0.0.1:{closed}", "--etcd-wait", "1", cwd=tmp_path
    )
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line.startswith("multikafka coordinator: etcd at")
    assert f"127.0.0.1:{closed}" in line
    assert "Traceback" not in result.stderr


def test_a_leader_whose_loop_is_blocked_past_its_lease_keeps_leading(
    make_coordinator: Make,
) -> None:
    """Lease renewals run on a thread of their own, with their own etcd
    client: the leader's event loop blocked for twice the lease's TTL (a
    large reconcile, say) does not let the lease expire, so the standby
    never takes over. (Renewed on the loop, the standby would lead.)"""
    prefix = f"/lead-{uid('p')}"
    first = make_coordinator(etcd_prefix=prefix, lease_ttl_s=1.5)
    second = make_coordinator(etcd_prefix=prefix, lease_ttl_s=1.5)
    assert first.coordinator is not None
    assert second.coordinator is not None
    leader, standby = (first, second) if first.coordinator.is_leader else (second, first)
    assert leader.coordinator is not None
    assert standby.coordinator is not None

    leader._loop.call_soon_threadsafe(time.sleep, 3.0)
    leader.call(asyncio.sleep(0), timeout_s=10)  # returns once the loop runs again

    assert leader.coordinator.is_leader
    assert leader.coordinator.metrics.registry.get_sample_value("multikafka_elections_total") == 1
    assert standby.coordinator.metrics.registry.get_sample_value("multikafka_elections_total") == 0
    assert not standby.coordinator.is_leader
