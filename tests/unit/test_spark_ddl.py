"""The Spark DDL parser and writer (multikafka.reader_agent._spark_ddl): the Arrow
types it builds are those PySpark builds from the same DDL."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from multikafka.core.exceptions import ValidationError
from multikafka.reader_agent._spark_ddl import parse_schema, parse_type, schema_ddl, type_ddl

INTERNALS = ("multikafka.reader_agent._spark_ddl",)


#: Spark type names (every alias) -> the PySpark type Spark's parser gives.
PRIMITIVES: dict[str, DataType] = {
    "string": StringType(),
    "binary": BinaryType(),
    "boolean": BooleanType(),
    "tinyint": ByteType(),
    "byte": ByteType(),
    "smallint": ShortType(),
    "short": ShortType(),
    "int": IntegerType(),
    "integer": IntegerType(),
    "bigint": LongType(),
    "long": LongType(),
    "float": FloatType(),
    "real": FloatType(),
    "double": DoubleType(),
    "date": DateType(),
    "timestamp": TimestampType(),
    "timestamp_ltz": TimestampType(),
    "timestamp_ntz": TimestampNTZType(),
    "decimal": DecimalType(10, 0),
    "decimal(5)": DecimalType(5, 0),
    "DECIMAL(38, 10)": DecimalType(38, 10),
    "numeric(4,2)": DecimalType(4, 2),
    "dec(3,3)": DecimalType(3, 3),
}


def pyspark_arrow(spark_type: DataType) -> pa.DataType:
    schema = to_arrow_schema(StructType([StructField("f", spark_type)]), timezone="UTC")
    return schema.field("f").type


@pytest.mark.parametrize(("ddl", "spark_type"), PRIMITIVES.items())
def test_primitive_types_are_those_pyspark_builds(ddl: str, spark_type: DataType) -> None:
    assert parse_type(ddl) == pyspark_arrow(spark_type)
    assert parse_type(ddl.upper()) == pyspark_arrow(spark_type)  # keywords ignore case


NESTED = (
    "id long, name string, tags array<string>, inner struct<a: int, b: double>, "
    "ts timestamp, amount decimal(12,2), attrs map<string, array<bigint>>, "
    "`odd name`: array<struct<`x``y`: date>>"
)
NESTED_SPARK = StructType(
    [
        StructField("id", LongType()),
        StructField("name", StringType()),
        StructField("tags", ArrayType(StringType())),
        StructField(
            "inner", StructType([StructField("a", IntegerType()), StructField("b", DoubleType())])
        ),
        StructField("ts", TimestampType()),
        StructField("amount", DecimalType(12, 2)),
        StructField("attrs", MapType(StringType(), ArrayType(LongType()))),
        StructField("odd name", ArrayType(StructType([StructField("x`y", DateType())]))),
    ]
)


def test_nested_schema_equals_what_pyspark_builds() -> None:
    ours = parse_schema(NESTED)
    assert ours.equals(to_arrow_schema(NESTED_SPARK, timezone="UTC"))
    assert ours.names == NESTED_SPARK.fieldNames()
    # PySpark's list items are called "element"; map keys may not be null.
    assert ours.field("tags").type.value_field.name == "element"
    assert not ours.field("attrs").type.key_field.nullable
    assert all(f.nullable for f in ours)


def test_writer_round_trips_in_sparks_spelling() -> None:
    schema = parse_schema(NESTED)
    ddl = schema_ddl(schema)
    assert parse_schema(ddl).equals(schema)
    assert ddl.startswith("id bigint, name string, tags array<string>, ")
    assert "inner struct<`a`: int, `b`: double>" in ddl
    assert "`odd name` array<struct<`x``y`: date>>" in ddl
    assert type_ddl(parse_type("map<string,decimal(5,1)>")) == "map<string,decimal(5,1)>"
    assert type_ddl(pa.timestamp("us", tz="UTC")) == "timestamp"


def test_writer_refuses_types_spark_has_no_ddl_for() -> None:
    with pytest.raises(ValueError, match="uint32"):
        type_ddl(pa.uint32())


def test_colon_and_whitespace_are_optional() -> None:
    assert parse_schema("a:int,b   struct<c:string>").equals(
        pa.schema([("a", pa.int32()), ("b", pa.struct([("c", pa.string())]))])
    )


def refused(ddl: str) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        parse_schema(ddl, "option valueSchema")
    assert info.value.field == "option valueSchema"
    return info.value


@pytest.mark.parametrize(
    ("ddl", "words"),
    [
        ("", ["empty", "id long"]),
        ("id lng", ["expected a type", "bigint", "'lng'", "position 3"]),
        ("id long,", ["expected a field name", "position 8", "the end"]),
        ("id long name string", ["expected ',' or the end", "position 8"]),
        ("a array<int", ["'>' closing array<", "position 11"]),
        ("a map<string>", ["',' between the key and value", "position 12"]),
        ("a struct<>", ["at least one field", "position 9"]),
        ("a struct<b int", ["expected ',' or '>'"]),
        ("a decimal(40,2)", ["precision must be 1 to 38, got 40"]),
        ("a decimal(4,5)", ["scale (5) may not exceed its precision (4)"]),
        ("a decimal(x)", ["decimal's precision"]),
        ("a int not null", ["NOT NULL is not supported", "position 6"]),
        ("a int comment 'x'", ["COMMENT is not supported"]),
        ("a varchar(10)", ["varchar(n) is not supported; use string"]),
        ("a interval", ["intervals are not supported"]),
        ("a int, A string", ["'A' appears twice", "case-insensitively", "position 7"]),
        ("`` int", ["may not be empty"]),
        ("a int; drop", ["expected ',' or the end", "';"]),
    ],
)
def test_bad_ddl_says_what_and_where(ddl: str, words: list[str]) -> None:
    message = str(refused(ddl))
    for word in words:
        assert word in message, message


def test_parse_type_wants_one_type() -> None:
    with pytest.raises(ValidationError, match="end of the type"):
        parse_type("int int")
