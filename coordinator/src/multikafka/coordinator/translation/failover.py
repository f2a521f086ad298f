"""Failover translation: where the splits of a cluster that replaced a failed
one start, for a query that was reading the failed cluster.

Each strategy first gives an *estimate*, a lower bound on the mirror:

* ``timestamp``: ``offsets_for_times(time of the last record read - margin)``;
* ``identity``: the same offset (offset-preserving mirrors): exact, nothing
  more is done;
* ``mm2``: MirrorMaker 2's offset syncs (:mod:`.mm2`): the downstream offset
  of the newest sync at or before the position, +1 when past it; without
  such a sync, MM2's checkpoint of the query's consumer group
  (``commitGroupId``) when it is at or before the position; else
  ``timestamp``, and the translation says so.

Then the query resumes *right after the mirror's copy of the last record it
read*: the reader keeps the fingerprints of the last records of every range
it reads (:mod:`.marks`), and the coordinator reads the mirror forward from
the estimate looking for them (:mod:`.matching`): to the partition's end,
or once they are found, to the last record's time plus the margin (for a
re-sent copy), at most :data:`MAX_SCAN_RECORDS`. Nothing is read twice,
nothing skipped. When no copy is found (the mirror changed the records, or
its copy lies beyond what is read) the estimate stands, and the history
says so.

A split of the new cluster takes over from the failed cluster's split of the
same partition of the same topic, or of the topic an ``mm2`` block between
the two renames it from (``east.orders`` on the mirror is ``orders``).

The position used is what the query really read: its ranges abandoned on the
failed cluster lower it (:mod:`multikafka.coordinator.translation.abandoned`),
and only records actually read leave read marks. The mark of the last
record read before the position arrives with the report of the task that
read it, which may come after the next micro-batch is asked for: until the
mark that reaches the position is known, for at most ``wait_s`` after the
failover, the split is not translated (:meth:`FailoverTranslator.translate`
leaves it out, and the planner keeps the failed cluster's splits in the
query meanwhile). Without a mark, the split starts at its earliest offset:
more duplicates, never a loss.

A drain into an MM2 mirror (:meth:`FailoverTranslator.translate_drain`)
is matched the same way: the draining cluster is still there, so the last
records before each drain end offset are read from it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from multikafka.coordinator.clusters.discovery import Discovery
from multikafka.coordinator.clusters.kafka import OffsetQuery, Record
from multikafka.coordinator.state.stream_status import FailoverRecord, StreamView
from multikafka.coordinator.translation.marks import Mark, ReadMarks
from multikafka.coordinator.translation.matching import Found, Matcher
from multikafka.coordinator.translation.mm2.tracker import MirrorSyncs
from multikafka.core._fingerprint import TRAILING, Fingerprint, fingerprint
from multikafka.core._kafka_config import reads_committed
from multikafka.core._offsets import clusters_of
from multikafka.core.exceptions import UnavailableError
from multikafka.core.mm2_records import Checkpoint
from multikafka.core.model import DEFAULT_MARGIN_MS, ClusterState, FailoverStrategy, SplitId

logger = logging.getLogger(__name__)

#: Seconds after a failover a split's translation waits for the mark of the
#: last record its query read (the report of the task that read it).
WAIT_S = 10.0
#: Records of one mirror partition read at most looking for a copy.
MAX_SCAN_RECORDS = 200_000
#: Seconds a scan of a mirror may take.
SCAN_TIMEOUT_S = 30.0
#: Records read back from a draining cluster's drain end for its last ones.
DRAIN_TAIL_RECORDS = 64
#: Records of the mirror read before an estimate: MM2's rule puts a position
#: at a sync at the copy of its first unread record, so the copies of the
#: last ones read lie just before it (a transaction marker or few between).
SCAN_BEFORE = 16

#: How a split's start was chosen (the ``result`` label of the metric).
MATCHED, PARTIAL, ESTIMATE, EXACT = "matched", "partial", "estimate", "exact"


@dataclass(frozen=True)
class Translation:
    """How one new split's starting offset was chosen (for the history)."""

    split: str
    source: str
    offset: int
    how: str
    #: The strategy's estimate (-1: none, e.g. ``identity``).
    estimate: int = -1
    #: :data:`MATCHED`, :data:`PARTIAL` (the mirror lacked the newest records
    #: read), :data:`ESTIMATE` (no copy found, or nothing to match with),
    #: :data:`EXACT` (``identity``), or "" (no counterpart: earliest).
    result: str = ""

    @property
    def skipped(self) -> int:
        """Records between the estimate and the start: those not read twice."""
        return max(self.offset - self.estimate, 0) if self.estimate >= 0 else 0


class _Search(NamedTuple):
    """A search of the mirror, and what it is cached by."""

    stream: str
    split: SplitId
    #: The estimate: where reading starts (a little before it).
    start: int
    #: The fingerprints of the last records read, oldest first.
    run: tuple[Fingerprint, ...]
    #: Past this record time, once the whole run was found, reading stops.
    limit_ms: int


@dataclass
class _Ask:
    """One split's translation under way."""

    split: SplitId
    source: str
    #: The strategy's estimate: an offset, or a lookup still to make.
    how: str
    estimate: int = -1
    lookup: OffsetQuery | None = None
    #: The last record read, when it can be matched.
    mark: Mark | None = None
    exact: bool = False
    found: Found | None = field(default=None)

    def search(self, stream: str, margin_ms: int) -> _Search | None:
        """What finding this split's copy takes (None: nothing to find)."""
        if self.mark is None or self.estimate < 0:
            return None
        m = self.mark
        return _Search(
            stream, self.split, self.estimate, m.fingerprints, m.timestamp_ms + margin_ms
        )


class FailoverTranslator:
    def __init__(
        self,
        discovery: Discovery,
        marks: ReadMarks,
        syncs: MirrorSyncs | None = None,
        *,
        wait_s: float = WAIT_S,
        max_scan_records: int = MAX_SCAN_RECORDS,
    ) -> None:
        self._discovery = discovery
        self._marks = marks
        self._syncs = syncs
        self._wait_s = wait_s
        self._max_scan = max_scan_records
        #: What a search of the mirror found: every query at the same
        #: position asks the same (cleared when it grows past 10,000).
        self._found: dict[_Search, Found | None] = {}

    @staticmethod
    def record_for(
        view: StreamView, cluster: str, start: Mapping[str, int]
    ) -> FailoverRecord | None:
        """The failover that decides where ``cluster``'s splits start for a query
        at ``start``: the latest one into ``cluster``, while ``cluster`` is
        ACTIVE, its source cluster is still FAILED, has not failed over
        elsewhere since, and the query still holds the source's splits."""
        record = view.status.failover_into(cluster)
        if record is None or record is not view.status.failover_from(record.from_cluster):
            return None
        target = view.spec.clusters.get(cluster)
        source = view.spec.clusters.get(record.from_cluster)
        if target is None or target.state is not ClusterState.ACTIVE:
            return None
        if source is None or source.state is not ClusterState.FAILED:
            return None
        return record if record.from_cluster in clusters_of(start) else None

    async def translate(
        self,
        view: StreamView,
        record: FailoverRecord,
        splits: Sequence[SplitId],
        start: Mapping[str, int],
        abandoned: Mapping[str, int],
        *,
        group_id: str = "",
        now_ms: int | None = None,
        wait: bool = True,
    ) -> tuple[dict[str, int], list[Translation]]:
        """Starting offsets of ``splits`` (all of ``record.to_cluster``) that can
        be resolved now; none while the new cluster does not answer a lookup
        they need (``identity`` needs none for splits with a counterpart), and
        not those whose last record read is not known yet (see the module;
        ``wait=False``: from the last record known to be read)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        waiting = wait and now_ms < record.at_ms + self._wait_s * 1000
        asks: list[_Ask] = []
        done: list[Translation] = []
        for b in splits:
            topic = view.spec.counterpart_topic(record.to_cluster, record.from_cluster, b.topic)
            source = SplitId(record.from_cluster, topic or b.topic, b.partition)
            a = str(source)
            if topic is None or a not in start:
                why = "no counterpart on the failed cluster: earliest"
                asks.append(_Ask(b, "", why, lookup=OffsetQuery.earliest()))
                continue
            pos = min(start[a], abandoned.get(a, start[a]))
            if record.strategy is FailoverStrategy.IDENTITY:
                done.append(Translation(str(b), a, pos, f"identity from {a}@{pos}", -1, EXACT))
                continue
            mark, exact = self._marks.last_read(view.name, a, pos)
            if not exact and pos > 0 and waiting:
                continue  # the report of what was read last may be on its way
            asks.append(self._estimate(view, record, b, a, pos, mark, exact, group_id))
        try:
            await self._look_up(view.name, record.to_cluster, asks)
            await self._match(view, record.to_cluster, asks, record.margin_ms)
        except UnavailableError:
            return {}, []  # the new cluster does not answer: try again next batch
        done.extend(_chosen(ask) for ask in asks if ask.estimate >= 0)
        entry = {t.split: t.offset for t in done}
        return entry, sorted(done, key=lambda t: t.split)

    async def preview(
        self,
        view: StreamView,
        record: FailoverRecord,
        start: Mapping[str, int],
        abandoned: Mapping[str, int],
        *,
        group_id: str = "",
    ) -> list[Translation]:
        """Where the splits of ``record.to_cluster`` would start now for a
        query at ``start`` (a failover's dry run)."""
        cc = self._discovery.client(view.name, record.to_cluster)
        splits = cc.splits() if cc is not None else []
        _, notes = await self.translate(
            view, record, splits, start, abandoned, group_id=group_id, wait=False
        )
        return notes

    def _estimate(
        self,
        view: StreamView,
        record: FailoverRecord,
        b: SplitId,
        a: str,
        pos: int,
        mark: Mark | None,
        exact: bool,
        group_id: str,
    ) -> _Ask:
        """The strategy's estimate for split ``b`` from ``a`` at ``pos``."""
        source = SplitId.parse(a)
        matchable = mark if mark is not None and mark.fingerprints else None
        unmatched = ""
        if mark is not None and matchable is None:
            # read by an agent that keeps no fingerprints (an older version),
            # or a mark too old to keep them
            unmatched = f" (no fingerprints of {a}@{mark.offset}: not matched)"
        fallback = ""
        if record.strategy is FailoverStrategy.MM2:
            hit = (
                self._syncs.translate(view.name, record.to_cluster, source, pos)
                if self._syncs
                else None
            )
            if hit is not None:
                up, down = hit.sync.upstream_offset, hit.sync.downstream_offset
                how = f"mm2 from {a}@{pos} by the sync {up} -> {down}{unmatched}"
                return _Ask(b, a, how, hit.offset, mark=matchable, exact=exact)
            cp = self._checkpoint(view, record.to_cluster, group_id, b, pos)
            if cp is not None:
                how = (
                    f"mm2 from {a}@{pos} by group {group_id}'s checkpoint "
                    f"{cp.upstream_offset} -> {cp.downstream_offset}{unmatched}"
                )
                return _Ask(b, a, how, cp.downstream_offset, mark=matchable, exact=exact)
            fallback = f"no MM2 offset sync at or before {a}@{pos}, so timestamp: "
        if mark is None:
            why = "nothing read yet" if pos == 0 else "no read mark"
            how = f"{fallback}{why} on {a}@{pos}: earliest"
            return _Ask(b, a, how, lookup=OffsetQuery.earliest())
        ts = max(mark.timestamp_ms - record.margin_ms, 0)
        how = (
            f"{fallback}time of {a}@{mark.offset} ({mark.timestamp_ms} ms) - "
            f"{record.margin_ms} ms margin{unmatched}"
        )
        return _Ask(b, a, how, lookup=OffsetQuery.at_time(ts), mark=matchable, exact=exact)

    async def _look_up(self, stream: str, cluster: str, asks: Sequence[_Ask]) -> None:
        """Resolve the estimates that are lookups on the new cluster."""
        lookups: dict[OffsetQuery, list[_Ask]] = defaultdict(list)
        for ask in asks:
            if ask.lookup is not None:
                lookups[ask.lookup].append(ask)
        items = list(lookups.items())
        answers = await asyncio.gather(
            *(
                self._discovery.cluster_offsets(stream, cluster, [x.split for x in group], query)
                for query, group in items
            )
        )
        for (_, group), found in zip(items, answers, strict=True):
            for ask in group:
                if str(ask.split) in found:
                    ask.estimate = found[str(ask.split)]

    async def _match(
        self, view: StreamView, cluster: str, asks: Sequence[_Ask], margin_ms: int
    ) -> None:
        """Find the copies of the last records read, from each estimate on
        (:meth:`_find`), once per position."""
        if len(self._found) > 10_000:
            self._found.clear()  # before this call's hits are counted on
        searches = [a.search(view.name, margin_ms) for a in asks]
        todo = {key for key in searches if key is not None and key not in self._found}
        if todo:
            # What the marks say is written before it decides a translation: a
            # leader that takes over finds the same (the match is a function
            # of etcd and the mirror).
            await self._marks.flush()
            by_partition = {(k.split.topic, k.split.partition): k for k in todo}
            found = await self._find(view, cluster, by_partition)
            for tp, k in by_partition.items():
                self._found[k] = found.get(tp)
        for ask, search in zip(asks, searches, strict=True):
            ask.found = self._found.get(search) if search is not None else None

    async def _find(
        self,
        view: StreamView,
        cluster: str,
        runs: Mapping[tuple[str, int], _Search],
    ) -> dict[tuple[str, int], Found]:
        """For each partition of ``cluster``: where the copy of ``run`` (the
        last records read, oldest first) is, reading from a little before
        ``start`` (:data:`SCAN_BEFORE`) on up to the end of the partition
        when asked, or :data:`MAX_SCAN_RECORDS`, or, once the whole run was
        found, the first record later than ``limit_ms`` (a re-sent copy
        comes soon after: ``runs``: partition -> its search)."""
        if not runs:
            return {}
        props = view.spec.clusters[cluster].properties
        query = OffsetQuery.stable() if reads_committed(props) else OffsetQuery.latest()
        cc = self._discovery.require(view.name, cluster)
        ends = await self._discovery.offsets(cc, list(runs), query)
        matchers = {tp: Matcher(r.run) for tp, r in runs.items()}
        limits = {tp: r.limit_ms for tp, r in runs.items()}
        max_scan = self._max_scan

        def visit(tp: tuple[str, int], m: Record) -> bool:
            ts = m.timestamp()[1]
            matcher = matchers[tp]
            if ts > limits[tp] and matcher.complete:
                return False  # past the margin: no later re-sent copy is looked for
            matcher.feed(
                m.offset() or 0,
                fingerprint(m.key(), m.value(), ts) if ts in matcher.times else None,
            )
            return matcher.fed < max_scan

        windows = {
            tp: (max(r.start - SCAN_BEFORE, 0), ends.get(tp, r.start)) for tp, r in runs.items()
        }
        await self._discovery.scan(view.name, cluster, windows, visit, SCAN_TIMEOUT_S)
        return {tp: f for tp, m in matchers.items() if (f := m.found()) is not None}

    def _checkpoint(
        self, view: StreamView, mirror: str, group_id: str, split: SplitId, position: int
    ) -> Checkpoint | None:
        """MM2's checkpoint of the query's consumer group for ``split`` (of
        the mirror), when it translates a position at or before the query's:
        MM2 computed its downstream offset by the same rule, so starting
        there never skips an unread record."""
        if not group_id or self._syncs is None:
            return None
        cp = self._syncs.checkpoint(view.name, mirror, group_id, split.topic, split.partition)
        return cp if cp is not None and 0 <= cp.upstream_offset <= position else None

    @staticmethod
    def drained_source(view: StreamView, cluster: str) -> str | None:
        """The cluster ``cluster`` is MM2's replica of, while that one is
        DRAINING with captured end offsets: a query then reads it up to those
        ends, so ``cluster``'s splits start at their translation."""
        mirror = view.spec.clusters[cluster].mm2
        if mirror is None or mirror.source not in view.status.drains:
            return None
        source = view.spec.clusters.get(mirror.source)
        return (
            mirror.source if source is not None and source.state is ClusterState.DRAINING else None
        )

    async def translate_drain(
        self, view: StreamView, cluster: str, source: str, splits: Sequence[SplitId]
    ) -> tuple[dict[str, int], list[Translation], list[SplitId]]:
        """Starting offsets of ``splits`` (of ``cluster``, MM2's replica of the
        DRAINING ``source``): each right after the copy of the last record
        before its counterpart's drain end offset, found from the offset
        syncs' translation of that end on. The splits without a usable sync
        are returned last; they take their cluster's starting position."""
        ends = view.status.drains[source]
        asks: list[_Ask] = []
        rest: list[SplitId] = []
        for b in splits:
            topic = view.spec.counterpart_topic(cluster, source, b.topic)
            a = SplitId(source, topic or b.topic, b.partition)
            end = ends.get(str(a)) if topic is not None else None
            hit = (
                self._syncs.translate(view.name, cluster, a, end)
                if end is not None and self._syncs is not None
                else None
            )
            if hit is None or end is None:
                rest.append(b)
                continue
            up, down = hit.sync.upstream_offset, hit.sync.downstream_offset
            how = f"mm2 from the drain end {a}@{end} by the sync {up} -> {down}"
            asks.append(_Ask(b, str(a), how, hit.offset))
        try:
            tails = await self._tails(view, source, asks)
            for ask in asks:
                ask.mark = tails.get(ask.source)
                ask.exact = ask.mark is not None
            await self._match(view, cluster, asks, DEFAULT_MARGIN_MS)
        except UnavailableError as exc:
            # The draining cluster or the mirror does not answer: the syncs'
            # translation stands (a lower bound, as before matching).
            logger.warning(
                "drain translation not matched",
                extra={"stream": view.name, "cluster": cluster, "error": str(exc)},
            )
        notes = [_chosen(ask) for ask in asks]
        return {t.split: t.offset for t in notes}, notes, rest

    async def _tails(self, view: StreamView, source: str, asks: Sequence[_Ask]) -> dict[str, Mark]:
        """The last records before each ask's drain end on ``source`` (the
        draining cluster, still there), as marks."""
        ends = view.status.drains[source]
        windows = {}
        for ask in asks:
            a = SplitId.parse(ask.source)
            end = ends[ask.source]
            if end > 0:
                windows[(a.topic, a.partition)] = (max(end - DRAIN_TAIL_RECORDS, 0), end)
        if not windows:
            return {}
        last: dict[tuple[str, int], list[tuple[int, Fingerprint]]] = defaultdict(list)

        def visit(tp: tuple[str, int], m: Record) -> bool:
            ts = m.timestamp()[1]
            last[tp].append((m.offset() or 0, fingerprint(m.key(), m.value(), ts)))
            return True

        await self._discovery.scan(view.name, source, windows, visit, SCAN_TIMEOUT_S)
        out = {}
        for (topic, partition), records in last.items():
            tail = records[-TRAILING:]
            offset, fp = tail[-1]
            split = str(SplitId(source, topic, partition))
            out[split] = Mark(offset, fp.timestamp_ms, ends[split], tuple(f for _, f in tail))
        return out


def _chosen(ask: _Ask) -> Translation:
    """Where ``ask``'s split starts: after the copy found, else the estimate."""
    split, a = str(ask.split), ask.source
    found, mark = ask.found, ask.mark
    if found is not None and mark is not None:
        # The estimate is at or before the copy of the first record not
        # read: never start before it either.
        offset = max(found.offset + 1, ask.estimate)
        full = found.matched == found.of
        result = MATCHED if full and ask.exact else PARTIAL
        which = (
            f"the last {found.of} records read, up to {a}@{mark.offset},"
            if full
            else f"{found.matched} of the last {found.of} records read (the mirror lacks the newest)"
        )
        if not ask.exact:
            which += " (the last read record known then, not the very last)"
        places = f"; found at {found.places} places" if found.places > 1 else ""
        how = (
            f"{ask.how} = {ask.estimate}; matched {which} at {found.offset}{places}: "
            f"starts after it, {offset - ask.estimate} records not read again"
        )
        return Translation(split, a, offset, how, ask.estimate, result)
    if mark is None:
        return Translation(split, a, ask.estimate, ask.how, ask.estimate, ESTIMATE if a else "")
    return Translation(
        split,
        a,
        ask.estimate,
        f"{ask.how} = {ask.estimate}; no copy of the last records read found past it: "
        "the estimate stands",
        ask.estimate,
        ESTIMATE,
    )
