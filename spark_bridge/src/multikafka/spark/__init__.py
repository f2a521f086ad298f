"""The Spark bridge: the PySpark Python Data Source ``multikafka``.

import multikafka.spark
multikafka.spark.register(spark)  # or spark.dataSource.register(MultiKafkaDataSource)
df = (spark.readStream.format("multikafka")
      .option("coordinator", "127.0.0.1:7070").option("stream", "orders")
      .option("startingOffsets", "earliest").load())
"""

from multikafka.spark.options import SourceOptions
from multikafka.spark.source import MultiKafkaDataSource, register

__all__ = ["MultiKafkaDataSource", "SourceOptions", "register"]
