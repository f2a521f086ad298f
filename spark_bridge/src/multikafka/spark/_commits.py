"""The commit Spark made that the coordinator has not heard of yet.

Spark commits a micro-batch (``commit(end)``) right after it asked for the
next one's end (``latestOffset``), so the commit rides on the next
``LatestOffsets`` call instead of a round trip of its own. With a long
trigger interval that would tell the coordinator late: a commit still
waiting after :data:`COMMIT_AFTER_S` is sent by itself (from a daemon
thread), and :meth:`PendingCommit.flush` sends it when the query stops.
Only the latest commit matters (each covers the ones before).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from multikafka.core._offsets import SplitOffsets
from multikafka.core.logs import logger_of

__all__ = ["COMMIT_AFTER_S", "PendingCommit"]

logger = logger_of(__name__)

#: Seconds a commit waits for the next latestOffset before it is sent by itself.
COMMIT_AFTER_S = 1.0


class PendingCommit:
    """``send(end)`` tells the coordinator (it must not raise for an
    unreachable coordinator: a commit is progress reporting)."""

    def __init__(
        self, send: Callable[[SplitOffsets], None], *, after_s: float = COMMIT_AFTER_S
    ) -> None:
        self._send = send
        self._after_s = after_s
        self._cond = threading.Condition()
        self._end: SplitOffsets | None = None
        self._since = 0.0
        self._thread: threading.Thread | None = None

    def put(self, end: SplitOffsets) -> None:
        """Spark committed the batch ending at ``end``."""
        with self._cond:
            if self._end is None:
                self._since = time.monotonic()
            self._end = end
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="multikafka-commit", daemon=True
                )
                self._thread.start()
            self._cond.notify()

    def take(self) -> SplitOffsets | None:
        """The commit to carry on the next call (None: none waiting); it is
        no longer pending."""
        with self._cond:
            end, self._end = self._end, None
            return end

    def put_back(self, end: SplitOffsets | None) -> None:
        """A commit taken for a call that failed (a newer one wins)."""
        if end is None:
            return
        with self._cond:
            if self._end is None:
                self._end = end
                self._since = time.monotonic()
                self._cond.notify()

    def flush(self) -> None:
        """Send the waiting commit now, if there is one."""
        end = self.take()
        if end is not None:
            self._send_quietly(end)

    def _send_quietly(self, end: SplitOffsets) -> None:
        try:
            self._send(end)
        except Exception:
            logger.warning("could not tell the coordinator of a commit", exc_info=True)

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._end is None or time.monotonic() < self._since + self._after_s:
                    wait = None if self._end is None else self._since + self._after_s
                    self._cond.wait(None if wait is None else max(0.0, wait - time.monotonic()))
                end, self._end = self._end, None
            self._send_quietly(end)
