"""Retrying, in one place: a deadline, exponential backoff with a cap, and an
injectable sleep and clock (the shape of patroni's ``Retry``).

    retry(fn, on=(UnavailableError,), deadline_s=30)              # blocking code
    await retry_async(fn, on=(UnavailableError,), deadline_s=30)  # asyncio
    poll(check, timeout_s=20, what="topic t")                     # until check() is truthy
    await poll_async(check, timeout_s=20, what="topic t")         # the same, on an event loop

Without a deadline, retrying goes on until ``fn`` returns or raises something
that is not retried (``on`` and ``when`` decide).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

#: Told about each retry: the error, and the delay before the next attempt.
OnRetry = Callable[[BaseException, float], None]


@dataclass(frozen=True)
class Backoff:
    """Delays between attempts: ``first_s``, then ``factor`` times longer
    each time, never more than ``max_s``."""

    first_s: float = 0.1
    max_s: float = 2.0
    factor: float = 2.0

    @classmethod
    def constant(cls, delay_s: float) -> Backoff:
        return cls(delay_s, delay_s, 1.0)

    def delays(self) -> Iterator[float]:
        delay = self.first_s
        while True:
            yield delay
            delay = min(delay * self.factor, self.max_s)


DEFAULT_BACKOFF = Backoff()


def _always(exc: BaseException) -> bool:
    return True


class _Attempts:
    """The bookkeeping both retry loops share: may the error be retried, and
    after which delay."""

    def __init__(
        self,
        on: tuple[type[BaseException], ...],
        when: Callable[[BaseException], bool],
        deadline_s: float | None,
        backoff: Backoff,
        clock: Callable[[], float],
        on_retry: OnRetry | None,
    ) -> None:
        self._on = on
        self._when = when
        self._deadline = None if deadline_s is None else clock() + deadline_s
        self._delays = backoff.delays()
        self._clock = clock
        self._on_retry = on_retry

    def delay_after(self, exc: BaseException) -> float | None:
        """The delay before the next attempt, or None: give up and raise."""
        if not isinstance(exc, self._on) or not self._when(exc):
            return None
        delay = next(self._delays)
        if self._deadline is not None and self._clock() + delay > self._deadline:
            return None
        if self._on_retry is not None:
            self._on_retry(exc, delay)
        return delay


def retry(
    fn: Callable[[], T],
    *,
    on: tuple[type[BaseException], ...],
    when: Callable[[BaseException], bool] = _always,
    deadline_s: float | None = None,
    backoff: Backoff = DEFAULT_BACKOFF,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    on_retry: OnRetry | None = None,
) -> T:
    """Call ``fn`` until it returns. An error of a type in ``on`` for which
    ``when`` holds is retried after the next backoff delay, unless that delay
    would end past the deadline: then the error is raised, as is any other."""
    attempts = _Attempts(on, when, deadline_s, backoff, clock, on_retry)
    while True:
        try:
            return fn()
        except BaseException as exc:
            delay = attempts.delay_after(exc)
            if delay is None:
                raise
        sleep(delay)


async def retry_async(
    fn: Callable[[], Awaitable[T]],
    *,
    on: tuple[type[BaseException], ...],
    when: Callable[[BaseException], bool] = _always,
    deadline_s: float | None = None,
    backoff: Backoff = DEFAULT_BACKOFF,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    on_retry: OnRetry | None = None,
) -> T:
    """:func:`retry` for coroutines (cancellation is never retried)."""
    attempts = _Attempts(on, when, deadline_s, backoff, clock, on_retry)
    while True:
        try:
            return await fn()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            delay = attempts.delay_after(exc)
            if delay is None:
                raise
        await sleep(delay)


class _NotYet(Exception):
    pass


def _attempt(check: Callable[[], T | None]) -> Callable[[], T]:
    def attempt() -> T:
        value = check()
        if not value:
            raise _NotYet
        return value

    return attempt


def poll(
    check: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
    retry_on: tuple[type[BaseException], ...] = (),
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Call ``check`` every ``interval_s`` until it returns something truthy,
    and return that. An error of a type in ``retry_on`` counts as "not yet";
    the last one is raised if time runs out. ``TimeoutError`` naming
    ``what`` after ``timeout_s``."""
    try:
        return retry(
            _attempt(check),
            on=(_NotYet, *retry_on),
            deadline_s=timeout_s,
            backoff=Backoff.constant(interval_s),
            sleep=sleep,
            clock=clock,
        )
    except _NotYet:
        raise TimeoutError(f"{what} not within {timeout_s}s") from None


async def poll_async(
    check: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.05,
    retry_on: tuple[type[BaseException], ...] = (),
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """:func:`poll` for coroutines: waits with ``asyncio.sleep``, so the
    event loop (and what is waited for) runs meanwhile."""
    attempt = _attempt(check)

    async def attempt_async() -> T:
        return attempt()

    try:
        return await retry_async(
            attempt_async,
            on=(_NotYet, *retry_on),
            deadline_s=timeout_s,
            backoff=Backoff.constant(interval_s),
            sleep=sleep,
            clock=clock,
        )
    except _NotYet:
        raise TimeoutError(f"{what} not within {timeout_s}s") from None
