"""The domain model: streams, clusters, splits.

A *stream* is a logical name whose data lives in one or more Kafka clusters;
its metadata maps ``cluster_id -> ClusterSpec``. A *split* is one partition of
one topic in one cluster, named ``"{cluster}/{topic}/{partition}"``.

Documents are parsed and validated by :mod:`multikafka.core.validation`; this module
only holds the frozen values and their canonical JSON form.
"""

from __future__ import annotations

import enum
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from multikafka.core._secrets import Properties
from multikafka.core.exceptions import shown
from multikafka.core.mm2 import Mm2Mirror
from multikafka.v1 import common_pb2

#: A partition number written the one way str(int) writes it.
_PARTITION = re.compile(r"0|[1-9][0-9]*")


class ClusterState(str, enum.Enum):
    """Lifecycle of a cluster inside a stream."""

    #: Read.
    ACTIVE = "ACTIVE"
    #: Known and watched, not read: a mirror waiting for a failover.
    STANDBY = "STANDBY"
    #: Read up to the end offsets captured when draining began, then retired.
    DRAINING = "DRAINING"
    #: Not read; ranges planned on it are abandoned.
    FAILED = "FAILED"

    @property
    def readable(self) -> bool:
        """Whether splits of a cluster in this state are planned and read."""
        return self in (ClusterState.ACTIVE, ClusterState.DRAINING)

    def to_proto(self) -> common_pb2.ClusterState.ValueType:
        """The state on the wire (``multikafka.v1.ClusterState``, same names)."""
        return common_pb2.ClusterState.Value(self.value)


class StartKind(str, enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True)
class StartingPosition:
    """Where a cluster's splits start when a query first sees them."""

    kind: StartKind
    #: Record time (ms since the epoch) for :attr:`StartKind.TIMESTAMP`.
    timestamp_ms: int = 0

    def to_document(self) -> str | dict[str, int]:
        if self.kind is StartKind.TIMESTAMP:
            return {"timestamp": self.timestamp_ms}
        return str(self.kind.value)


@dataclass(frozen=True)
class StoppingPosition:
    """Where a cluster's reading stops (Flink's per-cluster stopping offsets):
    exact offsets per partition, or the first record at/after a time. The
    coordinator never plans a split of the cluster past its stop."""

    #: ``((topic, partition), offset)`` pairs, sorted: the first offset *not*
    #: read of each named partition (partitions not named are not stopped).
    offsets: tuple[tuple[tuple[str, int], int], ...] = ()
    #: Record time (ms since the epoch): each partition stops before its first
    #: record at or after it (offsets-for-times). ``None`` with :attr:`offsets`.
    timestamp_ms: int | None = None

    def split_offsets(self, cluster: str) -> dict[str, int]:
        """``{split id: stop}`` of the named partitions of ``cluster``."""
        return {f"{cluster}/{t}/{p}": o for (t, p), o in self.offsets}

    def to_document(self) -> dict[str, Any]:
        if self.timestamp_ms is not None:
            return {"timestamp": self.timestamp_ms}
        return {"offsets": {f"{t}/{p}": o for (t, p), o in self.offsets}}

    def describe(self) -> str:
        """One line for people: ``at 2 offsets`` or ``at time 1767225600000``."""
        if self.timestamp_ms is not None:
            return f"stops at time {self.timestamp_ms} ms"
        n = len(self.offsets)
        return f"stops at {n} partition offset{'s' if n != 1 else ''}"


class Connection(NamedTuple):
    """How to reach one cluster: what a client needs, and its digest."""

    cluster: str
    bootstrap_servers: str
    properties: Properties

    @property
    def fingerprint(self) -> str:
        """Digest of the connection settings; it changes exactly when a client
        must be recreated. Secrets are hashed, never shown."""
        blob = json.dumps(
            [self.bootstrap_servers, self.properties.as_librdkafka_dict()], sort_keys=True
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def __repr__(self) -> str:
        return (
            f"Connection(cluster={self.cluster!r}, bootstrap_servers={self.bootstrap_servers!r}, "
            f"properties={self.properties!r})"
        )


@dataclass(frozen=True)
class ClusterSpec:
    """One physical cluster of a stream."""

    #: ``host:port[,host:port...]`` of the cluster's brokers.
    bootstrap_servers: str
    #: Topics of the stream in this cluster (at least one, no duplicates).
    topics: tuple[str, ...]
    #: librdkafka settings (security, timeouts). Secrets are redacted on output.
    properties: Properties = field(default_factory=Properties)
    #: Lifecycle state; only ACTIVE and DRAINING clusters are read.
    state: ClusterState = ClusterState.ACTIVE
    #: Where this cluster's splits start when a running query first sees them
    #: (default: earliest, so nothing added mid-query is missed).
    starting: StartingPosition | None = None
    #: Where this cluster's reading stops (None: it does not).
    stopping: StoppingPosition | None = None
    #: This cluster is MirrorMaker 2's replica of another of the stream.
    mm2: Mm2Mirror | None = None

    def connection(self, cluster_id: str) -> Connection:
        return Connection(cluster_id, self.bootstrap_servers, self.properties)

    def to_document(self, *, redact: bool = True) -> dict[str, Any]:
        props = self.properties.redacted() if redact else self.properties.as_librdkafka_dict()
        doc: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "topics": list(self.topics),
            "properties": props,
            "state": self.state.value,
        }
        if self.starting is not None:
            doc["starting"] = self.starting.to_document()
        if self.stopping is not None:
            doc["stopping"] = self.stopping.to_document()
        if self.mm2 is not None:
            doc["mm2"] = self.mm2.to_document()
        return doc


class FailoverStrategy(str, enum.Enum):
    #: offsets_for_times(last record time read from the old cluster - margin).
    TIMESTAMP = "timestamp"
    #: The same offsets (offset-preserving mirrors such as cluster linking).
    IDENTITY = "identity"
    #: MirrorMaker 2's offset syncs (the new cluster's ``mm2`` block names
    #: the failed one as its source); ``timestamp`` where no sync is usable.
    MM2 = "mm2"


#: How a document names the strategies, for errors.
STRATEGY_NAMES = ", ".join(s.value for s in FailoverStrategy)


#: How far back a timestamp failover starts, unless told otherwise.
DEFAULT_MARGIN_MS = 30_000
#: How long a query remembers where it left a cluster removed from its
#: stream, unless the stream says otherwise (7 days).
DEFAULT_REMOVED_CLUSTER_RETENTION_MS = 7 * 24 * 3_600_000


@dataclass(frozen=True)
class AutoFailover:
    """Automatic failover of a stream to a named standby cluster."""

    #: Cluster that takes over (usually STANDBY).
    standby: str
    #: How long the active cluster must stay unreachable before failing over.
    unreachable_after_ms: int
    strategy: FailoverStrategy = FailoverStrategy.TIMESTAMP
    margin_ms: int = DEFAULT_MARGIN_MS

    def to_document(self) -> dict[str, Any]:
        return {
            "standby": self.standby,
            "unreachable_after_ms": self.unreachable_after_ms,
            "strategy": self.strategy.value,
            "margin_ms": self.margin_ms,
        }


@dataclass(frozen=True)
class StreamSpec:
    """A logical stream: which clusters and topics hold its data."""

    name: str
    clusters: Mapping[str, ClusterSpec]
    auto_failover: AutoFailover | None = None
    #: How long each query remembers where it left a cluster removed from the
    #: stream (ms); a cluster added back within it resumes there. ``None``:
    #: :data:`DEFAULT_REMOVED_CLUSTER_RETENTION_MS`; 0 forgets at once.
    removed_cluster_retention_ms: int | None = None

    @property
    def retention_ms(self) -> int:
        """The removed-cluster retention in force (the default if not set)."""
        if self.removed_cluster_retention_ms is None:
            return DEFAULT_REMOVED_CLUSTER_RETENTION_MS
        return self.removed_cluster_retention_ms

    def to_document(self, *, redact: bool = True) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "clusters": {
                cid: spec.to_document(redact=redact) for cid, spec in sorted(self.clusters.items())
            },
        }
        if self.auto_failover is not None:
            doc["auto_failover"] = self.auto_failover.to_document()
        if self.removed_cluster_retention_ms is not None:
            doc["removed_cluster_retention_ms"] = self.removed_cluster_retention_ms
        return doc

    def to_json(self, *, redact: bool = True) -> str:
        # As UTF-8, not \u escapes: the 1 MiB limit counts the bytes sent,
        # and "\u00e9" would store 3 times as many as its UTF-8.
        return json.dumps(self.to_document(redact=redact), sort_keys=True, ensure_ascii=False)

    def counterpart_topic(self, cluster: str, other: str, topic: str) -> str | None:
        """The topic of ``other`` whose records ``cluster``'s ``topic`` holds
        too: renamed as an ``mm2`` block between the two says, else the same
        name. None: ``other`` has no such topic."""
        here, there = self.clusters[cluster], self.clusters[other]
        if here.mm2 is not None and here.mm2.source == other:
            return here.mm2.source_topic(topic, there.topics)
        if there.mm2 is not None and there.mm2.source == cluster:
            return next((t for t in there.topics if there.mm2.source_topic(t, [topic])), None)
        return topic

    def readable_clusters(self) -> dict[str, ClusterSpec]:
        return {cid: c for cid, c in self.clusters.items() if c.state.readable}

    def __repr__(self) -> str:
        return f"StreamSpec({self.to_json(redact=True)})"


class SplitId(NamedTuple):
    """``(cluster, topic, partition)``; ``str()`` gives ``"cluster/topic/partition"``."""

    cluster: str
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.cluster}/{self.topic}/{self.partition}"

    @classmethod
    def parse(cls, text: str) -> SplitId:
        """Parse ``"cluster/topic/partition"``; raises ``ValueError`` if malformed."""
        parts = text.split("/")
        if len(parts) != 3 or not parts[0] or not parts[1] or not _PARTITION.fullmatch(parts[2]):
            raise ValueError(
                f"split id {shown(text)} is not 'cluster/topic/partition' (partition like 0, 7, 12)"
            )
        partition = int(parts[2])
        if partition >= 2**31:
            raise ValueError(f"split id {shown(text)}: partition out of range")
        return cls(parts[0], parts[1], partition)
