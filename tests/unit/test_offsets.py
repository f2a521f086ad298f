"""Offset vectors: the document Spark stores (one text per vector, old flat
checkpoints still read), the wire columns, validation, split ids."""

from __future__ import annotations

import json
import pickle
import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from multikafka.core import _offsets as ov
from multikafka.core._offsets import NO_SPLITS, OFFSET_MAX
from multikafka.core.exceptions import ValidationError
from multikafka.core.model import SplitId
from multikafka.v1 import planner_pb2

INTERNALS = ("multikafka.core._offsets",)


def test_canonical_sorts_keys() -> None:
    out = ov.canonical({"west/t/0": 5, "east/t/1": 2, "east/t/0": 1})
    assert list(out) == ["east/t/0", "east/t/1", "west/t/0"]
    assert out == {"east/t/0": 1, "east/t/1": 2, "west/t/0": 5}


def test_canonical_of_nothing_is_the_placeholder() -> None:
    assert ov.canonical({}) == {NO_SPLITS: 0}
    assert ov.canonical({NO_SPLITS: 0}) == {NO_SPLITS: 0}
    assert ov.canonical(ov.EMPTY) == {NO_SPLITS: 0}


def test_canonical_drops_the_placeholder_when_there_are_splits() -> None:
    assert ov.canonical({NO_SPLITS: 0, "a/t/0": 3}) == {"a/t/0": 3}


def test_to_json_of_nothing() -> None:
    assert json.loads(ov.to_json({})) == {NO_SPLITS: 0}
    assert ov.parse_json(ov.to_json({})) == ov.EMPTY


def test_document_is_nested_with_dense_partition_lists() -> None:
    vector = {"west/t/1": 5, "east/u/0": 3, "east/t/0": 1, "west/t/0": 4, "east/t/1": 2}
    assert ov.to_document(vector) == {
        "east": {"t": [1, 2], "u": [3]},
        "west": {"t": [4, 5]},
    }
    # clusters, then topics, in order: Spark compares the text
    assert ov.to_json(vector) == '{"east": {"t": [1, 2], "u": [3]}, "west": {"t": [4, 5]}}'


def test_document_names_partitions_when_they_are_not_0_to_n() -> None:
    assert ov.to_document({"c/t/1": 7, "c/t/10": 9, "c/u/0": 1}) == {
        "c": {"t": {"1": 7, "10": 9}, "u": [1]}
    }


def test_document_is_several_times_smaller_than_the_flat_form() -> None:
    vector = {
        f"c{c}/topic-{t:03d}/{p}": 123_456_789 + p
        for c in range(3)
        for t in range(10)
        for p in range(100)
    }
    flat = len(json.dumps(ov.canonical(vector)))
    assert len(ov.to_json(vector)) * 2.5 < flat


@pytest.mark.parametrize("seed", range(20))
def test_to_json_is_byte_identical_for_any_insertion_order(seed: int) -> None:
    rng = random.Random(seed)
    items = [
        (f"c{rng.randrange(3)}/topic-{rng.randrange(3)}/{p}", rng.randrange(10**12))
        for p in range(rng.randrange(1, 30))
    ]
    vector = dict(items)
    shuffled = list(vector.items())
    rng.shuffle(shuffled)
    assert ov.to_json(vector) == ov.to_json(dict(shuffled))
    assert ov.to_json(vector) == ov.to_json(dict(reversed(list(vector.items()))))
    assert ov.parse_json(ov.to_json(vector)) == vector
    assert ov.parse_json(ov.to_json(vector)).to_dict() == vector


def test_to_json_round_trips_through_parse_json() -> None:
    vector = {"b/t/0": 7, "a/t/10": 0, "a/t/2": OFFSET_MAX}
    assert ov.parse_json(ov.to_json(vector)) == vector


def test_old_checkpoints_in_the_flat_form_are_read() -> None:
    """Spark hands back what an earlier version wrote into the offsets log:
    the flat form, placeholder included. It means the same vector."""
    old = '{"east/orders/0": 12, "east/orders/1": 40, "west/orders/0": 7}'
    vector = ov.parse_json(old)
    assert vector.to_dict() == {"east/orders/0": 12, "east/orders/1": 40, "west/orders/0": 7}
    assert ov.to_document(vector) == {"east": {"orders": [12, 40]}, "west": {"orders": [7]}}
    assert ov.parse_json('{"<no splits>": 0}') == ov.EMPTY


def test_nested_and_flat_entries_may_be_mixed() -> None:
    assert ov.parse({"a": {"t": [1, 2]}, "b/t/0": 3}).to_dict() == {
        "a/t/0": 1,
        "a/t/1": 2,
        "b/t/0": 3,
    }


def test_a_split_given_twice_is_refused() -> None:
    with pytest.raises(ValidationError, match="twice"):
        ov.parse({"a": {"t": [1]}, "a/t/0": 1})
    with pytest.raises(ValidationError, match="twice"):
        ov.parse({"a": {"t": {"0": 1}}, "a/t/0": 2})


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"a": {"t": [1, -1]}}, "offsets.a.t[1]"),
        ({"a": {"t": [1, True]}}, "offsets.a.t[1]"),
        ({"a": {"t": [1, None]}}, "offsets.a.t[1]"),
        ({"a": {"t": [OFFSET_MAX + 1]}}, "offsets.a.t[0]"),
        ({"a": {"t": {"01": 1}}}, "offsets.a.t.01"),
        ({"a": {"t": {str(2**31): 1}}}, f"offsets.a.t.{2**31}"),
        ({"a": {"t": 5}}, "offsets.a.t"),
        ({"a": {"": [1]}}, "offsets.a."),
        ({"a": {"x/y": [1]}}, "offsets.a.x/y"),
        ({"a/b": {"t": [1]}}, "offsets.a/b"),
        ({"a": [1, 2]}, "offsets.a"),
    ],
)
def test_parse_refuses_malformed_nested_documents(doc: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        ov.parse(doc)
    assert info.value.field == field


def test_special_offsets_in_nested_documents_only_when_asked() -> None:
    assert ov.parse({"a": {"t": [-2, -1, 5]}}, allow_special=True).to_dict() == {
        "a/t/0": -2,
        "a/t/1": -1,
        "a/t/2": 5,
    }
    with pytest.raises(ValidationError):
        ov.parse({"a": {"t": [-2]}})


# -- columns ----------------------------------------------------------------------


def test_columns_round_trip() -> None:
    vector = ov.parse({"b/t/0": 7, "a/t/10": 0, "a/t/2": OFFSET_MAX, "a/u/3": 1})
    msg = ov.to_columns(vector)
    assert list(msg.clusters) == ["a", "a", "b"]
    assert list(msg.topics) == ["t", "u", "t"]
    assert list(msg.counts) == [2, 1, 1]
    assert list(msg.partitions) == [2, 10, 3, 0]
    assert ov.from_columns(msg) == vector
    assert ov.from_columns(ov.to_columns({})) == ov.EMPTY


def test_columns_in_any_order_are_sorted() -> None:
    msg = planner_pb2.OffsetColumns(
        clusters=["b", "a"],
        topics=["t", "t"],
        counts=[1, 2],
        partitions=[0, 5, 1],
        offsets=[9, 8, 7],
    )
    vector = ov.from_columns(msg)
    assert list(vector.items()) == [("a/t/1", 7), ("a/t/5", 8), ("b/t/0", 9)]


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"clusters": ["a"], "topics": [], "counts": [1]}, "same length"),
        ({"partitions": [0], "offsets": []}, "same length"),
        ({"counts": [2], "partitions": [0], "offsets": [1]}, "add up"),
        ({"counts": [1], "partitions": [-1], "offsets": [1]}, ">= 0"),
        ({"counts": [1], "partitions": [0], "offsets": [-1]}, "offset >= 0"),
        ({"counts": [2], "partitions": [3, 3], "offsets": [1, 2]}, "twice"),
        ({"clusters": ["a/b"]}, "without '/'"),
        ({"topics": [""]}, "non-empty"),
    ],
)
def test_columns_are_checked(fields: dict[str, list[object]], problem: str) -> None:
    base: dict[str, list[object]] = {
        "clusters": ["a"],
        "topics": ["t"],
        "counts": [0],
        "partitions": [],
        "offsets": [],
    }
    with pytest.raises(ValidationError) as info:
        ov.from_columns(planner_pb2.OffsetColumns(**{**base, **fields}), "start")
    assert problem in info.value.problem
    assert info.value.field.startswith("start")


# -- the vector as a mapping --------------------------------------------------------


def test_vector_is_a_mapping_of_split_ids() -> None:
    vector = ov.parse({"b/t/0": 7, "a/t/10": 0, "a/t/2": 5})
    assert len(vector) == 3
    assert vector["a/t/10"] == 0
    assert "a/t/2" in vector
    assert "a/t/3" not in vector
    assert "nonsense" not in vector
    assert 3 not in vector
    with pytest.raises(KeyError):
        vector["c/t/0"]
    assert dict(vector) == {"a/t/2": 5, "a/t/10": 0, "b/t/0": 7}
    assert ov.clusters_of(vector) == {"a", "b"}
    assert ov.clusters_of({"a/t/0": 1, NO_SPLITS: 0}) == {"a"}


def test_repr_of_a_large_vector_is_short() -> None:
    vector = ov.parse({"c": {"t": list(range(1000))}})
    assert repr(vector) == "SplitOffsets(1000 splits in 1 topics of 1 clusters)"


def test_splits_from_counts_and_positions() -> None:
    splits = ov.Splits.from_counts("c", {"t": 3, "u": 0, "v": 2})
    assert splits.ids() == ["c/t/0", "c/t/1", "c/t/2", "c/v/0", "c/v/1"]
    assert splits.topic_partitions() == [("t", 0), ("t", 1), ("t", 2), ("v", 0), ("v", 1)]
    other = ov.parse({"c/t/2": 0, "c/u/0": 0, "c/v/1": 0, "d/t/0": 0}).splits
    at, found = splits.positions(other)
    assert found.tolist() == [True, False, True, False]
    assert at[found].tolist() == [2, 4]
    assert splits.cluster_slice("c") == slice(0, 5)
    assert splits.cluster_slice("d") == slice(5, 5)


def test_positions_are_remembered_per_pair_of_sets_and_read_only() -> None:
    """A query's splits are looked up in the same sets every trigger: the
    answer is remembered on the looked-up set, and nobody may change it."""
    splits = ov.Splits.from_counts("c", {"t": 3, "v": 2})
    other = ov.parse({"c/t/2": 0, "c/u/0": 0, "c/v/1": 0, "d/t/0": 0}).splits
    at, found = splits.positions(other)
    again = splits.positions(other)
    assert again[0] is at
    assert again[1] is found
    with pytest.raises(ValueError, match="read-only"):
        found[0] = False
    # Another slice, or a set equal but not the same, is its own question.
    part = splits.positions(other, other.cluster_slice("c"))
    assert part[1].tolist() == [True, False, True]
    assert splits.positions(other)[1].tolist() == [True, False, True, False]
    equal = ov.Splits.from_counts("c", {"t": 3, "v": 2})
    assert equal.positions(other)[0] is not at
    assert equal.positions(other)[1].tolist() == found.tolist()
    # A set in itself: every split where it is.
    mine = splits.positions(splits, slice(1, 4))
    assert mine[0].tolist() == [1, 2, 3]
    assert mine[1].all()
    # Pickled (to executors) without what it remembers.
    copy = pickle.loads(pickle.dumps(other))
    assert copy == other
    assert len(pickle.dumps(other)) == len(pickle.dumps(copy))
    # select() of every split is the set itself (the memory carries over).
    assert splits.select(np.ones(len(splits), dtype=bool)) is splits
    assert splits.select(np.array([True, False, True, True, True])).ids() == [
        "c/t/0",
        "c/t/2",
        "c/v/0",
        "c/v/1",
    ]


@given(
    st.dictionaries(
        st.tuples(
            st.sampled_from(["a", "b", "c-1"]),
            st.sampled_from(["t", "t.2", "u_x"]),
            st.integers(0, 2**31 - 1) | st.integers(0, 12),
        ),
        st.integers(0, OFFSET_MAX),
        max_size=40,
    )
)
def test_every_form_round_trips(entries: dict[tuple[str, str, int], int]) -> None:
    flat = {f"{c}/{t}/{p}": o for (c, t, p), o in entries.items()}
    vector = ov.parse(flat)
    assert vector.to_dict() == flat
    assert ov.parse_json(ov.to_json(vector)) == vector
    assert ov.from_columns(ov.to_columns(vector)) == vector
    assert ov.parse(ov.canonical(vector)) == vector
    assert list(vector) == [f"{c}/{t}/{p}" for c, t, p in sorted(entries)]


def test_parse_accepts_a_valid_vector() -> None:
    assert ov.parse({"east/orders/0": 0, "west/orders-eu/3": 42}) == {
        "east/orders/0": 0,
        "west/orders-eu/3": 42,
    }


def test_parse_drops_the_placeholder() -> None:
    assert ov.parse({NO_SPLITS: 0}) == {}
    assert ov.parse({NO_SPLITS: 0, "a/t/0": 4}) == {"a/t/0": 4}


@pytest.mark.parametrize("value", [[], "a/t/0", None, 3, [["a/t/0", 1]]])
def test_parse_refuses_non_objects(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        ov.parse(value, "startingOffsets")
    assert info.value.field == "startingOffsets"
    assert "JSON object" in info.value.problem


@pytest.mark.parametrize(
    "key",
    [
        *("a/b", "a/b/x", "a//1", "/b/1", "a/b/-1", "a/b/1/2", "a", "", "a/b/", f"a/b/{2**31}"),
        # Not canonical: a partition is written the one way str(int) writes it.
        *("a/t/01", "a/t/+1", "a/t/1_0", "a/t/ 1"),
    ],
)
def test_parse_refuses_bad_split_ids(key: str) -> None:
    with pytest.raises(ValidationError) as info:
        ov.parse({"good/t/0": 1, key: 1}, "startingOffsets")
    assert info.value.field == f"startingOffsets.{key}"


@pytest.mark.parametrize("off", [-1, -2, -3, OFFSET_MAX + 1])
def test_parse_refuses_negative_offsets_by_default(off: int) -> None:
    with pytest.raises(ValidationError) as info:
        ov.parse({"a/t/0": off}, "end")
    assert info.value.field == "end.a/t/0"
    assert "an offset >= 0" in info.value.problem
    assert repr(off) in info.value.problem


@pytest.mark.parametrize("off", [-1, -2, 0, 5, OFFSET_MAX])
def test_parse_allows_special_offsets_when_asked(off: int) -> None:
    assert ov.parse({"a/t/0": off}, allow_special=True) == {"a/t/0": off}


@pytest.mark.parametrize("off", [-3, -100, OFFSET_MAX + 1])
def test_parse_special_range_is_limited(off: int) -> None:
    with pytest.raises(ValidationError) as info:
        ov.parse({"a/t/0": off}, "startingOffsets", allow_special=True)
    assert info.value.field == "startingOffsets.a/t/0"
    assert "-2 (earliest), -1 (latest)" in info.value.problem


@pytest.mark.parametrize("off", [True, False, 1.0, "5", None, [1]])
def test_parse_refuses_non_integer_offsets(off: object) -> None:
    with pytest.raises(ValidationError) as info:
        ov.parse({"a/t/0": off}, allow_special=True)
    assert info.value.field == "offsets.a/t/0"


@pytest.mark.parametrize("text", ["{", "", "[1", "{'a/t/0': 1}"])
def test_parse_json_refuses_invalid_json(text: str) -> None:
    with pytest.raises(ValidationError) as info:
        ov.parse_json(text, "option startingoffsets")
    assert info.value.field == "option startingoffsets"
    assert "not valid JSON" in info.value.problem


def test_parse_json_validates_content() -> None:
    with pytest.raises(ValidationError) as info:
        ov.parse_json('{"a/b": 1}', "x")
    assert info.value.field == "x.a/b"


# -- SplitId ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "split"),
    [
        ("east/orders/0", SplitId("east", "orders", 0)),
        ("a.b-c_d/orders.v2/17", SplitId("a.b-c_d", "orders.v2", 17)),
        (f"c/t/{2**31 - 1}", SplitId("c", "t", 2**31 - 1)),
    ],
)
def test_split_id_round_trip(text: str, split: SplitId) -> None:
    assert SplitId.parse(text) == split
    assert str(split) == text
    assert SplitId.parse(str(split)) == split


@pytest.mark.parametrize("seed", range(10))
def test_split_id_round_trip_random(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = "abcXYZ019._-"
    split = SplitId(
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 10))),
        "".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 10))),
        rng.randrange(2**31),
    )
    assert SplitId.parse(str(split)) == split


@pytest.mark.parametrize(
    "text",
    [
        *("a/b", "a/b/c/1", "/b/1", "a//1", "a/b/x", "a/b/-1", f"a/b/{2**31}", ""),
        *("a/t/01", "a/t/+1", "a/t/1_0", "a/t/ 1"),  # not canonical
    ],
)
def test_split_id_parse_refuses_malformed(text: str) -> None:
    with pytest.raises(ValueError):
        SplitId.parse(text)
