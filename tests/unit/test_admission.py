"""minOffsetsPerTrigger / maxTriggerDelay: the gate itself (fake clock), and
the Spark stream reader's latestOffset and reportLatestOffset with a fake
planner client, as Spark 4.2+ calls them (a start and a read limit) and as
Spark 4.0 and 4.1 do (neither)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from multikafka.core import _offsets as ov
from multikafka.core._admission import DEFAULT_MAX_DELAY_S, MinRecordsGate, available_records
from multikafka.core.exceptions import ValidationError
from multikafka.core.planner_client import LatestOffsets
from multikafka.spark import parse_options
from multikafka.spark._compat import ReadAllAvailable, ReadMaxRows, ReadMinRows
from multikafka.spark._source import MultiKafkaStreamReader

INTERNALS = (
    "multikafka.core._admission",
    "multikafka.core._offsets",
    "multikafka.spark._compat",
    "multikafka.spark._source",
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def v(**offsets: int) -> dict[str, int]:
    """A vector of splits ``a/t/<p>`` from ``p0=..., p1=...``."""
    return {f"a/t/{k[1:]}": o for k, o in offsets.items()}


def test_available_records_count_only_splits_in_both() -> None:
    start = {"a/t/0": 10, "a/t/1": 5, "a/t/2": 7}
    available = {"a/t/0": 15, "a/t/1": 5, "b/t/0": 1000}
    assert available_records(start, available) == 5
    assert available_records(start, {"a/t/0": 3}) == 0  # behind counts 0, not negative
    assert available_records({}, available) == 0


def test_the_gate_holds_until_enough_records() -> None:
    clock = Clock()
    gate = MinRecordsGate(10, 60, clock=clock)
    assert not gate.admit(v(p0=0), v(p0=9))
    assert gate.admit(v(p0=0), v(p0=10))


def test_the_gate_counts_what_is_available_not_the_limited_end() -> None:
    gate = MinRecordsGate(10, 60, clock=Clock())
    # maxOffsetsPerTrigger cut the end to 4 records, but 12 are there.
    assert gate.admit(v(p0=0), v(p0=4), v(p0=12))
    assert not gate.admit(v(p0=4), v(p0=8), v(p0=12))


def test_the_delay_releases_a_held_batch_and_restarts() -> None:
    clock = Clock()
    gate = MinRecordsGate(100, 30, clock=clock)
    assert not gate.admit(v(p0=0), v(p0=1))
    clock.now += 29.9
    assert not gate.admit(v(p0=0), v(p0=1))
    clock.now += 0.1
    assert gate.admit(v(p0=0), v(p0=1))
    # the delay counts again from that batch
    clock.now += 10
    assert not gate.admit(v(p0=1), v(p0=2))
    assert gate.waited_s() == pytest.approx(10)


def test_nothing_new_is_never_a_batch_and_keeps_the_delay_running() -> None:
    clock = Clock()
    gate = MinRecordsGate(5, 30, clock=clock)
    clock.now += 31
    assert not gate.admit(v(p0=3), v(p0=3))
    assert gate.waited_s() == pytest.approx(31)
    assert gate.admit(v(p0=3), v(p0=4))  # the first record after the delay goes at once


def test_a_batch_let_through_restarts_the_delay() -> None:
    clock = Clock()
    gate = MinRecordsGate(100, 30, clock=clock)
    clock.now += 20
    assert gate.admit(v(p0=0), v(p0=1), hold=False)
    assert not gate.admit(v(p0=1), v(p0=1), hold=False)  # nothing new is never a batch
    clock.now += 20  # 40 s since the gate was made, 20 since that batch
    assert not gate.admit(v(p0=1), v(p0=2))


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (v(p0=0), v(p0=1, p1=0)),  # a split enters
        (v(p0=0, p1=0), v(p0=1)),  # a split retires (drain, failover)
        ({"a/t/0": 5}, {"b/t/0": 0}),  # failover: one cluster's splits for another's
        (v(p0=50), v(p0=0)),  # records lost, the split is read again from its start
    ],
)
def test_a_batch_that_changes_the_split_set_never_waits(
    start: dict[str, int], end: dict[str, int]
) -> None:
    gate = MinRecordsGate(1_000_000, DEFAULT_MAX_DELAY_S, clock=Clock())
    assert gate.admit(start, end)


def test_gate_arguments_are_checked() -> None:
    with pytest.raises(ValidationError, match="at least 1"):
        MinRecordsGate(0)
    with pytest.raises(ValidationError, match="negative"):
        MinRecordsGate(1, -1)


# -- the Spark stream reader ---------------------------------------------------


class FakePlanner:
    """Answers LatestOffsets with the next of ``answers`` (end, available)."""

    def __init__(
        self,
        *answers: tuple[dict[str, int], dict[str, int] | None],
        initial: dict[str, int] | None = None,
    ) -> None:
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []
        self.initial = initial or {}
        self.resolved = 0
        self.resolved_with: str | None = None

    def resolve(
        self, stream: str, position: object, *, isolation_level: str = ""
    ) -> tuple[ov.SplitOffsets, list[str]]:
        self.resolved += 1
        self.resolved_with = isolation_level
        return ov.as_offsets(self.initial), []

    def latest_offsets(
        self, stream: str, query_id: str, start: Mapping[str, int], **kwargs: Any
    ) -> LatestOffsets:
        self.asked.append({"start": dict(start), **kwargs})
        end, available = self.answers.pop(0)
        return LatestOffsets(
            ov.as_offsets(end), None if available is None else ov.as_offsets(available)
        )


def stream_reader(planner: FakePlanner, clock: Clock, **options: str) -> MultiKafkaStreamReader:
    opts = parse_options({"coordinator": "127.0.0.1:1", "stream": "s", **options}, streaming=True)
    reader = MultiKafkaStreamReader(opts)
    reader._client = planner  # type: ignore[assignment]
    if reader._gate is not None:
        reader._gate._clock = clock
        reader._gate._last = clock()
    return reader


def test_latest_offset_returns_start_while_too_few_records() -> None:
    clock = Clock()
    planner = FakePlanner(
        (v(p0=3), v(p0=3)), (v(p0=12), v(p0=12)), (v(p0=13), v(p0=13)), (v(p0=14), v(p0=14))
    )
    reader = stream_reader(planner, clock, minOffsetsPerTrigger="10", maxTriggerDelay="1m")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMinRows(10)
    start = ov.to_document(v(p0=0))
    assert reader.latestOffset(start, limit) is start  # 3 < 10: held
    assert reader.latestOffset(start, limit) == ov.to_document(v(p0=12))
    start = ov.to_document(v(p0=12))
    assert reader.latestOffset(start, limit) is start  # 1 new record
    clock.now += 60  # maxTriggerDelay passed
    assert reader.latestOffset(start, limit) == ov.to_document(v(p0=14))
    assert all(a["max_records"] == 0 for a in planner.asked)


def test_min_with_max_plans_at_most_max() -> None:
    clock = Clock()
    planner = FakePlanner((v(p0=3), v(p0=3)), (v(p0=10), v(p0=30)))
    reader = stream_reader(
        planner, clock, minOffsetsPerTrigger="5", maxOffsetsPerTrigger="10", maxTriggerDelay="1h"
    )
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(10)
    start = ov.to_document(v(p0=0))
    assert reader.latestOffset(start, limit) is start  # 3 available < 5
    assert reader.latestOffset(start, limit) == ov.to_document(v(p0=10))
    assert [a["max_records"] for a in planner.asked] == [10, 10]


def test_spark_asking_for_everything_skips_the_minimum() -> None:
    planner = FakePlanner((v(p0=1), v(p0=1)))
    reader = stream_reader(planner, Clock(), minOffsetsPerTrigger="10")
    assert reader.latestOffset(ov.to_document(v(p0=0)), ReadAllAvailable()) == ov.to_document(
        v(p0=1)
    )


def test_available_now_skips_the_minimum() -> None:
    planner = FakePlanner((v(p0=1), v(p0=1)))
    reader = stream_reader(planner, Clock(), minOffsetsPerTrigger="10")
    reader._target = ov.as_offsets(v(p0=1))  # what prepareForTriggerAvailableNow sets
    assert reader.latestOffset(ov.to_document(v(p0=0)), ReadMinRows(10)) == ov.to_document(v(p0=1))


def test_report_latest_offset_is_what_is_available_without_the_limit() -> None:
    planner = FakePlanner((v(p0=5), v(p0=40)), (v(p0=10), v(p0=41)))
    reader = stream_reader(planner, Clock(), maxOffsetsPerTrigger="5")
    assert reader.reportLatestOffset() is None  # nothing asked yet
    reader.latestOffset(ov.to_document(v(p0=0)), reader.getDefaultReadLimit())
    assert reader.reportLatestOffset() == ov.to_document(v(p0=40))
    reader.latestOffset(ov.to_document(v(p0=5)), reader.getDefaultReadLimit())
    assert reader.reportLatestOffset() == ov.to_document(v(p0=41))


# -- Spark 4.0 and 4.1: latestOffset() without a start or a limit ----------------


def test_a_first_start_asks_for_latest_before_initial_and_gets_one_start() -> None:
    # Spark 4.0/4.1 on a new checkpoint: latestOffset(), then initialOffset().
    planner = FakePlanner((v(p0=7), v(p0=7)), initial=v(p0=2))
    reader = stream_reader(planner, Clock())
    assert reader.latestOffset() == ov.to_document(v(p0=7))
    assert planner.asked[0]["start"] == v(p0=2)
    assert reader.initialOffset() == ov.to_document(v(p0=2))
    assert planner.resolved == 1  # one start, whoever asks first


@pytest.mark.parametrize("level", ["", "read_committed", "read_uncommitted"])
def test_the_querys_isolation_level_reaches_the_planner(level: str) -> None:
    """kafka.isolation.level decides where the coordinator plans to (the
    last stable offsets for readers of committed records); unset, each
    cluster's own setting does ("")."""
    planner = FakePlanner((v(p0=7), v(p0=7)), initial=v(p0=2))
    options = {"kafka.isolation.level": level} if level else {}
    reader = stream_reader(planner, Clock(), **options)
    reader.latestOffset()
    assert planner.asked[0]["isolation_level"] == level
    assert planner.resolved_with == level


def test_each_batch_starts_where_the_last_one_ended() -> None:
    planner = FakePlanner((v(p0=5), v(p0=5)), (v(p0=9), v(p0=9)), initial=v(p0=0))
    reader = stream_reader(planner, Clock())
    reader._partitions = lambda start, end: []  # type: ignore[method-assign,assignment]
    reader.initialOffset()
    assert reader.latestOffset() == ov.to_document(v(p0=5))
    reader.partitions(ov.to_document(v(p0=0)), ov.to_document(v(p0=5)))
    assert reader.latestOffset() == ov.to_document(v(p0=9))
    assert [a["start"] for a in planner.asked] == [
        v(p0=0),
        v(p0=5),
    ]


def test_a_restart_starts_at_the_batch_spark_plans_again() -> None:
    # Spark 4.0/4.1 from a checkpoint: partitions(end, end) of its last
    # logged batch (and that batch again if uncommitted), then latestOffset().
    planner = FakePlanner((v(p0=40), v(p0=40)), initial=v(p0=0))
    reader = stream_reader(planner, Clock())
    reader._partitions = lambda start, end: []  # type: ignore[method-assign,assignment]
    reader.partitions(ov.to_document(v(p0=30)), ov.to_document(v(p0=30)))
    reader.initialOffset()  # Spark asks when it re-runs batch 0: not the next start
    assert reader.latestOffset() == ov.to_document(v(p0=40))
    assert planner.asked[0]["start"] == v(p0=30)


def test_the_options_limits_apply_without_spark(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    planner = FakePlanner(
        (v(p0=3), v(p0=3)),
        (v(p0=5), v(p0=5)),
        (v(p0=15), v(p0=30)),
        (v(p0=25), v(p0=30)),
        initial=v(p0=0),
    )
    reader = stream_reader(
        planner, clock, minOffsetsPerTrigger="5", maxOffsetsPerTrigger="10", maxTriggerDelay="1h"
    )
    reader.initialOffset()
    # The first batch of a run is never held: under Trigger.AvailableNow
    # Spark < 4.2 asks once, and a held batch would end the run with nothing.
    assert reader.latestOffset() == ov.to_document(v(p0=3))
    assert reader.latestOffset() == ov.to_document(v(p0=3))  # 2 available < 5: held
    assert reader.latestOffset() == ov.to_document(v(p0=15))
    assert reader.latestOffset() == ov.to_document(v(p0=25))
    assert [a["max_records"] for a in planner.asked] == [10, 10, 10, 10]
    assert [a["start"] for a in planner.asked] == [v(p0=0), v(p0=3), v(p0=3), v(p0=15)]
    said = [r.getMessage() for r in caplog.records if "admission control" in r.getMessage()]
    assert len(said) == 1
    assert "Trigger.AvailableNow" in said[0]


def test_without_limits_nothing_is_said(caplog: pytest.LogCaptureFixture) -> None:
    planner = FakePlanner((v(p0=3), v(p0=3)), initial=v(p0=0))
    reader = stream_reader(planner, Clock())
    assert reader.latestOffset() == ov.to_document(v(p0=3))
    assert planner.asked[0]["max_records"] == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
