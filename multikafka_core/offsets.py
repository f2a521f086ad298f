"""Offset vectors: ``{split_id: next_offset}``.

Spark compares source offsets as raw JSON strings, so a vector is always a dict
with sorted keys, and never empty: a stream with no splits yet is represented
by the single placeholder key :data:`NO_SPLITS`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from multikafka_core.exceptions import ValidationError, shown
from multikafka_core.model import SplitId

#: Placeholder entry of the vector of a stream that has no splits (yet).
NO_SPLITS = "<no splits>"

OFFSET_MAX = 2**63 - 1

OffsetVector = dict[str, int]


def canonical(offsets: Mapping[str, int]) -> OffsetVector:
    """The vector with sorted keys; ``{NO_SPLITS: 0}`` when there is no split."""
    real = {k: int(v) for k, v in offsets.items() if k != NO_SPLITS}
    if not real:
        return {NO_SPLITS: 0}
    return dict(sorted(real.items()))


def splits_of(offsets: Mapping[str, int]) -> OffsetVector:
    """The real split entries of a vector (without the placeholder)."""
    return {k: v for k, v in offsets.items() if k != NO_SPLITS}


def clusters_of(offsets: Mapping[str, int]) -> set[str]:
    """The clusters whose splits the vector holds."""
    return {SplitId.parse(s).cluster for s in splits_of(offsets)}


def parse(value: object, field: str = "offsets", *, allow_special: bool = False) -> OffsetVector:
    """Validate a decoded vector. With ``allow_special``, ``-2`` (earliest) and
    ``-1`` (latest) are accepted, as in Spark's ``startingOffsets`` JSON."""
    if not isinstance(value, dict):
        raise ValidationError(field, 'must be a JSON object of {"cluster/topic/partition": offset}')
    out: OffsetVector = {}
    low = -2 if allow_special else 0
    for key, off in value.items():
        if key == NO_SPLITS:
            continue
        try:
            SplitId.parse(key)
        except ValueError as exc:
            raise ValidationError(f"{field}.{key}", str(exc)) from None
        if isinstance(off, bool) or not isinstance(off, int) or not low <= off <= OFFSET_MAX:
            allowed = (
                "-2 (earliest), -1 (latest) or an offset >= 0"
                if allow_special
                else "an offset >= 0"
            )
            raise ValidationError(f"{field}.{key}", f"must be {allowed}, got {shown(off)}")
        out[key] = off
    return out


def parse_json(text: str, field: str = "offsets", *, allow_special: bool = False) -> OffsetVector:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ValidationError(field, f"not valid JSON: {exc}") from None
    return parse(value, field, allow_special=allow_special)


def to_json(offsets: Mapping[str, int]) -> str:
    """Canonical JSON text of a vector (what Spark stores in its offset log)."""
    return json.dumps(canonical(offsets))
