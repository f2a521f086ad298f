"""Helpers for tests: waiting for a condition (over the core's ``poll``), sequence checks, stream docs,
running the command line (the admin CLI in-process, a coordinator as a
process of its own)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import pytest

from multikafka.core import _offsets as ov
from multikafka.core.env import PREFIX as SETTINGS_PREFIX
from multikafka.core.retry import poll, poll_async
from multikafka.devstack import free_port
from multikafka.devstack.counts import sequence_report, split_key
from multikafka.devstack.feed import Feed, SequenceProducer, create_topics, fence
from multikafka.devstack.stack import TANSU_PROPERTIES, stream_doc
from multikafka.v1 import planner_pb2

if TYPE_CHECKING:
    from click.testing import Result

    from multikafka.core.admin_client import AdminClient
    from multikafka.v1 import admin_pb2

INTERNALS = ("multikafka.core._offsets",)


T = TypeVar("T")

__all__ = [
    "TANSU_PROPERTIES",
    "assert_duplicates_within_margin",
    "assert_exactly_once",
    "eventually",
    "eventually_async",
    "one_line",
    "produce_mixed",
    "produce_sequence",
    "run_admin_cli",
    "run_coordinator",
    "seed_stream",
    "seeded_stream",
    "sequence_report",
    "stream_doc",
    "uid",
]


def uid(prefix: str = "t") -> str:
    """A name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def eventually(check: Callable[[], T], *, timeout_s: float = 30.0, interval_s: float = 0.05) -> T:
    """Call ``check`` until it returns a truthy value without raising
    ``AssertionError``; return that value. On timeout, re-raise the last
    assertion (or fail saying what was last returned). The polling is
    :func:`multikafka.core.retry.poll`'s."""
    last: list[Any] = [None]
    try:
        return poll(
            _noting(check, last),
            timeout_s=timeout_s,
            what="condition",
            interval_s=interval_s,
            retry_on=(AssertionError,),
        )
    except TimeoutError:
        raise _unmet(timeout_s, last[0]) from None


def _unmet(timeout_s: float, last: Any) -> AssertionError:
    return AssertionError(f"condition not met within {timeout_s}s (last value {last!r})")


def _noting(check: Callable[[], T], last: list[Any]) -> Callable[[], T]:
    """``check``, keeping what it returned last in ``last[0]``."""

    def noted() -> T:
        last[0] = check()
        return last[0]  # type: ignore[no-any-return]

    return noted


def produce_sequence(
    bootstrap: str, topic: str, partitions: int, label: str, seqs: Iterable[int]
) -> int:
    """Produce records ``label:seq`` in batches, then fence every partition."""
    producer = SequenceProducer(bootstrap)
    n = producer.produce(topic, partitions, label, seqs)
    producer.flush()
    fence(bootstrap, topic, partitions)
    return n


def transactional_producer(bootstrap: str) -> Any:
    """A confluent-kafka producer with transactions initialised, one record
    a batch (tansu's high watermark is right only then) when each produce
    is flushed."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": uid("tx"), "batch.num.messages": 1}
    )
    producer.init_transactions(15)
    return producer


def produce_each(producer: Any, topic: str, keys: Sequence[str], partition: int = 0) -> None:
    """One record per key into ``partition``, each flushed: a batch of its
    own (tansu's high watermark is right only then)."""
    for key in keys:
        producer.produce(topic, key=key.encode(), value=b"v", partition=partition)
        producer.flush()


def open_transaction(producer: Any, topic: str, keys: Sequence[str], partition: int = 0) -> None:
    """Begin a transaction of ``producer`` (:func:`transactional_producer`)
    and write :func:`produce_each` into it; the caller commits or aborts it."""
    producer.begin_transaction()
    produce_each(producer, topic, keys, partition)


def produce_mixed(bootstrap: str, topic: str, records: int = 200) -> None:
    """``records`` records into a new ``topic`` of 2 partitions, every field a
    converter reads varied: record ``i`` goes to partition ``i % 2``, its key
    is null when ``i % 5 == 0``, its value when ``i % 7 == 0``, it has a
    header when ``i % 3 == 0``, its timestamp is ``1_700_000_000_000 + i``."""
    from confluent_kafka import Producer

    create_topics(bootstrap, {topic: 2})
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 1})
    for i in range(records):
        producer.produce(
            topic,
            partition=i % 2,
            key=None if i % 5 == 0 else f"k{i}".encode(),
            value=None if i % 7 == 0 else bytes([i % 256]) * (i % 37),
            headers=[("n", str(i).encode())] if i % 3 == 0 else None,
            timestamp=1_700_000_000_000 + i,
        )
    assert producer.flush(30) == 0


async def eventually_async(
    check: Callable[[], T], *, timeout_s: float = 30.0, interval_s: float = 0.005
) -> T:
    """:func:`eventually` for async tests: waits with ``asyncio.sleep``, so the
    event loop (and what the test waits for) runs meanwhile."""
    last: list[Any] = [None]
    try:
        return await poll_async(
            _noting(check, last),
            timeout_s=timeout_s,
            what="condition",
            interval_s=interval_s,
            retry_on=(AssertionError,),
        )
    except TimeoutError:
        raise _unmet(timeout_s, last[0]) from None


def assert_exactly_once(keys: Iterable[str], expected: dict[str, int]) -> None:
    """Every record of ``expected`` (label -> count) among ``keys``, once."""
    missing, duplicated = sequence_report(keys, expected)
    assert not missing, f"{len(missing)} lost, e.g. {missing[:5]}"
    assert not duplicated, f"{len(duplicated)} read twice, e.g. {list(duplicated.items())[:5]}"


def assert_duplicates_within_margin(
    rows: Iterable[tuple[str, str]], feed: Feed, cut: int, margin_ms: int, primary: str
) -> None:
    """A timestamp failover from ``primary`` of the ``r:`` records ``feed``
    sent, routed to the mirror only from sequence number ``cut`` on: nothing
    lost, and what was read twice lies inside the failover's margin.
    ``rows``: (cluster, key) of every record read."""
    rows = list(rows)
    missing, duplicated = sequence_report([k for _, k in rows], {"r": len(feed.sent)})
    assert not missing, f"{len(missing)} lost, e.g. {missing[:5]}"
    assert all(c == 2 for c in duplicated.values())
    window = feed.margin_window(
        (split_key(k)[1] for c, k in rows if c == primary and k.startswith("r:")),
        cut,
        margin_ms,
    )
    assert window, "nothing was read from the primary before the failover"
    outside = [k for k in duplicated if split_key(k)[1] not in window]
    assert not outside, f"{len(outside)} of {len(duplicated)} duplicates outside the margin"


class Seeded(NamedTuple):
    """What :func:`seed_stream` made."""

    stream: str
    topic: str
    #: What ``put_stream`` answered.
    info: admin_pb2.StreamInfo


def seed_stream(
    admin: AdminClient,
    bootstrap: str,
    prefix: str,
    *,
    partitions: int = 1,
    records: int = 0,
    properties: Mapping[str, str] | None = None,
) -> Seeded:
    """A new topic on one cluster with ``records`` records ``a:0..`` and a
    stream reading it as cluster ``a`` (with ``properties`` added to the
    cluster's)."""
    topic = uid(prefix)
    create_topics(bootstrap, {topic: partitions})
    if records:
        produce_sequence(bootstrap, topic, partitions, "a", range(records))
    name = uid(prefix)
    doc = stream_doc(name, {"a": (bootstrap, [topic])})
    doc["clusters"]["a"]["properties"].update(properties or {})
    return Seeded(name, topic, admin.put_stream(doc))


def seeded_stream(
    admin: AdminClient, bootstrap: str, prefix: str, **options: Any
) -> tuple[str, str]:
    """:func:`seed_stream` (with the same options); returns (stream, topic)."""
    stream, topic, _ = seed_stream(admin, bootstrap, prefix, **options)
    return stream, topic


def _settings() -> list[str]:
    """The ``MULTIKAFKA_*`` settings of this process's environment."""
    return [k for k in os.environ if k.startswith(SETTINGS_PREFIX)]


def run_admin_cli(args: Sequence[str], env: Mapping[str, str | None] | None = None) -> Result:
    """``multikafka admin ARGS`` in this process (click's runner), with no
    ``MULTIKAFKA_*`` setting but those of ``env`` (None: unset)."""
    from click.testing import CliRunner

    from multikafka.cli import main

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        return CliRunner().invoke(
            main, ["admin", *args], env={**dict.fromkeys(_settings()), **(env or {})}
        )
    finally:  # the CLI configures logging for its process; this is pytest's
        root.handlers[:], root.level = handlers, level


def run_coordinator(
    *flags: str, cwd: Path, timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """``multikafka coordinator FLAGS --listen <a free port>`` as a process of
    its own, with no ``MULTIKAFKA_*`` setting from the environment, for
    configurations it must refuse: fails the test if it still runs after
    ``timeout_s`` (it served instead of refusing)."""
    listen = f"127.0.0.1:{free_port()}"
    argv = [
        str(Path(sys.executable).parent / "multikafka"),
        "coordinator",
        *flags,
        "--listen",
        listen,
    ]
    process_env = {k: v for k, v in os.environ.items() if not k.startswith(SETTINGS_PREFIX)}
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            cwd=cwd,
            env=process_env,
        )
    except subprocess.TimeoutExpired as exc:
        # (what it wrote so far comes as bytes, text=True or not)
        output = b"".join(o for o in (exc.stdout, exc.stderr) if isinstance(o, bytes)).decode()
        pytest.fail(f"served instead of refusing: still running after {timeout_s}s\n{output}")


def one_line(text: str) -> str:
    """The one non-blank line of ``text`` (fails if there are more or none)."""
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def by_split(columns: planner_pb2.OffsetColumns) -> dict[str, int]:
    """A position's offsets or times (``offsets``, ``split_timestamps``) by
    split id (the wire carries them in columns)."""
    return dict(ov.from_columns(columns, "position", allow_special=True))


def report_reads(
    coordinator: str, stream: str, query_id: str, positions: Mapping[str, int]
) -> None:
    """Tell ``coordinator`` (an address) what a query read, as its agents
    would: for each split, a range read up to its position (its last record
    the one before; no fingerprints). A failover translates from the last
    record read, and waits for this report otherwise."""
    import grpc

    from multikafka.v1 import reader_pb2, reader_pb2_grpc

    marks = [
        reader_pb2.ReadMark(
            split=split,
            last_offset=at - 1,
            last_timestamp_ms=1,
            next_offset=at,
            from_offset=at - 1,
        )
        for split, at in positions.items()
        if at > 0
    ]
    with grpc.insecure_channel(coordinator) as channel:
        reader_pb2_grpc.ReaderStub(channel).ReportReads(
            reader_pb2.ReportReadsRequest(
                agent_id="test", stream=stream, query_id=query_id, marks=marks
            ),
            timeout=30,
        )
