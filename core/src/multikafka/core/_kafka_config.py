"""librdkafka settings every multikafka client starts from: the coordinator's
metadata clients and group committers, and the reader agents' consumers.

No confluent-kafka import: these are plain settings, shared by the
coordinator (which never reads records) and the read path.
"""

from __future__ import annotations

from collections.abc import Mapping

from multikafka.core._references import resolve_properties
from multikafka.core.model import Connection

#: Group id of reader consumers: librdkafka needs one, we never join or commit with it.
READER_GROUP_ID = "multikafka-reader"

READER_DEFAULTS = {
    "log.connection.close": "false",
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    # A range that starts before the log start is data loss; we want to know.
    "auto.offset.reset": "error",
    "fetch.max.bytes": "52428800",
    "max.partition.fetch.bytes": "10485760",
    "queued.min.messages": "200000",
    # When a partition's prefetch passes queued.min.messages, librdkafka
    # postpones its next fetch by this (default 1000 ms), and a range assigned
    # next on that partition (the next micro-batch) waited for it: 1.0-1.3 s
    # stalls in one small micro-batch out of three (docs/benchmarks.md,
    # Small micro-batches).
    "fetch.queue.backoff.ms": "10",
}


ClientConfig = dict[str, str | int | float | bool]


#: librdkafka's ``isolation.level`` values; readers use librdkafka's default.
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)


def reads_committed(properties: Mapping[str, str], override: str = "") -> bool:
    """Whether readers of a cluster with ``properties`` read only committed
    records: the query's ``kafka.isolation.level`` (``override``) if set, else
    the cluster's ``isolation.level``, else librdkafka's default
    (``read_committed``). Such readers stop at the last stable offset (the
    first record of a transaction still open), so planning stops there too."""
    level = override or properties.get("isolation.level", READ_COMMITTED)
    return level != READ_UNCOMMITTED


def client_config(connection: Connection, defaults: Mapping[str, str]) -> ClientConfig:
    """librdkafka settings for ``connection``: our defaults, then the stream's
    properties (which win; ConfigProvider references resolved here, where
    the client runs: :mod:`multikafka.core._references`), then the bootstrap
    servers. Never log the result."""
    config: ClientConfig = dict(defaults)
    config.update(
        resolve_properties(connection.cluster, connection.properties.as_librdkafka_dict())
    )
    config["bootstrap.servers"] = connection.bootstrap_servers
    return config


#: :func:`_collector_paused` freezes at this process's batches numbered by a
