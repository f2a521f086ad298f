"""One way to run background work, in its asyncio and thread forms: periodic
work goes on after an error, loops start again, stop ends everything."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from multikafka.core import _background as background
from multikafka.core._background import BackgroundTasks, BackgroundThreads
from tests.helpers import eventually, eventually_async

INTERNALS = ("multikafka.core._background",)


@pytest.fixture(autouse=True)
def quick_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background, "RESTART_AFTER_S", 0.01)


async def test_periodic_task_goes_on_after_an_error(caplog: pytest.LogCaptureFixture) -> None:
    tasks = BackgroundTasks("owner")
    calls = 0

    async def tick() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("boom")

    tasks.every("ticker", 0.001, tick)
    assert tasks.names() == ["owner: ticker"]
    await eventually_async(lambda: calls >= 4)
    await tasks.stop()
    assert tasks.names() == []
    stopped_at = calls
    await asyncio.sleep(0.02)
    assert calls == stopped_at  # nothing runs after stop
    assert "owner: ticker failed" in caplog.text
    assert "boom" in caplog.text


async def test_a_loop_that_dies_starts_again() -> None:
    tasks = BackgroundTasks("owner")
    starts = 0

    async def loop() -> None:
        nonlocal starts
        starts += 1
        if starts < 3:
            raise RuntimeError("died")
        await asyncio.Event().wait()  # runs until cancelled

    tasks.run("loop", loop)
    await eventually_async(lambda: starts == 3)
    await tasks.stop()
    assert starts == 3


async def test_spawned_work_runs_once_and_stop_cancels_what_is_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tasks = BackgroundTasks("owner")
    done: list[str] = []
    blocked = asyncio.Event()

    async def quick() -> None:
        done.append("quick")

    async def failing() -> None:
        raise ValueError("bad")

    async def slow() -> None:
        try:
            await blocked.wait()  # never set: only stop ends it
        except asyncio.CancelledError:
            done.append("cancelled")
            raise
        done.append("slow")

    with caplog.at_level(logging.ERROR):
        tasks.spawn("quick", quick())
        tasks.spawn("failing", failing())
        tasks.spawn("slow", slow())
        await eventually_async(lambda: tasks.names() == ["owner: slow"])
        await asyncio.wait_for(tasks.stop(), 5)
    assert done == ["quick", "cancelled"]
    assert "owner: failing failed" in caplog.text


def test_thread_every_wakes_early_and_stop_joins() -> None:
    threads = BackgroundThreads("owner")
    wake = threading.Event()
    calls: list[int] = []
    threads.every("beat", 3600, lambda: calls.append(1), wake=wake)
    assert threads.names() == ["owner-beat"]
    wake.set()
    eventually(lambda: len(calls) == 1, timeout_s=5)
    threads.stop()
    assert threads.names() == []
    assert len(calls) == 1  # stopping does not run it again


def test_thread_loop_starts_again_until_stopped(caplog: pytest.LogCaptureFixture) -> None:
    threads = BackgroundThreads("owner")
    runs: list[int] = []

    def loop() -> None:
        runs.append(1)
        if len(runs) < 3:
            raise RuntimeError("died")
        threads.stopping.wait()

    threads.run("loop", loop)
    eventually(lambda: len(runs) == 3, timeout_s=5)
    threads.stop()
    assert len(runs) == 3
    assert "owner: loop failed; starting it again" in caplog.text


def test_thread_every_goes_on_after_an_error() -> None:
    threads = BackgroundThreads("owner")
    calls: list[int] = []

    def tick() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first fails")

    threads.every("tick", 0.001, tick)
    eventually(lambda: len(calls) >= 3, timeout_s=5)
    threads.stop()
