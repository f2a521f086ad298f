"""Helpers for tests: waiting for a condition, sequence checks, stream docs."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from multikafka.devstack.feed import FENCE_KEY, SequenceProducer, create_topics, fence
from multikafka.devstack.stack import TANSU_PROPERTIES, stream_doc

if TYPE_CHECKING:
    from multikafka_core.admin_client import AdminClient

T = TypeVar("T")

__all__ = [
    "TANSU_PROPERTIES",
    "assert_exactly_once",
    "eventually",
    "eventually_async",
    "produce_sequence",
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
    assertion (or fail saying what was last returned)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
            error: AssertionError | None = None
        except AssertionError as exc:
            error = exc
        if time.monotonic() > deadline:
            if error is not None:
                raise error
            raise AssertionError(f"condition not met within {timeout_s}s (last value {last!r})")
        time.sleep(interval_s)


def sequence_report(
    keys: Iterable[str], expected: Mapping[str, int]
) -> tuple[list[str], dict[str, int]]:
    """Missing keys and duplicated keys (key -> count) among ``keys`` for
    ``expected`` labels with sequence numbers 0..n-1. Fence keys are ignored."""
    fence_key = FENCE_KEY.decode()
    counts = Counter(k for k in keys if not k.startswith(fence_key))
    missing = [
        f"{label}:{s}"
        for label, n in expected.items()
        for s in range(n)
        if f"{label}:{s}" not in counts
    ]
    duplicated = {k: c for k, c in counts.items() if c > 1}
    return missing, duplicated


def produce_sequence(
    bootstrap: str, topic: str, partitions: int, label: str, seqs: Iterable[int]
) -> int:
    """Produce records ``label:seq`` in batches, then fence every partition."""
    producer = SequenceProducer(bootstrap)
    n = producer.produce(topic, partitions, label, seqs)
    producer.flush()
    fence(bootstrap, topic, partitions)
    return n


async def eventually_async(
    check: Callable[[], T], *, timeout_s: float = 30.0, interval_s: float = 0.005
) -> T:
    """:func:`eventually` for async tests: waits with ``asyncio.sleep``, so the
    event loop (and what the test waits for) runs meanwhile."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            last = check()
            if last:
                return last
            error: AssertionError | None = None
        except AssertionError as exc:
            error = exc
        if time.monotonic() > deadline:
            if error is not None:
                raise error
            raise AssertionError(f"condition not met within {timeout_s}s (last value {last!r})")
        await asyncio.sleep(interval_s)


def assert_exactly_once(keys: Iterable[str], expected: dict[str, int]) -> None:
    """Every record of ``expected`` (label -> count) among ``keys``, once."""
    missing, duplicated = sequence_report(keys, expected)
    assert not missing, f"{len(missing)} lost, e.g. {missing[:5]}"
    assert not duplicated, f"{len(duplicated)} read twice, e.g. {list(duplicated.items())[:5]}"


def seeded_stream(
    admin: AdminClient, bootstrap: str, prefix: str, *, partitions: int = 1, records: int = 0
) -> tuple[str, str]:
    """A new topic on one cluster with ``records`` records ``a:0..`` and a
    stream reading it as cluster ``a``; returns (stream, topic)."""
    topic = uid(prefix)
    create_topics(bootstrap, {topic: partitions})
    if records:
        produce_sequence(bootstrap, topic, partitions, "a", range(records))
    name = uid(prefix)
    admin.put_stream(stream_doc(name, {"a": (bootstrap, [topic])}))
    return name, topic
