"""High watermarks (and timestamp stops) per cluster of a stream, shared by
every query that plans on it: a thousand queries triggering once a second
ask a cluster a few times a second, not a thousand times.

A cached value serves a query's ``LatestOffsets`` only when it is at most
``max_age_s`` old and can answer it as a fresh one would in every way that
matters:

* every split the query holds (of the topics asked) is in it, with a high
  watermark at or above the query's position: a watermark older than the
  query's own position would read as offsets going backwards (data loss)
  or a partition gone;
* under ``Trigger.AvailableNow``, every split is at or above the run's
  target (``cap``): a stale watermark would end the run short of it.

A query held back by its read budget (``maxOffsetsPerTrigger``) reads no
record of the newest anyway: a value older than the age (up to
``BEHIND_MAX_AGE_S``) still serves it when the cluster's part of its backlog
in that value is at least its budget. Only the budget's shares between
splits (proportional to backlog) can differ from a fresh value's.

Otherwise the cluster is asked, and every query waiting meanwhile shares the
one request: its answer serves each query that came at most ``max_age_s``
after it was asked (or after it), however long the cluster took to answer,
so that a slow answer never makes every waiting query ask again. A cached watermark is a lower bound of the true one (offsets
only grow), so a batch planned from it never reads past what exists; what
it leaves out the next batch reads. Once a value is half its age, the next
query that uses it asks for a fresh one in the background: under load no
query waits for a broker; a lone query with triggers further apart than
``max_age_s`` asks the cluster on each of them, as before. Exact reads
(``ResolveOffsets``: starting and ending positions, the AvailableNow target)
never use the cache.

A cluster read committed (its readers' ``isolation.level``, the default) is
planned to its last stable offsets: its readers never get past the first
record of a transaction still open. Its value holds those, and the high
watermarks too when a query stands past one of them (a position inside a
transaction still open is no loss of data: such a split waits).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from multikafka.coordinator.clusters.discovery import ClusterClient, Discovery
from multikafka.coordinator.clusters.kafka import OffsetQuery
from multikafka.coordinator.planning.lookups import lookup
from multikafka.coordinator.planning.stopping import stop_offsets
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.core._background import BackgroundTasks
from multikafka.core._offsets import SplitOffsets, Splits
from multikafka.core.exceptions import UnavailableError

__all__ = ["DEFAULT_MAX_AGE_S", "ClusterEnds", "Watermarks"]

logger = logging.getLogger(__name__)

#: How old a cached watermark may be when a query plans with it.
DEFAULT_MAX_AGE_S = 0.1
#: How old it may be for a query whose read budget the value already fills.
BEHIND_MAX_AGE_S = 5.0


@dataclass(frozen=True)
class _Entry:
    """What one request to a cluster answered."""

    #: The cluster client asked (a new client, e.g. new connection settings: ask again).
    client: ClusterClient
    #: The stopping position the stops were asked for.
    stopping: object
    #: The splits asked.
    ask: Splits
    #: How far readers may read: the high watermarks, or for readers of
    #: committed records the last stable offsets.
    latest: SplitOffsets
    stop: SplitOffsets | None
    #: ``time.monotonic()`` when the request was sent.
    asked_at: float
    #: The high watermarks when ``latest`` holds last stable offsets and a
    #: query stood past one of them (None: ``latest`` is at or above every
    #: position it serves).
    high: SplitOffsets | None = None

    @property
    def end(self) -> SplitOffsets:
        """The high watermarks, or the best lower bound of them known."""
        return self.latest if self.high is None else self.high


class ClusterEnds(NamedTuple):
    """What a cluster's splits look like for planning (see :class:`_Entry`)."""

    latest: SplitOffsets
    stop: SplitOffsets | None
    #: High watermarks (a lower bound of them), at or above the query's positions.
    high: SplitOffsets


class Watermarks:
    """The shared watermarks of one term's planning (see the module docstring)."""

    def __init__(
        self,
        discovery: Discovery,
        *,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._discovery = discovery
        self._max_age_s = max_age_s
        self._clock = clock
        #: (stream, cluster, read committed) -> the last answer.
        self._entries: dict[_Key, _Entry] = {}
        self._pending: dict[_Key, asyncio.Future[_Entry]] = {}
        self._tasks = BackgroundTasks("watermarks")
        #: Requests sent to clusters, and queries answered from the cache (for tests and metrics).
        self.asked = 0
        self.served = 0

    async def get(
        self,
        view: StreamView,
        cc: ClusterClient,
        ask: Splits,
        *,
        start: SplitOffsets,
        cap: SplitOffsets | None = None,
        budget: int | None = None,
        committed: bool = False,
    ) -> ClusterEnds:
        """The high watermarks of ``ask`` (all of ``cc``'s cluster; ``committed``:
        the last stable offsets, and high watermarks at or above ``start``)
        and their stops (None: the cluster has no stopping position), good
        enough for a query at ``start`` (and ``cap``, with read ``budget``).
        Raises :class:`UnavailableError` when the cluster does not answer."""
        arrived = self._clock()
        found = self.cached(view, cc, ask, start=start, cap=cap, budget=budget, committed=committed)
        if found is not None:
            return found
        key = (view.name, cc.cluster, committed)
        stopping = view.spec.clusters[cc.cluster].stopping
        # Join the request on its way: its answer serves this query if it
        # was asked within the age before the query came, however long the
        # cluster takes to answer; one asked after it came is as fresh as
        # one this query would ask. Queries never each ask again after a
        # slow answer (a herd that would slow the cluster further).
        while (pending := self._pending.get(key)) is not None:
            try:
                entry = await asyncio.shield(pending)
            except UnavailableError:
                break
            if (entry.asked_at >= arrived and _at_or_above(entry.end, ask, start)) or self._serves(
                entry, cc, stopping, ask, start, cap, budget, now=arrived
            ):
                self.served += 1
                return _ends(entry)
        entry = await self._refresh(key, view, cc, ask, start)
        return _ends(entry)

    def cached(
        self,
        view: StreamView,
        cc: ClusterClient,
        ask: Splits,
        *,
        start: SplitOffsets,
        cap: SplitOffsets | None = None,
        budget: int | None = None,
        committed: bool = False,
    ) -> ClusterEnds | None:
        """What :meth:`get` answers without waiting, or None: it would wait
        for the cluster. Past half its age, a value used here is renewed in
        the background."""
        key = (view.name, cc.cluster, committed)
        entry = self._entries.get(key)
        stopping = view.spec.clusters[cc.cluster].stopping
        if entry is None or not self._serves(entry, cc, stopping, ask, start, cap, budget):
            return None
        self.served += 1
        if self._clock() - entry.asked_at > self._max_age_s / 2 and key not in self._pending:
            self._tasks.spawn("refresh", self._refresh_quietly(key, view, cc, ask, start))
            self._pending[key] = asyncio.get_running_loop().create_future()
        return _ends(entry)

    def _serves(
        self,
        entry: _Entry,
        cc: ClusterClient,
        stopping: object,
        ask: Splits,
        start: SplitOffsets,
        cap: SplitOffsets | None,
        budget: int | None = None,
        *,
        now: float | None = None,
    ) -> bool:
        """Whether ``entry`` answers a query at ``start`` that asked at
        ``now`` (default: now) as a fresh value would (module docstring)."""
        if entry.client is not cc or entry.stopping != stopping:
            return False
        age = (self._clock() if now is None else now) - entry.asked_at
        behind = bool(budget) and self._max_age_s > 0 and age <= BEHIND_MAX_AGE_S
        if age > self._max_age_s and not behind:
            return False
        if entry.ask is not ask and entry.ask != ask:
            return False
        if not _at_or_above(entry.end, ask, start) or not (
            cap is None or _at_or_above(entry.latest, ask, cap)
        ):
            return False
        # Older than the age: only for a query the value keeps at its budget.
        return age <= self._max_age_s or _backlog(entry.latest, ask, start) >= (budget or 0)

    async def _refresh(
        self, key: _Key, view: StreamView, cc: ClusterClient, ask: Splits, start: SplitOffsets
    ) -> _Entry:
        """Ask the cluster; queries arriving meanwhile wait for this answer."""
        loop = asyncio.get_running_loop()
        future = self._pending.get(key)
        if future is None or future.done():
            future = self._pending[key] = loop.create_future()
        asked_at = self._clock()
        try:
            self.asked += 1
            committed = key[2]
            query = OffsetQuery.stable() if committed else OffsetQuery.latest()
            latest = await lookup(self._discovery, cc, ask, query)
            high = None
            if committed and not _at_or_above(latest, ask, start):
                # A position past a last stable offset: inside a transaction
                # still open, or lost (the high watermark tells which).
                high = await lookup(self._discovery, cc, ask, OffsetQuery.latest())
            stop = await stop_offsets(self._discovery, view, cc, ask)
        except BaseException as exc:
            self._entries.pop(key, None)
            if not future.done():
                future.set_exception(exc)
                future.exception()  # retrieved: nobody may be waiting
            raise
        finally:
            if self._pending.get(key) is future:
                del self._pending[key]
        entry = _Entry(
            cc, view.spec.clusters[cc.cluster].stopping, ask, latest, stop, asked_at, high
        )
        current = self._entries.get(key)
        if current is None or current.asked_at <= asked_at:
            self._entries[key] = entry
        if not future.done():
            future.set_result(entry)
        return entry

    async def _refresh_quietly(
        self, key: _Key, view: StreamView, cc: ClusterClient, ask: Splits, start: SplitOffsets
    ) -> None:
        # A cluster that does not answer: the next query asks again, and sees the error.
        with contextlib.suppress(UnavailableError):
            await self._refresh(key, view, cc, ask, start)

    async def close(self) -> None:
        await self._tasks.stop()
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        self._entries.clear()


#: (stream, cluster, read committed)
_Key = tuple[str, str, bool]


def _ends(entry: _Entry) -> ClusterEnds:
    return ClusterEnds(entry.latest, entry.stop, entry.end)


def _backlog(latest: SplitOffsets, ask: Splits, start: SplitOffsets) -> int:
    """Records between ``start`` and ``latest`` over the splits of ``start``
    in ``ask``'s cluster that ``latest`` holds."""
    cid = ask.clusters()
    if not len(start) or not cid or not len(latest):
        return 0
    where = start.splits.cluster_slice(cid[0])
    at, found = latest.positions_of(start.splits, where)
    ahead = latest.offsets[at[found]] - start.offsets[where][found]
    return int(np.maximum(ahead, 0).sum())


def _at_or_above(latest: SplitOffsets, ask: Splits, offsets: SplitOffsets) -> bool:
    """Whether every split of ``offsets`` that is in ``ask`` (the cluster's
    part of it) is in ``latest`` at or above its offset there."""
    cid = ask.clusters()
    if not len(offsets) or not cid:
        return True
    where = offsets.splits.cluster_slice(cid[0])
    if where.start == where.stop:
        return True
    _, asked = ask.positions(offsets.splits, where)
    if not asked.any():
        return True
    if not len(latest):
        return False
    at, found = latest.positions_of(offsets.splits, where)
    high = latest.offsets[at]
    return bool(np.all(~asked | (found & (high >= offsets.offsets[where]))))
