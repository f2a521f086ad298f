"""Micro-batch planning, as pure functions (the I/O is in ``planner_service``).

Given where a query stands (its start vector) and what the clusters look like
now (:class:`ClusterSnapshot`), :func:`plan_end` decides the end vector of the
next micro-batch:

* a split whose cluster is reachable advances towards its high watermark,
  within its share of the read budget (shares are proportional to backlog);
* a split whose cluster is unreachable stays where it is (no new range, and
  the other clusters are not held up);
* a DRAINING cluster's splits stop at the offsets captured when draining began
  and retire once reached; FAILED, STANDBY and removed clusters' splits retire;
* a split seen for the first time enters at its starting offset (resolved by
  the service: earliest, the cluster's starting position, or a translation
  from the failed cluster it replaces) and advances from the next batch on;
* an offset that went backwards, or a partition that vanished, is data loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from multikafka_core.exceptions import DataLossError
from multikafka_core.model import ClusterState, SplitId
from multikafka_core.offsets import OffsetVector, canonical, splits_of


@dataclass(frozen=True)
class ClusterSnapshot:
    """What planning knows about one cluster of the stream right now."""

    state: ClusterState
    #: Topics of the stream in this cluster.
    topics: frozenset[str]
    reachable: bool
    #: Split ids discovered on the cluster.
    splits: frozenset[str] = frozenset()
    #: High watermark per split (only when reachable).
    latest: Mapping[str, int] = field(default_factory=dict)
    #: End offsets captured when the cluster began DRAINING (None: not yet).
    drain: Mapping[str, int] | None = None


@dataclass
class EndPlan:
    end: OffsetVector
    #: split id -> why it left the vector.
    retired: dict[str, str] = field(default_factory=dict)
    #: split id -> what was lost (only with failOnDataLoss=false).
    data_loss: dict[str, str] = field(default_factory=dict)
    #: Splits that entered the vector in this plan.
    entered: list[str] = field(default_factory=list)


def allocate(backlog: Mapping[str, int], budget: int | None) -> dict[str, int]:
    """Split ``budget`` records across splits in proportion to their backlog
    (largest remainders get the rounding). No split gets more than its backlog;
    ``None`` means no limit."""
    total = sum(backlog.values())
    if budget is None or total <= budget:
        return dict(backlog)
    shares = {s: budget * b // total for s, b in backlog.items()}
    left = budget - sum(shares.values())
    for s in sorted(backlog, key=lambda s: (-(budget * backlog[s] % total), s))[:left]:
        shares[s] += 1
    return shares


def new_splits(start: Mapping[str, int], clusters: Mapping[str, ClusterSnapshot]) -> list[str]:
    """Splits that would enter the vector: discovered on an ACTIVE cluster and
    not in ``start``. A DRAINING cluster admits none: a query reads only the
    splits it already holds to the drain end, then retires them for good."""
    out: list[str] = []
    for snap in clusters.values():
        if snap.state is not ClusterState.ACTIVE:
            continue
        out.extend(s for s in snap.splits if s not in start)
    return sorted(out)


def plan_end(
    start: Mapping[str, int],
    clusters: Mapping[str, ClusterSnapshot],
    entry: Mapping[str, int],
    *,
    budget: int | None = None,
    cap: Mapping[str, int] | None = None,
    fail_on_data_loss: bool = True,
) -> EndPlan:
    """The end vector of the next micro-batch. ``entry`` holds the starting
    offset of each new split that could be resolved (others wait); ``cap`` is
    the Trigger.AvailableNow target."""
    start = splits_of(start)
    plan = EndPlan(end={})
    backlog: dict[str, int] = {}
    for s, pos in start.items():
        split = SplitId.parse(s)
        snap = clusters.get(split.cluster)
        reason = _retire_reason(split, pos, snap)
        if snap is None or reason is not None:
            plan.retired[s] = reason or "cluster removed from the stream"
            continue
        if not snap.reachable or (snap.state is ClusterState.DRAINING and snap.drain is None):
            plan.end[s] = pos  # no new range; resume later where it stopped
            continue
        high = snap.latest.get(s)
        if high is None:
            _lost(plan, s, f"partition {s} no longer exists (topic deleted?)", fail_on_data_loss)
            continue
        if high < pos:
            _lost(
                plan,
                s,
                f"offsets of {s} went backwards from {pos} to {high} (topic recreated?)",
                fail_on_data_loss,
            )
            plan.end[s] = 0  # read the partition again from its start
            continue
        if snap.drain is not None and snap.state is ClusterState.DRAINING:
            high = min(high, snap.drain[s])
        if cap is not None:
            high = min(high, cap.get(s, pos))
        plan.end[s] = pos
        if high > pos:
            backlog[s] = high - pos
    for s, share in allocate(backlog, budget).items():
        plan.end[s] += share
    for s in new_splits(start, clusters):
        if s in entry and (cap is None or s in cap):
            plan.end[s] = entry[s]
            plan.entered.append(s)
    plan.end = canonical(plan.end)
    return plan


def _retire_reason(split: SplitId, pos: int, snap: ClusterSnapshot | None) -> str | None:
    if snap is None:
        return "cluster removed from the stream"
    if split.topic not in snap.topics:
        return "topic removed from the stream"
    if snap.state is ClusterState.FAILED:
        return "cluster failed"
    if snap.state is ClusterState.STANDBY:
        return "cluster is standby"
    if snap.state is ClusterState.DRAINING and snap.drain is not None:
        end = snap.drain.get(str(split))
        if end is None or pos >= end:
            return "drained"
    return None


def _lost(plan: EndPlan, split: str, what: str, fail: bool) -> None:
    if fail:
        raise DataLossError(f"{what}; set failOnDataLoss=false to skip lost data and go on")
    plan.data_loss[split] = what
