"""Failover translation and what it is computed from.

* :mod:`.failover`: where the splits of a cluster that replaced a failed one
  start, from a query's position on the failed cluster;
* :mod:`.marks`: read marks, the offset and record time of the last record
  agents read per split (what ``timestamp`` translation looks up);
* :mod:`.abandoned`: ranges a query gave up on a failed cluster, which lower
  its position there;
* :mod:`.mm2`: MirrorMaker 2's records, its offset translation, and the
  leader's tail of every mirror's offset syncs (the ``mm2`` strategy).
"""

from multikafka.coordinator.translation.abandoned import Abandonments
from multikafka.coordinator.translation.failover import FailoverTranslator, Translation
from multikafka.coordinator.translation.marks import ReadMark, ReadMarks

__all__ = ["Abandonments", "FailoverTranslator", "ReadMark", "ReadMarks", "Translation"]
