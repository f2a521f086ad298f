"""Decoding a read's keys and values: the spec a query gives
(``keyFormat``/``valueFormat``, their schemas, ``mode``), the schema it
declares, and applying it to each Arrow batch of a read.

The spec is plain strings (picklable, it travels inside each Spark task); the
decoders are built once per process and spec. ``mode`` works like Spark's
JSON reader:

* ``PERMISSIVE`` (default): a record that does not decode gets a null
  ``key``/``value`` and its bytes in ``_corrupt_key``/``_corrupt_value``
  (columns that exist only when that side is decoded);
* ``DROPMALFORMED``: the record is dropped (and counted);
* ``FAILFAST``: the read fails at the first one, naming stream, split and
  offset and what was wrong, never the payload (it may hold secrets).

A null payload (a tombstone, a null key) stays null and is not malformed.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import multikafka.reader_agent._arrow as arrow
import multikafka.reader_agent._spark_ddl as spark_ddl
from multikafka.core.exceptions import MalformedRecordError, ValidationError
from multikafka.reader_agent.decoders import Decoded, Decoder, make_decoder

CORRUPT_KEY = "_corrupt_key"
CORRUPT_VALUE = "_corrupt_value"


class Mode(enum.Enum):
    """What a read does with a record that does not decode."""

    PERMISSIVE = "PERMISSIVE"
    DROPMALFORMED = "DROPMALFORMED"
    FAILFAST = "FAILFAST"

    @classmethod
    def parse(cls, text: str, what: str = "option mode") -> Mode:
        try:
            return cls(text.strip().upper())
        except ValueError:
            known = ", ".join(m.value for m in cls)
            raise ValidationError(what, f"must be one of {known}, got {text!r}") from None


@dataclass
class MalformedCounts:
    """Records that did not decode, by what became of them."""

    #: Kept with their bytes in a ``_corrupt_*`` column (PERMISSIVE).
    corrupt: int = 0
    #: Dropped (DROPMALFORMED).
    dropped: int = 0
    #: Reads failed on one (FAILFAST).
    failed: int = 0


@dataclass(frozen=True)
class PayloadDecoding:
    """How a read decodes keys and values (the source options, as given)."""

    key_format: str = "raw"
    key_schema: str = ""
    value_format: str = "raw"
    value_schema: str = ""
    mode: Mode = Mode.PERMISSIVE

    @classmethod
    def parse(
        cls,
        *,
        key_format: str = "raw",
        key_schema: str = "",
        value_format: str = "raw",
        value_schema: str = "",
        mode: str = "PERMISSIVE",
    ) -> PayloadDecoding:
        """A checked spec: every error a query can make here surfaces now,
        with what to fix (not in the executors)."""
        spec = cls(
            key_format.strip().lower(),
            key_schema,
            value_format.strip().lower(),
            value_schema,
            Mode.parse(mode),
        )
        spec.decoders()
        return spec

    @property
    def is_raw(self) -> bool:
        return self.key_format == "raw" and self.value_format == "raw"

    def decoders(self) -> tuple[Decoder, Decoder]:
        """The key and value decoders (built once per process)."""
        return (
            _decoder(self.key_format, self.key_schema, "key"),
            _decoder(self.value_format, self.value_schema, "value"),
        )

    def arrow_schema(self, *, include_headers: bool) -> pa.Schema:
        """The schema of a decoded batch: the read's, with ``key`` and
        ``value`` decoded and the ``_corrupt_*`` columns last (made once per
        spec, not per batch)."""
        return _schema(self, include_headers)

    def _make_schema(self, include_headers: bool) -> pa.Schema:
        base = arrow.SCHEMA_WITH_HEADERS if include_headers else arrow.SCHEMA
        if self.is_raw:
            return base
        key, value = self.decoders()
        fields = [
            f.with_type(key.type if f.name == "key" else value.type)
            if f.name in ("key", "value")
            else f
            for f in base
        ]
        if self.key_format != "raw":
            fields.append(pa.field(CORRUPT_KEY, pa.binary()))
        if self.value_format != "raw":
            fields.append(pa.field(CORRUPT_VALUE, pa.binary()))
        return pa.schema(fields)

    def spark_ddl(self, *, include_headers: bool) -> str:
        """The Spark DDL the source declares (equal, through PySpark, to
        :meth:`arrow_schema`)."""
        if self.is_raw:
            return arrow.SPARK_DDL_WITH_HEADERS if include_headers else arrow.SPARK_DDL
        return spark_ddl.schema_ddl(self.arrow_schema(include_headers=include_headers))

    def apply(
        self, batch: pa.RecordBatch, *, stream: str, counts: MalformedCounts | None = None
    ) -> pa.RecordBatch:
        """``batch`` (a read's raw batch, see :func:`multikafka.reader_agent._arrow.record_batch`)
        with its keys and values decoded, as :attr:`mode` says. Other columns
        are kept as they are."""
        if self.is_raw:
            return batch
        counts = counts if counts is not None else MalformedCounts()
        key_dec, value_dec = self.decoders()
        raw_key, raw_value = batch.column("key"), batch.column("value")
        key = key_dec.decode(raw_key) if self.key_format != "raw" else None
        value = value_dec.decode(raw_value) if self.value_format != "raw" else None
        bad = _either(key, value, batch.num_rows)
        if self.mode is Mode.FAILFAST and bad.any():
            counts.failed += 1
            raise _failure(batch, stream, key, value, int(np.argmax(bad)))
        include_headers = "headers" in batch.schema.names
        schema = self.arrow_schema(include_headers=include_headers)
        arrays = [
            (key.values if key else raw_key)
            if name == "key"
            else (value.values if value else raw_value)
            if name == "value"
            else batch.column(name)
            for name in schema.names
            if name not in (CORRUPT_KEY, CORRUPT_VALUE)
        ]
        for side, raw in ((key, raw_key), (value, raw_value)):
            if side is not None:
                arrays.append(
                    _corrupt(side, raw)
                    if self.mode is Mode.PERMISSIVE
                    else pa.nulls(len(raw), pa.binary())
                )
        out = pa.RecordBatch.from_arrays(arrays, schema=schema)
        n_bad = int(bad.sum())
        if n_bad and self.mode is Mode.DROPMALFORMED:
            counts.dropped += n_bad
            return out.filter(pa.array(~bad))
        counts.corrupt += n_bad
        return out


@functools.cache
def _schema(spec: PayloadDecoding, include_headers: bool) -> pa.Schema:
    return spec._make_schema(include_headers)


@functools.cache
def _decoder(format: str, schema: str, side: str) -> Decoder:
    return make_decoder(format, schema, side=side)


def _either(key: Decoded | None, value: Decoded | None, n: int) -> np.ndarray:
    bad = np.zeros(n, dtype=bool)
    for side in (key, value):
        if side is not None:
            bad |= side.bad
    return bad


def _corrupt(side: Decoded, raw: pa.Array) -> pa.Array:
    """The raw bytes where ``side`` did not decode, else null."""
    if not side.bad.any():
        return pa.nulls(len(raw), pa.binary())
    return pc.if_else(pa.array(side.bad), raw, pa.scalar(None, pa.binary()))


def _failure(
    batch: pa.RecordBatch, stream: str, key: Decoded | None, value: Decoded | None, row: int
) -> MalformedRecordError:
    cluster = batch.column("cluster")[row].as_py()
    topic = batch.column("topic")[row].as_py()
    partition = batch.column("partition")[row].as_py()
    offset = batch.column("offset")[row].as_py()
    what = "value" if value is not None and value.bad[row] else "key"
    side = value if what == "value" else key
    reason = side.reasons.get(row, "did not decode") if side is not None else "did not decode"
    return MalformedRecordError(
        f"stream {stream}, split {cluster}/{topic}/{partition}, offset {offset}: "
        f"the {what} is malformed: {reason} (mode FAILFAST; PERMISSIVE keeps such "
        f"records with their bytes in _corrupt_{what}, DROPMALFORMED drops them)"
    )
