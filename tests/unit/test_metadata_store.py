"""The coordinator's own records in etcd, when a stored value is malformed
(written by hand, by an older version, or cut short): it is skipped and
logged, and nothing else stops: not the metadata watch, not a start."""

from __future__ import annotations

import json

import pytest

from multikafka.coordinator.state.history import History
from multikafka.coordinator.state.queries import QueryStore
from multikafka.coordinator.translation import ReadMarks
from multikafka.coordinator.translation.marks import Mark
from multikafka.devstack.stack import stream_doc
from tests.fakes import FakeEtcd, Parts
from tests.helpers import eventually_async

INTERNALS = (
    "multikafka.coordinator.state.history",
    "multikafka.coordinator.state.queries",
    "multikafka.coordinator.translation",
    "multikafka.coordinator.translation.marks",
)


#: JSON that is not the object a record is, or an object of the wrong shape.
MALFORMED = [b"[]", b"null", b'"x"', b"5", b"not json", b'{"drains": []}']


@pytest.mark.parametrize("raw", MALFORMED)
async def test_a_malformed_status_is_ignored_and_the_watch_goes_on(
    parts: Parts, raw: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    await parts.put(stream_doc("s", {"a": ("h:1", ["t"])}))
    before = parts.store.get("s")
    bad = await parts.etcd.put(parts.store.status_prefix + "s", raw)
    await parts.store.wait_applied(bad)
    assert parts.store.get("s").status == before.status
    assert "invalid stream status in etcd ignored" in caplog.text
    # the watch is alive: the next change applies
    revision = await parts.put(stream_doc("s", {"a": ("h:1", ["t", "u"])}))
    assert parts.store.get("s").spec_revision == revision
    assert parts.store.get("s").spec.clusters["a"].topics == ("t", "u")


@pytest.mark.parametrize("raw", MALFORMED)
async def test_loaders_skip_a_malformed_record_and_load_the_rest(raw: bytes) -> None:
    etcd = FakeEtcd()
    await etcd.put("/t/marks/bad", raw)
    await etcd.put("/t/marks/good", json.dumps({"a/t/0": [[4, 1000]]}).encode())
    await etcd.put("/t/queries/bad", raw)
    await etcd.put("/t/queries/worse", json.dumps({"stream": "s", "offsets": []}).encode())
    await etcd.put("/t/queries/good", json.dumps({"stream": "s", "offsets": {"a/t/0": 5}}).encode())
    await etcd.put("/t/history/bad", raw)
    entry = {"time_ms": 1, "generation": 2, "kind": "fail", "cluster": "a", "detail": "d"}
    await etcd.put("/t/history/good", json.dumps([entry]).encode())

    marks = ReadMarks(etcd, "/t")  # type: ignore[arg-type]
    await marks.load()
    assert marks.at_or_before("good", "a/t/0", 10) == Mark(4, 1000)
    queries = QueryStore(etcd, "/t")  # type: ignore[arg-type]
    await queries.load()
    assert [q.query_id for q in queries.all()] == ["good"]
    history = History(etcd, "/t", 10)  # type: ignore[arg-type]
    await history.load()
    assert [e.kind for e in history.entries("good")] == ["fail"]
    assert history.entries("bad") == []


async def test_history_is_written_in_the_background_and_again_after_etcd_returns() -> None:
    etcd = FakeEtcd()
    history = History(etcd, "/t", 10, retry_s=0.01)  # type: ignore[arg-type]
    history.start()
    try:
        etcd.down = True
        history.record("s", "fail", cluster="a", detail="down")
        await eventually_async(lambda: etcd.refused >= 2, timeout_s=5)  # tried, and again
        assert etcd.value("/t/history/s") is None
        etcd.down = False
        raw = await eventually_async(lambda: etcd.value("/t/history/s"), timeout_s=5)
        assert [e["kind"] for e in json.loads(raw)] == ["fail"]
    finally:
        await history.stop()


async def test_a_deleted_streams_status_leaves_nothing_behind(parts: Parts) -> None:
    """The stream document goes first, then its status: the status must not
    stay as an orphan waiting for a document (one entry per deleted stream)."""
    for i in range(3):
        await parts.put(stream_doc(f"s{i}", {"a": ("h:1", ["t"])}))
        await parts.etcd.put(parts.store.status_prefix + f"s{i}", b"{}")
        await parts.etcd.delete(parts.store.streams_prefix + f"s{i}")
        await parts.etcd.delete(parts.store.status_prefix + f"s{i}")
        await parts.store.wait_applied(parts.etcd.revision)
    assert parts.store._orphan_status == {}


async def test_query_progress_is_written_in_batches_and_when_the_term_stops() -> None:
    """A thousand queries committing once a second cost etcd a few
    transactions a second, not a thousand writes; nothing committed is lost
    when the term ends, and a new leader loads every query."""
    etcd = FakeEtcd()
    queries = QueryStore(etcd, "/t", flush_interval_s=3600)  # type: ignore[arg-type]
    queries.start()
    before = etcd.revision
    for i in range(200):
        await queries.commit(f"q{i}", "s", {"a/t/0": i})
    assert etcd.keys("/t/queries/") == []  # not yet written
    await queries.flush()
    assert len(etcd.keys("/t/queries/")) == 200
    assert etcd.revision - before == 4  # 200 values, 64 per transaction
    await queries.commit("q7", "s", {"a/t/0": 1000})
    await queries.stop()
    loaded = QueryStore(etcd, "/t")  # type: ignore[arg-type]
    await loaded.load()
    progress = loaded.get("q7")
    assert progress is not None
    assert progress.offsets == {"a/t/0": 1000}
    assert len(loaded.all()) == 200


async def test_query_progress_etcd_did_not_take_is_written_next_time() -> None:
    etcd = FakeEtcd()
    queries = QueryStore(etcd, "/t")  # type: ignore[arg-type]
    await queries.commit("q", "s", {"a/t/0": 3})
    etcd.down = True
    await queries.flush()
    etcd.down = False
    assert etcd.value("/t/queries/q") is None
    await queries.flush()
    assert json.loads(etcd.value("/t/queries/q") or b"{}")["offsets"] == {"a": {"t": [3]}}
