"""The ``multikafka`` PySpark data source."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from reader_agent.arrow import SPARK_DDL, SPARK_DDL_WITH_HEADERS
from spark_bridge.options import SourceOptions
from spark_bridge.readers import MultiKafkaBatchReader, MultiKafkaStreamReader


class MultiKafkaDataSource(DataSource):
    """``spark.readStream.format("multikafka")``: one logical stream read from
    all the Kafka clusters its metadata names, exactly once."""

    @classmethod
    def name(cls) -> str:
        return "multikafka"

    def schema(self) -> str:
        headers = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return SPARK_DDL_WITH_HEADERS if headers else SPARK_DDL

    def reader(self, schema: StructType) -> MultiKafkaBatchReader:
        return MultiKafkaBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> MultiKafkaStreamReader:
        return MultiKafkaStreamReader(SourceOptions.parse(self.options, streaming=True))
