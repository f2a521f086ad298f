"""The Spark bridge: the PySpark Python Data Source ``multikafka``.

import multikafka.spark
multikafka.spark.register(spark)  # or spark.dataSource.register(MultiKafkaDataSource)
df = (spark.readStream.format("multikafka")
      .option("coordinator", "127.0.0.1:7070").option("stream", "orders")
      .option("startingOffsets", "earliest").load())

``parse_options(options, streaming=True)`` gives the ``ReadOptions`` a query
with these options reads with (the model ``multikafka.Reader``'s arguments
map onto too), or the error Spark would show. The modules named ``_x`` are
internal.
"""

import time as _time

_IMPORT_STARTED = _time.time()

from multikafka.reader_agent import ReadOptions  # noqa: E402
from multikafka.reader_agent import _startup as startup  # noqa: E402
from multikafka.spark._options import parse_options  # noqa: E402
from multikafka.spark._source import MultiKafkaDataSource, register  # noqa: E402

# A Spark Python worker imports this first (to unpickle the reader): how long
# the imports took shows in the startup trace (reader_agent._startup).
startup.stamp("importing", at=_IMPORT_STARTED)
startup.stamp("imported")

__all__ = ["MultiKafkaDataSource", "ReadOptions", "parse_options", "register"]
