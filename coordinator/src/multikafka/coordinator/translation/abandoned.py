"""Abandoned ranges: planned ranges a query will never read because their
cluster failed or went away, whoever gave them up (the planner for a cluster
already gone, an agent for one that went away while it read). Each is counted,
written to the stream's history and remembered for the query: failover
translation starts from the first offset the query did not read, never from
further on.
"""

from __future__ import annotations

from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.state.history import History
from multikafka.coordinator.state.queries import QueryStore
from multikafka.core.model import SplitId


class Abandonments:
    """Accounts for abandoned ranges: a metric, a history entry, and the query's
    abandoned position (:meth:`multikafka.coordinator.state.queries.QueryStore.abandon`)."""

    def __init__(self, queries: QueryStore, history: History, metrics: Metrics) -> None:
        self._queries = queries
        self._history = history
        self._metrics = metrics

    async def record(
        self,
        stream: str,
        query_id: str,
        split: str,
        frm: int,
        until: int,
        why: str,
        generation: int = 0,
    ) -> None:
        progress = self._queries.get(query_id)
        if progress is not None and progress.abandoned.get(split) == frm:
            return  # told again (an agent sends its recent reports to a new leader)
        cid = SplitId.parse(split).cluster
        self._metrics.abandoned.labels(stream, cid).inc()
        self._metrics.abandoned_records.labels(stream, cid).inc(max(until - frm, 0))
        self._history.record(
            stream,
            "abandoned",
            cluster=cid,
            detail=f"query {query_id}: {split} [{frm}, {until}) not read: {why}",
            generation=generation,
        )
        await self._queries.abandon(query_id, stream, split, frm)
