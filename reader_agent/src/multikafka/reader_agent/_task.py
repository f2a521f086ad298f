"""What one Spark task asks an agent to read: plain, picklable data."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from multikafka.core._ranges import SplitRange
from multikafka.core.model import Connection
from multikafka.core.transport import ConnectConfig
from multikafka.reader_agent._overrides import Overrides
from multikafka.reader_agent._payloads import PayloadDecoding


@dataclass(frozen=True)
class ReadTask:
    #: How the agent reaches the coordinator it registers with and reports to
    #: (its CA, client certificate and reader token travel with the task, so
    #: executors need no file); ``None``: report to no coordinator.
    coordinator: ConnectConfig | None
    stream: str
    query_id: str
    #: Metadata generation the task was planned at.
    generation: int
    ranges: tuple[SplitRange, ...]
    #: cluster -> how to reach it (properties hold secrets: never logged).
    clusters: Mapping[str, Connection] = field(repr=False)
    include_headers: bool = False
    fail_on_data_loss: bool = True
    #: How keys and values are decoded (default: raw bytes, as Spark's Kafka source).
    decoding: PayloadDecoding = field(default_factory=PayloadDecoding)
    #: The query's librdkafka settings for its reader consumers (Spark's
    #: ``kafka.*`` options), over the clusters' properties; values never shown.
    overrides: Overrides = field(default_factory=Overrides, repr=False)

    def __repr__(self) -> str:
        ranges = ", ".join(f"{r.split}[{r.start},{r.until})" for r in self.ranges)
        return f"ReadTask(stream={self.stream!r}, query={self.query_id!r}, generation={self.generation}, ranges=[{ranges}])"
