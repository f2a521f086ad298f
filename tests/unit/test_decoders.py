"""Payload decoders (multikafka.reader_agent.decoders): raw, string and json, their
registry, and that json decodes in bulk, isolating bad records by cutting
chunks (a few parses per bad record, one for a chunk of good ones)."""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from multikafka.core.exceptions import ValidationError
from multikafka.reader_agent import decoders
from multikafka.reader_agent.decoders import (
    Decoded,
    JsonDecoder,
    Unparsable,
    formats,
    isolate,
    make_decoder,
)

SCHEMA = (
    "id long, name string, tags array<string>, inner struct<a: int, b: double>, "
    "ts timestamp, day date, amount decimal(6,2)"
)


def decode(fmt: str, payloads: list[bytes | None], schema: str = "") -> Decoded:
    return make_decoder(fmt, schema).decode(pa.array(payloads, pa.binary()))


def json_decode(payloads: list[bytes | None], schema: str = SCHEMA) -> Decoded:
    got = decode("json", payloads, schema)
    assert len(got.values) == len(payloads)
    assert got.bad.dtype == bool
    assert len(got.bad) == len(payloads)
    got.values.validate(full=True)
    return got


# -- raw and string -----------------------------------------------------------


def test_raw_is_the_payload_itself() -> None:
    payloads = pa.array([b"\xff\x00", None, b""], pa.binary())
    got = make_decoder("raw").decode(payloads)
    assert got.values is payloads
    assert not got.bad.any()


def test_string_decodes_utf8_and_flags_invalid_bytes() -> None:
    got = decode("string", [b"caf\xc3\xa9", b"\xff\xfe", None, b"", b"ok", b"\xc3"])
    assert got.values.type == pa.string()
    assert got.values.to_pylist() == ["café", None, None, "", "ok", None]
    assert got.bad.tolist() == [False, True, False, False, False, True]
    assert got.reasons == {1: "not valid UTF-8", 5: "not valid UTF-8"}


def test_string_split_multibyte_across_records_is_still_invalid() -> None:
    # Each half of "€" alone is invalid, though the two concatenated are not.
    got = decode("string", [b"\xe2\x82", b"\xac"])
    assert got.bad.tolist() == [True, True]


# -- json -------------------------------------------------------------------------


def test_json_good_records_nested_and_unknown_fields_ignored() -> None:
    record = {
        "id": 7,
        "name": "x",
        "tags": ["a", "b"],
        "inner": {"b": 2.5, "a": 1, "extra": [1]},
        "ts": "2024-01-02T03:04:05.250Z",
        "day": "2024-02-29",
        "amount": "12.34",
        "unknown": {"deep": [1, 2]},
    }
    got = json_decode([json.dumps(record).encode(), b'{"id": 8}'])
    assert not got.bad.any()
    first, second = got.values.to_pylist()
    assert first == {
        "id": 7,
        "name": "x",
        "tags": ["a", "b"],
        "inner": {"a": 1, "b": 2.5},
        "ts": dt.datetime(2024, 1, 2, 3, 4, 5, 250000, tzinfo=dt.timezone.utc),
        "day": dt.date(2024, 2, 29),
        "amount": Decimal("12.34"),
    }
    assert second == dict.fromkeys(first) | {"id": 8}
    assert got.values.type == make_decoder("json", SCHEMA).type


def test_json_null_payload_is_a_null_struct_not_malformed() -> None:
    got = json_decode([None, b'{"id": 1}', None])
    assert got.values.to_pylist()[0] is None
    assert got.values.to_pylist()[2] is None
    assert not got.bad.any()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"", "an empty payload"),
        (b" \r\n ", "an empty payload"),
        (b"null", "not a JSON object"),
        (b"42", "not a JSON object"),
        (b'"text"', "not a JSON object"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"id": 1', "not a JSON object"),
        (b'{"id": 1,}', "invalid JSON"),
        (b'{"id": "seven"}', "field /id is a JSON string where the schema wants a number"),
        (b'{"id": 1.5}', "a value does not convert to int64"),
        (b'{"inner": {"a": "x"}}', "field /inner/a is a JSON string"),
        (b'{"tags": ["a", 1]}', "field /tags/[] is a JSON number"),
        (b'{"day": "2024-02-30"}', "does not convert"),
        (b'{"amount": 1.234}', "does not convert"),
        (b'{"id": 1} {"id": 2}', "more than one JSON value"),
        (b'{"id": 1}null{}', "more than one JSON value"),
        (b'{"name": "a\nb"}', "invalid JSON"),  # a raw newline inside a string
        (b'{"name": "\xff"}', "not valid UTF-8"),
        (b'{"id": 1, "id": 2}', "field /id appears twice"),
    ],
)
def test_json_malformed_records_are_isolated(payload: bytes, reason: str) -> None:
    good = [b'{"id": %d}' % i for i in range(5)]
    got = json_decode([*good[:2], payload, *good[2:]])
    assert got.bad.tolist() == [False, False, True, False, False, False]
    assert reason in got.reasons[2]
    assert got.values.to_pylist()[2] is None
    assert [v["id"] for i, v in enumerate(got.values.to_pylist()) if i != 2] == [0, 1, 2, 3, 4]


def test_json_reasons_never_quote_the_payload() -> None:
    secrets = [
        b'{"id": "hunter2"}',
        b'{"id": 99999999999999999999999}',
        b'{"day": "hunter2"}',
        b'{"name": hunter2}',
        b'{"hunter2": [1, }',
        b"hunter2",
    ]
    got = json_decode(secrets)
    assert got.bad.all()
    for reason in got.reasons.values():
        assert "hunter2" not in reason, reason
        assert "9999" not in reason, reason


def test_json_newlines_between_tokens_are_whitespace() -> None:
    got = json_decode([b'{\n  "id": 1,\r\n  "name": "x"\n}\n', b'\t{"id":2}  '])
    assert not got.bad.any()
    assert [v["id"] for v in got.values.to_pylist()] == [1, 2]


def test_json_all_bad_and_empty_batches() -> None:
    assert json_decode([b"", b"x", None]).bad.tolist() == [True, True, False]
    empty = json_decode([])
    assert len(empty.values) == 0
    assert empty.values.type == make_decoder("json", SCHEMA).type


def test_json_field_of_the_wrong_type_in_a_struct() -> None:
    got = json_decode([b'{"inner": 5}', b'{"inner": null}', b'{"inner": {}}'])
    assert got.bad.tolist() == [True, False, False]
    assert got.values.to_pylist()[1]["inner"] is None
    assert got.values.to_pylist()[2]["inner"] == {"a": None, "b": None}


# -- bulk: parses per chunk, not per record ------------------------------------------


def count_chunks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Sizes of the chunks JsonDecoder parses."""
    sizes: list[int] = []
    real = JsonDecoder._chunk

    def counting(self: JsonDecoder, joined: object, lo: int, hi: int) -> pa.Array:
        sizes.append(hi - lo)
        return real(self, joined, lo, hi)  # type: ignore[arg-type]

    monkeypatch.setattr(JsonDecoder, "_chunk", counting)
    return sizes


def records(n: int) -> list[bytes | None]:
    return [
        json.dumps({"id": i, "name": f"n{i}", "tags": ["t"], "inner": {"a": i, "b": 0.5}}).encode()
        for i in range(n)
    ]


def test_good_batch_is_parsed_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = count_chunks(monkeypatch)
    got = json_decode(records(10_000))
    assert sizes == [10_000]
    assert not got.bad.any()
    assert got.values.field("id").to_pylist() == list(range(10_000))


def test_no_fallback_on_a_good_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The paths taken for bad records (cutting chunks, explaining a failure)
    fail the test: a good batch never reaches them."""

    def fallback(*args: object, **kwargs: object) -> None:
        raise AssertionError("a per-record fallback ran on a good batch")

    monkeypatch.setattr(Unparsable, "__init__", fallback)
    monkeypatch.setattr(JsonDecoder, "_reason", fallback)
    assert not json_decode(records(10_000)).bad.any()
    with pytest.raises(AssertionError, match="fallback"):  # the trap works
        json_decode([b'{"id": "x"}'])


@pytest.mark.parametrize("bad_rows", [[0], [9_999], [17, 5_000, 9_000], list(range(100, 110))])
def test_bad_records_cost_a_few_parses_each(
    monkeypatch: pytest.MonkeyPatch, bad_rows: list[int]
) -> None:
    payloads = records(10_000)
    for row in bad_rows:
        payloads[row] = b'{"id": "not a number"}'
    sizes = count_chunks(monkeypatch)
    got = json_decode(payloads)
    assert np.flatnonzero(got.bad).tolist() == bad_rows
    assert len(sizes) <= 1 + len(bad_rows) * (2 * math.ceil(math.log2(10_000)) + 1)
    assert got.values.field("id").to_pylist() == [
        None if i in bad_rows else i for i in range(10_000)
    ]


def test_multiple_values_without_an_error_are_found_by_halving(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    payloads = records(1_000)
    payloads[321] = b'{"id": 1}{"id": 2}'  # parses, but as two rows: no row to blame
    sizes = count_chunks(monkeypatch)
    got = json_decode(payloads)
    assert np.flatnonzero(got.bad).tolist() == [321]
    assert len(sizes) <= 1 + 2 * math.ceil(math.log2(1_000))


# -- isolate --------------------------------------------------------------------------


def attempts_on(
    bad: set[int], hint: bool
) -> tuple[Callable[[int, int], int], list[tuple[int, int]]]:
    calls: list[tuple[int, int]] = []

    def attempt(lo: int, hi: int) -> int:
        calls.append((lo, hi))
        broken = sorted(r for r in bad if lo <= r < hi)
        if broken:
            raise Unparsable(f"row {broken[0]}", broken[0] - lo if hint else None)
        return hi - lo

    return attempt, calls


@pytest.mark.parametrize("hint", [True, False])
def test_isolate_finds_every_bad_row(hint: bool) -> None:
    bad = {0, 3, 4, 63, 500, 999}
    attempt, calls = attempts_on(bad, hint)
    done, found = isolate(1_000, attempt)
    assert found == {r: f"row {r}" for r in bad}
    assert sum(n for _, n in done) == 1_000 - len(bad)
    assert [lo for lo, _ in done] == sorted(lo for lo, _ in done)
    if hint:  # cut at the named row: two parses per bad row
        assert len(calls) <= 1 + 2 * len(bad)
    else:
        assert len(calls) <= 1 + len(bad) * 2 * math.ceil(math.log2(1_000))


def test_isolate_of_nothing_calls_nothing() -> None:
    attempt, calls = attempts_on(set(), True)
    assert isolate(0, attempt) == ([], {})
    assert calls == []


# -- registry and options -------------------------------------------------------------


def test_known_formats() -> None:
    assert {"raw", "string", "json"} <= set(formats())


def refused(fmt: str, schema: str = "", side: str = "value") -> ValidationError:
    with pytest.raises(ValidationError) as info:
        make_decoder(fmt, schema, side=side)
    return info.value


def test_unknown_format_lists_the_known_ones() -> None:
    err = refused("avro", side="key")
    assert err.field == "option keyFormat"
    assert "unknown format 'avro'" in err.problem
    assert "json, raw, string" in err.problem


def test_json_needs_a_schema() -> None:
    err = refused("json")
    assert err.field == "option valueSchema"
    assert "needs a schema" in err.problem
    assert "id long" in err.problem


@pytest.mark.parametrize("fmt", ["raw", "string"])
def test_only_json_takes_a_schema(fmt: str) -> None:
    err = refused(fmt, "id long", side="key")
    assert err.field == "option keySchema"
    assert f"keyFormat is {fmt}" in err.problem


def test_bad_ddl_names_the_option_and_position() -> None:
    err = refused("json", "id long, name strng")
    assert err.field == "option valueSchema"
    assert "position 14" in err.problem
    assert "'strng'" in err.problem


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ("m map<string, int>", "map is not supported in a json schema"),
        ("b binary", "binary is not supported in a json schema"),
        ("s struct<x: array<binary>>", "binary is not supported"),
    ],
)
def test_json_refuses_types_it_cannot_read(schema: str, words: str) -> None:
    assert words in refused("json", schema).problem


def test_formats_are_case_insensitive() -> None:
    assert make_decoder(" JSON ", "id long").format == "json"


class UpperDecoder:
    """A third-party decoder: registered by name, used by the read path as is."""

    format = "upper"
    type = pa.string()

    def decode(self, payloads: pa.Array) -> Decoded:
        text = payloads.cast(pa.string())
        values = pa.array([None if v is None else v.upper() for v in text.to_pylist()])
        return Decoded(values, np.zeros(len(payloads), dtype=bool))


def test_new_formats_register_without_touching_the_read_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(decoders._REGISTRY, "upper", lambda schema, side: UpperDecoder())
    assert "upper" in formats()
    got = make_decoder("upper").decode(pa.array([b"abc", None]))
    assert got.values.to_pylist() == ["ABC", None]


def test_isolate_tries_a_named_row_alone_when_rows_before_it_fail() -> None:
    """A wrong hint (rows before the named one are bad too) cannot blame a
    good row: the named row is then tried on its own."""
    calls: list[tuple[int, int]] = []

    def attempt(lo: int, hi: int) -> int:
        calls.append((lo, hi))
        if lo <= 2 < hi:
            raise Unparsable("bad 2", 5 - lo if lo <= 5 < hi else None)  # names row 5
        return hi - lo

    done, found = isolate(10, attempt)
    assert found == {2: "bad 2"}
    assert (5, 6) in calls  # row 5 was tried alone, and worked
    assert sum(n for _, n in done) == 9
