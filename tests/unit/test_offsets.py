"""Offset vectors: canonical JSON (Spark compares it as text), validation, split ids."""

from __future__ import annotations

import json
import random

import pytest

from multikafka_core import offsets as ov
from multikafka_core.exceptions import ValidationError
from multikafka_core.model import SplitId
from multikafka_core.offsets import NO_SPLITS, OFFSET_MAX


def test_canonical_sorts_keys() -> None:
    out = ov.canonical({"west/t/0": 5, "east/t/1": 2, "east/t/0": 1})
    assert list(out) == ["east/t/0", "east/t/1", "west/t/0"]
    assert out == {"east/t/0": 1, "east/t/1": 2, "west/t/0": 5}


def test_canonical_of_nothing_is_the_placeholder() -> None:
    assert ov.canonical({}) == {NO_SPLITS: 0}
    assert ov.canonical({NO_SPLITS: 0}) == {NO_SPLITS: 0}


def test_canonical_drops_the_placeholder_when_there_are_splits() -> None:
    assert ov.canonical({NO_SPLITS: 0, "a/t/0": 3}) == {"a/t/0": 3}


def test_to_json_of_nothing() -> None:
    assert json.loads(ov.to_json({})) == {NO_SPLITS: 0}


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
    assert json.loads(ov.to_json(vector)) == vector


def test_to_json_round_trips_through_parse_json() -> None:
    vector = {"b/t/0": 7, "a/t/10": 0, "a/t/2": OFFSET_MAX}
    assert ov.parse_json(ov.to_json(vector)) == vector


def test_splits_of_drops_the_placeholder() -> None:
    assert ov.splits_of({NO_SPLITS: 0}) == {}
    assert ov.splits_of({NO_SPLITS: 0, "a/t/0": 1}) == {"a/t/0": 1}
    assert ov.splits_of({"a/t/0": 1, "b/t/0": 2}) == {"a/t/0": 1, "b/t/0": 2}


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
