"""A unary call answered over a bidirectional stream kept open for the next
one (:class:`Exchange`, what :meth:`~multikafka.core.transport.Coordinators.exchange`
keeps per channel and method): gRPC's cost of a call (setting it up, its
metadata and status) is paid once per stream, on both sides. A request
not answered in time fails as a unary call's timeout would
(``DEADLINE_EXCEEDED``), which one process-wide watchdog thread enforces
(:class:`_Watchdog`), so an ``ask`` blocks only on the stream's queue.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

__all__ = ["Exchange", "StreamError"]


class StreamError(grpc.RpcError, grpc.Call):
    """A kept stream's failure that gRPC did not raise itself: no answer in
    time (``DEADLINE_EXCEEDED``, as a unary call's timeout), or the stream
    ended by the replica without an error."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> tuple[()]:
        return ()

    def trailing_metadata(self) -> tuple[()]:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float:
        return 0.0

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False


#: Ends a kept stream's requests.
_END = object()


class Exchange:
    """One bidirectional call kept open on a channel: one request at a time
    (``busy``), each answered in turn, read by the caller's thread; a
    process-wide :class:`_Watchdog` cancels the call when an answer is late."""

    def __init__(
        self,
        channel: grpc.Channel,
        method: str,
        response_type: type[Any],
        metadata: tuple[tuple[str, str], ...],
    ) -> None:
        self.busy = threading.Lock()
        self._method = method
        self._late = False
        self._requests: queue.SimpleQueue[Any] = queue.SimpleQueue()
        open_call = channel.stream_stream(
            method,
            request_serializer=_serialize,
            response_deserializer=response_type.FromString,
        )
        self._call: Any = open_call(iter(self._requests.get, _END), metadata=metadata)

    @property
    def ended(self) -> bool:
        """The stream is over (a replica or a proxy ended it)."""
        return bool(self._call.done())

    def ask(self, request: Any, timeout_s: float) -> Any:
        """The answer to ``request``; raises the stream's error (it is then
        over), or ``DEADLINE_EXCEEDED`` after ``timeout_s``."""
        self._requests.put(request)
        watched = _WATCHDOG.watch(time.monotonic() + timeout_s, self)
        try:
            return next(self._call)
        except StopIteration:
            raise StreamError(
                grpc.StatusCode.UNAVAILABLE, f"{self._method}: the stream ended"
            ) from None
        except grpc.RpcError:
            if self._late:
                raise StreamError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"{self._method}: no answer within {timeout_s:g} s",
                ) from None
            raise
        finally:
            watched.waiting = False

    def expire(self) -> None:
        """The answer is late: end the call (:meth:`ask` raises)."""
        self._late = True
        self._call.cancel()

    def close(self) -> None:
        self._requests.put(_END)
        self._call.cancel()


@dataclass(order=True)
class _Watch:
    """One answer awaited by :class:`_Watchdog`, ordered by its deadline."""

    deadline: float
    sequence: int
    exchange: Exchange = field(compare=False)
    #: Cleared once the answer came (the entry is dropped when it reaches the top).
    waiting: bool = field(default=True, compare=False)


class _Watchdog:
    """Ends kept streams whose answer is late: one thread for all of them,
    asleep until the earliest deadline (answers that came in time are
    dropped from its heap when they reach the top)."""

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._heap: list[_Watch] = []
        self._sequence = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, deadline: float, exchange: Exchange) -> _Watch:
        """Watch ``exchange`` until ``deadline``; clear the returned
        entry's ``waiting`` once answered."""
        entry = _Watch(deadline, next(self._sequence), exchange)
        with self._wake:
            heapq.heappush(self._heap, entry)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="multikafka-exchange-watchdog", daemon=True
                )
                self._thread.start()
            if self._heap[0] is entry:
                self._wake.notify()
        return entry

    def _run(self) -> None:
        with self._wake:
            while True:
                while self._heap and not self._heap[0].waiting:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._wake.wait()
                    continue
                delay = self._heap[0].deadline - time.monotonic()
                if delay > 0:
                    self._wake.wait(delay)
                    continue
                entry = heapq.heappop(self._heap)
                if entry.waiting:
                    entry.exchange.expire()


_WATCHDOG = _Watchdog()


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data
