"""Background work, run one way: each component owns one group of named
tasks, started with ``every`` (periodic), ``run`` (a loop that lasts until
stopped) or ``spawn`` (one-off), and ended with one ``stop``.

:class:`BackgroundTasks` is the asyncio form (the coordinator),
:class:`BackgroundThreads` the thread form (the reader agent, which lives in
Spark's Python workers and has no event loop). In both, an unexpected error
never ends the work silently: it is logged with the task's name; a periodic
task runs again at its next tick and a loop is started again after a pause.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from multikafka.core.logs import logger_of

logger = logger_of(__name__)

#: Pause before a loop that died of an unexpected error starts again.
RESTART_AFTER_S = 1.0


class BackgroundTasks:
    """A component's asyncio tasks. Create it inside the running loop's world
    (``every``/``run``/``spawn`` need a running loop)."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: set[asyncio.Task[None]] = set()

    def every(
        self,
        name: str,
        interval_s: float,
        fn: Callable[[], Awaitable[object]],
        *,
        wake: asyncio.Event | None = None,
    ) -> None:
        """Call ``fn`` every ``interval_s`` seconds (the first time after one
        interval), or at once when ``wake`` is set."""

        async def loop() -> None:
            while True:
                if wake is None:
                    await asyncio.sleep(interval_s)
                else:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(wake.wait(), interval_s)
                    wake.clear()
                try:
                    await fn()
                except Exception:
                    logger.exception("%s: %s failed; trying again next time", self.owner, name)

        self._start(name, loop())

    def run(self, name: str, fn: Callable[[], Awaitable[object]]) -> None:
        """Run the loop ``fn`` until stopped; start it again if it ends or dies."""

        async def loop() -> None:
            while True:
                try:
                    await fn()
                    logger.warning("%s: %s ended; starting it again", self.owner, name)
                except Exception:
                    logger.exception("%s: %s failed; starting it again", self.owner, name)
                await asyncio.sleep(RESTART_AFTER_S)

        self._start(name, loop())

    def spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` once, in the background; its errors are logged."""

        async def once() -> None:
            try:
                await coro
            except Exception:
                logger.exception("%s: %s failed", self.owner, name)

        self._start(name, once())

    def _start(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.owner}: {name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def names(self) -> list[str]:
        """Names of the tasks running now."""
        return sorted(t.get_name() for t in self._tasks if not t.done())

    async def stop(self) -> None:
        """Cancel every task and wait until all have ended."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()


class BackgroundThreads:
    """A component's daemon threads, sharing one stop signal."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        #: Set by :meth:`stop`; loops given to :meth:`run` return when it is set.
        self.stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._wakes: list[threading.Event] = []

    def every(
        self,
        name: str,
        interval_s: float,
        fn: Callable[[], object],
        *,
        wake: threading.Event | None = None,
    ) -> None:
        """Call ``fn`` every ``interval_s`` seconds, or at once when ``wake`` is set."""
        event = wake if wake is not None else threading.Event()
        self._wakes.append(event)

        def loop() -> None:
            while not self.stopping.is_set():
                event.wait(interval_s)
                event.clear()
                if self.stopping.is_set():
                    return
                try:
                    fn()
                except Exception:
                    logger.exception("%s: %s failed; trying again next time", self.owner, name)

        self._start(name, loop)

    def run(
        self, name: str, fn: Callable[[], None], *, restart_after_s: float | None = None
    ) -> None:
        """Run the loop ``fn`` until :attr:`stopping` is set (``fn`` watches it);
        start it again, after ``restart_after_s`` (default
        :data:`RESTART_AFTER_S`), if it returns or dies before that."""

        def loop() -> None:
            while not self.stopping.is_set():
                try:
                    fn()
                except Exception:
                    logger.exception("%s: %s failed; starting it again", self.owner, name)
                self.stopping.wait(RESTART_AFTER_S if restart_after_s is None else restart_after_s)

        self._start(name, loop)

    def _start(self, name: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=f"{self.owner}-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def names(self) -> list[str]:
        """Names of the threads running now."""
        return sorted(t.name for t in self._threads if t.is_alive())

    def stop(self, join_s: float = 5.0) -> None:
        """Signal every thread to stop and wait for each (up to ``join_s``)."""
        self.stopping.set()
        for event in self._wakes:
            event.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(join_s)
        self._threads.clear()
        self._wakes.clear()
