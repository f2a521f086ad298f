"""The coordinator's end of the reader agents' link: the use cases behind
the Reader service, for one term of leadership.

Agents register, follow reconcile events (:meth:`AgentLink.events`: a
snapshot, then every change, as the bytes the reconciler serialized once for
all of them), heartbeat with the counters of their sub-readers (which feed
the metrics), acknowledge the generations they applied, and report what they
read: read marks for failover translation, ranges they gave up, which
splits they hold, and how many tasks their Spark runs at once
(:mod:`.task_slots`, for the planner).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable, Sequence
from typing import NamedTuple

from multikafka.coordinator.access import Caller
from multikafka.coordinator.agents.reconcile import Reconciler
from multikafka.coordinator.agents.registry import AgentRegistry
from multikafka.coordinator.agents.task_slots import TaskSlots
from multikafka.coordinator.metrics import MALFORMED_MODES, Metrics
from multikafka.coordinator.state.metadata import MetadataStore
from multikafka.coordinator.translation import Abandonments, ReadMark, ReadMarks
from multikafka.core._ranges import SplitRange
from multikafka.core.exceptions import NotFoundError, PermissionDeniedError, shown
from multikafka.v1 import reader_pb2

__all__ = ["AgentLink", "Beat"]


class Beat(NamedTuple):
    """The answer to a heartbeat."""

    #: Whether the agent is registered (else it registers again).
    known: bool
    #: The generation agents should have applied.
    generation: int


class AgentLink:
    def __init__(
        self,
        store: MetadataStore,
        registry: AgentRegistry,
        reconciler: Reconciler,
        marks: ReadMarks,
        abandonments: Abandonments,
        metrics: Metrics,
        slots: TaskSlots | None = None,
    ) -> None:
        self._store = store
        #: What agents say their Spark runs at once, for the planner.
        self.slots = slots if slots is not None else TaskSlots()
        self._registry = registry
        self._reconciler = reconciler
        self._marks = marks
        self._abandonments = abandonments
        self._metrics = metrics

    async def register(
        self, agent_id: str, host: str, pid: int, converter: str = "", caller: Caller | None = None
    ) -> int:
        """Register the agent (again); returns the current generation.
        ``converter``: how it converts Kafka messages into Arrow; ``caller``:
        who registers it (its events show only the streams it may read; an
        agent registered by one principal is not another's to take over)."""
        self.check_owner(agent_id, caller)
        await self._registry.register(agent_id, host, pid, converter, caller)
        return self._reconciler.generation

    def policy_changed(self) -> None:
        """The access policy changed: end the subscriptions of agents whose
        rights changed (they subscribe again under the new policy)."""
        self._registry.rights_changed()

    async def events(
        self, agent_id: str, caller: Caller | None = None
    ) -> AsyncGenerator[bytes, None]:
        """The agent's reconcile events, serialized: a snapshot, then each
        change, until a newer subscription of the agent (or the end of the
        term) ends this one. :class:`NotFoundError` for an agent that did
        not register."""
        agent = self._registry.get(agent_id)
        if agent is None:
            raise NotFoundError(f"agent {shown(agent_id)} is not registered; call Register first")
        self.check_owner(agent_id, caller)
        mailbox = self._registry.subscribe(agent_id)
        try:
            yield self._reconciler.snapshot_payload(agent.rights)
            while True:
                item = await mailbox.get()
                if item is None:
                    return
                self._reconciler.sent(item)
                yield item.payload
        finally:
            self._registry.unsubscribe(agent_id, mailbox)

    def check_owner(self, agent_id: str, caller: Caller | None) -> None:
        """:class:`PermissionDeniedError` if ``agent_id`` is registered by
        another principal than ``caller``'s (None: nothing is checked)."""
        known = self._registry.get(agent_id)
        if known is not None and caller is not None and known.principal != caller.name:
            raise PermissionDeniedError(
                f"agent {shown(agent_id)} is registered by another principal; "
                "an agent id belongs to the principal that registered it"
            )

    def heartbeat(
        self, agent_id: str, applied: int, stats: Sequence[reader_pb2.SubReaderStats]
    ) -> Beat:
        """The agent is alive, applied generation ``applied`` and pushes the
        running totals of its sub-readers: the metrics count what is new
        (and no series for a stream or cluster that is gone)."""
        agent = self._registry.heartbeat(agent_id, applied, list(stats))
        if agent is None:
            return Beat(False, self._reconciler.generation)
        for s in stats:
            view = self._store.find(s.stream)
            if view is None or s.cluster not in view.spec.clusters:
                continue  # gone (or never was): no metric series for it
            key = f"{s.stream}/{s.cluster}"
            now = (
                s.records_read,
                s.restarts,
                s.malformed_records,
                s.corrupt_records,
                s.malformed_failures,
            )
            before = agent.counted.get(key, ())
            before = before + (0,) * (len(now) - len(before))
            labels = (
                (self._metrics.agent_records, (s.stream, s.cluster)),
                (self._metrics.subreader_restarts, (s.stream, s.cluster)),
                *((self._metrics.malformed, (s.stream, s.cluster, m)) for m in MALFORMED_MODES),
            )
            for (family, names), value, counted in zip(labels, now, before, strict=True):
                if value > counted:
                    family.labels(*names).inc(value - counted)
            agent.counted[key] = tuple(map(max, now, before))
        return Beat(True, self._reconciler.generation)

    def acknowledge(self, agent_id: str, applied: int) -> None:
        """The agent applied generation ``applied`` (nothing for an agent
        that is not registered)."""
        self._registry.acknowledge(agent_id, applied)

    async def report_reads(
        self,
        stream: str,
        agent_id: str,
        query_id: str,
        marks: Iterable[ReadMark],
        abandoned: Iterable[SplitRange],
        task_slots: int = 0,
        passed: Iterable[SplitRange] = (),
    ) -> None:
        """What the agent read of ``stream`` for ``query_id`` (checked by the
        caller: a refused report must leave nothing behind): the last record
        of each range it read, the ranges it read to their end without a
        record (``passed``), the ranges it gave up, and how many tasks the
        query's Spark runs at once (``task_slots``, 0: unknown)."""
        self.slots.note(query_id, task_slots)
        held = set()
        for mark in marks:
            self._marks.add(
                stream,
                mark.split,
                mark.offset,
                mark.timestamp_ms,
                next=mark.next,
                start=mark.start,
                fingerprints=mark.fingerprints,
            )
            held.add(mark.split)
        for span in passed:
            self._marks.passed(stream, span.split, span.start, span.until)
            held.add(span.split)
        for r in abandoned:
            await self._abandonments.record(
                stream,
                query_id,
                r.split,
                r.start,
                r.until,
                f"cluster went away while agent {shown(agent_id)} read it",
            )
        if held:
            self._registry.hold(agent_id, stream, held)
