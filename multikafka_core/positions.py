"""Starting and ending positions with per-split times (Spark's
``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``), built the
same way by the Spark source and the standalone reader."""

from __future__ import annotations

from collections.abc import Mapping

from multikafka_core import offsets as ov
from multikafka_core.exceptions import ValidationError
from multikafka_core.v1 import planner_pb2

Position = planner_pb2.Position

#: Strategy name -> what a split with no record at or after its time does.
NO_MATCH = {"error": Position.NO_MATCH_ERROR, "latest": Position.NO_MATCH_LATEST}


def with_split_times(
    position: planner_pb2.Position,
    times: str | Mapping[str, object],
    strategy: str,
    *,
    field: str,
    strategy_field: str,
    offsets_field: str,
) -> planner_pb2.Position:
    """``position`` with the splits of ``times`` (JSON text or a decoded
    document, nested ``{"cluster": {"topic": {"0": ms}}}`` or flat
    ``{"cluster/topic/0": ms}``) starting at their first record at or after
    their time; the other splits keep ``position``. ``strategy``: ``error``
    or ``latest`` (what a split with no such record does). A split also named
    in ``position``'s offsets is refused (``offsets_field`` names them)."""
    parsed = ov.parse_json(times, field) if isinstance(times, str) else ov.parse(dict(times), field)
    if not parsed:
        raise ValidationError(field, "names no split")
    if position.kind == Position.SPECIFIC:
        named = ov.as_offsets(dict(position.offsets)).splits
        both = parsed.splits.positions(named)[1]
        if both.any():
            raise ValidationError(
                f"{field}.{named.select(both).ids()[0]}",
                f"also named in {offsets_field}: name each split in one of them",
            )
    chosen = NO_MATCH.get(strategy.strip().lower())
    if chosen is None:
        raise ValidationError(strategy_field, f"must be error or latest, got {strategy!r}")
    out = Position()
    out.CopyFrom(position)
    out.split_timestamps.update(ov.canonical(parsed))
    out.no_match = chosen
    return out
