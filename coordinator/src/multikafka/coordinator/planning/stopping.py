"""Where a cluster's reading stops: its ``stopping`` position in the stream
document, as offsets of its splits (Flink's per-cluster stopping offsets).

* ``{"offsets": {...}}``: the named partitions stop at those offsets;
  partitions not named are not stopped.
* ``{"timestamp": t}``: each partition stops before its first record at or
  after ``t`` (offsets-for-times). While a partition has no such record yet
  the lookup answers its end offset, so reading goes on up to it, and the
  stop stays put once such a record exists.

The planner caps every offset it hands out at these
(:func:`multikafka.coordinator.planning.end_vector.cap_at_stops`, and ``plan_end``): the end of a
micro-batch, the end of a batch read, ``latest``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from multikafka.coordinator.clusters.discovery import ClusterClient, Discovery
from multikafka.coordinator.clusters.kafka import OffsetQuery
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.core import _offsets as ov
from multikafka.core._offsets import SplitOffsets, Splits

__all__ = ["stop_offsets", "stops_of_clusters"]


async def stop_offsets(
    discovery: Discovery, view: StreamView, cc: ClusterClient, splits: Splits
) -> SplitOffsets | None:
    """The stop offsets of ``splits`` (all of ``cc``'s cluster), or ``None``
    when the cluster has no stopping position. A timestamp stop asks the
    cluster (raises :class:`~multikafka.core.exceptions.UnavailableError`)."""
    stopping = view.spec.clusters[cc.cluster].stopping
    if stopping is None:
        return None
    if stopping.timestamp_ms is None:
        return ov.as_offsets(stopping.split_offsets(cc.cluster))
    pairs = splits.topic_partitions()
    found = await discovery.offsets(cc, pairs, OffsetQuery.at_time(stopping.timestamp_ms))
    values = np.array([found.get(p, -1) for p in pairs], dtype=np.int64)
    there = values >= 0
    return SplitOffsets(splits.select(there), values[there])


async def stops_of_clusters(
    discovery: Discovery, view: StreamView, clients: Mapping[str, ClusterClient], splits: Splits
) -> SplitOffsets:
    """The stop offsets of ``splits`` of every cluster in ``clients`` that has
    a stopping position (raises ``UnavailableError`` like :func:`stop_offsets`)."""
    parts = []
    for cid in splits.clusters():
        cc = clients.get(cid)
        if cc is None or view.spec.clusters.get(cid) is None:
            continue
        where = splits.cluster_slice(cid)
        stops = await stop_offsets(
            discovery, view, cc, splits.select(np.arange(where.start, where.stop))
        )
        if stops is not None:
            parts.append(stops)
    return SplitOffsets.union(parts)
