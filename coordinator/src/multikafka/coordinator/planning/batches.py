"""Planning a query's micro-batches: the use cases behind the Planner
service, one method per call of the Spark source's driver.

* :meth:`MicroBatches.resolve`: a starting (or ending) position as offsets;
* :meth:`MicroBatches.latest`: the end of the next micro-batch (new splits
  resumed, translated or at their starting position; ``plan_end``'s budget,
  drains, retirements, data loss), accounted for in metrics and history;
* :meth:`MicroBatches.plan`: the batch's Spark tasks and their clusters'
  connection settings; ranges on FAILED or removed clusters are abandoned;
* :meth:`MicroBatches.commit`: the query's progress (and a consumer group's
  offsets, when asked).

Vectors are :class:`~multikafka.core._offsets.SplitOffsets` columns and tasks
are arrays: a stream of 100,000 splits costs a few numpy operations per call.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from multikafka.coordinator.agents.task_slots import TaskSlots
from multikafka.coordinator.clusters.discovery import Discovery
from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.planning.assignment import cut_ranges
from multikafka.coordinator.planning.end_vector import (
    CLUSTER_REMOVED,
    EndPlan,
    new_split_set,
    plan_end,
)
from multikafka.coordinator.planning.entry import EntryOffsets, Resumed
from multikafka.coordinator.planning.notes import PlanNotes
from multikafka.coordinator.planning.resolve import resolve_position
from multikafka.coordinator.planning.snapshots import snapshots_of
from multikafka.coordinator.planning.watermarks import Watermarks
from multikafka.coordinator.state.history import History
from multikafka.coordinator.state.queries import QueryStore
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.coordinator.translation import Abandonments
from multikafka.core._offsets import I64, SplitOffsets
from multikafka.core._ranges import DEFAULT_MAX_RECORDS_PER_TASK
from multikafka.core.exceptions import PreconditionError, UnavailableError
from multikafka.core.model import Connection
from multikafka.v1 import planner_pb2

__all__ = ["MicroBatches", "TaskPlan"]

logger = logging.getLogger(__name__)


class TaskPlan(NamedTuple):
    """The Spark tasks of a micro-batch: range ``i`` reads ``[start[i],
    until[i])`` of partition ``partitions[i]`` of ``groups[group[i]]`` (a
    (cluster, topic)); task ``t`` reads the next ``task_ranges[t]`` ranges."""

    groups: Sequence[tuple[str, str]]
    group: I64
    partitions: I64
    start: I64
    until: I64
    task_ranges: I64
    #: How to reach each cluster the tasks read (secrets included).
    connections: list[Connection]


class MicroBatches:
    """The Planner's use cases for one term of leadership."""

    def __init__(
        self,
        discovery: Discovery,
        watermarks: Watermarks,
        entry: EntryOffsets,
        queries: QueryStore,
        abandonments: Abandonments,
        history: History,
        metrics: Metrics,
        *,
        hand_out_secrets: bool,
        slots: TaskSlots | None = None,
    ) -> None:
        self._discovery = discovery
        self._watermarks = watermarks
        self._entry = entry
        self._queries = queries
        self._abandonments = abandonments
        self._metrics = metrics
        self._notes = PlanNotes(history, metrics)
        #: Whether callers proved they are readers (token or client
        #: certificate): only then does a task plan carry secrets.
        self._hand_out_secrets = hand_out_secrets
        #: What agents report their Spark runs at once (:mod:`..agents.task_slots`).
        self._slots = slots if slots is not None else TaskSlots()

    async def resolve(
        self, view: StreamView, position: planner_pb2.Position, *, isolation: str = ""
    ) -> SplitOffsets:
        """The offsets ``position`` names (see :mod:`.resolve`)."""
        return await resolve_position(self._discovery, view, position, isolation=isolation)

    async def latest(
        self,
        view: StreamView,
        query_id: str,
        start: SplitOffsets,
        *,
        max_records: int | None,
        cap: SplitOffsets | None,
        fail_on_data_loss: bool,
        isolation: str = "",
    ) -> EndPlan:
        """The end of the query's next micro-batch from ``start`` (at most
        ``max_records`` records; within ``cap``, Trigger.AvailableNow's
        target), and what is available now (``EndPlan.available``); its
        readers' ``isolation`` level ("": each cluster's own)."""
        snapshots = await snapshots_of(
            self._discovery,
            self._watermarks,
            self._metrics,
            view,
            start,
            cap,
            max_records,
            isolation=isolation,
        )
        new = new_split_set(start, snapshots)
        abandoned = {}
        group_id = ""
        left: dict[str, SplitOffsets] = {}
        now_ms = int(time.time() * 1000)
        progress = self._queries.get(query_id)
        if progress is not None:
            abandoned = progress.abandoned
            group_id = progress.group_id
            await self._queries.forget_held(query_id, start, set(view.spec.clusters))
            left = progress.resumable(view.spec.retention_ms, now_ms)
        new_ids = new.ids()
        resumed = (
            await self._entry.resume(view, new_ids, left, fail_on_data_loss=fail_on_data_loss)
            if left and new_ids
            else Resumed()
        )
        rest = [s for s in new_ids if s not in resumed.claimed] if resumed.claimed else new_ids
        entry, translations = (
            await self._entry.resolve(view, start, rest, abandoned, group_id=group_id)
            if rest
            else ({}, [])
        )
        entry.update(resumed.entry)
        plan = plan_end(
            start,
            snapshots,
            entry,
            budget=max_records,
            cap=cap,
            fail_on_data_loss=fail_on_data_loss,
            hold=self._entry.held(view, start, snapshots, entry),
        )
        plan.data_loss.update(resumed.data_loss)
        self._notes.account(view, plan, snapshots)
        await self._remember_removed(view, query_id, start, plan.retired, now_ms)
        self._notes.record(view, query_id, plan, resumed, translations)
        return plan

    async def plan(
        self,
        view: StreamView,
        query_id: str,
        start: SplitOffsets,
        end: SplitOffsets,
        *,
        min_partitions: int,
        max_records_per_partition: int | None,
        parallelism: int,
    ) -> TaskPlan:
        """The tasks reading ``start`` to ``end``; the ranges of clusters
        not read any more (FAILED, STANDBY, removed) are abandoned.
        ``parallelism`` 0: what the query's agents reported, if anything."""
        parallelism = parallelism or self._slots.of(query_id)
        # A split entering the vector has nothing to read yet: it starts at its end.
        frm = start.values_at(end.splits, end.offsets)
        todo = end.offsets > frm
        for cid in end.splits.clusters():
            spec = view.spec.clusters.get(cid)
            if spec is not None and spec.state.readable:
                continue
            why = "cluster removed" if spec is None else f"cluster {spec.state.value}"
            where = end.splits.cluster_slice(cid)
            lost = np.flatnonzero(todo[where]) + where.start
            for s, a, b in zip(
                end.splits.select(lost).ids(),
                frm[lost].tolist(),
                end.offsets[lost].tolist(),
                strict=True,
            ):
                await self._abandonments.record(view.name, query_id, s, a, b, why, view.generation)
            todo[where] = False
        read = end.splits.select(todo)
        pieces = cut_ranges(
            frm[todo],
            end.offsets[todo],
            min_partitions=min_partitions,
            max_records=max_records_per_partition or DEFAULT_MAX_RECORDS_PER_TASK,
            parallelism=parallelism,
        )
        return TaskPlan(
            read.groups,
            read.group[pieces.which],
            read.partitions[pieces.which],
            pieces.start,
            pieces.until,
            pieces.task_sizes(),
            [self._connection(view, cid) for cid in read.clusters()],
        )

    async def commit(
        self, view: StreamView, query_id: str, end: SplitOffsets, *, group_id: str = ""
    ) -> None:
        """Store the query's progress; with ``group_id``, commit ``end`` to
        that consumer group on every cluster that answers."""
        await self._queries.commit(
            query_id, view.name, end, retention_ms=view.spec.retention_ms, group_id=group_id
        )
        if group_id:
            await self._commit_groups(view, group_id, end)

    def _connection(self, view: StreamView, cid: str) -> Connection:
        conn = view.spec.clusters[cid].connection(cid)
        if not self._hand_out_secrets and conn.properties.has_secrets():
            raise PreconditionError(
                f"cluster {cid!r} of stream {view.name!r} has secret properties, which "
                "this coordinator hands only to authenticated readers: give it "
                "--reader-token-file (and the Spark job coordinatorTokenFile) or "
                "--tls-client-ca"
            )
        return conn

    async def _remember_removed(
        self,
        view: StreamView,
        query_id: str,
        start: SplitOffsets,
        retired: Mapping[str, str],
        now_ms: int,
    ) -> None:
        """Remember where the query leaves the splits of clusters removed from
        the stream (for as long as the stream's retention says; 0: not at all)."""
        gone = [s for s, why in retired.items() if why == CLUSTER_REMOVED]
        if gone and view.spec.retention_ms > 0:
            await self._queries.remember_removed(
                query_id, view.name, {s: start[s] for s in gone}, now_ms
            )

    async def _commit_groups(self, view: StreamView, group_id: str, end: SplitOffsets) -> None:
        for cid in end.splits.clusters():
            where = end.splits.cluster_slice(cid)
            mine = end.select(np.arange(where.start, where.stop))
            offs = dict(zip(mine.splits.topic_partitions(), mine.offsets.tolist(), strict=True))
            cc = self._discovery.client(view.name, cid)
            if cc is None or not cc.health.reachable:
                continue
            try:
                await self._discovery.call(
                    cc, functools.partial(cc.client.commit_group, group_id, offs, 5.0)
                )
            except UnavailableError as exc:
                logger.warning(
                    "group commit failed",
                    extra={"stream": view.name, "cluster": cid, "error": str(exc)},
                )
