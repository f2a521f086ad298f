"""A small, strict Spark DDL parser producing Arrow types, and the writer back.

``id long, inner struct<a: int, tags: array<string>>`` becomes the Arrow
schema PySpark would build from the same DDL (``to_arrow_schema(...,
timezone="UTC")``: every field nullable, timestamps in microseconds and UTC,
list items named ``element``, map keys not null), so a batch decoded into it
is one the Python data source accepts. ``multikafka_core`` may not import
PySpark (its parser needs a JVM anyway), hence this parser; the equality with
PySpark's conversion is tested in ``tests/unit/test_spark_ddl.py`` and, with
Spark's own parser, in ``tests/e2e/test_decoding.py``.

Refused with a message saying so: ``NOT NULL`` and ``COMMENT`` (decoded
fields are always nullable, and comments would not reach Arrow), ``char`` /
``varchar``, intervals, ``variant`` and any type Arrow decoding cannot build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

from multikafka.core.exceptions import ValidationError

#: Spark's timestamp, in Arrow (PySpark converts with timezone="UTC").
TIMESTAMP = pa.timestamp("us", tz="UTC")

_PRIMITIVES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "tinyint": pa.int8(),
    "byte": pa.int8(),
    "smallint": pa.int16(),
    "short": pa.int16(),
    "int": pa.int32(),
    "integer": pa.int32(),
    "bigint": pa.int64(),
    "long": pa.int64(),
    "float": pa.float32(),
    "real": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": TIMESTAMP,
    "timestamp_ltz": TIMESTAMP,
    "timestamp_ntz": pa.timestamp("us"),
}
_DECIMALS = ("decimal", "dec", "numeric")
_REFUSED = {
    "char": "char(n) is not supported; use string",
    "varchar": "varchar(n) is not supported; use string",
    "interval": "intervals are not supported",
    "variant": "variant is not supported",
    "void": "void is not supported",
}
KNOWN_TYPES = sorted({*_PRIMITIVES, *_DECIMALS, "array", "map", "struct"})

_TOKEN = re.compile(
    r"\s*(?:(?P<quoted>`(?:[^`]|``)*`)|(?P<word>[A-Za-z0-9_]+)|(?P<punct>[<>(),:])|(?P<other>\S))"
)
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class _Token:
    kind: str  # "quoted", "word", "punct", "other" or "end"
    text: str
    pos: int


class _Parser:
    def __init__(self, text: str, what: str) -> None:
        self.text = text
        self.what = what
        self.tokens: list[_Token] = []
        for m in _TOKEN.finditer(text):
            kind = m.lastgroup or "other"
            self.tokens.append(_Token(kind, m.group(kind), m.start(kind)))
        self.tokens.append(_Token("end", "", len(text)))
        self.i = 0

    def error(self, problem: str, at: _Token | None = None) -> ValidationError:
        tok = at or self.peek()
        near = "the end" if tok.kind == "end" else repr(self.text[tok.pos : tok.pos + 20])
        return ValidationError(self.what, f"{problem} at position {tok.pos} (near {near})")

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def expect(self, punct: str, wanted: str) -> None:
        tok = self.take()
        if tok.kind != "punct" or tok.text != punct:
            raise self.error(f"expected {wanted}", tok)

    def fields(self, end: str) -> list[pa.Field]:
        """``name [:] type`` pairs separated by commas, up to ``end`` (a
        punctuation mark, or "" for the end of the text)."""
        out: list[pa.Field] = []
        seen: dict[str, str] = {}
        while True:
            name_tok = self.take()
            if name_tok.kind == "quoted":
                name = name_tok.text[1:-1].replace("``", "`")
            elif name_tok.kind == "word":
                name = name_tok.text
            else:
                raise self.error("expected a field name", name_tok)
            if not name:
                raise self.error("a field name may not be empty", name_tok)
            if name.lower() in seen:
                raise self.error(
                    f"field {name!r} appears twice (Spark compares names case-insensitively)",
                    name_tok,
                )
            seen[name.lower()] = name
            if self.peek().kind == "punct" and self.peek().text == ":":
                self.take()
            out.append(pa.field(name, self.type_()))
            self.refuse_modifiers()
            tok = self.peek()
            if tok.kind == "punct" and tok.text == ",":
                self.take()
                continue
            if (end and tok.kind == "punct" and tok.text == end) or (not end and tok.kind == "end"):
                return out
            wanted = f"',' or '{end}'" if end else "',' or the end"
            raise self.error(f"expected {wanted}", tok)

    def refuse_modifiers(self) -> None:
        tok = self.peek()
        if tok.kind == "word" and tok.text.lower() == "not":
            raise self.error("NOT NULL is not supported: decoded fields are always nullable")
        if tok.kind == "word" and tok.text.lower() == "comment":
            raise self.error("COMMENT is not supported")

    def type_(self) -> pa.DataType:
        tok = self.take()
        word = tok.text.lower() if tok.kind == "word" else ""
        if word in _PRIMITIVES:
            return _PRIMITIVES[word]
        if word in _DECIMALS:
            return self.decimal()
        if word == "array":
            self.expect("<", "'<' after array")
            item = self.type_()
            self.expect(">", "'>' closing array<")
            return pa.list_(pa.field("element", item))
        if word == "map":
            self.expect("<", "'<' after map")
            key = self.type_()
            self.expect(",", "',' between the key and value types of map<")
            value = self.type_()
            self.expect(">", "'>' closing map<")
            return pa.map_(pa.field("key", key, nullable=False), pa.field("value", value))
        if word == "struct":
            self.expect("<", "'<' after struct")
            if self.peek().kind == "punct" and self.peek().text == ">":
                raise self.error("a struct needs at least one field")
            fields = self.fields(">")
            self.expect(">", "'>' closing struct<")
            return pa.struct(fields)
        if word in _REFUSED:
            raise self.error(_REFUSED[word], tok)
        shown = "the end" if tok.kind == "end" else repr(tok.text)
        raise self.error(f"expected a type, one of {', '.join(KNOWN_TYPES)}; got {shown}", tok)

    def decimal(self) -> pa.DataType:
        precision, scale = 10, 0
        if self.peek().kind == "punct" and self.peek().text == "(":
            self.take()
            precision = self.number("precision")
            if self.peek().kind == "punct" and self.peek().text == ",":
                self.take()
                scale = self.number("scale")
            self.expect(")", "')' closing decimal(")
        if not 1 <= precision <= 38:
            raise self.error(f"decimal precision must be 1 to 38, got {precision}")
        if scale > precision:
            raise self.error(f"decimal scale ({scale}) may not exceed its precision ({precision})")
        return pa.decimal128(precision, scale)

    def number(self, what: str) -> int:
        tok = self.take()
        if tok.kind != "word" or not tok.text.isdigit():
            raise self.error(f"expected the decimal's {what} (a number)", tok)
        return int(tok.text)


def parse_schema(ddl: str, what: str = "schema") -> pa.Schema:
    """The Arrow schema of a Spark DDL field list (``a int, b string``).
    ``what`` names the input in errors (``option valueSchema``)."""
    if not ddl.strip():
        raise ValidationError(what, "is empty; give fields like 'id long, name string'")
    parser = _Parser(ddl, what)
    return pa.schema(parser.fields(""))


def parse_type(ddl: str, what: str = "type") -> pa.DataType:
    """The Arrow type of one Spark DDL type (``array<struct<a: int>>``)."""
    parser = _Parser(ddl, what)
    type_ = parser.type_()
    if parser.peek().kind != "end":
        raise parser.error("expected the end of the type")
    return type_


def quote(name: str) -> str:
    """A field name as DDL: backquoted, backquotes doubled."""
    return "`" + name.replace("`", "``") + "`"


_DDL_NAMES: dict[pa.DataType, str] = {
    pa.string(): "string",
    pa.binary(): "binary",
    pa.bool_(): "boolean",
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.date32(): "date",
    TIMESTAMP: "timestamp",
    pa.timestamp("us"): "timestamp_ntz",
}


def type_ddl(type_: pa.DataType) -> str:
    """Spark DDL of an Arrow type this module can parse (the inverse of
    :func:`parse_type`, in Spark's own spelling: ``bigint``, not ``long``)."""
    if type_ in _DDL_NAMES:
        return _DDL_NAMES[type_]
    if pa.types.is_decimal128(type_):
        return f"decimal({type_.precision},{type_.scale})"
    if pa.types.is_list(type_):
        return f"array<{type_ddl(type_.value_type)}>"
    if pa.types.is_map(type_):
        return f"map<{type_ddl(type_.key_type)},{type_ddl(type_.item_type)}>"
    if pa.types.is_struct(type_):
        return f"struct<{fields_ddl(list(type_), sep=': ')}>"
    raise ValueError(f"no Spark DDL for Arrow type {type_}")


def fields_ddl(fields: list[pa.Field], *, sep: str = " ") -> str:
    """Fields as DDL, ``name type`` (top level) or ``name: type`` (in a struct)."""
    return ", ".join(
        f"{f.name if _PLAIN_NAME.fullmatch(f.name) and sep == ' ' else quote(f.name)}{sep}{type_ddl(f.type)}"
        for f in fields
    )


def schema_ddl(schema: pa.Schema) -> str:
    """Spark DDL of a whole schema (``key binary, value struct<...>, ...``)."""
    return fields_ddl(list(schema))
