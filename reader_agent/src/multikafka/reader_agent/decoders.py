"""Payload decoders: a column of Kafka keys or values (Arrow binary) in, the
decoded column and a mask of the records that did not decode out.

A decoder works on whole columns, never per record on the happy path: the
``json`` decoder joins a batch's payloads into one newline-delimited buffer
and parses it with ``pyarrow.json`` in one call. A chunk that does not parse
is cut in pieces (at the row pyarrow names, else in halves) until every bad
record stands alone, so bad records cost a few parses each, good ones nothing
more (:func:`isolate`).

Decoders are found by format name in a registry (:func:`register`,
:func:`make_decoder`): ``raw``, ``string`` and ``json`` here; Avro or
Protobuf can be registered without touching the read path. Nothing here knows
Spark: options are plain strings, results Arrow arrays and a numpy mask, so
the standalone reader uses the same decoders.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

import multikafka.reader_agent._spark_ddl as spark_ddl
from multikafka.core.exceptions import ValidationError


@dataclass(frozen=True)
class Decoded:
    """What a decoder made of a column of payloads."""

    #: The decoded column, as long as the input: null where the payload was
    #: null (a tombstone or a null key) or did not decode.
    values: pa.Array
    #: ``True`` where the payload did not decode (never where it was null).
    bad: np.ndarray
    #: Why, for each bad row (row -> reason; never the payload's bytes).
    reasons: Mapping[int, str] = field(default_factory=dict)


class Decoder(Protocol):
    """Decodes one column of payloads."""

    #: The format's name (``json``).
    @property
    def format(self) -> str: ...

    #: The Arrow type of the decoded column.
    @property
    def type(self) -> pa.DataType: ...

    def decode(self, payloads: pa.Array) -> Decoded:
        """Decode ``payloads`` (Arrow binary, nulls allowed)."""
        ...


#: Builds a decoder from the schema option ("" when not given); ``side`` is
#: ``key`` or ``value``, for error messages (``option valueSchema``).
DecoderFactory = Callable[[str, str], Decoder]

_REGISTRY: dict[str, DecoderFactory] = {}


def register(format: str, factory: DecoderFactory) -> None:
    """Make ``format`` (lower case) known to :func:`make_decoder`."""
    _REGISTRY[format.lower()] = factory


def formats() -> list[str]:
    """The known format names, sorted."""
    return sorted(_REGISTRY)


def make_decoder(format: str, schema: str = "", *, side: str = "value") -> Decoder:
    """The decoder of ``format`` with ``schema`` (a Spark DDL string for
    ``json``). Raises :class:`ValidationError` saying what to fix."""
    factory = _REGISTRY.get(format.strip().lower())
    if factory is None:
        raise ValidationError(
            f"option {side}Format", f"unknown format {format!r}; known: {', '.join(formats())}"
        )
    return factory(schema, side)


# -- isolating bad records ----------------------------------------------------


class Unparsable(Exception):
    """A chunk did not decode. ``row``: the row of the chunk that broke it,
    when the parser says (a hint; pieces are checked anyway)."""

    def __init__(self, reason: str, row: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.row = row


T = TypeVar("T")


def isolate(
    count: int, attempt: Callable[[int, int], T]
) -> tuple[list[tuple[int, T]], dict[int, str]]:
    """Run ``attempt(lo, hi)`` on rows ``[0, count)``; where it raises
    :class:`Unparsable`, cut the chunk and try the pieces, down to single
    rows. Returns the results of the chunks that worked, ``(lo, result)`` in
    row order, and the bad rows with their reasons.

    With a row named (the parser stops at the first bad row), the chunk is
    cut around it: the rows before it are tried as one piece and, when they
    parse, the named row is bad without a try of its own (every row before
    it parsed, so the parser stopped in it); the rest is tried next. That is
    two calls per bad row. Without a row, chunks are halved: about
    2·log2(count) calls per bad row. One call when every row is good."""
    done: list[tuple[int, T]] = []
    bad: dict[int, str] = {}
    worked: set[tuple[int, int]] = set()
    # (lo, hi, and for a row the parser named: its reason and the rows before it)
    todo: list[tuple[int, int, str | None, tuple[int, int] | None]] = (
        [(0, count, None, None)] if count else []
    )
    while todo:  # a stack: the rows before a named row are tried before it
        lo, hi, named, before = todo.pop()
        if named is not None and (before is None or before in worked):
            bad[lo] = named
            continue
        try:
            done.append((lo, attempt(lo, hi)))
            worked.add((lo, hi))
        except Unparsable as exc:
            if hi - lo == 1:
                bad[lo] = exc.reason
            elif exc.row is not None and 0 <= exc.row < hi - lo:
                at = lo + exc.row
                if at + 1 < hi:
                    todo.append((at + 1, hi, None, None))
                todo.append((at, at + 1, exc.reason, (lo, at) if at > lo else None))
                if at > lo:
                    todo.append((lo, at, None, None))
            else:
                mid = (lo + hi) // 2
                todo += [(mid, hi, None, None), (lo, mid, None, None)]
    done.sort(key=lambda piece: piece[0])
    return done, bad


def assemble(count: int, pieces: list[tuple[int, pa.Array]], type_: pa.DataType) -> pa.Array:
    """One array of ``count`` rows from the pieces that worked (in row
    order); rows no piece covers are null."""
    if len(pieces) == 1 and len(pieces[0][1]) == count:
        return pieces[0][1]
    parts: list[pa.Array] = []
    at = 0
    for lo, arr in pieces:
        if lo > at:
            parts.append(pa.nulls(lo - at, type_))
        parts.append(arr)
        at = lo + len(arr)
    if at < count:
        parts.append(pa.nulls(count - at, type_))
    return pa.concat_arrays(parts) if parts else pa.nulls(0, type_)


def _mask(count: int, rows: Mapping[int, str]) -> np.ndarray:
    bad = np.zeros(count, dtype=bool)
    if rows:
        bad[np.fromiter(rows, dtype=np.int64, count=len(rows))] = True
    return bad


# -- raw and string ------------------------------------------------------------


class RawDecoder:
    """The payload's bytes, as they are (Spark's Kafka source)."""

    format = "raw"
    type: pa.DataType = pa.binary()

    def decode(self, payloads: pa.Array) -> Decoded:
        return Decoded(payloads, np.zeros(len(payloads), dtype=bool))


def _raw(schema: str, side: str) -> Decoder:
    if schema.strip():
        raise ValidationError(
            f"option {side}Schema", f"only json takes a schema; {side}Format is raw"
        )
    return RawDecoder()


def utf8(payloads: pa.Array) -> tuple[pa.Array, dict[int, str]]:
    """``payloads`` as an Arrow string array (null where not valid UTF-8),
    and the rows that are not, with their reasons."""

    def attempt(lo: int, hi: int) -> pa.Array:
        try:
            return payloads.slice(lo, hi - lo).cast(pa.string())
        except pa.ArrowInvalid:
            raise Unparsable("not valid UTF-8") from None

    pieces, bad = isolate(len(payloads), attempt)
    return assemble(len(payloads), pieces, pa.string()), bad


class StringDecoder:
    """The payload as UTF-8 text; invalid UTF-8 is a malformed record."""

    format = "string"
    type: pa.DataType = pa.string()

    def decode(self, payloads: pa.Array) -> Decoded:
        text, bad = utf8(payloads)
        return Decoded(text, _mask(len(payloads), bad), bad)


def _string(schema: str, side: str) -> Decoder:
    if schema.strip():
        raise ValidationError(
            f"option {side}Schema", f"only json takes a schema; {side}Format is string"
        )
    return StringDecoder()


# -- json ------------------------------------------------------------------------

_ROW = re.compile(r" in row (\d+)")
_COLUMN = re.compile(r"Column\((/[^)]*)\) (changed from (\w+) to (\w+)|was specified twice)")
_CONVERT = re.compile(r"Failed to convert JSON to ([^,:]+)")
_RAPIDJSON = re.compile(r"JSON parse error: ([A-Za-z ',{}\[\]]+)\.")


class JsonDecoder:
    """A JSON object per payload, into a struct of a Spark DDL schema, parsed
    in bulk by ``pyarrow.json``. Unknown fields are ignored; a field of the
    wrong type, an empty payload or one that is not exactly one JSON object
    is malformed. Raw newlines in a payload count as the whitespace they are
    (replaced by tabs, which are whitespace too outside strings and invalid
    inside them, as raw newlines are), so one line is one record."""

    format = "json"

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self.type: pa.DataType = pa.struct(list(schema))
        #: What pyarrow reads (dates as text: it parses dates only from numbers).
        self._read_schema = pa.schema([f.with_type(_readable(f.type)) for f in schema])
        self._names = {n for n in _names(self.type)}
        self._parse = pj.ParseOptions(
            explicit_schema=self._read_schema,
            unexpected_field_behavior="ignore",
            newlines_in_values=False,
        )

    def decode(self, payloads: pa.Array) -> Decoded:
        n = len(payloads)
        text, bad = utf8(payloads)
        # One line per record: raw CR/LF (whitespace, or invalid in a string)
        # become tabs (the same to a JSON parser).
        text = pc.replace_substring(pc.replace_substring(text, "\n", "\t"), "\r", "\t")
        trimmed = pc.utf8_trim(text, " \t")
        # Exactly one object: starts with '{' and ends with '}' (also keeps
        # a bare `null`, which crashes pyarrow's reader, from starting a line).
        shaped = pc.and_(pc.starts_with(trimmed, "{"), pc.ends_with(trimmed, "}"))
        shaped_np = shaped.fill_null(False).to_numpy(zero_copy_only=False)
        present = ~np.asarray(text.is_null().to_numpy(zero_copy_only=False))
        for row in np.flatnonzero(present & ~shaped_np):
            bad[int(row)] = (
                "an empty payload" if not trimmed[int(row)].as_py() else "not a JSON object"
            )
        rows = np.flatnonzero(shaped_np)
        lines = text if len(rows) == n else text.take(pa.array(rows))
        joined = _Joined.of(lines)
        pieces, unparsed = isolate(len(lines), lambda lo, hi: self._chunk(joined, lo, hi))
        parsed = assemble(len(lines), pieces, self.type)
        for i, reason in unparsed.items():
            bad[int(rows[i])] = reason
        if len(rows) != n:
            where = np.full(n, -1, dtype=np.int64)
            where[rows] = np.arange(len(rows))
            parsed = parsed.take(pa.array(where, mask=where < 0))
        return Decoded(parsed, _mask(n, bad), bad)

    def _chunk(self, joined: _Joined, lo: int, hi: int) -> pa.Array:
        """Rows ``[lo, hi)`` of the joined lines parsed: a struct array of
        ``hi - lo`` rows, or :class:`Unparsable`. The parser stops at the
        first error, so a failed attempt costs what it read up to there."""
        data = joined.rows(lo, hi)
        read = pj.ReadOptions(use_threads=False, block_size=max(len(data) + 1, 1 << 16))
        try:
            table = pj.read_json(
                pa.BufferReader(data), read_options=read, parse_options=self._parse
            )
            values = table.to_struct_array().combine_chunks()
            if not values.type.equals(self.type):
                values = values.cast(self.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            found = _ROW.search(str(exc))
            raise Unparsable(
                self._reason(str(exc)), int(found.group(1)) if found else None
            ) from None
        if len(values) != hi - lo:
            raise Unparsable("more than one JSON value")
        return values

    def _reason(self, error: str) -> str:
        """pyarrow's message without any part of the payload: field paths of
        the schema, types and the JSON parser's fixed messages only."""
        column = _COLUMN.search(error)
        if column:
            path = column.group(1)
            known = all(p in self._names for p in path.strip("/").split("/") if p != "[]")
            where = f"field {path}" if known else "a field"
            if column.group(3):
                return f"{where} is a JSON {column.group(4)} where the schema wants a {column.group(3)}"
            return f"{where} appears twice"
        convert = _CONVERT.search(error)
        if convert:
            return f"a value does not convert to {convert.group(1)}"
        if "Failed to parse" in error or "Casting from" in error or "cast" in error.lower():
            return "a value does not convert to its schema type"
        parse = _RAPIDJSON.search(error)
        if parse:
            return f"invalid JSON ({parse.group(1).strip()})"
        return "invalid JSON"


@dataclass(frozen=True)
class _Joined:
    """Lines joined by newlines into one buffer, once; any run of rows is a
    zero-copy slice of it (cutting a chunk copies nothing)."""

    data: pa.Buffer
    #: Byte where row ``i`` starts (for ``i`` = the row count: the end + 1).
    starts: np.ndarray

    @classmethod
    def of(cls, lines: pa.Array) -> _Joined:
        n = len(lines)
        whole = pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), lines)
        data = pc.binary_join(whole, "\n")[0].as_buffer() if n else pa.py_buffer(b"")
        starts = np.zeros(n + 1, dtype=np.int64)
        lengths = pc.binary_length(lines).to_numpy(zero_copy_only=False)
        np.cumsum(lengths.astype(np.int64) + 1, out=starts[1:])  # + 1: the newline
        return cls(data, starts)

    def rows(self, lo: int, hi: int) -> pa.Buffer:
        start = int(self.starts[lo])
        return self.data.slice(start, int(self.starts[hi]) - 1 - start)


def _readable(type_: pa.DataType) -> pa.DataType:
    """``type_`` with what pyarrow.json cannot parse from text read as text
    (cast after parsing)."""
    if pa.types.is_date32(type_):
        return pa.string()
    if pa.types.is_list(type_):
        return pa.list_(type_.value_field.with_type(_readable(type_.value_type)))
    if pa.types.is_struct(type_):
        return pa.struct([f.with_type(_readable(f.type)) for f in type_])
    return type_


def _names(type_: pa.DataType) -> set[str]:
    if pa.types.is_list(type_):
        return _names(type_.value_type)
    if pa.types.is_struct(type_):
        return {n for f in type_ for n in (f.name, *_names(f.type))}
    return set()


def _unsupported(type_: pa.DataType) -> str | None:
    """Why pyarrow.json cannot decode ``type_`` (None if it can)."""
    if pa.types.is_map(type_):
        return "map is not supported in a json schema (pyarrow cannot read JSON into a map); use struct<...> with the known keys"
    if pa.types.is_binary(type_):
        return "binary is not supported in a json schema (Spark reads it as base64); use string"
    if pa.types.is_list(type_):
        return _unsupported(type_.value_type)
    if pa.types.is_struct(type_):
        for f in type_:
            why = _unsupported(f.type)
            if why:
                return why
    return None


def _json(schema: str, side: str) -> Decoder:
    what = f"option {side}Schema"
    if not schema.strip():
        raise ValidationError(
            what,
            f"{side}Format json needs a schema, a Spark DDL string like 'id long, name string'",
        )
    parsed = spark_ddl.parse_schema(schema, what)
    why = _unsupported(pa.struct(list(parsed)))
    if why:
        raise ValidationError(what, why)
    return JsonDecoder(parsed)


register("raw", _raw)
register("string", _string)
register("json", _json)
