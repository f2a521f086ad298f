"""When a micro-batch may start: Spark's ``minOffsetsPerTrigger`` with
``maxTriggerDelay`` (the standalone reader's ``min_records_per_batch`` with
``max_batch_delay_s``), decided the same way for both faces.

A micro-batch waits until at least ``min_records`` records are available,
unless ``max_delay_s`` passed since the last micro-batch started (or, for
the first one, since the gate was made: the query started). Records
available are counted as Spark's Kafka source counts them, over the splits
the query holds: ``Σ max(0, available - start)`` over splits in both
vectors. A batch that changes the split set (a split enters, or retires
after a drain or a failover) never waits: moving off a cluster must not
wait for volume; nor does one that moves a split back (lost records
skipped with failOnDataLoss=false).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import numpy as np

from multikafka.core import _offsets as ov
from multikafka.core.exceptions import ValidationError

#: Spark's default ``maxTriggerDelay``: 15 minutes.
DEFAULT_MAX_DELAY_S = 15 * 60.0


def available_records(start: Mapping[str, int], available: Mapping[str, int]) -> int:
    """Records between ``start`` and ``available`` over the splits both hold."""
    begin, now = ov.as_offsets(start), ov.as_offsets(available)
    if not len(begin) or not len(now):
        return 0
    at, found = begin.positions_of(now.splits)
    ahead = now.offsets[found] - begin.offsets[at[found]]
    return int(np.maximum(ahead, 0).sum())


class MinRecordsGate:
    """Holds micro-batches back until ``min_records`` records are available
    or ``max_delay_s`` passed since the last one started. ``clock``: a
    monotonic clock in seconds (injectable for tests)."""

    def __init__(
        self,
        min_records: int,
        max_delay_s: float = DEFAULT_MAX_DELAY_S,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if min_records < 1:
            raise ValidationError("min records", f"must be at least 1, got {min_records}")
        if max_delay_s < 0:
            raise ValidationError("max delay", f"must not be negative, got {max_delay_s}")
        self.min_records = min_records
        self.max_delay_s = max_delay_s
        self._clock = clock
        #: When the last micro-batch started (first: when the gate was made).
        self._last = clock()

    def admit(
        self,
        start: Mapping[str, int],
        end: Mapping[str, int],
        available: Mapping[str, int] | None = None,
        *,
        hold: bool = True,
    ) -> bool:
        """Whether the micro-batch ``[start, end)`` starts now. ``available``:
        what could be read without a read limit (None: ``end``). A batch
        with nothing new (``end == start``) is not a batch: False, and the
        delay keeps running. ``hold=False``: any batch with something new
        starts (the delay counts from it)."""
        begin, stop = ov.as_offsets(start), ov.as_offsets(end)
        if stop == begin:
            return False
        if (
            not hold
            or begin.splits != stop.splits
            or _went_back(begin, stop)
            or self._waited_enough()
        ):
            return self._started()
        count = available_records(begin, stop if available is None else available)
        if count >= self.min_records:
            return self._started()
        return False

    def waited_s(self) -> float:
        """Seconds since the last micro-batch started."""
        return self._clock() - self._last

    def _waited_enough(self) -> bool:
        return self.waited_s() >= self.max_delay_s

    def _started(self) -> bool:
        self._last = self._clock()
        return True


def _went_back(start: ov.SplitOffsets, end: ov.SplitOffsets) -> bool:
    """Whether a split of both goes back (data loss skipped: the batch
    reads the partition again from its start); such a batch never waits."""
    at, found = start.positions_of(end.splits)
    return bool((end.offsets[found] < start.offsets[at[found]]).any())
