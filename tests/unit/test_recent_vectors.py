"""The Planner's memory of the offset vectors each query exchanged lately:
the same wire bytes give the vector decoding would, anything else is
decoded and checked, and what it holds stays bounded."""

from __future__ import annotations

import pytest

from multikafka.coordinator.api.vectors import RecentVectors
from multikafka.core import _offsets as ov
from multikafka.core.exceptions import ValidationError
from multikafka.v1 import planner_pb2

INTERNALS = (
    "multikafka.coordinator.api.vectors",
    "multikafka.core._offsets",
)


def vector(n: int, at: int = 0) -> ov.SplitOffsets:
    return ov.SplitOffsets.from_mapping({f"c/t/{p}": at + p for p in range(n)})


def test_the_end_a_query_was_answered_is_its_next_start_without_decoding() -> None:
    vectors = RecentVectors()
    end = vector(100, at=5)
    wire = vectors.encode("q", end)
    # What the client sends back: the same vector, encoded again on its side.
    sent = planner_pb2.OffsetColumns.FromString(ov.to_columns(dict(end)).SerializeToString())
    got = vectors.decode("q", sent, "start")
    assert got is end
    assert vectors.hits == 1
    assert vectors.misses == 0
    assert ov.from_columns(wire) == end


def test_another_vector_is_decoded_and_remembered() -> None:
    vectors = RecentVectors()
    vectors.encode("q", vector(10))
    other = ov.to_columns(vector(10, at=1))
    first = vectors.decode("q", other, "start")
    assert first == vector(10, at=1)
    assert vectors.decode("q", other, "committed") is first
    assert (vectors.hits, vectors.misses) == (1, 1)


def test_vectors_are_per_query() -> None:
    vectors = RecentVectors()
    vectors.encode("q", vector(10))
    vectors.decode("r", ov.to_columns(vector(10)), "start")
    assert vectors.misses == 1


def test_bad_columns_are_still_refused() -> None:
    vectors = RecentVectors()
    bad = ov.to_columns(vector(3))
    bad.offsets[1] = -5
    for _ in range(2):
        with pytest.raises(ValidationError, match=r"start\.offsets"):
            vectors.decode("q", bad, "start")
    assert len(vectors) == 0


def test_an_answer_that_would_not_decode_is_not_kept() -> None:
    vectors = RecentVectors()
    odd = ov.SplitOffsets(vector(2).splits, vector(2).offsets - 1)  # -1: not a client's offset
    sent = vectors.encode("q", odd)
    with pytest.raises(ValidationError):
        vectors.decode("q", sent, "start")


def test_a_few_vectors_per_query_and_a_bounded_total() -> None:
    vectors = RecentVectors(per_query=3, max_splits=1_000)
    for at in range(5):
        vectors.encode("q", vector(10, at))
    assert len(vectors) == 3
    # The oldest went first.
    vectors.decode("q", ov.to_columns(vector(10, 0)), "start")
    assert vectors.misses == 1
    vectors.decode("q", ov.to_columns(vector(10, 4)), "start")
    assert vectors.hits == 1
    # 1,000 splits in all: the queries used longest ago are forgotten.
    for i in range(50):
        vectors.encode(f"q{i}", vector(50))
    assert 950 <= vectors.splits <= 1_000
    assert "q" not in vectors
    assert "q49" in vectors
    # A vector over a tenth of the total is never kept.
    vectors.encode("big", vector(101))
    assert "big" not in vectors
    vectors.forget("q49")
    assert "q49" not in vectors
    assert vectors.splits <= 950
