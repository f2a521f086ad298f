"""Every e2e test leaves no streaming query behind, pass or fail."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(autouse=True)
def _stop_queries(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "spark" in request.fixturenames:
        spark: SparkSession = request.getfixturevalue("spark")
        for query in spark.streams.active:
            query.stop()
