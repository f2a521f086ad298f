"""What each cluster of a stream looks like now, for planning a query's next
micro-batch (:func:`snapshots_of`): its state and topics, the splits it
has, their high watermarks (or last stable offsets) from the shared
:class:`~.watermarks.Watermarks`, its drain ends and stops: the
:class:`~.end_vector.ClusterSnapshot` ``plan_end`` takes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from multikafka.coordinator.clusters.discovery import ClusterClient, Discovery
from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.planning.end_vector import ClusterSnapshot
from multikafka.coordinator.planning.watermarks import ClusterEnds, Watermarks
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.core import _offsets as ov
from multikafka.core._kafka_config import reads_committed
from multikafka.core._offsets import SplitOffsets, Splits
from multikafka.core.exceptions import UnavailableError

__all__ = ["snapshots_of"]


async def snapshots_of(
    discovery: Discovery,
    watermarks: Watermarks,
    metrics: Metrics,
    view: StreamView,
    start: SplitOffsets,
    cap: SplitOffsets | None = None,
    budget: int | None = None,
    isolation: str = "",
) -> dict[str, ClusterSnapshot]:
    """What each cluster of the stream looks like now (high watermarks of
    the splits it has and the ones ``start`` holds, last stable offsets where
    the query's readers read committed records (``isolation``, else the
    cluster's own), and its stops, from ``watermarks``: fresh enough for a
    query at ``start`` within ``cap``, reading at most ``budget`` records);
    whether it answered goes to the ``reachable`` gauge. Clusters the shared
    watermarks answer are done at once; the others are asked concurrently."""

    def now(cid: str) -> ClusterSnapshot | None:
        """The snapshot, if it needs no request."""
        spec = view.spec.clusters[cid]
        cc = discovery.client(view.name, cid)
        if cc is None or not spec.state.readable:
            return _snapshot(view, cid, reachable=cc is not None)
        if not cc.discovered:
            return None
        known, ask = _ask(cc, start, cid, spec.topics)
        committed = reads_committed(spec.properties, isolation)
        found = watermarks.cached(
            view, cc, ask, start=start, cap=cap, budget=budget, committed=committed
        )
        if found is None:
            return None
        metrics.reachable.labels(view.name, cid).set(1)
        return _snapshot(view, cid, True, known, found, committed)

    async def asked(cid: str) -> tuple[str, ClusterSnapshot]:
        spec = view.spec.clusters[cid]
        cc = discovery.client(view.name, cid)
        if cc is None or not spec.state.readable:
            return cid, _snapshot(view, cid, reachable=cc is not None)
        if not cc.discovered:
            await discovery.discover(cc)
        known, ask = _ask(cc, start, cid, spec.topics)
        committed = reads_committed(spec.properties, isolation)
        try:
            ends = await watermarks.get(
                view, cc, ask, start=start, cap=cap, budget=budget, committed=committed
            )
        except UnavailableError:
            metrics.reachable.labels(view.name, cid).set(0)
            return cid, _snapshot(view, cid, False, known)
        metrics.reachable.labels(view.name, cid).set(1)
        return cid, _snapshot(view, cid, True, known, ends, committed)

    ready = {cid: now(cid) for cid in view.spec.clusters}
    later = [cid for cid, snap in ready.items() if snap is None]
    if later:
        ready.update(await asyncio.gather(*(asked(cid) for cid in later)))
    return {cid: snap for cid, snap in ready.items() if snap is not None}


def _ask(
    cc: ClusterClient, start: SplitOffsets, cid: str, topics: Sequence[str]
) -> tuple[Splits, Splits]:
    """The splits discovery lists on the cluster, and those to ask
    watermarks of: these and the splits the query holds that discovery does
    not list (yet)."""
    known, _ = cc.split_table()
    where = start.splits.cluster_slice(cid)
    _, listed = known.positions(start.splits, where)
    if listed.all():
        return known, known
    held = start.splits.select(np.arange(where.start, where.stop)[~listed])
    wanted = set(topics)
    keep = np.array([t in wanted for _, t in held.groups], dtype=bool)[held.group]
    return known, Splits.union([known, held.select(keep)])


def _snapshot(
    view: StreamView,
    cid: str,
    reachable: bool,
    known: Splits | None = None,
    ends: ClusterEnds | None = None,
    committed: bool = False,
) -> ClusterSnapshot:
    spec = view.spec.clusters[cid]
    raw_drain = view.status.drains.get(cid)
    drain = None if raw_drain is None else ov.as_offsets(raw_drain)
    return ClusterSnapshot(
        spec.state,
        frozenset(spec.topics),
        reachable,
        ov.EMPTY_SPLITS if known is None else known,
        ov.EMPTY if ends is None else ends.high,
        drain,
        None if ends is None else ends.stop,
        ends.latest if ends is not None and committed else None,
    )
