"""The Spark bridge: the PySpark Python Data Source ``multikafka``.

import spark_bridge
spark_bridge.register(spark)  # or spark.dataSource.register(MultiKafkaDataSource)
df = (spark.readStream.format("multikafka")
      .option("coordinator", "127.0.0.1:7070").option("stream", "orders")
      .option("startingOffsets", "earliest").load())
"""

from spark_bridge.options import SourceOptions
from spark_bridge.source import MultiKafkaDataSource, register

__all__ = ["MultiKafkaDataSource", "SourceOptions", "register"]
