"""Micro-batch planning, as pure functions (the I/O is in :mod:`.batches`).

Given where a query stands (its start vector) and what the clusters look like
now (:class:`ClusterSnapshot`), :func:`plan_end` decides the end vector of the
next micro-batch:

* a split whose cluster is reachable advances towards its high watermark
  (its last stable offset when the query's readers read committed records:
  never into a transaction still open), within its share of the read budget
  (shares are proportional to backlog);
* a split whose cluster is unreachable stays where it is (no new range, and
  the other clusters are not held up);
* a DRAINING cluster's splits stop at the offsets captured when draining began
  and retire once reached; FAILED, STANDBY and removed clusters' splits retire,
  but a FAILED cluster's splits stay (with no new range) while the cluster
  that replaced it has splits still to enter (``hold``): the query's position
  on the FAILED cluster is what their translation starts from;
* a cluster with a stopping position (``stopping`` in the stream document) is
  never planned past its stop offsets: a split that reached its stop simply
  has no more data (it stays in the vector);
* a split seen for the first time enters at its starting offset (resolved by
  the service: earliest, the cluster's starting position, or a translation
  from the failed cluster it replaces) and advances from the next batch on;
* an offset that went backwards, or a partition that vanished, is data loss.

A stream may have 100,000 splits: the work is done on the vectors' columns
(numpy), per split only where something unusual happens (a split retires,
data was lost).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from multikafka.core._offsets import (
    EMPTY,
    EMPTY_SPLITS,
    I64,
    SplitOffsets,
    Splits,
    as_offsets,
)
from multikafka.core.exceptions import DataLossError
from multikafka.core.model import ClusterState, SplitId

#: Why a split left the vector, by code (0: it did not).
RETIRED = (
    "",
    "cluster removed from the stream",
    "topic removed from the stream",
    "cluster failed",
    "cluster is standby",
    "drained",
)
_REMOVED, _TOPIC, _FAILED, _STANDBY, _DRAINED = 1, 2, 3, 4, 5
#: Why the splits of a cluster removed from the stream left the vector.
CLUSTER_REMOVED = RETIRED[_REMOVED]


@dataclass(frozen=True)
class ClusterSnapshot:
    """What planning knows about one cluster of the stream right now.

    For tests and small callers, ``splits`` may also be given as split ids and
    ``latest`` and ``drain`` as ``{split id: offset}``; they are converted."""

    state: ClusterState
    #: Topics of the stream in this cluster.
    topics: frozenset[str]
    reachable: bool
    #: Splits discovered on the cluster.
    splits: Splits = field(default_factory=lambda: EMPTY_SPLITS)
    #: High watermark per split (only when reachable).
    latest: SplitOffsets = field(default_factory=lambda: EMPTY)
    #: End offsets captured when the cluster began DRAINING (None: not yet).
    drain: SplitOffsets | None = None
    #: Stop offsets of the cluster's stopping position (None: no stop).
    stop: SplitOffsets | None = None
    #: Last stable offset per split when the query's readers read committed
    #: records (None: they read up to the high watermark).
    stable: SplitOffsets | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.splits, Splits):
            ids: Iterable[str] = self.splits
            object.__setattr__(self, "splits", Splits.from_ids(SplitId.parse(s) for s in ids))
        object.__setattr__(self, "latest", as_offsets(self.latest))
        if self.drain is not None:
            object.__setattr__(self, "drain", as_offsets(self.drain))
        if self.stop is not None:
            object.__setattr__(self, "stop", as_offsets(self.stop))
        if self.stable is not None:
            object.__setattr__(self, "stable", as_offsets(self.stable))


@dataclass
class EndPlan:
    end: SplitOffsets
    #: split id -> why it left the vector.
    retired: dict[str, str] = field(default_factory=dict)
    #: split id -> what was lost (only with failOnDataLoss=false).
    data_loss: dict[str, str] = field(default_factory=dict)
    #: Splits that entered the vector in this plan.
    entered: list[str] = field(default_factory=list)
    #: cluster -> records this plan reads of the splits it held.
    planned: dict[str, int] = field(default_factory=dict)
    #: cluster -> records between its held splits' positions and their high
    #: watermarks (only for clusters that answered).
    lag: dict[str, int] = field(default_factory=dict)
    #: The end without the budget and without the cap: what is available now
    #: (what Spark reports as the latest offset; minOffsetsPerTrigger counts it).
    available: SplitOffsets = field(default_factory=lambda: EMPTY)


def allocate(backlog: Mapping[str, int], budget: int | None) -> dict[str, int]:
    """Split ``budget`` records across splits in proportion to their backlog
    (largest remainders get the rounding, ties to the smaller split id). No
    split gets more than its backlog; ``None`` means no limit."""
    names = sorted(backlog)
    shares = allocate_array(np.array([backlog[s] for s in names], dtype=np.int64), budget)
    return dict(zip(names, shares.tolist(), strict=True))


def allocate_array(backlog: I64, budget: int | None) -> I64:
    """:func:`allocate` on an array; ties of the rounding go to the earlier entry."""
    n = len(backlog)
    total = int(backlog.sum()) if n and int(backlog.max()) < 2**62 // n else sum(backlog.tolist())
    if budget is None or total <= budget:
        return backlog.copy()
    if total < 2**31:  # budget * backlog fits in int64
        shares = budget * backlog // total
        rest = budget * backlog % total
    else:
        exact = [divmod(budget * b, total) for b in backlog.tolist()]
        shares = np.array([s for s, _ in exact], dtype=np.int64)
        rest = np.array([r for _, r in exact], dtype=object)
    left = budget - int(shares.sum())
    if not left:
        return shares
    if total < 2**62 // n:  # rank by remainder, then earlier entry, in one int64
        rank = rest.astype(np.int64) * n + np.arange(n - 1, -1, -1, dtype=np.int64)
        top = np.argpartition(-rank, left - 1)[:left]
    else:
        top = np.array(heapq.nsmallest(left, range(n), key=lambda i: (-rest[i], i)))
    shares[top] += 1
    return shares


def new_split_set(start: Mapping[str, int], clusters: Mapping[str, ClusterSnapshot]) -> Splits:
    """Splits that would enter the vector: discovered on an ACTIVE cluster and
    not in ``start``. A DRAINING cluster admits none: a query reads only the
    splits it already holds to the drain end, then retires them for good."""
    held = as_offsets(start).splits
    parts = []
    for cid in sorted(clusters):
        snap = clusters[cid]
        if snap.state is ClusterState.ACTIVE and len(snap.splits):
            where = held.cluster_slice(cid)
            if where.stop - where.start == len(snap.splits):
                # As many held as listed: none is new if all held are listed
                # (the question every trigger asks, answered from memory).
                _, listed = snap.splits.positions(held, where)
                if listed.all():
                    continue
            _, known = held.positions(snap.splits)
            parts.append(snap.splits.select(~known))
    return Splits.union(parts)


def new_splits(start: Mapping[str, int], clusters: Mapping[str, ClusterSnapshot]) -> list[str]:
    """The ids of :func:`new_split_set`, in order."""
    return new_split_set(start, clusters).ids()


def plan_end(
    start: Mapping[str, int],
    clusters: Mapping[str, ClusterSnapshot],
    entry: Mapping[str, int],
    *,
    budget: int | None = None,
    cap: Mapping[str, int] | None = None,
    fail_on_data_loss: bool = True,
    hold: frozenset[str] = frozenset(),
) -> EndPlan:
    """The end vector of the next micro-batch. ``entry`` holds the starting
    offset of each new split that could be resolved (others wait); ``cap`` is
    the Trigger.AvailableNow target; the FAILED clusters in ``hold`` keep
    their splits, without a new range."""
    held = as_offsets(start)
    splits, pos = held.splits, held.offsets
    n = len(pos)
    retired = np.zeros(n, dtype=np.int64)  # a RETIRED code per split
    frozen = np.zeros(n, dtype=bool)  # no new range this time
    high = np.full(n, -1, dtype=np.int64)  # high watermark, -1: none
    stable = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)  # last stable offset
    limit = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)  # drain end
    stop = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)  # stopping offset
    bounds = splits.bounds()
    for cid in splits.clusters():
        where = splits.cluster_slice(cid)
        snap = clusters.get(cid)
        if snap is None:
            retired[where] = _REMOVED
            continue
        code = {ClusterState.FAILED: _FAILED, ClusterState.STANDBY: _STANDBY}.get(snap.state, 0)
        if code == _FAILED and cid in hold:
            frozen[where] = True
            continue
        retired[where] = code
        for g, (_, topic) in enumerate(splits.groups):
            if splits.groups[g][0] == cid and topic not in snap.topics:
                retired[bounds[g] : bounds[g + 1]] = _TOPIC
        if code:
            continue
        if snap.stop is not None and len(snap.stop):
            at, found = snap.stop.positions_of(splits, where)
            stop[where] = np.where(found, snap.stop.offsets[at], stop[where])
        draining = snap.state is ClusterState.DRAINING
        if draining and snap.drain is not None:
            at, found = snap.drain.positions_of(splits, where)
            ends = np.where(found, snap.drain.offsets[at] if len(snap.drain) else 0, -1)
            # A stop below the drain end ends the drain there.
            ends = np.where(found, np.minimum(ends, stop[where]), ends)
            done = (~found | (pos[where] >= ends)) & (retired[where] == 0)
            retired[where] = np.where(done, _DRAINED, retired[where])
            limit[where] = np.where(found, ends, limit[where])
        if snap.reachable and len(snap.latest):
            at, found = snap.latest.positions_of(splits, where)
            high[where] = np.where(found, snap.latest.offsets[at], -1)
        if snap.reachable and snap.stable is not None and len(snap.stable):
            at, found = snap.stable.positions_of(splits, where)
            stable[where] = np.where(found, snap.stable.offsets[at], stable[where])
        if not snap.reachable or (draining and snap.drain is None):
            frozen[where] = True
    live = retired == 0
    active = live & ~frozen
    missing = active & (high < 0)
    backwards = active & (high >= 0) & (high < pos)
    ok = active & (high >= pos)
    plan = EndPlan(end=EMPTY)
    for what, mask in (("gone", missing), ("back", backwards)):
        if mask.any():
            lost = splits.select(mask).ids()
            for s, p, h in zip(lost, pos[mask].tolist(), high[mask].tolist(), strict=True):
                text = (
                    f"partition {s} no longer exists (topic deleted?)"
                    if what == "gone"
                    else f"offsets of {s} went backwards from {p} to {h} (topic recreated?)"
                )
                if fail_on_data_loss:
                    raise DataLossError(
                        f"{text}; set failOnDataLoss=false to skip lost data and go on"
                    )
                plan.data_loss[s] = text
    limit = np.minimum(limit, stop)
    # Readers of committed records stop at the last stable offset; a split
    # standing past it (inside a transaction still open) waits there.
    reachable = np.minimum(np.minimum(high, np.maximum(stable, pos)), limit)
    target = reachable
    if cap is not None:
        target = np.minimum(target, as_offsets(cap).values_at(splits, pos))
    backlog = np.where(ok & (target > pos), target - pos, 0)
    end = pos + allocate_array(backlog, budget)
    end[backwards] = 0  # read the partition again from its start
    available = np.where(ok & (reachable > pos), reachable, pos)
    available[backwards] = 0
    keep = live & ~missing
    for code in np.unique(retired[~live]).tolist():
        for s in splits.select(retired == code).ids():
            plan.retired[s] = RETIRED[code]
    _account(plan, splits, pos, end, np.where(high >= 0, np.minimum(high, stop), high), keep)
    entered = _entering(held, clusters, as_offsets(entry), cap)
    plan.entered = entered.splits.ids()
    kept = splits.select(keep)
    plan.end = SplitOffsets.union([SplitOffsets(kept, end[keep]), entered])
    plan.available = SplitOffsets.union([SplitOffsets(kept, available[keep]), entered])
    return plan


def cap_at_stops(offsets: SplitOffsets, stops: SplitOffsets) -> SplitOffsets:
    """``offsets`` with every split that has a stop offset held at or below it."""
    if not len(stops) or not len(offsets):
        return offsets
    at, found = stops.positions_of(offsets.splits)
    if not found.any():
        return offsets
    capped = np.where(found, np.minimum(offsets.offsets, stops.offsets[at]), offsets.offsets)
    return SplitOffsets(offsets.splits, capped)


def _entering(
    held: SplitOffsets,
    clusters: Mapping[str, ClusterSnapshot],
    entry: SplitOffsets,
    cap: Mapping[str, int] | None,
) -> SplitOffsets:
    """New splits with an entry offset (and in the cap, if there is one)."""
    new = new_split_set(held, clusters)
    at, found = entry.positions_of(new)
    if cap is not None:
        found = found & as_offsets(cap).positions_of(new)[1]
    if not found.any():
        return EMPTY
    return SplitOffsets(new.select(found), entry.offsets[at[found]])


def _account(
    plan: EndPlan, splits: Splits, pos: I64, end: I64, high: I64, keep: np.ndarray
) -> None:
    """Records planned and lag per cluster, over the splits the query held."""
    for cid in splits.clusters():
        where = splits.cluster_slice(cid)
        k = keep[where]
        if not k.any():
            continue
        p = pos[where][k]
        plan.planned[cid] = int(np.maximum(end[where][k] - p, 0).sum())
        h = high[where][k]
        if (h >= 0).any():
            plan.lag[cid] = int(np.maximum(h - p, 0)[h >= 0].sum())
