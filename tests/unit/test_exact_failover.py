"""Exact failover over the fakes: the strategy's estimate, then the mirror
read forward from it for the copy of the last records a query read
(:class:`multikafka.coordinator.translation.FailoverTranslator`), what the
history and the metrics say of it, the wait for the mark of the last record
read, the failed cluster's splits kept while the new one's wait
(:meth:`multikafka.coordinator.planning.entry.EntryOffsets.held`, ``plan_end``'s
``hold``), the same answer from a new leader, and a drain into an MM2 mirror.

Stream ``s``: ``a`` (h:1) ACTIVE and ``b`` (h:2) STANDBY, one topic ``t``
of 2 partitions. ``a`` holds 40 records per partition; ``b`` holds 100
records of its own, then a copy of ``a``'s (the same key, value and time)
at offsets shifted by 100.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from multikafka.coordinator.planning.end_vector import ClusterSnapshot, plan_end
from multikafka.coordinator.state.stream_status import FailoverRecord
from multikafka.coordinator.translation import FailoverTranslator, ReadMark, ReadMarks
from multikafka.coordinator.translation.failover import ESTIMATE, MATCHED, PARTIAL
from multikafka.core._fingerprint import Fingerprint, fingerprint
from multikafka.core._offsets import as_offsets
from multikafka.core._ranges import SplitRange
from multikafka.core.mm2_records import OffsetSync
from multikafka.core.model import ClusterState, FailoverStrategy, SplitId
from multikafka.devstack.stack import stream_doc
from tests.fakes import FAKE_CONFIG, Parts, coordinator_parts

INTERNALS = (
    "multikafka.coordinator.planning.end_vector",
    "multikafka.coordinator.state.stream_status",
    "multikafka.coordinator.translation",
    "multikafka.coordinator.translation.failover",
    "multikafka.core._fingerprint",
    "multikafka.core._offsets",
    "multikafka.core._ranges",
)


A, B = "h:1", "h:2"
N = 40
SHIFT = 100


def content(partition: int, n: int) -> tuple[bytes, bytes]:
    return b"p%d-k%d" % (partition, n), b"v%d" % n


def time_of(n: int) -> int:
    return 1_000_000 + 100 * n  # 100 ms apart


def source_fp(partition: int, n: int) -> Fingerprint:
    return fingerprint(*content(partition, n), time_of(n))


async def mirrored(
    parts: Parts, *, copy: Any = None, strategy: FailoverStrategy = FailoverStrategy.TIMESTAMP
) -> FailoverRecord:
    """The stream, failed over a -> b (margin 1 s). ``copy(partition)``
    gives the records b holds after its own 100 (default: all of a's)."""
    for p in (0, 1):
        parts.kafka.cluster(A).add_records(
            "t", p, [time_of(n) for n in range(N)], [content(p, n) for n in range(N)]
        )
        ours = [(b"own", b"%d" % i) for i in range(SHIFT)]
        parts.kafka.cluster(B).add_records("t", p, [1000 + i for i in range(SHIFT)], ours)
        copied = copy(p) if copy is not None else list(range(N))
        parts.kafka.cluster(B).add_records(
            "t", p, [time_of(n) for n in copied], [content(p, n) for n in copied]
        )
    await parts.put(stream_doc("s", {"a": (A, ["t"]), "b": (B, ["t"])}, states={"b": "STANDBY"}))
    view = await parts.lifecycle.failover("s", "a", "b", strategy=strategy, margin_ms=1000)
    record = view.status.failover_into("b")
    assert record is not None
    return record


def read_up_to(parts: Parts, partition: int, position: int, *, start: int = 0) -> None:
    """A range ``[start, position)`` of a's partition read, as an agent reports it."""
    last = position - 1
    parts.marks.add(
        "s",
        f"a/t/{partition}",
        last,
        time_of(last),
        next=position,
        start=start,
        fingerprints=[source_fp(partition, n) for n in range(max(start, last - 3), last + 1)],
    )


async def translate(
    parts: Parts, record: FailoverRecord, start: dict[str, int], **kw: Any
) -> tuple[dict[str, int], dict[str, Any]]:
    view = parts.store.get("s")
    splits = [SplitId("b", "t", 0), SplitId("b", "t", 1)]
    entry, notes = await parts.translator.translate(view, record, splits, start, {}, **kw)
    return entry, {n.split: n for n in notes}


async def test_the_query_resumes_right_after_the_mirror_s_copy_of_the_last_record_read(
    parts: Parts,
) -> None:
    record = await mirrored(parts)
    read_up_to(parts, 0, 30)
    read_up_to(parts, 1, 25, start=20)

    entry, notes = await translate(parts, record, {"a/t/0": 30, "a/t/1": 25})

    # Records 0..29 and 0..24 were read: the copies of 30 and 25 come next.
    assert entry == {"b/t/0": SHIFT + 30, "b/t/1": SHIFT + 25}
    t = notes["b/t/0"]
    # the estimate: time of record 29 - 1 s = record 19's time -> its copy
    assert (t.estimate, t.offset, t.skipped, t.result) == (SHIFT + 19, SHIFT + 30, 11, MATCHED)
    assert f"matched the last 4 records read, up to a/t/0@29, at {SHIFT + 29}" in t.how
    assert "11 records not read again" in t.how
    assert notes["b/t/1"].result == MATCHED


async def test_a_mirror_that_changed_the_records_falls_back_to_the_estimate_and_says_so(
    parts: Parts,
) -> None:
    record = await mirrored(parts)
    # a transform on the way: every value rewritten
    for p in (0, 1):
        recs = parts.kafka.cluster(B).contents[("t", p)]
        recs[SHIFT:] = [(k, (v or b"") + b"!") for k, v in recs[SHIFT:]]
    read_up_to(parts, 0, 30)
    read_up_to(parts, 1, 30)

    entry, notes = await translate(parts, record, {"a/t/0": 30, "a/t/1": 30})

    assert entry == {"b/t/0": SHIFT + 19, "b/t/1": SHIFT + 19}  # the estimate: never later
    assert notes["b/t/0"].result == ESTIMATE
    assert "no copy of the last records read found past it: the estimate stands" in (
        notes["b/t/0"].how
    )


async def test_a_mirror_that_lagged_resumes_after_the_last_record_it_copied(
    parts: Parts,
) -> None:
    # a died before b copied its records 28 and 29 (read by the query)
    record = await mirrored(parts, copy=lambda p: list(range(28)))
    read_up_to(parts, 0, 30)
    read_up_to(parts, 1, 30)

    entry, notes = await translate(parts, record, {"a/t/0": 30, "a/t/1": 30})

    assert entry["b/t/0"] == SHIFT + 28  # after the copy of 27: nothing b holds read twice
    assert notes["b/t/0"].result == PARTIAL
    assert "2 of the last 4 records read (the mirror lacks the newest)" in notes["b/t/0"].how


async def test_a_batch_the_mirror_sent_twice_is_not_read_again(parts: Parts) -> None:
    # b copied 0..31, then again 24..39 (its task restarted)
    record = await mirrored(parts, copy=lambda p: list(range(32)) + list(range(24, N)))
    read_up_to(parts, 0, 30)
    read_up_to(parts, 1, 30)

    entry, notes = await translate(parts, record, {"a/t/0": 30, "a/t/1": 30})

    # the latest copy of record 29 is the second: 100 + 32 + (29 - 24)
    assert entry["b/t/0"] == SHIFT + 32 + 6
    assert "found at 2 places" in notes["b/t/0"].how


async def test_a_translation_waits_for_the_mark_of_the_last_record_read(parts: Parts) -> None:
    record = await mirrored(parts)
    translator = FailoverTranslator(parts.discovery, parts.marks, wait_s=10.0)
    view = parts.store.get("s")
    splits = [SplitId("b", "t", 0)]
    start = {"a/t/0": 30, "a/t/1": 30}
    read_up_to(parts, 0, 20)  # a range [20, 30) was read, its report not in yet

    early = record.at_ms + 1000
    assert await translator.translate(view, record, splits, start, {}, now_ms=early) == ({}, [])

    read_up_to(parts, 0, 30, start=20)  # the report arrives
    entry, notes = await translator.translate(view, record, splits, start, {}, now_ms=early)
    assert entry == {"b/t/0": SHIFT + 30}
    assert notes[0].result == MATCHED


async def test_after_the_wait_the_last_record_known_to_be_read_is_matched(parts: Parts) -> None:
    record = await mirrored(parts)
    translator = FailoverTranslator(parts.discovery, parts.marks, wait_s=10.0)
    view = parts.store.get("s")
    read_up_to(parts, 0, 20)  # the report of [20, 30) never comes (its worker died)

    late = record.at_ms + 10_000
    entry, notes = await translator.translate(
        view, record, [SplitId("b", "t", 0)], {"a/t/0": 30}, {}, now_ms=late
    )
    # after the copy of record 19: records 20..29 are read twice, never skipped
    assert entry == {"b/t/0": SHIFT + 20}
    assert notes[0].result == PARTIAL
    assert "(the last read record known then, not the very last)" in notes[0].how


async def test_mm2_starts_from_its_sync_and_matches_from_there(parts: Parts) -> None:
    doc = stream_doc("s", {"a": (A, ["t"]), "b": (B, ["t"])}, states={"b": "STANDBY"})
    doc["clusters"]["b"]["mm2"] = {"source": "a", "replication_policy": "identity"}
    record = await mirrored(parts, strategy=FailoverStrategy.TIMESTAMP)
    await parts.put(doc)
    record = FailoverRecord("a", "b", FailoverStrategy.MM2, 1000, record.at_ms)
    # MM2 synced a/t/0's offset 30 (copied to 130); none of a/t/1's
    key, value = OffsetSync("t", 0, 30, SHIFT + 30).encode()
    parts.kafka.cluster(A).append_internal("mm2-offset-syncs.b.internal", key, value)
    await parts.duties.syncs.poll()
    read_up_to(parts, 0, 30)
    read_up_to(parts, 1, 30)

    entry, notes = await translate(parts, record, {"a/t/0": 30, "a/t/1": 30})

    assert entry == {"b/t/0": SHIFT + 30, "b/t/1": SHIFT + 30}
    # a/t/0 at the sync: its estimate is the copy of the first record not
    # read, and the copy of the last one read lies just before it
    t = notes["b/t/0"]
    assert t.how.startswith(f"mm2 from a/t/0@30 by the sync 30 -> {SHIFT + 30}")
    assert (t.estimate, t.offset, t.skipped, t.result) == (SHIFT + 30, SHIFT + 30, 0, MATCHED)
    # a/t/1 without a sync: the timestamp estimate, matched all the same
    assert notes["b/t/1"].how.startswith("no MM2 offset sync at or before a/t/1@30")
    assert notes["b/t/1"].result == MATCHED


async def test_every_query_at_one_position_shares_one_read_of_the_mirror(parts: Parts) -> None:
    record = await mirrored(parts)
    read_up_to(parts, 0, 30)
    read_up_to(parts, 1, 30)
    client = next(c for c in parts.kafka.clients if c.cluster is parts.kafka.cluster(B))

    first, _ = await translate(parts, record, {"a/t/0": 30, "a/t/1": 30})
    scanned = client.scanned
    assert scanned > 0
    again, _ = await translate(parts, record, {"a/t/0": 30, "a/t/1": 30})
    assert again == first
    assert client.scanned == scanned


async def test_a_full_cache_of_searches_keeps_the_hits_of_the_call_that_empties_it(
    parts: Parts,
) -> None:
    """The cache of searches is emptied when it is full; a split found in it
    by the same call as a new one is still matched (not the estimate)."""
    record = await mirrored(parts)
    read_up_to(parts, 0, 30)
    read_up_to(parts, 1, 30)
    view = parts.store.get("s")
    await parts.translator.translate(view, record, [SplitId("b", "t", 0)], {"a/t/0": 30}, {})
    parts.translator._found.update((("filler", i), None) for i in range(10_001))  # type: ignore[misc]

    _, notes = await translate(parts, record, {"a/t/0": 30, "a/t/1": 30})
    assert notes["b/t/0"].result == MATCHED  # a hit of this call
    assert notes["b/t/1"].result == MATCHED  # searched by this call
    assert len(parts.translator._found) <= 2


async def test_a_new_leader_finds_the_same_start(parts: Parts) -> None:
    """The match is a function of etcd (the marks, written before it is
    used) and the mirror: a leader that takes over answers the same."""
    record = await mirrored(parts)
    read_up_to(parts, 0, 30)
    read_up_to(parts, 1, 25, start=20)
    entry, _ = await translate(parts, record, {"a/t/0": 30, "a/t/1": 25})

    marks = ReadMarks(parts.etcd, "/t")  # type: ignore[arg-type]
    await marks.load()  # what the old leader wrote before it answered
    successor = FailoverTranslator(parts.discovery, marks)
    view = parts.store.get("s")
    splits = [SplitId("b", "t", 0), SplitId("b", "t", 1)]
    again, _ = await successor.translate(view, record, splits, {"a/t/0": 30, "a/t/1": 25}, {})
    assert again == entry


async def test_the_failed_cluster_s_splits_stay_until_the_new_one_s_have_entered() -> None:
    parts = await coordinator_parts(config=replace(FAKE_CONFIG, translation_wait_s=10.0))
    try:
        await _held_then_retired(parts)
    finally:
        await parts.close()


async def _held_then_retired(parts: Parts) -> None:
    await mirrored(parts)
    read_up_to(parts, 0, 30)
    read_up_to(parts, 1, 20)  # a/t/1's last range was read, its report is not in yet
    view = parts.store.get("s")
    start = as_offsets({"a/t/0": 30, "a/t/1": 30})

    waiting = await parts.batches.latest(
        view, "q", start, max_records=None, cap=None, fail_on_data_loss=True
    )
    # b/t/0 enters; b/t/1 waits, and a's splits stay for it, with no new range
    assert waiting.end == {"a/t/0": 30, "a/t/1": 30, "b/t/0": SHIFT + 30}
    assert not waiting.retired

    read_up_to(parts, 1, 30, start=20)
    done = await parts.batches.latest(
        view, "q", waiting.end, max_records=None, cap=None, fail_on_data_loss=True
    )
    assert done.end == {"b/t/0": SHIFT + N, "b/t/1": SHIFT + 30}
    assert set(done.retired) == {"a/t/0", "a/t/1"}
    translated = [e.detail for e in parts.history.entries("s") if e.kind == "translated"]
    assert len(translated) == 2
    assert (
        parts.sample(
            "multikafka_failover_translations_total", stream="s", cluster="b", result=MATCHED
        )
        == 2
    )
    assert (
        parts.sample("multikafka_failover_skipped_records_total", stream="s", cluster="b") == 2 * 11
    )


def test_plan_end_keeps_a_held_failed_cluster_s_splits_without_a_new_range() -> None:
    start = {"a/t/0": 5, "b/t/0": 7}
    snapshots = {
        "a": ClusterSnapshot(ClusterState.FAILED, frozenset({"t"}), False),
        "b": ClusterSnapshot(ClusterState.ACTIVE, frozenset({"t"}), True, ["b/t/0"], {"b/t/0": 9}),
    }
    held = plan_end(start, snapshots, {}, hold=frozenset({"a"}))
    assert held.end == {"a/t/0": 5, "b/t/0": 9}
    assert held.retired == {}
    gone = plan_end(start, snapshots, {})
    assert gone.end == {"b/t/0": 9}
    assert gone.retired == {"a/t/0": "cluster failed"}


async def test_the_mirror_is_read_past_the_margin_until_the_copy_is_found(parts: Parts) -> None:
    """Records out of time order before the copy (b's own, timed long after
    a's) do not end the search; once the copy is found, the margin does."""
    record = await mirrored(parts)
    for p in (0, 1):  # b's own records: far in the future
        parts.kafka.cluster(B).times[("t", p)][:SHIFT] = [time_of(10_000)] * SHIFT
    read_up_to(parts, 0, 30)
    read_up_to(parts, 1, 30)
    client = next(c for c in parts.kafka.clients if c.cluster is parts.kafka.cluster(B))

    entry, notes = await translate(parts, record, {"a/t/0": 30, "a/t/1": 30})

    assert entry == {"b/t/0": SHIFT + 30, "b/t/1": SHIFT + 30}
    assert notes["b/t/0"].estimate == 0  # the time lookup: b's first record is "after" it
    # each partition read up to the copy, then on to the margin's end: record
    # 29's time + 1 s is record 39's, the last copied
    assert client.scanned == 2 * (SHIFT + N)


async def test_a_report_told_twice_is_taken_once(parts: Parts) -> None:
    """Agents send their recent reports again to a new leader: the marks,
    the ranges passed and the ranges given up count once."""
    await mirrored(parts)
    mark = ReadMark("a/t/0", 9, time_of(9), next=10, start=0, fingerprints=(source_fp(0, 9),))
    gave_up = [SplitRange("a", "t", 0, 10, 40)]
    passed = [SplitRange("a", "t", 1, 5, 9)]  # markers only, after a range read to 5
    parts.marks.add("s", "a/t/1", 4, time_of(4), next=5)
    for _ in range(2):
        await parts.link.report_reads("s", "agent", "q", [mark], gave_up, 0, passed)

    assert parts.marks.last_read("s", "a/t/0", 10)[1]
    assert parts.marks.last_read("s", "a/t/1", 9)[1]
    assert parts.sample("multikafka_abandoned_ranges_total", stream="s", cluster="a") == 1
    assert [e.kind for e in parts.history.entries("s")].count("abandoned") == 1
    progress = parts.queries.get("q")
    assert progress is not None
    assert progress.abandoned == {"a/t/0": 10}


async def test_a_partition_with_fewer_records_than_the_run_is_matched_by_those(
    parts: Parts,
) -> None:
    """A source partition that held two records, both read: the run is two
    long, and found."""
    record = await mirrored(parts, copy=lambda p: list(range(N)))
    parts.marks.add(
        "s",
        "a/t/0",
        1,
        time_of(1),
        next=2,
        start=0,
        fingerprints=[source_fp(0, 0), source_fp(0, 1)],
    )
    read_up_to(parts, 1, 30)

    entry, notes = await translate(parts, record, {"a/t/0": 2, "a/t/1": 30})

    assert entry["b/t/0"] == SHIFT + 2
    assert notes["b/t/0"].result == MATCHED
    assert "matched the last 2 records read" in notes["b/t/0"].how


async def test_a_drain_into_an_mm2_replica_starts_right_after_the_copy_of_its_end(
    parts: Parts,
) -> None:
    """The draining source is read for its last records before each drain
    end; the replica starts right after their copy (the sync's translation of
    the end lies before it)."""
    await mirrored(parts)
    doc = stream_doc("s", {"a": (A, ["t"]), "b": (B, ["t"])}, states={"b": "STANDBY"})
    doc["clusters"]["b"]["mm2"] = {"source": "a", "replication_policy": "identity"}
    await parts.put(doc)
    for p in (0, 1):  # MM2 synced each partition's offset 30 (copied to 130)
        key, value = OffsetSync("t", p, 30, SHIFT + 30).encode()
        parts.kafka.cluster(A).append_internal("mm2-offset-syncs.b.internal", key, value)
    await parts.duties.syncs.poll()
    await parts.lifecycle.drain("s", "a")  # ends: 40 per partition (a's end)
    await parts.lifecycle.activate("s", "b")

    entry, notes = await parts.entry.resolve(
        parts.store.get("s"), {"a/t/0": 35, "a/t/1": 35}, ["b/t/0", "b/t/1"], {}
    )

    # the sync 30 -> 130 puts the end 40 at 131; the copy of a's record 39
    # is at 139: b starts at 140
    assert entry == {"b/t/0": SHIFT + N, "b/t/1": SHIFT + N}
    assert [(n.estimate, n.result) for n in notes] == [(SHIFT + 31, MATCHED)] * 2
    assert "mm2 from the drain end a/t/0@40 by the sync 30 -> 130" in notes[0].how


async def test_an_older_failover_into_a_cluster_since_made_standby_holds_nothing(
    parts: Parts,
) -> None:
    """a failed over to c, later read again (c drained, a active), then
    failed over to b: the record a -> c is stale. It neither translates c's
    splits nor keeps a's in the query: a's retire once b's entered."""
    await mirrored(parts)
    c = "h:3"
    parts.kafka.cluster(c).add_records("t", 0, [time_of(n) for n in range(N)])
    parts.kafka.cluster(c).add_records("t", 1, [time_of(n) for n in range(N)])
    doc = stream_doc(
        "s", {"a": (A, ["t"]), "b": (B, ["t"]), "c": (c, ["t"])}, states={"b": "STANDBY"}
    )
    await parts.put(doc)
    await parts.lifecycle.failover("s", "a", "c", margin_ms=1000)  # a -> c ...
    await parts.lifecycle.activate("s", "a")  # ... and back: c drained to STANDBY
    await parts.lifecycle.drain("s", "c")
    await parts.lifecycle.fail("s", "c")
    doc["clusters"]["c"]["state"] = "STANDBY"
    await parts.put(doc)
    await parts.lifecycle.failover("s", "a", "b", margin_ms=1000)  # then a -> b
    view = parts.store.get("s")
    assert [(f.from_cluster, f.to_cluster) for f in view.status.failovers[-2:]] == [
        ("a", "c"),
        ("a", "b"),
    ]
    read_up_to(parts, 0, 30)
    read_up_to(parts, 1, 30)
    start = as_offsets({"a/t/0": 30, "a/t/1": 30})

    assert parts.translator.record_for(view, "c", start) is None
    plan = await parts.batches.latest(
        view, "q", start, max_records=None, cap=None, fail_on_data_loss=True
    )
    assert plan.end == {"b/t/0": SHIFT + 30, "b/t/1": SHIFT + 30}
    assert set(plan.retired) == {"a/t/0", "a/t/1"}
