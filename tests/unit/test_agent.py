"""The reader agent with a fake range consumer: reading tasks, reusing sub-readers,
and applying reconcile events (restart only what changed, close what went away)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pytest

from multikafka.core._ranges import SplitRange
from multikafka.core._secrets import Properties
from multikafka.core.model import Connection
from multikafka.reader_agent import ReaderAgent, ReadTask
from multikafka.reader_agent._arrow import (
    HEADERS_TYPE,
    SCHEMA,
    SCHEMA_WITH_HEADERS,
    TIMESTAMP_TYPE,
    Columns,
)
from multikafka.reader_agent._range_consumer import ReadOutcome
from multikafka.v1 import reader_pb2
from tests.helpers import eventually

INTERNALS = (
    "multikafka.core._ranges",
    "multikafka.core._secrets",
    "multikafka.reader_agent._arrow",
    "multikafka.reader_agent._range_consumer",
    "multikafka.reader_agent._subreader",
)


STREAM = "orders"


class FakeReader:
    """Yields one batch per range, with offsets ``start..until-1``."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.calls: list[list[SplitRange]] = []
        self.closes = 0
        self.closed_event = threading.Event()
        #: should_abandon() as seen after each yielded batch.
        self.abandon_checks: list[bool] = []

    def read(
        self,
        ranges: Sequence[SplitRange],
        outcome: ReadOutcome,
        *,
        include_headers: bool,
        fail_on_data_loss: bool,
        should_abandon: Callable[[], bool],
    ) -> Iterator[Columns]:
        assert self.closes == 0, "read on a closed reader"
        self.calls.append(list(ranges))
        for r in ranges:
            offsets = list(range(r.start, r.until))
            if not offsets:
                continue
            n = len(offsets)
            outcome.records += n
            outcome.last[(r.topic, r.partition)] = (offsets[-1], 1000 + offsets[-1])
            yield Columns(
                key=pa.array([None] * n, pa.binary()),
                value=pa.array([f"{r.topic}-{o}".encode() for o in offsets], pa.binary()),
                topic=pa.array([r.topic] * n, pa.string()),
                partition=pa.array([r.partition] * n, pa.int32()),
                offset=pa.array(offsets, pa.int64()),
                timestamp=pa.array([1000 + o for o in offsets], TIMESTAMP_TYPE),
                timestamp_type=pa.array([0] * n, pa.int32()),
                headers=pa.array([[]] * n, HEADERS_TYPE) if include_headers else None,
            )
            self.abandon_checks.append(should_abandon())

    def close(self) -> None:
        self.closes += 1
        self.closed_event.set()


class FakeFactory:
    """A RangeConsumerFactory that records every reader it makes."""

    def __init__(self) -> None:
        self.made: list[FakeReader] = []

    def __call__(self, connection: Connection) -> FakeReader:
        reader = FakeReader(connection)
        self.made.append(reader)
        return reader

    def of(self, cluster: str) -> list[FakeReader]:
        return [r for r in self.made if r.connection.cluster == cluster]


def conn(cluster: str, bootstrap: str = "127.0.0.1:9", **props: str) -> Connection:
    return Connection(cluster, bootstrap, Properties(props))


CONNS = {c: conn(c) for c in ("a", "b")}


def rng(
    cluster: str, start: int, until: int, *, topic: str = "t", partition: int = 0
) -> SplitRange:
    return SplitRange(cluster, topic, partition, start, until)


def task(
    *ranges: SplitRange,
    clusters: dict[str, Connection] | None = None,
    include_headers: bool = False,
) -> ReadTask:
    return ReadTask(
        coordinator="",
        stream=STREAM,
        query_id="q",
        generation=1,
        ranges=tuple(ranges),
        clusters=clusters or CONNS,
        include_headers=include_headers,
    )


def event(
    generation: int,
    *desired: tuple[str, str] | tuple[str, str, str],
    snapshot: bool = False,
) -> reader_pb2.ReconcileEvent:
    """``desired``: (cluster, state[, fingerprint]); fingerprint defaults to CONNS'."""
    clusters = []
    for d in desired:
        cluster, state = d[0], d[1]
        fp = d[2] if len(d) == 3 else CONNS[cluster].fingerprint
        clusters.append(
            reader_pb2.ClusterDesired(stream=STREAM, cluster=cluster, fingerprint=fp, state=state)
        )
    return reader_pb2.ReconcileEvent(generation=generation, snapshot=snapshot, clusters=clusters)


def offsets_read(batches: list[pa.RecordBatch]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for b in batches:
        for c, t, p, o in zip(
            b.column("cluster").to_pylist(),
            b.column("topic").to_pylist(),
            b.column("partition").to_pylist(),
            b.column("offset").to_pylist(),
            strict=True,
        ):
            out.setdefault(f"{c}/{t}/{p}", []).append(o)
    return {k: sorted(v) for k, v in out.items()}


def stats(agent: ReaderAgent) -> dict[str, reader_pb2.SubReaderStats]:
    return {s.cluster: s for s in agent.stats()[1]}


@pytest.fixture
def factory() -> FakeFactory:
    return FakeFactory()


@pytest.fixture
def agent(factory: FakeFactory) -> Iterator[ReaderAgent]:
    # A long idle timeout: the background reaper stays out of the way.
    a = ReaderAgent(agent_id="test-agent", factory=factory, idle_timeout_s=3600)
    yield a
    a.close()


def read_all(agent: ReaderAgent, t: ReadTask) -> list[pa.RecordBatch]:
    return list(agent.read(t))


# -- reading ---------------------------------------------------------------------


def test_task_yields_every_offset_as_arrow(agent: ReaderAgent) -> None:
    batches = read_all(
        agent,
        task(rng("a", 0, 5), rng("a", 10, 13, partition=1), rng("b", 7, 9, topic="u")),
    )
    assert batches
    assert all(b.schema.equals(SCHEMA) for b in batches)
    assert offsets_read(batches) == {
        "a/t/0": [0, 1, 2, 3, 4],
        "a/t/1": [10, 11, 12],
        "b/u/0": [7, 8],
    }


def test_task_with_headers(agent: ReaderAgent) -> None:
    batches = read_all(agent, task(rng("a", 0, 2), include_headers=True))
    assert [b.schema.equals(SCHEMA_WITH_HEADERS) for b in batches] == [True]


def test_empty_task_reads_nothing(agent: ReaderAgent, factory: FakeFactory) -> None:
    assert read_all(agent, task()) == []
    assert factory.made == []


def test_sub_reader_is_reused_across_tasks(agent: ReaderAgent, factory: FakeFactory) -> None:
    read_all(agent, task(rng("a", 0, 5)))
    read_all(agent, task(rng("a", 5, 9)))
    read_all(agent, task(rng("a", 9, 12), rng("b", 0, 1)))
    assert len(factory.of("a")) == 1
    assert len(factory.of("b")) == 1
    reader = factory.of("a")[0]
    assert len(reader.calls) == 3
    assert reader.closes == 0
    assert agent.sub_readers() == [(STREAM, "a"), (STREAM, "b")]


def test_reader_gets_the_task_connection(agent: ReaderAgent, factory: FakeFactory) -> None:
    read_all(agent, task(rng("a", 0, 1)))
    assert factory.of("a")[0].connection == CONNS["a"]


def test_two_ranges_of_one_split_are_both_read(agent: ReaderAgent, factory: FakeFactory) -> None:
    batches = read_all(agent, task(rng("a", 5, 10), rng("a", 0, 5), rng("a", 0, 2, partition=1)))
    assert offsets_read(batches) == {"a/t/0": list(range(10)), "a/t/1": [0, 1]}
    calls = factory.of("a")[0].calls
    # one partition at most once per call: two rounds
    assert len(calls) == 2
    for call in calls:
        keys = [(r.topic, r.partition) for r in call]
        assert len(keys) == len(set(keys))
    assert calls[0] == [SplitRange("a", "t", 0, 0, 5), SplitRange("a", "t", 1, 0, 2)]
    assert calls[1] == [SplitRange("a", "t", 0, 5, 10)]


def test_stats_count_records_and_splits(agent: ReaderAgent) -> None:
    read_all(agent, task(rng("a", 0, 5), rng("a", 0, 3, partition=1), rng("b", 0, 2)))
    read_all(agent, task(rng("a", 5, 6)))
    st = stats(agent)
    assert st["a"].records_read == 9
    assert st["b"].records_read == 2
    # every split read lately, by any of its tasks
    assert list(st["a"].splits) == ["a/t/0", "a/t/1"]
    assert st["a"].restarts == 0


def test_splits_not_read_for_a_while_are_no_longer_reported(
    agent: ReaderAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    from multikafka.reader_agent import _subreader as subreader

    now = [1000.0]
    monkeypatch.setattr(subreader.time, "monotonic", lambda: now[0])
    read_all(agent, task(rng("a", 0, 5), rng("a", 0, 3, partition=1)))
    now[0] += subreader.RECENT_S / 2
    read_all(agent, task(rng("a", 5, 6)))
    now[0] += subreader.RECENT_S / 2 + 1
    assert list(stats(agent)["a"].splits) == ["a/t/0"]


# -- reconcile: push side -------------------------------------------------------


def test_changed_fingerprint_restarts_only_that_cluster(
    agent: ReaderAgent, factory: FakeFactory
) -> None:
    read_all(agent, task(rng("a", 0, 1), rng("b", 0, 1)))
    reader_a, reader_b = factory.of("a")[0], factory.of("b")[0]
    agent.apply(event(2, ("a", "ACTIVE"), ("b", "ACTIVE", conn("b", "127.0.0.1:10").fingerprint)))
    assert reader_a.closes == 0
    assert reader_b.closes == 1
    assert agent.sub_readers() == [(STREAM, "a")]
    st = stats(agent)
    assert st["a"].restarts == 0
    assert st["b"].restarts == 1

    new_b = {"a": CONNS["a"], "b": conn("b", "127.0.0.1:10")}
    read_all(agent, task(rng("a", 1, 2), rng("b", 1, 2), clusters=new_b))
    assert factory.of("a") == [reader_a]
    assert len(factory.of("b")) == 2
    assert factory.of("b")[1].connection == new_b["b"]
    assert len(reader_a.calls) == 2


def test_unchanged_event_restarts_nothing(agent: ReaderAgent, factory: FakeFactory) -> None:
    read_all(agent, task(rng("a", 0, 1), rng("b", 0, 1)))
    agent.apply(event(2, ("a", "ACTIVE"), ("b", "DRAINING")))
    assert [r.closes for r in factory.made] == [0, 0]
    assert agent.sub_readers() == [(STREAM, "a"), (STREAM, "b")]


def test_removed_cluster_is_closed_and_forgotten(agent: ReaderAgent, factory: FakeFactory) -> None:
    agent.apply(event(1, ("a", "ACTIVE"), ("b", "ACTIVE")))
    read_all(agent, task(rng("a", 0, 1), rng("b", 0, 1)))
    assert agent.tracked() == [(STREAM, "a"), (STREAM, "b")]
    agent.apply(event(2, ("b", "REMOVED", "")))
    assert factory.of("b")[0].closes == 1
    assert factory.of("a")[0].closes == 0
    assert agent.tracked() == [(STREAM, "a")]
    assert set(stats(agent)) == {"a"}


def test_removed_unknown_cluster_is_harmless(agent: ReaderAgent) -> None:
    agent.apply(event(3, ("b", "REMOVED", "")))
    assert agent.tracked() == []
    assert agent.applied_generation == 3


@pytest.mark.parametrize("state", ["FAILED", "STANDBY"])
def test_unread_state_closes_the_sub_reader(
    agent: ReaderAgent, factory: FakeFactory, state: str
) -> None:
    read_all(agent, task(rng("a", 0, 1), rng("b", 0, 1)))
    agent.apply(event(2, ("b", state)))
    assert factory.of("b")[0].closes == 1
    assert factory.of("a")[0].closes == 0
    assert agent.sub_readers() == [(STREAM, "a")]
    assert stats(agent)["b"].restarts == 0


def test_desired_state_before_any_reader_is_remembered(
    agent: ReaderAgent, factory: FakeFactory
) -> None:
    agent.apply(event(1, ("b", "ACTIVE")))
    assert factory.made == []
    assert agent.tracked() == [(STREAM, "b")]
    assert agent.sub_readers() == []


def test_snapshot_drops_clusters_not_in_it(agent: ReaderAgent, factory: FakeFactory) -> None:
    agent.apply(event(1, ("a", "ACTIVE"), ("b", "ACTIVE")))
    read_all(agent, task(rng("a", 0, 1), rng("b", 0, 1)))
    agent.apply(event(2, ("a", "ACTIVE"), snapshot=True))
    assert factory.of("b")[0].closes == 1
    assert factory.of("a")[0].closes == 0
    assert agent.tracked() == [(STREAM, "a")]


def test_non_snapshot_event_keeps_clusters_not_in_it(
    agent: ReaderAgent, factory: FakeFactory
) -> None:
    agent.apply(event(1, ("a", "ACTIVE"), ("b", "ACTIVE")))
    read_all(agent, task(rng("a", 0, 1), rng("b", 0, 1)))
    agent.apply(event(2, ("a", "ACTIVE")))
    assert [r.closes for r in factory.made] == [0, 0]
    assert agent.tracked() == [(STREAM, "a"), (STREAM, "b")]


def test_applied_generation_is_the_max(agent: ReaderAgent) -> None:
    assert agent.applied_generation == 0
    agent.apply(event(5, ("a", "ACTIVE")))
    agent.apply(event(3, ("a", "ACTIVE")))
    assert agent.applied_generation == 5
    agent.apply(event(7))
    assert agent.applied_generation == 7
    assert agent.stats()[0] == 7


# -- reconcile while a task reads ---------------------------------------------------


def two_batch_task() -> ReadTask:
    return task(rng("b", 0, 3), rng("b", 0, 2, partition=1))


@pytest.mark.parametrize("state", ["FAILED", "STANDBY", "REMOVED"])
def test_close_during_a_task_is_deferred(
    agent: ReaderAgent, factory: FakeFactory, state: str
) -> None:
    it = agent.read(two_batch_task())
    first = next(it)
    reader = factory.of("b")[0]
    agent.apply(event(2, ("b", state)))
    assert reader.closes == 0  # still in use
    assert agent.sub_readers() == []  # but out of service
    rest = list(it)
    assert reader.closes == 1
    assert offsets_read([first, *rest]) == {"b/t/0": [0, 1, 2], "b/t/1": [0, 1]}


def test_restart_during_a_task_is_deferred(agent: ReaderAgent, factory: FakeFactory) -> None:
    it = agent.read(two_batch_task())
    next(it)
    reader = factory.of("b")[0]
    agent.apply(event(2, ("b", "ACTIVE", "new-fingerprint")))
    assert reader.closes == 0
    list(it)
    assert reader.closes == 1
    assert stats(agent)["b"].restarts == 1


def test_task_after_deferred_close_gets_a_new_reader(
    agent: ReaderAgent, factory: FakeFactory
) -> None:
    it = agent.read(two_batch_task())
    next(it)
    agent.apply(event(2, ("b", "ACTIVE", "new-fingerprint")))
    # a second task meanwhile does not use the reader being retired
    read_all(agent, task(rng("b", 10, 11)))
    assert len(factory.of("b")) == 2
    assert factory.of("b")[0].closes == 0
    assert factory.of("b")[1].calls == [[SplitRange("b", "t", 0, 10, 11)]]
    list(it)
    assert factory.of("b")[0].closes == 1
    assert factory.of("b")[1].closes == 0


def test_abandoned_iteration_releases_the_reader(agent: ReaderAgent, factory: FakeFactory) -> None:
    it = agent.read(two_batch_task())
    next(it)
    agent.apply(event(2, ("b", "FAILED")))
    it.close()  # Spark stops consuming the task's iterator
    assert factory.of("b")[0].closes == 1


@pytest.mark.parametrize("state", ["FAILED", "STANDBY", "REMOVED"])
def test_reader_is_told_to_abandon_a_cluster_no_longer_read(
    agent: ReaderAgent, factory: FakeFactory, state: str
) -> None:
    agent.apply(event(1, ("b", "ACTIVE")))
    it = agent.read(two_batch_task())
    next(it)
    reader = factory.of("b")[0]
    assert reader.abandon_checks == []
    agent.apply(event(2, ("b", state)))
    list(it)
    assert reader.abandon_checks == [True, True]


def test_reader_is_not_told_to_abandon_a_read_cluster(
    agent: ReaderAgent, factory: FakeFactory
) -> None:
    agent.apply(event(1, ("b", "ACTIVE")))
    read_all(agent, two_batch_task())
    assert factory.of("b")[0].abandon_checks == [False, False]


def test_cluster_removed_during_a_task_is_forgotten_after_it(agent: ReaderAgent) -> None:
    agent.apply(event(1, ("a", "ACTIVE"), ("b", "ACTIVE")))
    it = agent.read(two_batch_task())
    next(it)
    agent.apply(event(2, ("b", "REMOVED", "")))
    assert agent.tracked() == [(STREAM, "a")]
    list(it)
    assert agent.tracked() == [(STREAM, "a")]


# -- reconcile: pull side ------------------------------------------------------------


def test_task_with_new_connection_restarts_the_sub_reader(
    agent: ReaderAgent, factory: FakeFactory
) -> None:
    read_all(agent, task(rng("a", 0, 1), rng("b", 0, 1)))
    newer = {"a": CONNS["a"], "b": conn("b", **{"sasl.password": "rotated"})}
    batches = read_all(agent, task(rng("a", 1, 2), rng("b", 1, 2), clusters=newer))
    assert offsets_read(batches) == {"a/t/0": [1], "b/t/0": [1]}
    old_b, new_b = factory.of("b")
    assert old_b.closes == 1
    assert new_b.connection == newer["b"]
    assert new_b.closes == 0
    assert len(factory.of("a")) == 1
    st = stats(agent)
    assert st["b"].restarts == 1
    assert st["a"].restarts == 0
    assert st["b"].records_read == 2  # counters outlive the restart


# -- idle sub-readers -------------------------------------------------------------------


def test_reap_idle_closes_only_idle_sub_readers(agent: ReaderAgent, factory: FakeFactory) -> None:
    read_all(agent, task(rng("a", 0, 1), rng("b", 0, 1)))
    agent._subs[(STREAM, "a")].last_used = time.monotonic() - agent.idle_timeout_s - 1
    assert agent.reap_idle() == 1
    assert factory.of("a")[0].closes == 1
    assert factory.of("b")[0].closes == 0
    assert agent.sub_readers() == [(STREAM, "b")]
    assert stats(agent)["a"].restarts == 0
    assert agent.reap_idle() == 0


def test_reap_idle_spares_sub_readers_in_use(agent: ReaderAgent, factory: FakeFactory) -> None:
    it = agent.read(two_batch_task())
    next(it)
    agent._subs[(STREAM, "b")].last_used = time.monotonic() - agent.idle_timeout_s - 1
    assert agent.reap_idle() == 0
    assert factory.of("b")[0].closes == 0
    list(it)
    assert factory.of("b")[0].closes == 0  # release marks it used just now
    assert agent.reap_idle() == 0


def test_background_reaper_closes_idle_sub_readers(factory: FakeFactory) -> None:
    a = ReaderAgent(agent_id="reaper-test", factory=factory, idle_timeout_s=0.01)
    try:
        read_all(a, task(rng("a", 0, 1)))
        assert factory.of("a")[0].closed_event.wait(timeout=10)
        assert factory.of("a")[0].closes == 1
        eventually(lambda: a.sub_readers() == [], timeout_s=10)
    finally:
        a.close()


# -- lifecycle ---------------------------------------------------------------------------


def test_close_closes_every_sub_reader(factory: FakeFactory) -> None:
    a = ReaderAgent(agent_id="close-test", factory=factory, idle_timeout_s=3600)
    read_all(a, task(rng("a", 0, 1), rng("b", 0, 1)))
    a.close()
    assert [r.closes for r in factory.made] == [1, 1]
    assert a.sub_readers() == []


def test_read_task_repr_hides_connections() -> None:
    t = task(rng("a", 0, 5), clusters={"a": conn("a", **{"sasl.password": "hunter2"})})
    assert "hunter2" not in repr(t)
    assert "a/t/0[0,5)" in repr(t)


# -- a task's clusters are read at the same time -----------------------------------------


class GatedReader(FakeReader):
    """Cluster "a"'s reader: before its records it waits for ``gate`` (a slow
    fetch; 3 s at most), asking should_abandon while it waits; or fails when
    told to."""

    gate = threading.Event()
    fail: Exception | None = None

    def read(
        self,
        ranges: Sequence[SplitRange],
        outcome: ReadOutcome,
        *,
        include_headers: bool,
        fail_on_data_loss: bool,
        should_abandon: Callable[[], bool],
    ) -> Iterator[Columns]:
        if self.connection.cluster == "a":
            if self.fail is not None:
                raise self.fail
            deadline = time.monotonic() + 3.0  # a test that expects no wait fails, not hangs
            while not self.gate.wait(0.01) and time.monotonic() < deadline:
                if should_abandon():
                    outcome.abandoned.extend(ranges)
                    return
        yield from super().read(
            ranges,
            outcome,
            include_headers=include_headers,
            fail_on_data_loss=fail_on_data_loss,
            should_abandon=should_abandon,
        )


@pytest.fixture
def gated() -> Iterator[ReaderAgent]:
    GatedReader.gate = threading.Event()
    GatedReader.fail = None
    a = ReaderAgent(agent_id="gated", factory=GatedReader, idle_timeout_s=3600)
    yield a
    GatedReader.gate.set()
    a.close()


def read_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("multikafka-read-")]


def test_a_slow_cluster_does_not_hold_back_another(gated: ReaderAgent) -> None:
    """Cluster b's records come while cluster a still waits for its fetch
    (read one after the other, b would wait for a)."""
    it = gated.read(task(rng("a", 0, 2), rng("b", 0, 3)))
    first = next(it)
    assert first.column("cluster").to_pylist() == ["b"] * 3
    GatedReader.gate.set()
    assert offsets_read([first, *it]) == {"a/t/0": [0, 1], "b/t/0": [0, 1, 2]}
    assert read_threads() == []
    assert all(s.in_use == 0 for s in gated._subs.values())
    assert {c: s.records_read for c, s in stats(gated).items()} == {"a": 2, "b": 3}


def test_read_one_after_the_other_when_not_concurrent(gated: ReaderAgent) -> None:
    gated.concurrent_clusters = False
    GatedReader.gate.set()
    batches = list(gated.read(task(rng("b", 0, 3), rng("a", 0, 2))))
    assert [b.column("cluster")[0].as_py() for b in batches] == ["a", "b"]


def test_stopping_early_stops_every_clusters_read_without_abandoning(gated: ReaderAgent) -> None:
    """Spark stops reading the task while cluster a waits: a's read gives up
    at its next poll, every sub-reader is released, and nothing counts as
    abandoned (the task stopped; its ranges were not given up)."""
    it = gated.read(task(rng("a", 0, 2), rng("b", 0, 3)))
    next(it)
    it.close()
    assert read_threads() == []
    assert all(s.in_use == 0 for s in gated._subs.values())
    assert {c: s.abandoned_ranges for c, s in stats(gated).items()} == {"a": 0, "b": 0}


def test_a_failing_cluster_fails_the_task_and_stops_the_others(gated: ReaderAgent) -> None:
    GatedReader.fail = RuntimeError("cluster a broke")
    with pytest.raises(RuntimeError, match="cluster a broke"):
        list(gated.read(task(rng("a", 0, 2), rng("b", 0, 3))))
    assert read_threads() == []
    assert all(s.in_use == 0 for s in gated._subs.values())
