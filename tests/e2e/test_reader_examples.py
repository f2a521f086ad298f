"""The examples of docs/reader.md, run as they are written (only the
coordinator's address and the stream's name changed) against a real
coordinator and two tansu clusters holding JSON orders."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from tests.conftest import KafkaClusters
from tests.helpers import stream_doc, uid

pytestmark = pytest.mark.integration

DOC = Path(__file__).resolve().parents[2] / "docs" / "reader.md"


def examples() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 3, "docs/reader.md: the pandas, DuckDB and asyncio examples"
    return blocks


def produce_orders(bootstrap: str, topic: str, ids: range) -> None:
    """JSON orders one per produce batch (tansu's watermarks are exact so)."""
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 1})
    for i in ids:
        value = json.dumps({"id": i, "amount": i / 2})
        producer.produce(topic, key=str(i).encode(), value=value.encode(), partition=i % 2)
    assert producer.flush(30) == 0


def run(block: str, coordinator: str, stream: str, cwd: Path) -> dict[str, Any]:
    code = block.replace('"127.0.0.1:7070"', f'"{coordinator}"').replace('"orders"', f'"{stream}"')
    assert code != block, "the example names the coordinator and the stream"
    namespace: dict[str, Any] = {"__name__": "__example__"}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwd)
        exec(compile(code, str(DOC), "exec"), namespace)
    return namespace


def test_the_readers_examples_run_as_written(
    coordinator: CoordinatorThread, admin: AdminClient, kafka: KafkaClusters, tmp_path: Path
) -> None:
    a, b = kafka.shared(2)
    topic = uid("orders")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 2})
    produce_orders(a.bootstrap, topic, range(100))
    produce_orders(b.bootstrap, topic, range(100, 150))
    name = uid("orders")
    admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])}))
    pandas_example, duckdb_example, async_example = examples()

    first = run(pandas_example, coordinator.address, name, tmp_path)
    assert first["per_cluster"] == {"a": 100, "b": 50}
    assert json.loads((tmp_path / "orders.offsets.json").read_text()) == {
        "a": {topic: [50, 50]},
        "b": {topic: [25, 25]},
    }
    # The next run resumes where this one stopped: only what came since.
    produce_orders(a.bootstrap, topic, range(150, 160))
    again = run(pandas_example, coordinator.address, name, tmp_path)
    assert again["per_cluster"] == {"a": 10}
    assert sorted(again["orders"]["key"].map(bytes.decode).astype(int)) == list(range(150, 160))

    duck = run(duckdb_example, coordinator.address, name, tmp_path)
    assert duck["total"] == (160, sum(i / 2 for i in range(160)))

    counted = run(async_example, coordinator.address, name, tmp_path)
    assert counted["counted"] == 160
