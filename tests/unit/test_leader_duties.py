"""Stopping a term of leadership (:class:`LeaderDuties.stop`): whatever one
part does, the others still stop, so a deposed leader keeps no clients."""

from __future__ import annotations

import asyncio
import logging

import pytest

from multikafka.coordinator.runtime import leader
from multikafka.devstack.stack import stream_doc
from tests.fakes import Parts

INTERNALS = ("multikafka.coordinator.runtime.leader",)


async def test_a_part_that_hangs_or_fails_does_not_keep_the_others_running(
    parts: Parts, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await parts.put(stream_doc("s", {"a": ("h:1", ["t"])}))
    cc = parts.discovery.client("s", "a")
    assert cc is not None

    async def hang() -> None:  # a flush to an etcd that does not answer
        await asyncio.Event().wait()

    async def fail() -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(leader, "STOP_PART_S", 0.2)
    monkeypatch.setattr(parts.duties.marks, "stop", hang)
    monkeypatch.setattr(parts.duties.history, "stop", fail)
    with caplog.at_level(logging.INFO, logger=leader.__name__):
        await asyncio.wait_for(parts.duties.stop(), 5)
    assert cc.client.closed  # type: ignore[attr-defined]
    assert "stopping the leader's read marks took over" in caplog.text
    assert "stopping the leader's history failed" in caplog.text
    assert "the leader's duties stopped in" in caplog.text
