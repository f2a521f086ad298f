"""Prometheus metrics of the coordinator, and of the agents that push theirs
to it. One registry per coordinator; children of a cluster or stream are
removed when it goes away, so no series outlives what it describes."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from multikafka.core.model import ClusterState

_PER_CLUSTER = ("stream", "cluster")

#: The ``mode`` label of :attr:`Metrics.malformed`, in the order agents push
#: their counters (SubReaderStats: malformed_records, corrupt_records,
#: malformed_failures).
MALFORMED_MODES = ("DROPMALFORMED", "PERMISSIVE", "FAILFAST")


#: The ``result`` label of :attr:`Metrics.translations`
#: (``multikafka.coordinator.translation.failover``).
TRANSLATION_RESULTS = ("matched", "partial", "estimate", "exact")

#: The converters an agent reports (``multikafka.reader_agent._arrow``).
CONVERTERS = ("c-direct", "c-accessors", "python")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.generation = Gauge(
            "multikafka_metadata_generation",
            "Metadata generation applied per stream.",
            ["stream"],
            registry=r,
        )
        self.rejected = Counter(
            "multikafka_metadata_rejected",
            "Invalid stream documents ignored.",
            ["stream"],
            registry=r,
        )
        self.reachable = Gauge(
            "multikafka_cluster_reachable",
            "1 if the cluster answered its last request.",
            _PER_CLUSTER,
            registry=r,
        )
        self.cluster_state = Gauge(
            "multikafka_cluster_state",
            "1 for the state each cluster of a stream is in, 0 for the other states.",
            [*_PER_CLUSTER, "state"],
            registry=r,
        )
        self.partitions = Gauge(
            "multikafka_cluster_partitions",
            "Partitions discovered per cluster of a stream.",
            _PER_CLUSTER,
            registry=r,
        )
        self.lag = Gauge(
            "multikafka_lag_records",
            "Records between the latest planned start and the high watermarks.",
            _PER_CLUSTER,
            registry=r,
        )
        self.planned = Counter(
            "multikafka_records_planned",
            "Records planned into micro-batches.",
            _PER_CLUSTER,
            registry=r,
        )
        self.abandoned = Counter(
            "multikafka_abandoned_ranges",
            "Planned ranges abandoned (cluster failed or removed).",
            _PER_CLUSTER,
            registry=r,
        )
        self.abandoned_records = Counter(
            "multikafka_abandoned_records", "Records in abandoned ranges.", _PER_CLUSTER, registry=r
        )
        self.data_loss = Counter(
            "multikafka_data_loss_events",
            "Data loss detected and skipped (failOnDataLoss=false).",
            _PER_CLUSTER,
            registry=r,
        )
        self.shrunk = Counter(
            "multikafka_partition_count_shrunk",
            "A topic was seen with fewer partitions than before.",
            _PER_CLUSTER,
            registry=r,
        )
        self.failovers = Counter(
            "multikafka_failovers",
            "Failovers performed.",
            ["stream", "from_cluster", "to_cluster", "mode"],
            registry=r,
        )
        self.translations = Counter(
            "multikafka_failover_translations",
            "Splits of a cluster that replaced a failed or draining one, by how their "
            "start was chosen: matched (right after the copy of the last record read), "
            "partial (the copy of an earlier one: the mirror lacked the newest), estimate "
            "(the strategy's lower bound: no copy found), exact (identity).",
            ["stream", "cluster", "result"],
            registry=r,
        )
        self.translation_skipped = Counter(
            "multikafka_failover_skipped_records",
            "Records between a translation's estimate and the start matching chose: "
            "records not read twice.",
            _PER_CLUSTER,
            registry=r,
        )
        self.drains = Counter("multikafka_drains", "Drains started.", _PER_CLUSTER, registry=r)
        self.reconciles = Counter(
            "multikafka_reconcile_events", "Reconcile events pushed.", ["stream"], registry=r
        )
        self.reconcile_latency = Histogram(
            "multikafka_reconcile_latency_seconds",
            "From seeing a metadata change to the last registered agent applying it.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.readers = Gauge("multikafka_readers", "Registered reader agents.", registry=r)
        self.converters = Gauge(
            "multikafka_reader_converters",
            "Registered reader agents by how they convert Kafka messages into Arrow: "
            "c-direct (compiled, reading the structs), c-accessors (compiled, through the "
            "accessor methods) or python.",
            ["converter"],
            registry=r,
        )
        self.leader = Gauge(
            "multikafka_leader", "1 while this replica is the leader, else 0.", registry=r
        )
        self.elections = Counter(
            "multikafka_elections", "Times this replica was elected leader.", registry=r
        )
        self.lease_renewals_failed = Counter(
            "multikafka_lease_renewals_failed",
            "Renewals of the leader's lease that failed or found it gone.",
            registry=r,
        )
        self.lease_renewal_seconds = Histogram(
            "multikafka_lease_renewal_seconds",
            "How long the leader's lease renewals took (each must finish well inside a "
            "third of the lease TTL).",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )
        self.denied = Counter(
            "multikafka_denied",
            "Calls refused by access control: no or an unknown credential "
            "(role: the role the call needed), or a role not granted on the stream.",
            ["role", "service"],
            registry=r,
        )
        self.policy_reloads = Counter(
            "multikafka_access_policy_reloads",
            "Access policy files read: loaded, or refused (the last good one stays).",
            ["outcome"],
            registry=r,
        )
        self.policy_valid = Gauge(
            "multikafka_access_policy_valid",
            "1 while the access policy file in place is the one in force, 0 while a "
            "refused file waits to be fixed (or none was ever loaded: every call refused).",
            registry=r,
        )
        self.fenced_writes = Counter(
            "multikafka_fenced_writes",
            "Writes refused because this replica no longer leads (fencing).",
            registry=r,
        )
        self.agent_records = Counter(
            "multikafka_agent_records_read",
            "Records read by agents (pushed by them).",
            _PER_CLUSTER,
            registry=r,
        )
        self.mm2_sync_age = Gauge(
            "multikafka_mm2_sync_age_seconds",
            "Age of the newest MirrorMaker 2 offset sync per mirrored source partition "
            "(cluster: the mirror; topic, partition: on the source).",
            [*_PER_CLUSTER, "topic", "partition"],
            registry=r,
        )
        self.mm2_upstream_lag = Gauge(
            "multikafka_mm2_upstream_lag_records",
            "Records on the source past its newest MirrorMaker 2 offset sync, per mirrored "
            "source partition (cluster: the mirror). MM2 syncs about every offset.lag.max "
            "records; a growing value means syncs stopped.",
            [*_PER_CLUSTER, "topic", "partition"],
            registry=r,
        )
        self.subreader_restarts = Counter(
            "multikafka_subreader_restarts",
            "Sub-reader restarts in agents (pushed by them).",
            _PER_CLUSTER,
            registry=r,
        )
        self.malformed = Counter(
            "multikafka_agent_malformed_records",
            "Records whose key or value did not decode, by the query's mode: dropped "
            "(DROPMALFORMED), kept in _corrupt_key/_corrupt_value (PERMISSIVE), "
            "reads failed (FAILFAST) (pushed by agents).",
            [*_PER_CLUSTER, "mode"],
            registry=r,
        )

    def forget_mm2_partition(self, stream: str, cluster: str, topic: str, partition: int) -> None:
        for family in (self.mm2_sync_age, self.mm2_upstream_lag):
            with contextlib.suppress(KeyError):
                family.remove(stream, cluster, topic, str(partition))

    _cluster_families = (
        "reachable",
        "partitions",
        "lag",
        "planned",
        "abandoned",
        "abandoned_records",
        "data_loss",
        "shrunk",
        "drains",
        "translation_skipped",
        "agent_records",
        "subreader_restarts",
    )

    def set_cluster_states(self, stream: str, states: Mapping[str, ClusterState]) -> None:
        """One series per (cluster, state): 1 for the state it is in, 0 for
        the others (a state-set: ``multikafka_cluster_state{state="DRAINING"} == 1``
        selects the clusters that are draining)."""
        for cluster, current in states.items():
            for state in ClusterState:
                self.cluster_state.labels(stream, cluster, state.value).set(
                    1 if state is current else 0
                )

    def forget_cluster(self, stream: str, cluster: str) -> None:
        for name in self._cluster_families:
            family = getattr(self, name)
            with contextlib.suppress(KeyError):
                family.remove(stream, cluster)
        for state in ClusterState:
            with contextlib.suppress(KeyError):
                self.cluster_state.remove(stream, cluster, state.value)
        for mode in MALFORMED_MODES:
            with contextlib.suppress(KeyError):
                self.malformed.remove(stream, cluster, mode)
        for result in TRANSLATION_RESULTS:
            with contextlib.suppress(KeyError):
                self.translations.remove(stream, cluster, result)

    def count_converters(self, converters: Iterable[str]) -> None:
        """Set :attr:`converters` to how many agents use each converter (0 for
        one no agent uses any more). Labels stay few: an agent that names no
        known converter counts as ``unknown``."""
        counts = collections.Counter(c if c in CONVERTERS else "unknown" for c in converters)
        for name in {*CONVERTERS, "unknown"}:
            self.converters.labels(name).set(counts.get(name, 0))

    def forget_stream(self, stream: str, clusters: list[str]) -> None:
        for cluster in clusters:
            self.forget_cluster(stream, cluster)
        for family in (self.generation, self.rejected, self.reconciles):
            with contextlib.suppress(KeyError):
                family.remove(stream)
        # Failovers are labelled by both clusters and the mode: remove every
        # series of the stream (a cluster that is gone may be one of them).
        seen = {
            (s.labels["from_cluster"], s.labels["to_cluster"], s.labels["mode"])
            for metric in self.failovers.collect()
            for s in metric.samples
            if s.labels.get("stream") == stream
        }
        for from_cluster, to_cluster, mode in seen:
            with contextlib.suppress(KeyError):
                self.failovers.remove(stream, from_cluster, to_cluster, mode)

    def per_cluster(self, family: str, stream: str) -> dict[str, float]:
        """The value of a per-cluster family (``"lag"``, a counter's total for
        ``"agent_records"``) for each cluster of ``stream`` that has one."""
        values: dict[str, float] = {}
        for metric in getattr(self, family).collect():
            for s in metric.samples:
                if s.labels.get("stream") == stream and not s.name.endswith("_created"):
                    values[s.labels["cluster"]] = s.value
        return values
