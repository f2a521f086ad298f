"""The provider interfaces (shaped like Pinot's stream plug-ins)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, runtime_checkable

from multikafka_core.arrow import Columns


class OffsetQuery(NamedTuple):
    """Which offset to look up: ``"earliest"``, ``"latest"`` or a record time."""

    kind: str
    timestamp_ms: int = 0

    @classmethod
    def earliest(cls) -> OffsetQuery:
        return cls("earliest")

    @classmethod
    def latest(cls) -> OffsetQuery:
        return cls("latest")

    @classmethod
    def at_time(cls, timestamp_ms: int) -> OffsetQuery:
        return cls("timestamp", timestamp_ms)


class MetadataClient(Protocol):
    """Cluster metadata as the coordinator needs it. Blocking calls; the
    coordinator runs them on an executor."""

    def partition_counts(self, topics: Sequence[str], timeout_s: float) -> dict[str, int]:
        """Partitions per topic; topics that do not exist are left out."""
        ...

    def offsets(
        self, partitions: Sequence[tuple[str, int]], query: OffsetQuery, timeout_s: float
    ) -> dict[tuple[str, int], int]:
        """The offset per ``(topic, partition)`` for ``query``. A time after every
        record resolves to the end offset."""
        ...

    def commit_group(
        self, group_id: str, offsets: Mapping[tuple[str, int], int], timeout_s: float
    ) -> None:
        """Store ``offsets`` as the committed offsets of consumer group ``group_id``."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ServesStreams(Protocol):
    """A client that can name, in its own log lines (librdkafka's), the
    (stream, cluster) pairs it serves, and be told that its cluster is known
    to be down (FAILED: its connection failures are expected, logged at
    DEBUG). Optional: owners call it on clients that have it."""

    def set_log_context(
        self, users: Sequence[tuple[str, str]], *, expected_down: bool = False
    ) -> None: ...


class TopicPartitionRange(NamedTuple):
    """Read ``[start, until)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    until: int


@dataclass
class ReadOutcome:
    """What reading a set of ranges did, beyond the records it returned."""

    #: Last offset and record time read per (topic, partition).
    last: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    #: Offsets found missing (deleted by retention) and skipped.
    lost: int = 0
    #: Ranges given up because the caller asked to abandon them.
    abandoned: list[TopicPartitionRange] = field(default_factory=list)
    records: int = 0


class RangeReader(Protocol):
    """Reads exact offset ranges of one cluster; never joins a consumer group."""

    def read(
        self,
        ranges: Sequence[TopicPartitionRange],
        outcome: ReadOutcome,
        *,
        include_headers: bool,
        fail_on_data_loss: bool,
        should_abandon: Callable[[], bool],
    ) -> Iterator[Columns]:
        """Yield the records of ``ranges`` in batches; fill ``outcome`` as it goes."""
        ...

    def close(self) -> None: ...
