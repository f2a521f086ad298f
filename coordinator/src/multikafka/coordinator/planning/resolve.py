"""Where a query starts, or a batch read starts or ends: a ``Position``
(earliest, latest, per-split offsets, a time, per-split times) resolved to
offsets of the stream's splits.

Splits not named resolve by the position's kind; per-split times are looked
up with offsets-for-times, once per distinct time on each cluster. A named
split with no record at or after its time fails the call, or with
``NO_MATCH_LATEST`` resolves to its latest offset. No offset lies past a
cluster's stop.
"""

from __future__ import annotations

import asyncio

import numpy as np

from multikafka.coordinator.clusters.discovery import Discovery
from multikafka.coordinator.clusters.kafka import OffsetQuery
from multikafka.coordinator.planning.end_vector import cap_at_stops
from multikafka.coordinator.planning.lookups import lookup, lookup_all
from multikafka.coordinator.planning.notes import SHOWN_SPLITS
from multikafka.coordinator.planning.stopping import stops_of_clusters
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.core import _offsets as ov
from multikafka.core._offsets import SplitOffsets, Splits
from multikafka.core.exceptions import PreconditionError, UnavailableError, ValidationError, shown
from multikafka.v1 import planner_pb2

__all__ = ["resolve_position"]

Position = planner_pb2.Position


async def resolve_position(
    discovery: Discovery, view: StreamView, pos: planner_pb2.Position, *, isolation: str = ""
) -> SplitOffsets:
    """The offsets ``pos`` names on the readable clusters of ``view``.
    Splits of a cluster that does not answer are left out: they join a query
    later, at their cluster's starting position. The latest offset of a
    cluster whose readers read committed records (``isolation``, else the
    cluster's own) is its last stable offset, as a consumer reading
    committed records sees it."""
    kind = pos.kind or Position.EARLIEST
    readable = [discovery.require(view.name, cid) for cid in view.spec.readable_clusters()]
    await asyncio.gather(*(discovery.discover(cc) for cc in readable if not cc.discovered))
    specific = ov.EMPTY
    if kind == Position.SPECIFIC:
        specific = _check_specific(view, pos.offsets)
        kind = pos.fallback or Position.EARLIEST
    timed = ov.EMPTY
    if pos.split_timestamps.partitions:
        timed = _check_specific(
            view, pos.split_timestamps, "position.split_timestamps", special=False
        )
        both = timed.splits.positions(specific.splits)[1] if len(specific) else None
        if both is not None and both.any():
            s = specific.splits.select(both).ids()[0]
            raise ValidationError(
                f"position.split_timestamps.{s}",
                "also named in position.offsets: name each split in one of them",
            )
        if pos.no_match not in (0, Position.NO_MATCH_ERROR, Position.NO_MATCH_LATEST):
            raise ValidationError("position.no_match", "use NO_MATCH_ERROR or NO_MATCH_LATEST")
    earliest, latest = OffsetQuery.earliest(), OffsetQuery.latest()
    fallback = {
        Position.EARLIEST: earliest,
        Position.LATEST: latest,
        Position.TIMESTAMP: OffsetQuery.at_time(pos.timestamp_ms),
    }.get(kind)
    if fallback is None:
        raise ValidationError("position.kind", "use EARLIEST, LATEST, SPECIFIC or TIMESTAMP")
    if kind == Position.TIMESTAMP and pos.timestamp_ms < 0:
        raise ValidationError("position.timestamp_ms", "must be milliseconds since the epoch, >= 0")
    for cid in specific.splits.clusters():
        discovery.require(view.name, cid)  # UNAVAILABLE (the client retries) until set up
    splits = Splits.union([cc.split_table()[0] for cc in readable] + [specific.splits])
    given = specific.values_at(splits, np.full(len(splits), -3, dtype=np.int64))
    if len(timed):
        given[timed.positions_of(splits)[1]] = -4
    # -4: by its own time; -3: not named; -2 earliest, -1 latest (Spark's convention)
    lookups = [(fallback, given == -3), (earliest, given == -2), (latest, given == -1)]
    parts = [SplitOffsets(splits.select(given >= 0), given[given >= 0])]
    if len(timed):
        parts.extend(
            await _at_times(
                discovery, view, timed, latest_if_none=pos.no_match == Position.NO_MATCH_LATEST
            )
        )
    for query, mask in lookups:
        if mask.any():
            parts.extend(
                await lookup_all(discovery, view, splits.select(mask), query, isolation=isolation)
            )
    out = SplitOffsets.union(parts)
    # No position lies past a cluster's stop: a batch read ending at
    # "latest" ends there, a query starting at "latest" has nothing left.
    clients = {cc.cluster: cc for cc in readable}
    try:
        return cap_at_stops(out, await stops_of_clusters(discovery, view, clients, out.splits))
    except UnavailableError as exc:
        raise UnavailableError(f"stream {view.name!r}: stopping offsets: {exc}") from exc


def _check_specific(
    view: StreamView,
    offsets: planner_pb2.OffsetColumns,
    field: str = "position.offsets",
    *,
    special: bool = True,
) -> SplitOffsets:
    """``offsets`` (offsets, or times with ``special=False``) checked:
    every split of a cluster and topic of the stream."""
    checked = ov.from_columns(offsets, field, allow_special=special)
    bounds = checked.splits.bounds().tolist()
    ids = checked.splits.ids()
    for g, (cluster, topic) in enumerate(checked.splits.groups):
        s = ids[bounds[g]]
        spec = view.spec.clusters.get(cluster)
        if spec is None:
            raise ValidationError(
                f"{field}.{s}",
                f"stream {view.name!r} has no cluster {shown(cluster)}",
            )
        if topic not in spec.topics:
            raise ValidationError(
                f"{field}.{s}",
                f"cluster {cluster!r} of stream {view.name!r} has no topic {shown(topic)}",
            )
    return checked


async def _at_times(
    discovery: Discovery, view: StreamView, times: SplitOffsets, *, latest_if_none: bool
) -> list[SplitOffsets]:
    """The first offset of each split of ``times`` whose record time is at
    or after the split's time. A split with no such record resolves to its
    latest offset with ``latest_if_none``, else fails the call
    (:class:`PreconditionError`, naming it). The splits' clusters must be
    read (ACTIVE or DRAINING) and answer (:class:`UnavailableError`: the
    client retries); a partition the cluster does not have is refused."""
    field = "position.split_timestamps"
    out: list[SplitOffsets] = []
    for cid in times.splits.clusters():
        where = times.splits.cluster_slice(cid)
        mine = times.select(np.arange(where.start, where.stop))
        state = view.spec.clusters[cid].state
        if not state.readable:
            raise ValidationError(
                f"{field}.{mine.splits.ids()[0]}",
                f"cluster {cid!r} of stream {view.name!r} is {state.value}: it is not read",
            )
        cc = discovery.require(view.name, cid)
        if not cc.discovered:
            await discovery.discover(cc)
        _, known = cc.split_table()[0].positions(mine.splits)
        if not known.all():
            s = mine.splits.select(~known).split_ids()[0]
            raise ValidationError(
                f"{field}.{s}",
                f"topic {s.topic!r} of cluster {cid!r} has {cc.partitions.get(s.topic, 0)} "
                f"partition(s): there is no partition {s.partition}",
            )
        by_time = [(ts, mine.select(mine.offsets == ts)) for ts in np.unique(mine.offsets).tolist()]
        found = await asyncio.gather(
            *(lookup(discovery, cc, group.splits, OffsetQuery.at_time(ts)) for ts, group in by_time)
        )
        got = SplitOffsets.union(list(found))
        if len(got) < len(mine):
            raise UnavailableError(
                f"stream {view.name!r}: cluster {cid!r} did not answer for every split"
            )
        if not latest_if_none:
            # A time after every record resolves to the end offset: found
            # first, the end asked after, a split found at or past its end
            # has no record at or after its time.
            ends = await lookup(discovery, cc, got.splits, OffsetQuery.latest())
            none = got.offsets >= ends.values_at(got.splits, np.zeros(len(got), dtype=np.int64))
            if none.any():
                ids = got.splits.select(none).ids()
                times_of = mine.values_at(got.splits.select(none), np.zeros(len(ids), np.int64))
                named = ", ".join(
                    f"{s} (time {t})"
                    for s, t in zip(ids[:SHOWN_SPLITS], times_of.tolist(), strict=False)
                )
                raise PreconditionError(
                    f"stream {view.name!r}: no record at or after the given time in "
                    f"{len(ids)} split(s): {named}; give an earlier time, or start such "
                    "splits at their latest offset (strategy latest; Spark: "
                    "startingOffsetsByTimestampStrategy=latest)"
                )
        out.append(got)
    return out
