"""The ``multikafka`` data source, found by PySpark without code.

PySpark looks up Python data sources by itself when a session first needs
one: it imports every installed top-level module whose name starts with
``pyspark_`` and registers its ``DefaultSource`` under the source's name
(``pyspark/sql/worker/lookup_data_sources.py``). With this module installed
(it ships with multikafka-spark), ``spark.readStream.format("multikafka")``
works in any new session, classic or Spark Connect, with no import and no
``register`` call. :func:`multikafka.spark.register` still registers the
source explicitly, with the session's parallelism.
"""

from multikafka.spark import MultiKafkaDataSource

#: What PySpark registers: the source itself (its name is ``multikafka``).
DefaultSource = MultiKafkaDataSource

__all__ = ["DefaultSource"]
