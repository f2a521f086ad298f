"""Offsets asked of the clusters while planning, in columns: one lookup per
cluster and query (a stream of 100,000 splits asks a few questions, not one
per split), and what each cluster of a stream looks like now
(:func:`snapshots_of`: the high watermarks and stops ``plan_end`` takes).
"""

from __future__ import annotations

import asyncio
import logging
from itertools import repeat
from typing import TYPE_CHECKING

import numpy as np

from multikafka.coordinator.clusters.discovery import ClusterClient, Discovery
from multikafka.coordinator.clusters.kafka import OffsetQuery
from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.planning.planner import ClusterSnapshot
from multikafka.coordinator.state.stream_state import StreamView
from multikafka.core import offsets as ov
from multikafka.core.exceptions import UnavailableError
from multikafka.core.offsets import SplitOffsets, Splits

if TYPE_CHECKING:
    from multikafka.coordinator.planning.watermarks import Watermarks

__all__ = ["lookup", "lookup_all", "snapshots_of"]

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
    discovery: Discovery, view: StreamView, splits: Splits, query: OffsetQuery
) -> list[SplitOffsets]:
    """:func:`lookup` for every cluster of ``splits``, concurrently; the
    splits of a cluster that is not set up or does not answer are left out."""

    async def one(cid: str) -> SplitOffsets:
        where = splits.cluster_slice(cid)
        mine = splits.select(np.arange(where.start, where.stop))
        try:
            return await lookup(discovery, discovery.require(view.name, cid), mine, query)
        except UnavailableError as exc:
            logger.warning(
                "cluster unreachable; its splits join later",
                extra={"stream": view.name, "cluster": cid, "error": str(exc)},
            )
            return ov.EMPTY

    return list(await asyncio.gather(*(one(cid) for cid in splits.clusters())))


async def snapshots_of(
    discovery: Discovery,
    watermarks: Watermarks,
    metrics: Metrics,
    view: StreamView,
    start: SplitOffsets,
    cap: SplitOffsets | None = None,
) -> dict[str, ClusterSnapshot]:
    """What each cluster of the stream looks like now (high watermarks of
    the splits it has and the ones ``start`` holds, and its stops, from
    ``watermarks``: fresh enough for a query at ``start`` within ``cap``);
    whether it answered goes to the ``reachable`` gauge."""

    async def one(cid: str) -> tuple[str, ClusterSnapshot]:
        spec = view.spec.clusters[cid]
        cc = discovery.client(view.name, cid)
        raw_drain = view.status.drains.get(cid)
        drain = None if raw_drain is None else ov.as_offsets(raw_drain)
        topics = frozenset(spec.topics)
        if cc is None or not spec.state.readable:
            return cid, ClusterSnapshot(spec.state, topics, reachable=cc is not None, drain=drain)
        if not cc.discovered:
            await discovery.discover(cc)
        known, _ = cc.split_table()
        ask = known
        # Splits the query holds that discovery does not list (yet) are asked too.
        where = start.splits.cluster_slice(cid)
        _, listed = known.positions(start.splits, where)
        if not listed.all():
            held = start.splits.select(np.arange(where.start, where.stop)[~listed])
            keep = np.array([t in topics for _, t in held.groups], dtype=bool)[held.group]
            ask = Splits.union([known, held.select(keep)])
        try:
            latest, stop = await watermarks.get(view, cc, ask, start=start, cap=cap)
        except UnavailableError:
            metrics.reachable.labels(view.name, cid).set(0)
            return cid, ClusterSnapshot(spec.state, topics, False, known, drain=drain)
        metrics.reachable.labels(view.name, cid).set(1)
        return cid, ClusterSnapshot(spec.state, topics, True, known, latest, drain, stop)

    return dict(await asyncio.gather(*(one(cid) for cid in view.spec.clusters)))
