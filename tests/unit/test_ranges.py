"""Ranges on the wire (:mod:`multikafka.core._ranges`): one Python type,
``SplitRange``, and one message, ``RangeColumns``, for plans and reports."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multikafka.core._ranges import SplitRange, columns, from_columns, tasks_of, to_columns
from multikafka.core.exceptions import ValidationError
from multikafka.v1 import common_pb2

INTERNALS = ("multikafka.core._ranges",)


NAMES = st.sampled_from(["east", "west", "c-1"])
RANGES = st.builds(
    lambda c, t, p, a, n: SplitRange(c, t, p, a, a + n),
    NAMES,
    st.sampled_from(["orders", "t"]),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
    st.integers(0, 1000),
)


def test_a_range_names_its_split() -> None:
    r = SplitRange("east", "orders", 3, 10, 25)
    assert (r.split, r.size) == ("east/orders/3", 15)


@given(st.lists(RANGES, max_size=20))
def test_ranges_survive_the_columns(ranges: list[SplitRange]) -> None:
    msg = common_pb2.RangeColumns.FromString(to_columns(ranges).SerializeToString())
    assert from_columns(msg) == ranges
    assert not msg.task_ranges
    assert len(msg.clusters) == len({(r.cluster, r.topic) for r in ranges})


def test_a_plan_comes_back_as_its_tasks() -> None:
    groups = [("east", "orders"), ("west", "orders")]
    msg = columns(
        groups,
        np.array([0, 0, 1]),
        np.array([0, 1, 0]),
        np.array([0, 5, 7]),
        np.array([10, 9, 8]),
        np.array([2, 1]),
    )
    assert tasks_of(msg) == [
        (SplitRange("east", "orders", 0, 0, 10), SplitRange("east", "orders", 1, 5, 9)),
        (SplitRange("west", "orders", 0, 7, 8),),
    ]
    msg.task_ranges[0] = 1
    with pytest.raises(ValidationError, match="task_ranges must be >= 1 and add up"):
        tasks_of(msg)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda m: m.groups.append(0), "same length"),
        (lambda m: m.topics.append("x"), "clusters and topics"),
        (lambda m: m.groups.__setitem__(0, 5), r"abandoned.groups\[0\]: no group 5"),
        (lambda m: m.partitions.__setitem__(0, -1), r"abandoned.partitions\[0\]: must be >= 0"),
        (lambda m: m.until_offsets.__setitem__(0, 1), r"abandoned\[0\]: needs 0 <= from_offset"),
        (lambda m: m.from_offsets.__setitem__(0, -3), r"abandoned\[0\]: needs 0 <= from_offset"),
        (lambda m: m.clusters.__setitem__(0, "a/b"), r"abandoned.clusters\[0\]: cluster name"),
        (lambda m: m.topics.__setitem__(0, ""), r"abandoned.topics\[0\]: topic name"),
    ],
)
def test_malformed_columns_are_refused_naming_the_part(change: object, says: str) -> None:
    msg = to_columns([SplitRange("east", "orders", 0, 5, 9)])
    change(msg)  # type: ignore[operator]
    with pytest.raises(ValidationError, match=says):
        from_columns(msg, "abandoned")
