"""Starting and ending positions as users write them (``earliest``,
``latest``, JSON offsets like Spark's ``startingOffsets``) and with per-split
times (Spark's ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``),
built the same way by the Spark source and the standalone reader."""

from __future__ import annotations

import json
from collections.abc import Mapping

from multikafka.core import _offsets as ov
from multikafka.core.exceptions import ValidationError
from multikafka.v1 import planner_pb2

Position = planner_pb2.Position

#: Strategy name -> what a split with no record at or after its time does.
NO_MATCH = {"error": Position.NO_MATCH_ERROR, "latest": Position.NO_MATCH_LATEST}


def offsets_position(text: str, field: str, *, ending: bool = False) -> planner_pb2.Position:
    """``earliest``, ``latest`` or JSON offsets (``-2`` earliest, ``-1``
    latest, as Spark's) as a position; splits the JSON does not name take
    earliest (a start) or latest (an end). ``field`` names the option in
    errors."""
    raw = text.strip()
    if raw.lower() == "earliest":
        if ending:
            raise ValidationError(field, "earliest is not a valid end; use latest or JSON")
        return Position(kind=Position.EARLIEST)
    if raw.lower() == "latest":
        return Position(kind=Position.LATEST)
    if raw.startswith("{"):
        offsets = ov.parse_json(raw, field, allow_special=True)
        if not offsets:
            raise ValidationError(field, "names no split")
        if ending:
            early = sorted(s for s, o in offsets.items() if o == -2)
            if early:
                raise ValidationError(
                    f"{field}.{early[0]}", "-2 (earliest) is not a valid end; use -1 or an offset"
                )
        return specific(offsets, fallback=Position.LATEST if ending else Position.EARLIEST)
    raise ValidationError(
        field,
        f"must be earliest, latest or JSON like {json.dumps({'cluster/topic/0': 42})}, got {raw!r}",
    )


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
        named = ov.from_columns(position.offsets, offsets_field, allow_special=True).splits
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
    out.split_timestamps.CopyFrom(ov.to_columns(parsed))
    out.no_match = chosen
    return out


def specific(
    offsets: Mapping[str, int], *, fallback: planner_pb2.Position.Kind.ValueType = Position.EARLIEST
) -> planner_pb2.Position:
    """A position at ``offsets`` per split (``-2`` earliest, ``-1`` latest);
    splits not named take ``fallback`` (EARLIEST or LATEST)."""
    return Position(kind=Position.SPECIFIC, offsets=ov.to_columns(offsets), fallback=fallback)
