"""Read marks (:class:`multikafka.coordinator.translation.marks.ReadMarks`) over the
in-memory etcd: the at-or-before lookup failover translation uses, duplicate
offsets, thinning past ``MAX_MARKS``, persistence under
``<prefix>/marks/<stream>`` (flush, load, unreadable values, forget) and
flushing while etcd is down."""

from __future__ import annotations

import json

from multikafka.coordinator.translation.marks import MAX_MARKS, ReadMarks
from tests.fakes import FakeEtcd

KEY = "/t/marks/s"


def marks_on(etcd: FakeEtcd) -> ReadMarks:
    return ReadMarks(etcd, "/t")  # type: ignore[arg-type]


def stored(etcd: FakeEtcd, key: str = KEY) -> object:
    raw = etcd.value(key)
    return json.loads(raw) if raw is not None else None


async def test_at_or_before_gives_the_mark_with_the_largest_offset_not_after_the_position() -> None:
    marks = marks_on(FakeEtcd())
    # added out of order: the index keeps them sorted
    marks.add("s", "a/t/0", 20, 2000)
    marks.add("s", "a/t/0", 10, 1000)
    marks.add("s", "a/t/0", 30, 3000)
    marks.add("s", "a/t/1", 5, 500)

    assert marks.at_or_before("s", "a/t/0", 9) is None  # before the first mark
    assert marks.at_or_before("s", "a/t/0", 10) == (10, 1000)
    assert marks.at_or_before("s", "a/t/0", 25) == (20, 2000)
    assert marks.at_or_before("s", "a/t/0", 30) == (30, 3000)
    assert marks.at_or_before("s", "a/t/0", 10_000) == (30, 3000)
    assert marks.at_or_before("s", "a/t/1", 25) == (5, 500)  # per split
    assert marks.at_or_before("s", "a/t/2", 25) is None
    assert marks.at_or_before("other", "a/t/0", 25) is None  # per stream


async def test_adding_the_same_offset_twice_keeps_one_mark() -> None:
    etcd = FakeEtcd()
    marks = marks_on(etcd)
    marks.add("s", "a/t/0", 10, 1000)
    marks.add("s", "a/t/0", 10, 9999)  # the same record again: the first mark stays
    marks.add("s", "a/t/0", 11, 1100)

    assert marks.at_or_before("s", "a/t/0", 10) == (10, 1000)
    await marks.flush()
    assert stored(etcd) == {"a/t/0": [[10, 1000], [11, 1100]]}


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
    assert stored(etcd) == {"a/t/0": [[o, 1000 + o] for o in expected]}

    assert marks.at_or_before("s", "a/t/0", 0) == (0, 1000)  # the oldest mark is kept
    assert marks.at_or_before("s", "a/t/0", 1) == (0, 1000)  # offset 1 was thinned out
    for offset in range(older_end, n):  # the newest MAX_MARKS // 2 are all kept
        assert marks.at_or_before("s", "a/t/0", offset) == (offset, 1000 + offset)


async def test_flush_writes_the_marks_of_each_stream_and_a_new_index_loads_them() -> None:
    etcd = FakeEtcd()
    marks = marks_on(etcd)
    marks.add("s", "a/t/0", 10, 1000)
    marks.add("s", "a/t/0", 20, 2000)
    marks.add("s", "b/u/3", 7, 700)
    marks.add("other", "a/t/0", 5, 50)
    assert etcd.keys("/t/marks/") == []  # nothing written before a flush

    await marks.flush()
    assert etcd.keys("/t/marks/") == ["/t/marks/other", "/t/marks/s"]
    assert stored(etcd) == {"a/t/0": [[10, 1000], [20, 2000]], "b/u/3": [[7, 700]]}
    assert stored(etcd, "/t/marks/other") == {"a/t/0": [[5, 50]]}

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
    assert loaded.at_or_before("s", "a/t/0", 15) == (10, 1000)
    assert loaded.at_or_before("other", "a/t/0", 6) == (5, 50)


async def test_load_ignores_unreadable_values_and_keeps_the_readable_ones() -> None:
    etcd = FakeEtcd()
    await etcd.put("/t/marks/garbage", b"not json")
    await etcd.put("/t/marks/short", json.dumps({"a/t/0": [[1]]}).encode())
    await etcd.put("/t/marks/badtime", json.dumps({"a/t/0": [[1, "soon"]]}).encode())
    await etcd.put("/t/marks/good", json.dumps({"a/t/0": [[3, 300], [1, 100]]}).encode())

    marks = marks_on(etcd)
    await marks.load()

    assert marks.at_or_before("good", "a/t/0", 2) == (1, 100)  # loaded, and sorted
    assert marks.at_or_before("good", "a/t/0", 3) == (3, 300)
    for stream in ("garbage", "short", "badtime"):
        assert marks.at_or_before(stream, "a/t/0", 10) is None


async def test_load_ignores_a_stored_value_that_is_json_but_not_an_object() -> None:
    """A marks value that parses as JSON but is not an object of splits (a
    list, ``null``) is as unreadable as one that does not parse."""
    etcd = FakeEtcd()
    await etcd.put("/t/marks/alist", b"[]")
    await etcd.put("/t/marks/good", json.dumps({"a/t/0": [[1, 100]]}).encode())

    marks = marks_on(etcd)
    await marks.load()  # must not raise: the coordinator loads marks when it starts

    assert marks.at_or_before("good", "a/t/0", 1) == (1, 100)
    assert marks.at_or_before("alist", "a/t/0", 1) is None


async def test_forget_deletes_the_stream_key_on_the_next_flush() -> None:
    etcd = FakeEtcd()
    marks = marks_on(etcd)
    marks.add("s", "a/t/0", 10, 1000)
    marks.add("keep", "a/t/0", 1, 100)
    await marks.flush()
    assert etcd.keys("/t/marks/") == ["/t/marks/keep", "/t/marks/s"]

    marks.forget("s")
    assert marks.at_or_before("s", "a/t/0", 10) is None
    assert etcd.value(KEY) is not None  # deleted only when flushed

    await marks.flush()
    assert etcd.keys("/t/marks/") == ["/t/marks/keep"]
    loaded = marks_on(etcd)
    await loaded.load()
    assert loaded.at_or_before("s", "a/t/0", 10) is None
    assert loaded.at_or_before("keep", "a/t/0", 1) == (1, 100)


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
    assert stored(etcd) == {"a/t/0": [[10, 1000]]}
    assert stored(etcd, "/t/marks/other") == {"a/t/0": [[5, 50]]}

    puts = etcd.puts
    await marks.flush()  # nothing dirty any more: nothing written again
    assert etcd.puts == puts
