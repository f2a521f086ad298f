"""The reader agent decodes each batch as its task says and counts what did
not decode in its per-(stream, cluster) stats (pushed to the coordinator)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pytest

from multikafka.core._ranges import SplitRange
from multikafka.core._secrets import Properties
from multikafka.core.exceptions import MalformedRecordError
from multikafka.core.model import Connection
from multikafka.reader_agent import ReaderAgent, ReadTask
from multikafka.reader_agent._arrow import TIMESTAMP_TYPE, Columns
from multikafka.reader_agent._payloads import PayloadDecoding
from multikafka.reader_agent._range_consumer import ReadOutcome

INTERNALS = (
    "multikafka.core._ranges",
    "multikafka.core._secrets",
    "multikafka.reader_agent._arrow",
    "multikafka.reader_agent._payloads",
    "multikafka.reader_agent._range_consumer",
)


class PayloadReader:
    """Yields each range as one batch whose value at offset ``o`` is
    ``payloads[o]``."""

    def __init__(self, payloads: list[bytes | None]) -> None:
        self.payloads = payloads

    def read(
        self,
        ranges: Sequence[SplitRange],
        outcome: ReadOutcome,
        *,
        include_headers: bool,
        fail_on_data_loss: bool,
        should_abandon: Callable[[], bool],
    ) -> Iterator[Columns]:
        for r in ranges:
            offsets = list(range(r.start, r.until))
            n = len(offsets)
            outcome.records += n
            outcome.last[(r.topic, r.partition)] = (offsets[-1], 0)
            yield Columns(
                key=pa.array([b"k"] * n, pa.binary()),
                value=pa.array([self.payloads[o] for o in offsets], pa.binary()),
                topic=pa.array([r.topic] * n, pa.string()),
                partition=pa.array([r.partition] * n, pa.int32()),
                offset=pa.array(offsets, pa.int64()),
                timestamp=pa.array([0] * n, TIMESTAMP_TYPE),
                timestamp_type=pa.array([0] * n, pa.int32()),
            )

    def close(self) -> None:
        pass


PAYLOADS: list[bytes | None] = [b'{"id": 0}', b'{"id": "x"}', None, b'{"id": 3}', b"", b'{"id": 5}']


@pytest.fixture
def agent() -> Iterator[ReaderAgent]:
    a = ReaderAgent(agent_id="t", factory=lambda conn: PayloadReader(PAYLOADS))
    yield a
    a.close()


def task(mode: str) -> ReadTask:
    return ReadTask(
        coordinator=None,
        stream="orders",
        query_id="q",
        generation=1,
        ranges=(SplitRange("east", "t", 0, 0, len(PAYLOADS)),),
        clusters={"east": Connection("east", "h:1", Properties({}))},
        decoding=PayloadDecoding.parse(value_format="json", value_schema="id long", mode=mode),
    )


def stats(agent: ReaderAgent) -> tuple[int, int, int]:
    (s,) = agent.stats()[1]
    return s.malformed_records, s.corrupt_records, s.malformed_failures


def test_dropmalformed_drops_and_counts(agent: ReaderAgent) -> None:
    batches = list(agent.read(task("DROPMALFORMED")))
    assert [b["offset"] for b in pa.Table.from_batches(batches).to_pylist()] == [0, 2, 3, 5]
    assert stats(agent) == (2, 0, 0)
    list(agent.read(task("DROPMALFORMED")))
    assert stats(agent) == (4, 0, 0)


def test_permissive_keeps_and_counts(agent: ReaderAgent) -> None:
    (batch,) = agent.read(task("PERMISSIVE"))
    assert batch.column("value").to_pylist() == [{"id": 0}, None, None, {"id": 3}, None, {"id": 5}]
    assert batch.column("_corrupt_value").to_pylist() == [
        None,
        b'{"id": "x"}',
        None,
        None,
        b"",
        None,
    ]
    assert batch.column("cluster").to_pylist() == ["east"] * 6
    assert stats(agent) == (0, 2, 0)


def test_failfast_fails_the_read_and_counts(agent: ReaderAgent) -> None:
    with pytest.raises(MalformedRecordError, match=r"stream orders, split east/t/0, offset 1"):
        list(agent.read(task("FAILFAST")))
    assert stats(agent) == (0, 0, 1)
    assert agent.stats()[1][0].records_read == len(PAYLOADS)
