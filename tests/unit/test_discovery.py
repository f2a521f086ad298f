"""Partition discovery with a fake metadata client: partitions that appear
join the stream; a partition count never shrinks (it is reported instead);
streams on one physical cluster share a client; failures mark a cluster
unreachable for a backoff. (tansu cannot add partitions, so the integration
tests cannot show growth.)"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from multikafka.coordinator import CoordinatorConfig
from multikafka.coordinator.clusters.discovery import Discovery
from multikafka.coordinator.planning.end_vector import ClusterSnapshot, new_splits
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.core._kafka_config import client_config
from multikafka.core.model import ClusterState, Connection
from multikafka.core.validation import parse_stream
from tests.fakes import FakeCluster, FakeMetadataClient

INTERNALS = (
    "multikafka.coordinator.clusters.discovery",
    "multikafka.coordinator.planning.end_vector",
    "multikafka.coordinator.state.stream_status",
    "multikafka.core._kafka_config",
)


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def discovery(cluster: FakeCluster) -> Any:
    shrinks: list[tuple[str, str, str, int, int]] = []
    d = Discovery(
        CoordinatorConfig(unreachable_backoff_s=60.0),
        ThreadPoolExecutor(2),
        client_factory=lambda conn: FakeMetadataClient(cluster),
        on_shrink=lambda *args: shrinks.append(args),
    )
    d.shrinks = shrinks  # type: ignore[attr-defined]
    return d


def view(name: str, topics: list[str]) -> StreamView:
    spec = parse_stream(
        {"name": name, "clusters": {"c": {"bootstrap_servers": "h:1", "topics": topics}}}
    )
    return StreamView(spec, 1)


async def test_new_partitions_join_and_counts_never_shrink(
    discovery: Any, cluster: FakeCluster
) -> None:
    cluster.counts = {"t": 2}
    await discovery.sync(view("s", ["t"]), "s")
    cc = discovery.client("s", "c")
    assert [str(s) for s in cc.splits()] == ["c/t/0", "c/t/1"]
    cluster.counts = {"t": 3}
    assert await discovery.discover(cc)
    splits = {str(s) for s in cc.splits()}
    assert splits == {"c/t/0", "c/t/1", "c/t/2"}
    snap = ClusterSnapshot(ClusterState.ACTIVE, frozenset({"t"}), True, frozenset(splits))
    assert new_splits({"c/t/0": 5, "c/t/1": 5}, {"c": snap}) == ["c/t/2"]
    cluster.counts = {"t": 1}
    await discovery.discover(cc)
    assert len(cc.splits()) == 3
    assert discovery.shrinks == [("s", "c", "t", 3, 1)]


async def test_topics_appear_when_created_and_leave_with_the_document(
    discovery: Any, cluster: FakeCluster
) -> None:
    cluster.counts = {"t": 1}
    await discovery.sync(view("s", ["t", "later"]), "s")
    cc = discovery.client("s", "c")
    assert [str(s) for s in cc.splits()] == ["c/t/0"]
    cluster.counts = {"t": 1, "later": 2}
    await discovery.discover_all()
    assert [str(s) for s in cc.splits()] == ["c/t/0", "c/later/0", "c/later/1"]
    await discovery.sync(view("s", ["later"]), "s")
    assert [str(s) for s in cc.splits()] == ["c/later/0", "c/later/1"]


async def test_streams_on_one_cluster_share_a_client(discovery: Any, cluster: FakeCluster) -> None:
    cluster.counts = {"t": 1, "u": 1}
    await discovery.sync(view("s1", ["t"]), "s1")
    await discovery.sync(view("s2", ["u"]), "s2")
    assert cluster.clients == 1
    assert discovery.client_count() == 1
    calls = cluster.calls
    await discovery.discover_all()
    assert cluster.calls == calls + 1  # one metadata request for both streams
    shared = discovery.client("s1", "c").client
    await discovery.sync(None, "s1")
    assert not shared.closed
    await discovery.sync(None, "s2")
    assert shared.closed
    assert discovery.client_count() == 0


async def test_unreachable_cluster_is_not_asked_again_during_the_backoff(
    discovery: Any, cluster: FakeCluster
) -> None:
    cluster.counts = {"t": 1}
    await discovery.sync(view("s", ["t"]), "s")
    cc = discovery.client("s", "c")
    cluster.down = True
    assert not await discovery.discover(cc)
    assert not cc.health.reachable
    assert cc.health.unreachable_since is not None
    calls = cluster.calls
    assert not await discovery.discover(cc)
    assert cluster.calls == calls  # skipped: still inside the backoff
    cluster.down = False
    assert await discovery.discover(cc, force=True)
    assert cc.health.reachable
    assert Connection("c", "h:1", cc.spec.properties).fingerprint == cc.fingerprint


async def test_settings_this_pod_cannot_resolve_make_the_cluster_unreachable_saying_why(
    cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client is made where its references resolve (as the Kafka
    client's factory does); one that cannot be resolved here is a cluster
    that does not answer, its error naming the property and the reference."""
    monkeypatch.delenv("KAFKA_TEST_UNSET_PASSWORD", raising=False)
    cluster.counts = {"t": 1}
    d = Discovery(
        CoordinatorConfig(unreachable_backoff_s=60.0),
        ThreadPoolExecutor(2),
        client_factory=lambda conn: (client_config(conn, {}), FakeMetadataClient(cluster))[1],
    )
    ref = "${env:KAFKA_TEST_UNSET_PASSWORD}"
    spec = parse_stream(
        {
            "name": "s",
            "clusters": {
                "c": {
                    "bootstrap_servers": "h:1",
                    "topics": ["t"],
                    "properties": {"sasl.password": ref},
                }
            },
        }
    )
    await d.sync(StreamView(spec, 1), "s")
    cc = d.client("s", "c")
    assert not await d.discover(cc)
    assert not cc.health.reachable
    assert "sasl.password" in cc.health.error
    assert ref in cc.health.error
    assert cluster.calls == 0  # nothing was asked of the cluster


class NamedClient(FakeMetadataClient):
    """A client that logs librdkafka's lines: it is told whom it serves."""

    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__(cluster)
        self.told: list[tuple[list[tuple[str, str]], bool]] = []

    def set_log_context(
        self, users: Sequence[tuple[str, str]], *, expected_down: bool = False
    ) -> None:
        self.told.append((sorted(users), expected_down))


async def test_a_client_is_told_its_streams_and_when_its_cluster_is_failed(
    cluster: FakeCluster,
) -> None:
    discovery = Discovery(
        CoordinatorConfig(), ThreadPoolExecutor(2), client_factory=lambda c: NamedClient(cluster)
    )
    cluster.counts = {"t": 1}
    await discovery.sync(view("s1", ["t"]), "s1")
    client = discovery.client("s1", "c").client
    assert client.told[-1] == ([("s1", "c")], False)
    await discovery.sync(view("s2", ["t"]), "s2")
    assert client.told[-1] == ([("s1", "c"), ("s2", "c")], False)
    failed = view("s1", ["t"])
    failed = StreamView(
        replace(
            failed.spec,
            clusters={"c": replace(failed.spec.clusters["c"], state=ClusterState.FAILED)},
        ),
        2,
    )
    await discovery.sync(failed, "s1")
    assert client.told[-1] == ([("s1", "c"), ("s2", "c")], False)  # s2 still reads it
    await discovery.sync(None, "s2")
    assert client.told[-1] == ([("s1", "c")], True)  # known down: its failures are expected
    await discovery.close()
