"""Read marks (:class:`multikafka.coordinator.translation.marks.ReadMarks`) over the
in-memory etcd: the at-or-before lookup failover translation uses, the last
record read before a position (how far each read went, ranges passed without
a record, fingerprints taken from the range before), duplicate offsets,
thinning past ``MAX_MARKS`` and fingerprints kept on the newest marks only,
persistence under ``<prefix>/marks/<stream>/<split>`` (flush, load, the
former one-value-per-stream layout, unreadable values, forget) and flushing
while etcd is down."""

from __future__ import annotations

import json

from multikafka.coordinator.translation.marks import (
    FINGERPRINTED_MARKS,
    MAX_MARKS,
    Mark,
    ReadMarks,
)
from multikafka.core._fingerprint import TRAILING, Fingerprint, encode
from tests.fakes import FakeEtcd

INTERNALS = (
    "multikafka.coordinator.translation.marks",
    "multikafka.core._fingerprint",
)


KEY = "/t/marks/s/a/t/0"


def marks_on(etcd: FakeEtcd) -> ReadMarks:
    return ReadMarks(etcd, "/t")  # type: ignore[arg-type]


def stored(etcd: FakeEtcd, key: str = KEY) -> object:
    raw = etcd.value(key)
    return json.loads(raw) if raw is not None else None


def fps(*digests: int) -> tuple[Fingerprint, ...]:
    return tuple(Fingerprint(1000 + d, d) for d in digests)


async def test_at_or_before_gives_the_mark_with_the_largest_offset_not_after_the_position() -> None:
    marks = marks_on(FakeEtcd())
    # added out of order: the index keeps them sorted
    marks.add("s", "a/t/0", 20, 2000)
    marks.add("s", "a/t/0", 10, 1000)
    marks.add("s", "a/t/0", 30, 3000)
    marks.add("s", "a/t/1", 5, 500)

    assert marks.at_or_before("s", "a/t/0", 9) is None  # before the first mark
    assert marks.at_or_before("s", "a/t/0", 10) == Mark(10, 1000)
    assert marks.at_or_before("s", "a/t/0", 25) == Mark(20, 2000)
    assert marks.at_or_before("s", "a/t/0", 30) == Mark(30, 3000)
    assert marks.at_or_before("s", "a/t/0", 10_000) == Mark(30, 3000)
    assert marks.at_or_before("s", "a/t/1", 25) == Mark(5, 500)  # per split
    assert marks.at_or_before("s", "a/t/2", 25) is None
    assert marks.at_or_before("other", "a/t/0", 25) is None  # per stream


async def test_last_read_is_exact_only_when_the_mark_s_read_reached_the_position() -> None:
    marks = marks_on(FakeEtcd())
    marks.add("s", "a/t/0", 9, 900, next=12, start=0, fingerprints=fps(7, 8, 9))
    marks.add("s", "a/t/0", 20, 2000)  # a read that stopped early: how far is not known

    # 10 and 11 are transaction markers: a query at 10, 11 or 12 read 9 last
    for position in (10, 11, 12):
        assert marks.last_read("s", "a/t/0", position) == (
            marks.at_or_before("s", "a/t/0", 9),
            True,
        )
    mark, exact = marks.last_read("s", "a/t/0", 15)  # 12..14 read, but not reported yet
    assert (mark, exact) == (Mark(9, 900, 12, fps(7, 8, 9)), False)
    assert marks.last_read("s", "a/t/0", 21) == (Mark(20, 2000), False)
    assert marks.last_read("s", "a/t/0", 0) == (None, False)  # nothing read
    assert marks.last_read("s", "a/t/0", 5) == (None, False)


async def test_a_range_passed_without_a_record_carries_the_mark_before_it_on() -> None:
    marks = marks_on(FakeEtcd())
    marks.add("s", "a/t/0", 9, 900, next=10, start=5)
    marks.passed("s", "a/t/0", 10, 14)  # [10, 14): markers only
    assert marks.last_read("s", "a/t/0", 14) == (Mark(9, 900, 14), True)

    marks.passed("s", "a/t/0", 20, 25)  # not adjacent to what is known: nothing learnt
    assert marks.last_read("s", "a/t/0", 25) == (Mark(9, 900, 14), False)


async def test_a_short_range_s_fingerprints_are_completed_from_the_range_before_it() -> None:
    marks = marks_on(FakeEtcd())
    marks.add("s", "a/t/0", 9, 900, next=10, start=0, fingerprints=fps(6, 7, 8, 9))
    marks.add("s", "a/t/0", 11, 1100, next=12, start=10, fingerprints=fps(10, 11))
    assert marks.at_or_before("s", "a/t/0", 11) == Mark(11, 1100, 12, fps(8, 9, 10, 11))
    assert len(fps(8, 9, 10, 11)) == TRAILING

    # a range that did not start where a known read ended takes nothing
    marks.add("s", "a/t/0", 30, 3000, next=31, start=20, fingerprints=fps(30))
    assert marks.at_or_before("s", "a/t/0", 30) == Mark(30, 3000, 31, fps(30))


async def test_adding_the_same_offset_again_keeps_one_mark_and_what_it_knows() -> None:
    etcd = FakeEtcd()
    marks = marks_on(etcd)
    marks.add("s", "a/t/0", 10, 1000)
    marks.add("s", "a/t/0", 10, 9999)  # the same record again: the first mark stays
    marks.add("s", "a/t/0", 11, 1100)
    assert marks.at_or_before("s", "a/t/0", 10) == Mark(10, 1000)
    await marks.flush()
    assert stored(etcd) == [[10, 1000], [11, 1100]]

    # another read of the same record that went further, with fingerprints
    marks.add("s", "a/t/0", 10, 1000, next=11, start=8, fingerprints=fps(9, 10))
    marks.add("s", "a/t/0", 10, 1000, next=11, start=10, fingerprints=fps(10))
    assert marks.at_or_before("s", "a/t/0", 10) == Mark(10, 1000, 11, fps(9, 10))


async def test_thinning_past_max_marks_keeps_the_oldest_and_every_recent_mark() -> None:
    etcd = FakeEtcd()
    marks = marks_on(etcd)
    n = MAX_MARKS + 1  # one more than the index holds: thinning happens once
    for offset in range(n):
        marks.add("s", "a/t/0", offset, 1000 + offset)

    keep = MAX_MARKS // 2
    older_end = n - keep  # the newest ``keep`` marks are offsets older_end..n-1
    expected = list(range(0, older_end, 2)) + list(range(older_end, n))
    await marks.flush()
    assert stored(etcd) == [[o, 1000 + o] for o in expected]

    assert marks.at_or_before("s", "a/t/0", 0) == Mark(0, 1000)  # the oldest mark is kept
    assert marks.at_or_before("s", "a/t/0", 1) == Mark(0, 1000)  # offset 1 was thinned out
    for offset in range(older_end, n):  # the newest MAX_MARKS // 2 are all kept
        assert marks.at_or_before("s", "a/t/0", offset) == Mark(offset, 1000 + offset)


async def test_only_the_newest_marks_keep_their_fingerprints() -> None:
    marks = marks_on(FakeEtcd())
    n = FINGERPRINTED_MARKS + 3
    for offset in range(n):
        marks.add("s", "a/t/0", offset, offset, next=offset + 1, fingerprints=fps(offset))

    for offset in range(n):
        mark = marks.at_or_before("s", "a/t/0", offset)
        assert mark is not None
        assert mark.next == offset + 1  # how far each read went is kept
        assert bool(mark.fingerprints) == (offset >= n - FINGERPRINTED_MARKS)


async def test_flush_writes_a_key_per_split_and_a_new_index_loads_them() -> None:
    etcd = FakeEtcd()
    marks = marks_on(etcd)
    marks.add("s", "a/t/0", 10, 1000)
    marks.add("s", "a/t/0", 20, 2000, next=23, start=11, fingerprints=fps(19, 20))
    marks.add("s", "b/u/3", 7, 700)
    marks.add("other", "a/t/0", 5, 50)
    assert etcd.keys("/t/marks/") == []  # nothing written before a flush

    await marks.flush()
    assert etcd.keys("/t/marks/") == [
        "/t/marks/other/a/t/0",
        "/t/marks/s/a/t/0",
        "/t/marks/s/b/u/3",
    ]
    assert stored(etcd) == [[10, 1000], [20, 2000, 23, encode(fps(19, 20))]]
    assert stored(etcd, "/t/marks/other/a/t/0") == [[5, 50]]

    loaded = marks_on(etcd)
    await loaded.load()
    for stream, split, offset in [
        ("s", "a/t/0", 9),
        ("s", "a/t/0", 15),
        ("s", "a/t/0", 99),
        ("s", "b/u/3", 7),
        ("other", "a/t/0", 6),
    ]:
        assert loaded.at_or_before(stream, split, offset) == marks.at_or_before(
            stream, split, offset
        )
    assert loaded.last_read("s", "a/t/0", 23) == (Mark(20, 2000, 23, fps(19, 20)), True)
    assert loaded.at_or_before("other", "a/t/0", 6) == Mark(5, 50)


async def test_marks_kept_one_value_per_stream_are_loaded_and_rewritten_per_split() -> None:
    etcd = FakeEtcd()
    await etcd.put("/t/marks/s", json.dumps({"a/t/0": [[3, 300], [1, 100]]}).encode())

    marks = marks_on(etcd)
    await marks.load()
    assert marks.at_or_before("s", "a/t/0", 2) == Mark(1, 100)

    await marks.flush()
    assert etcd.keys("/t/marks/") == [KEY]
    assert stored(etcd) == [[1, 100], [3, 300]]


async def test_load_ignores_unreadable_values_and_keeps_the_readable_ones() -> None:
    etcd = FakeEtcd()
    await etcd.put("/t/marks/garbage/a/t/0", b"not json")
    await etcd.put("/t/marks/short/a/t/0", json.dumps([[1]]).encode())
    await etcd.put("/t/marks/badtime/a/t/0", json.dumps([[1, "soon"]]).encode())
    await etcd.put("/t/marks/badfp/a/t/0", json.dumps([[1, 100, 2, "12:zz"]]).encode())
    await etcd.put("/t/marks/old/a/t/0", json.dumps({"a/t/0": [[1, 100]]}).encode())
    await etcd.put("/t/marks/good/a/t/0", json.dumps([[3, 300], [1, 100]]).encode())

    marks = marks_on(etcd)
    await marks.load()

    assert marks.at_or_before("good", "a/t/0", 2) == Mark(1, 100)  # loaded, and sorted
    assert marks.at_or_before("good", "a/t/0", 3) == Mark(3, 300)
    for stream in ("garbage", "short", "badtime", "badfp", "old"):
        assert marks.at_or_before(stream, "a/t/0", 10) is None


async def test_load_ignores_a_stored_stream_value_that_is_json_but_not_an_object() -> None:
    """A value of the former layout that parses as JSON but is not an object
    of splits (a list, ``null``) is as unreadable as one that does not parse."""
    etcd = FakeEtcd()
    await etcd.put("/t/marks/alist", b"[]")
    await etcd.put("/t/marks/anull", b"null")
    await etcd.put("/t/marks/good/a/t/0", json.dumps([[1, 100]]).encode())

    marks = marks_on(etcd)
    await marks.load()  # must not raise: the coordinator loads marks when it starts

    assert marks.at_or_before("good", "a/t/0", 1) == Mark(1, 100)
    assert marks.at_or_before("alist", "a/t/0", 1) is None


async def test_forget_deletes_the_stream_s_keys_on_the_next_flush() -> None:
    etcd = FakeEtcd()
    marks = marks_on(etcd)
    marks.add("s", "a/t/0", 10, 1000)
    marks.add("s", "a/t/1", 10, 1000)
    marks.add("keep", "a/t/0", 1, 100)
    await marks.flush()
    assert len(etcd.keys("/t/marks/s/")) == 2

    marks.forget("s")
    assert marks.at_or_before("s", "a/t/0", 10) is None
    assert etcd.value(KEY) is not None  # deleted only when flushed

    await marks.flush()
    assert etcd.keys("/t/marks/") == ["/t/marks/keep/a/t/0"]
    loaded = marks_on(etcd)
    await loaded.load()
    assert loaded.at_or_before("s", "a/t/0", 10) is None
    assert loaded.at_or_before("keep", "a/t/0", 1) == Mark(1, 100)


async def test_a_flush_while_etcd_is_down_keeps_the_marks_and_a_later_flush_writes_them() -> None:
    etcd = FakeEtcd()
    marks = marks_on(etcd)
    marks.add("s", "a/t/0", 10, 1000)
    marks.add("other", "a/t/0", 5, 50)

    etcd.down = True
    await marks.flush()  # does not raise
    assert etcd.keys("/t/marks/") == []
    assert etcd.puts == 0

    etcd.down = False
    await marks.flush()
    assert stored(etcd) == [[10, 1000]]
    assert stored(etcd, "/t/marks/other/a/t/0") == [[5, 50]]
