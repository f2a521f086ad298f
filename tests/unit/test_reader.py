"""The standalone reader's pure parts: where it starts, how its position
moves with each batch, and the options it refuses (no coordinator needed:
the channel opens on first use). Reading itself: tests/e2e/test_standalone_reader.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from multikafka import Reader, ValidationError
from multikafka.reader import Position, _advance, _start
from multikafka.reader_agent import SCHEMA, SCHEMA_WITH_HEADERS
from tests.helpers import by_split


def test_named_starts_are_positions_the_coordinator_resolves() -> None:
    assert _start("earliest", None) == Position(kind=Position.EARLIEST)
    assert _start(" LATEST ", None) == Position(kind=Position.LATEST)
    assert _start("latest", 1_700_000_000_000) == Position(
        kind=Position.TIMESTAMP, timestamp_ms=1_700_000_000_000
    )
    specific = _start('{"a/t/0": 5, "a/t/1": -2}', None)
    assert isinstance(specific, Position)
    assert specific.kind == Position.SPECIFIC
    assert by_split(specific.offsets) == {"a/t/0": 5, "a/t/1": -2}
    assert specific.fallback == Position.EARLIEST


def test_a_saved_position_is_resumed_as_it_is() -> None:
    """What ``Reader.offsets`` gives (Spark's offset document) starts the
    reader exactly there, without asking the coordinator to resolve it."""
    assert _start({"a": {"t": [3, 4]}, "b/u/2": 9}, None) == {
        "a/t/0": 3,
        "a/t/1": 4,
        "b/u/2": 9,
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("oldest", "must be earliest, latest or JSON"),
        ("{}", "names no split"),
        ("{not json", "not valid JSON"),
        ({"a/t/0": -1}, "starting_offsets"),
        (42, "got int"),
    ],
)
def test_bad_starts_say_what_to_give(value: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _start(value, None)  # type: ignore[arg-type]


def test_a_negative_start_time_is_refused() -> None:
    with pytest.raises(ValidationError, match="starting_timestamp_ms"):
        _start("latest", -1)


def batch(rows: list[tuple[str, str, int, int]]) -> pa.RecordBatch:
    """A batch of (cluster, topic, partition, offset) rows in Spark's schema."""
    n = len(rows)
    return pa.RecordBatch.from_pydict(
        {
            "key": [None] * n,
            "value": [b"v"] * n,
            "topic": [r[1] for r in rows],
            "partition": [r[2] for r in rows],
            "offset": [r[3] for r in rows],
            "timestamp": [0] * n,
            "timestampType": [0] * n,
            "cluster": [r[0] for r in rows],
        },
        schema=SCHEMA,
    )


def test_the_position_moves_past_each_splits_last_record() -> None:
    position = {"a/t/0": 0, "a/t/1": 10, "b/t/0": 7, "gone/t/0": 3}
    _advance(position, batch([("a", "t", 0, 0), ("a", "t", 0, 4), ("b", "t", 0, 7)]))
    assert position == {"a/t/0": 5, "a/t/1": 10, "b/t/0": 8, "gone/t/0": 3}
    # Only forward, and only splits of the position (new ones join with the
    # micro-batch's end).
    _advance(position, batch([("a", "t", 0, 2), ("new", "t", 0, 100)]))
    assert position == {"a/t/0": 5, "a/t/1": 10, "b/t/0": 8, "gone/t/0": 3}


def test_options_are_checked_when_the_reader_is_made() -> None:
    with pytest.raises(ValidationError, match="max_records_per_batch"):
        Reader("127.0.0.1:1", "s", max_records_per_batch=0)
    with pytest.raises(ValidationError, match="stream"):
        Reader("127.0.0.1:1", "")
    with pytest.raises(ValidationError, match="mode"):
        Reader("127.0.0.1:1", "s", value_format="json", value_schema="a int", mode="LENIENT")
    with pytest.raises(ValidationError, match="coordinator"):
        Reader("not an address", "s")


def test_the_schema_is_the_spark_sources() -> None:
    with Reader("127.0.0.1:1", "s") as r:
        assert r.schema == SCHEMA
        assert r.query_id.startswith("s-")
    with Reader("127.0.0.1:1", "s", include_headers=True, query_id="mine") as r:
        assert r.schema == SCHEMA_WITH_HEADERS
        assert r.query_id == "mine"
    with Reader("127.0.0.1:1", "s", value_format="json", value_schema="id long") as r:
        assert r.schema.field("value").type == pa.struct([("id", pa.int64())])
        assert r.schema.names[-1] == "_corrupt_value"


def test_a_closed_reader_reads_no_more() -> None:
    r = Reader("127.0.0.1:1", "s")
    r.close()
    with pytest.raises(ValidationError, match="closed"):
        next(r.batches())
