"""The Spark bridge: the PySpark Python Data Source ``multikafka``.

import multikafka.spark
multikafka.spark.register(spark)  # or spark.dataSource.register(MultiKafkaDataSource)
df = (spark.readStream.format("multikafka")
      .option("coordinator", "127.0.0.1:7070").option("stream", "orders")
      .option("startingOffsets", "earliest").load())

``parse_options(options, streaming=True)`` gives the ``ReadOptions`` a query
with these options reads with (the model ``multikafka.Reader``'s arguments
map onto too), or the error Spark would show.
"""

from multikafka.reader_agent.options import ReadOptions
from multikafka.spark.options import parse_options
from multikafka.spark.source import MultiKafkaDataSource, register

__all__ = ["MultiKafkaDataSource", "ReadOptions", "parse_options", "register"]
