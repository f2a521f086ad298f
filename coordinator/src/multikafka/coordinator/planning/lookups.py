"""Offsets asked of the clusters while planning, in columns: one lookup per
cluster and query (a stream of 100,000 splits asks a few questions, not one
per split).
"""

from __future__ import annotations

import asyncio
import logging
from itertools import repeat

import numpy as np

from multikafka.coordinator.clusters.discovery import ClusterClient, Discovery
from multikafka.coordinator.clusters.kafka import OffsetQuery
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.core import _offsets as ov
from multikafka.core._kafka_config import reads_committed
from multikafka.core._offsets import SplitOffsets, Splits
from multikafka.core.exceptions import UnavailableError

__all__ = ["lookup", "lookup_all"]

logger = logging.getLogger(__name__)


async def lookup(
    discovery: Discovery, cc: ClusterClient, splits: Splits, query: OffsetQuery
) -> SplitOffsets:
    """Offsets of ``splits`` (all of ``cc``'s cluster) for ``query``; splits
    the cluster does not know are left out. Raises :class:`UnavailableError`."""
    known, pairs = cc.split_table()
    if splits is not known and splits != known:
        pairs = splits.topic_partitions()
    found = await discovery.offsets(cc, pairs, query)
    values = np.array(list(map(found.get, pairs, repeat(-1))), dtype=np.int64)
    if len(values) and int(values.min()) < 0:
        there = values >= 0
        return SplitOffsets(splits.select(there), values[there])
    return SplitOffsets(splits, values)


async def lookup_all(
    discovery: Discovery,
    view: StreamView,
    splits: Splits,
    query: OffsetQuery,
    *,
    isolation: str = "",
) -> list[SplitOffsets]:
    """:func:`lookup` for every cluster of ``splits``, concurrently; the
    splits of a cluster that is not set up or does not answer are left out.
    The latest offsets of a cluster read committed (``isolation``, else the
    cluster's own, :func:`reads_committed`) are its last stable offsets."""

    async def one(cid: str) -> SplitOffsets:
        where = splits.cluster_slice(cid)
        mine = splits.select(np.arange(where.start, where.stop))
        asked = query
        if query.kind == "latest" and reads_committed(
            view.spec.clusters[cid].properties, isolation
        ):
            asked = OffsetQuery.stable()
        try:
            return await lookup(discovery, discovery.require(view.name, cid), mine, asked)
        except UnavailableError as exc:
            logger.warning(
                "cluster unreachable; its splits join later",
                extra={"stream": view.name, "cluster": cid, "error": str(exc)},
            )
            return ov.EMPTY

    return list(await asyncio.gather(*(one(cid) for cid in splits.clusters())))
