"""Helpers for tests: waiting for a condition, sequence checks, stream docs."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from multikafka.devstack.data import create_topics, produce_sequence

if TYPE_CHECKING:
    from multikafka.admin_client import AdminClient

T = TypeVar("T")


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


#: Client settings every test stream carries. tansu answers a fetch only
#: after the full fetch.wait.max.ms even when it has data (ARCHITECTURE.md);
#: a short wait keeps reads fast in tests. Not a product default.
TANSU_PROPERTIES = {"fetch.wait.max.ms": "10"}


def stream_doc(
    name: str, clusters: dict[str, tuple[str, list[str]]], **extra: Any
) -> dict[str, Any]:
    """A stream document: ``clusters`` maps id -> (bootstrap, topics)."""
    doc: dict[str, Any] = {
        "name": name,
        "clusters": {
            cid: {"bootstrap_servers": bs, "topics": topics, "properties": dict(TANSU_PROPERTIES)}
            for cid, (bs, topics) in clusters.items()
        },
    }
    doc.update(extra)
    return doc


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


def sequence_report(
    keys: Iterable[str], expected: dict[str, int]
) -> tuple[list[str], dict[str, int]]:
    """Missing keys and duplicated keys (key -> count) among ``keys`` for
    ``expected`` labels with sequence numbers 0..n-1. Fence keys are ignored."""
    counts = Counter(k for k in keys if not k.startswith("__fence__"))
    missing = [
        f"{label}:{s}"
        for label, n in expected.items()
        for s in range(n)
        if f"{label}:{s}" not in counts
    ]
    duplicated = {k: c for k, c in counts.items() if c > 1}
    return missing, duplicated
