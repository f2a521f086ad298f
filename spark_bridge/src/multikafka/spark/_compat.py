"""What the running PySpark offers a Python streaming source.

Admission control arrived in Spark 4.2: ``latestOffset(start, limit)``,
read limits and ``SupportsTriggerAvailableNow``, in
``pyspark.sql.streaming.datasource``. Spark 4.0 and 4.1 call
``latestOffset()`` with no arguments and pass no limits, so the stream
reader keeps track of each batch's start and applies the options' limits
itself (:class:`multikafka.spark._source.MultiKafkaStreamReader`). On those
versions the names below are stand-ins that Spark never sees.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyspark

#: The PySpark the source runs in.
SPARK_VERSION: str = pyspark.__version__

#: Whether Spark passes the stream reader a start and a read limit (4.2+).
ADMISSION_CONTROL: bool = importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None

if TYPE_CHECKING or ADMISSION_CONTROL:
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
else:  # Spark 4.0 and 4.1

    class ReadLimit:
        """Spark 4.2's read limit; before it, only the source's own."""

    @dataclass
    class ReadAllAvailable(ReadLimit):
        pass

    @dataclass
    class ReadMaxRows(ReadLimit):
        max_rows: int

    @dataclass
    class ReadMinRows(ReadLimit):
        min_rows: int

    class SupportsTriggerAvailableNow:
        """Spark 4.0 and 4.1 ask a Python source for its latest offsets once
        under Trigger.AvailableNow and read up to them."""


__all__ = [
    "ADMISSION_CONTROL",
    "SPARK_VERSION",
    "ReadAllAvailable",
    "ReadLimit",
    "ReadMaxRows",
    "ReadMinRows",
    "SupportsTriggerAvailableNow",
]
