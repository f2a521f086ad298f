"""Converting confluent-kafka messages into Arrow columns: every converter gives
the same columns, the compiled one is really used where it should be, and
batches it cannot take go to the Python converter.

The messages are real ``confluent_kafka.Message`` objects (this version of
confluent-kafka can construct one), so the compiled converter reads the same
struct here as on consumed messages; ``tests/integration/test_range_consumer.py``
runs both converters on consumed ones.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka import Message
from hypothesis import given, settings
from hypothesis import strategies as st

from multikafka.core import env
from multikafka.reader_agent import _arrow as arrow
from multikafka.reader_agent import _cconvert
from multikafka.reader_agent._arrow import (
    SCHEMA,
    SCHEMA_WITH_HEADERS,
    Columns,
    convert,
    record_batch,
)

INTERNALS = (
    "multikafka.reader_agent._arrow",
    "multikafka.reader_agent._cconvert",
)


#: The converters every test runs: Python and both modes of the compiled one
#: (a missing build fails them: CI has a compiler).
CONVERTERS = ["python", "c", "c-accessors"]


def msg(
    topic: str | None = "orders",
    partition: int | None = 0,
    offset: int | None = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    timestamp: tuple[int, int] = (1, 1_700_000_000_000),
    headers: list[tuple[str, bytes]] | None = None,
) -> Message:
    kw: dict[str, Any] = {"timestamp": timestamp, "key": key, "value": value, "headers": headers}
    if topic is not None:
        kw["topic"] = topic
    if partition is not None:
        kw["partition"] = partition
    if offset is not None:
        kw["offset"] = offset
    return Message(**kw)


def sample() -> list[Message]:
    """Nulls, empty bytes, two topics, interleaved partitions, 64-bit
    offsets, every timestamp type, headers on some."""
    return [
        msg("orders", 0, 5, b"a", b"x" * 100, (1, 1_700_000_000_001)),
        msg("orders", 1, 1 << 40, None, b"", (2, 1_700_000_000_002), [("h", b"1")]),
        msg("orders", 0, 6, b"", None, (0, -1)),
        msg("refunds", 0, 7, b"\x00\xff", b"\x00", (1, 0), []),
        msg("orders", 0, 8, b"b", b"y", (1, 1_700_000_000_009), [("a", b""), ("b", b"2")]),
        msg("refunds", 3, 0, None, None, (1, 5)),
    ]


@pytest.fixture(params=CONVERTERS)
def converter(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def test_every_field_of_every_record(converter: str) -> None:
    cols = convert(sample(), include_headers=True, converter=converter)
    assert cols.key.to_pylist() == [b"a", None, b"", b"\x00\xff", b"b", None]
    assert cols.value.to_pylist() == [b"x" * 100, b"", None, b"\x00", b"y", None]
    assert cols.topic.to_pylist() == ["orders"] * 3 + ["refunds", "orders", "refunds"]
    assert cols.partition.to_pylist() == [0, 1, 0, 0, 0, 3]
    assert cols.offset.to_pylist() == [5, 1 << 40, 6, 7, 8, 0]
    us = cols.timestamp.cast(pa.int64()).to_pylist()
    assert us == [
        1_700_000_000_001_000,
        1_700_000_000_002_000,
        -1000,
        0,
        1_700_000_000_009_000,
        5000,
    ]
    # librdkafka's 0/1/2 (none, create, append) are Kafka's -1/0/1
    assert cols.timestamp_type.to_pylist() == [0, 1, -1, 0, 0, 0]
    assert cols.headers is not None
    assert cols.headers.to_pylist() == [
        None,
        [{"key": "h", "value": b"1"}],
        None,
        [],
        [{"key": "a", "value": b""}, {"key": "b", "value": b"2"}],
        None,
    ]
    for array in (cols.key, cols.value, cols.topic, cols.partition, cols.offset, cols.timestamp):
        array.validate(full=True)


@pytest.mark.parametrize("headers", [False, True])
def test_the_batch_has_spark_schema_and_equals_the_python_one(
    converter: str, headers: bool
) -> None:
    batch = record_batch(
        convert(sample(), include_headers=headers, converter=converter),
        "east",
        include_headers=headers,
    )
    batch.validate(full=True)
    assert batch.schema.equals(SCHEMA_WITH_HEADERS if headers else SCHEMA)
    python = convert(sample(), include_headers=headers, converter="python")
    assert batch.equals(record_batch(python, "east", include_headers=headers))


def test_headers_only_when_asked(converter: str) -> None:
    assert convert(sample(), include_headers=False, converter=converter).headers is None


def test_partitions_and_their_last_records(converter: str) -> None:
    cols = convert(sample(), include_headers=False, converter=converter)
    pairs, codes = cols.partitions()
    assert [pairs[c] for c in codes] == [
        ("orders", 0),
        ("orders", 1),
        ("orders", 0),
        ("refunds", 0),
        ("orders", 0),
        ("refunds", 3),
    ]
    assert cols.last_per_partition((pairs, codes)) == {
        ("orders", 0): (8, 1_700_000_000_009),
        ("orders", 1): (1 << 40, 1_700_000_000_002),
        ("refunds", 0): (7, 0),
        ("refunds", 3): (0, 5),
    }


def test_filtered_columns_forget_the_converters_index(converter: str) -> None:
    """After a filter, the partitions and last records are those of the rows kept."""
    cols = convert(sample(), include_headers=False, converter=converter)
    pairs, codes = cols.partitions()
    keep = np.array([True, False, True, True, False, False])
    # as KafkaRangeConsumer does: the same pairs, the codes of the rows kept
    assert cols.filter(keep).last_per_partition((pairs, codes[keep])) == {
        ("orders", 0): (6, -1),
        ("refunds", 0): (7, 0),
    }
    kept = cols.filter(keep)
    assert type(kept) is Columns
    kept_pairs, kept_codes = kept.partitions()
    assert sorted(kept_pairs) == [("orders", 0), ("refunds", 0)]
    assert [kept_pairs[c] for c in kept_codes] == [("orders", 0), ("orders", 0), ("refunds", 0)]


def test_no_messages(converter: str) -> None:
    cols = convert([], include_headers=True, converter=converter)
    assert len(cols) == 0
    assert cols.last_per_partition(cols.partitions()) == {}
    assert record_batch(cols, "east", include_headers=True).schema.equals(SCHEMA_WITH_HEADERS)


def test_a_message_without_partition_or_offset_is_a_null(converter: str) -> None:
    """Never seen on consumed messages; the compiled converter hands such a
    batch to the Python one, which keeps them as nulls."""
    cols = convert(
        [msg(offset=3), msg(partition=None, offset=None)],
        include_headers=False,
        converter=converter,
    )
    assert cols.partition.to_pylist() == [0, None]
    assert cols.offset.to_pylist() == [3, None]


class LookAlike:
    """Not a confluent_kafka.Message, but answers the same methods."""

    def __init__(self, m: Message) -> None:
        self._m = m

    def __getattr__(self, name: str) -> Any:
        return getattr(self._m, name)


def test_objects_that_only_look_like_messages(converter: str) -> None:
    msgs = sample()
    mixed: list[Any] = [*msgs[:3], LookAlike(msgs[3]), *msgs[4:]]
    got = record_batch(
        convert(mixed, include_headers=True, converter=converter), "e", include_headers=True
    )
    want = record_batch(
        convert(msgs, include_headers=True, converter="python"), "e", include_headers=True
    )
    assert got.equals(want)


messages = st.lists(
    st.builds(
        msg,
        topic=st.sampled_from(["a", "bb", "ccc-ü"]),
        partition=st.integers(0, 2**31 - 1),
        offset=st.integers(0, 2**63 - 1),
        key=st.none() | st.binary(max_size=40),
        value=st.none() | st.binary(max_size=300),
        timestamp=st.tuples(st.integers(0, 2), st.integers(-(2**40), 2**40)),
        headers=st.none()
        | st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=3),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(msgs=messages)
def test_the_compiled_converter_equals_the_python_one(msgs: list[Message]) -> None:
    want = convert(msgs, include_headers=True, converter="python")
    for name in ("c", "c-accessors"):
        got = convert(msgs, include_headers=True, converter=name)
        for field in (
            "key",
            "value",
            "topic",
            "partition",
            "offset",
            "timestamp",
            "timestamp_type",
            "headers",
        ):
            assert getattr(got, field).equals(getattr(want, field)), (name, field)
        index = got.partitions()
        assert got.last_per_partition(index) == want.last_per_partition(want.partitions())
        assert [index[0][c] for c in index[1]] == list(
            zip(want.topic.to_pylist(), want.partition.to_pylist(), strict=True)
        )


# -- choosing the converter -------------------------------------------------------


def test_the_compiled_converter_reads_the_struct_here() -> None:
    """On the confluent-kafka this project pins, the struct mirror matches:
    ``auto`` (the default) reads it directly."""
    found, why = _cconvert.load()
    assert found is not None, why
    assert found.direct, why
    assert arrow.active_converter("auto") == "c-direct"
    assert arrow.active_converter("c") == "c-direct"
    assert arrow.active_converter("c-accessors") == "c-accessors"


def test_the_environment_picks_the_converter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.CONVERTER, "python")
    assert arrow.active_converter() == "python"
    cols = convert(sample(), include_headers=False)
    assert type(cols) is Columns  # the Python converter's, without a ready index
    monkeypatch.setenv(env.CONVERTER, "c")
    assert arrow.active_converter() == "c-direct"
    assert type(convert(sample(), include_headers=False)) is not Columns
    monkeypatch.delenv(env.CONVERTER)
    assert arrow.active_converter() == "c-direct"
    # The variable's earlier name still works, and the new one wins.
    monkeypatch.setenv(env.CONVERTER_EARLIER, "python")
    assert arrow.active_converter() == "python"
    monkeypatch.setenv(env.CONVERTER, "c")
    assert arrow.active_converter() == "c-direct"


def test_an_unknown_converter_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.CONVERTER, "fortran")
    with pytest.raises(ValueError, match="MULTIKAFKA_CONVERTER='fortran'"):
        convert(sample(), include_headers=False)


def test_a_struct_of_another_size_is_not_read_directly() -> None:
    """``check_layout`` compares the type's size with the mirrored struct;
    the direct mode also refuses any object whose type is not exactly the
    configured one."""
    from multikafka.reader_agent import _convert

    class Other:
        pass

    getters = (Message.topic, Message.partition, Message.offset, Message.timestamp)
    getters += (Message.key, Message.value, Message.error)
    try:
        _convert.configure(Other, getters)
        assert "bytes, the mirrored struct" in _convert.check_layout()
        assert _convert.convert(sample(), True) is None
    finally:
        _convert.configure(Message, getters)
    assert _convert.check_layout() is None
    assert _convert.convert(sample(), True) is not None


def test_without_the_extension_auto_converts_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine without a C compiler installs without the extension: reads
    then convert in Python, and asking for the compiled converter says why not."""
    import multikafka.reader_agent as reader_agent

    monkeypatch.delattr(reader_agent, "_convert")
    monkeypatch.setitem(sys.modules, "multikafka.reader_agent._convert", None)  # import fails
    found, why = _cconvert.load()
    assert found is None
    assert "not built" in why
    monkeypatch.setattr(arrow, "_load_compiled", lambda: (found, why))
    assert arrow.active_converter("auto") == "python"
    assert type(convert(sample(), include_headers=False)) is Columns
    with pytest.raises(RuntimeError, match="MULTIKAFKA_CONVERTER=c: the C converter is not built"):
        convert(sample(), include_headers=False, converter="c")


def test_a_layout_check_that_fails_says_which_releases_are_read_directly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The warning names the installed confluent-kafka and the range the
    reader requires (its own metadata: one home for the range)."""
    from importlib import metadata

    from multikafka.reader_agent import _convert

    monkeypatch.setattr(_convert, "check_layout", lambda: "Message is 112 bytes")
    found, why = _cconvert.load()
    assert found is not None
    assert not found.direct
    installed = metadata.version("confluent-kafka")
    assert why.startswith(f"Message is 112 bytes (confluent-kafka {installed} is installed; ")
    assert re.search(r"requires confluent-kafka[<>=.,\d]+, whose Message it reads directly", why)


def test_a_layout_that_failed_its_checks_is_not_read_directly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``auto`` and ``c`` then get the compiled converter through the
    accessor methods: 0.17 CPU-s per million records against the Python
    converter's 0.29 (docs/benchmarks.md), so never Python while it works."""
    found, _ = _cconvert.load()
    assert found is not None
    accessors = dataclasses.replace(found, direct=False)
    monkeypatch.setattr(arrow, "_load_compiled", lambda: (accessors, "size differs"))
    assert arrow.active_converter("auto") == "c-accessors"
    assert arrow.active_converter("c") == "c-accessors"
    got = convert(sample(), include_headers=True, converter="c")
    want = convert(sample(), include_headers=True, converter="python")
    assert record_batch(got, "e", include_headers=True).equals(
        record_batch(want, "e", include_headers=True)
    )
