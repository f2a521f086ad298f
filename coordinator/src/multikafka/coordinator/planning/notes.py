"""What planning a micro-batch leaves behind: metrics (records planned, lag,
data loss) and the stream's history (splits that resumed, were translated,
retired or lost data). A removed cluster may take 10,000 splits with it, so
entries about many splits are one per cluster and name a few."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.planning.end_vector import ClusterSnapshot, EndPlan
from multikafka.coordinator.planning.entry import Resumed
from multikafka.coordinator.state.history import History
from multikafka.coordinator.state.stream_status import StreamView
from multikafka.coordinator.translation import Translation
from multikafka.core.model import SplitId

__all__ = ["SHOWN_SPLITS", "PlanNotes"]

#: Split ids named in one history entry (or error) about many splits.
SHOWN_SPLITS = 10


class PlanNotes:
    """Accounts for the plans of one term's micro-batches."""

    def __init__(self, history: History, metrics: Metrics) -> None:
        self._history = history
        self._metrics = metrics

    def account(
        self, view: StreamView, plan: EndPlan, snapshots: Mapping[str, ClusterSnapshot]
    ) -> None:
        """Records planned per cluster, and the lag of the clusters that answered."""
        for cid, n in plan.planned.items():
            self._metrics.planned.labels(view.name, cid).inc(n)
        for cid, snap in snapshots.items():
            if snap.reachable and snap.state.readable:
                self._metrics.lag.labels(view.name, cid).set(plan.lag.get(cid, 0))

    def record(
        self,
        view: StreamView,
        query_id: str,
        plan: EndPlan,
        resumed: Resumed,
        translations: Sequence[Translation],
    ) -> None:
        """History entries of a plan (splits resumed, translated, retired;
        data lost, also counted)."""
        self._resumed(view, query_id, resumed, plan.entered)
        for t in translations:
            cid = SplitId.parse(t.split).cluster
            self._history.record(
                view.name,
                "translated",
                cluster=cid,
                detail=f"query {query_id}: {t.split} starts at {t.offset} ({t.how})",
                generation=view.generation,
            )
            if t.result:
                self._metrics.translations.labels(view.name, cid, t.result).inc()
                self._metrics.translation_skipped.labels(view.name, cid).inc(t.skipped)
        self._retired(view, query_id, plan.retired)
        for s, what in plan.data_loss.items():
            cid = SplitId.parse(s).cluster
            self._metrics.data_loss.labels(view.name, cid).inc()
            self._history.record(
                view.name,
                "data-loss",
                cluster=cid,
                detail=f"query {query_id}: {what}",
                generation=view.generation,
            )

    def _resumed(
        self, view: StreamView, query_id: str, resumed: Resumed, entered: list[str]
    ) -> None:
        """One entry per cluster added back whose splits resume where the
        query left them."""
        by_cluster: dict[str, list[str]] = defaultdict(list)
        for s in entered:
            if s in resumed.entry:
                by_cluster[SplitId.parse(s).cluster].append(s)
        for cid, splits in sorted(by_cluster.items()):
            shown_ = ", ".join(f"{s}@{resumed.entry[s]}" for s in splits[:SHOWN_SPLITS])
            more = ", ..." if len(splits) > SHOWN_SPLITS else ""
            self._history.record(
                view.name,
                "resumed",
                cluster=cid,
                detail=(
                    f"query {query_id}: {len(splits)} split(s) of a cluster added back resume "
                    f"where the query left them: {shown_}{more}"
                ),
                generation=view.generation,
            )

    def _retired(self, view: StreamView, query_id: str, retired: dict[str, str]) -> None:
        """One entry per cluster and reason."""
        groups: dict[tuple[str, str], list[str]] = defaultdict(list)
        for s, why in retired.items():
            groups[(SplitId.parse(s).cluster, why)].append(s)
        for (cid, why), splits in sorted(groups.items()):
            if len(splits) == 1:
                detail = f"query {query_id}: {splits[0]} ({why})"
            else:
                named = ", ".join(splits[:SHOWN_SPLITS]) + (
                    ", ..." if len(splits) > SHOWN_SPLITS else ""
                )
                detail = f"query {query_id}: {len(splits)} splits ({why}): {named}"
            self._history.record(
                view.name, "retired", cluster=cid, detail=detail, generation=view.generation
            )
