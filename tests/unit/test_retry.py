"""The one retry helper: which errors are retried, the backoff between
attempts, the deadline, and the poll built on it (with a fake clock)."""

from __future__ import annotations

import asyncio

import pytest

from multikafka.core.exceptions import UnavailableError, ValidationError
from multikafka.core.retry import Backoff, poll, poll_async, retry, retry_async


class Clock:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, delay: float) -> None:
        self.slept.append(delay)
        self.now += delay

    async def asleep(self, delay: float) -> None:
        self.sleep(delay)


def failing(times: int, error: Exception, result: str = "ok") -> tuple[list[int], object]:
    calls: list[int] = []

    def fn() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise error
        return result

    return calls, fn


def test_retries_listed_errors_with_growing_capped_delays() -> None:
    clock = Clock()
    calls, fn = failing(5, UnavailableError("down"))
    got = retry(
        fn,  # type: ignore[arg-type]
        on=(UnavailableError,),
        backoff=Backoff(first_s=0.1, max_s=0.5, factor=2),
        sleep=clock.sleep,
        clock=clock,
    )
    assert got == "ok"
    assert len(calls) == 6
    assert clock.slept == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])


def test_other_errors_are_raised_at_once() -> None:
    clock = Clock()
    calls, fn = failing(1, ValidationError("x", "bad"))
    with pytest.raises(ValidationError):
        retry(fn, on=(UnavailableError,), sleep=clock.sleep, clock=clock)  # type: ignore[arg-type]
    assert len(calls) == 1
    assert clock.slept == []


def test_when_decides_among_listed_errors() -> None:
    clock = Clock()
    calls, fn = failing(3, UnavailableError("fatal"))
    with pytest.raises(UnavailableError):
        retry(
            fn,  # type: ignore[arg-type]
            on=(UnavailableError,),
            when=lambda exc: "fatal" not in str(exc),
            sleep=clock.sleep,
            clock=clock,
        )
    assert len(calls) == 1


def test_gives_up_before_sleeping_past_the_deadline() -> None:
    clock = Clock()
    calls, fn = failing(100, UnavailableError("down"))
    seen: list[float] = []
    with pytest.raises(UnavailableError):
        retry(
            fn,  # type: ignore[arg-type]
            on=(UnavailableError,),
            deadline_s=1.0,
            backoff=Backoff.constant(0.3),
            sleep=clock.sleep,
            clock=clock,
            on_retry=lambda exc, delay: seen.append(delay),
        )
    # attempts at 0, 0.3, 0.6, 0.9; a fifth would start at 1.2 > 1.0
    assert len(calls) == 4
    assert clock.slept == pytest.approx([0.3, 0.3, 0.3])
    assert seen == clock.slept


async def test_async_retry_and_cancellation_is_never_retried() -> None:
    clock = Clock()
    attempts = 0

    async def flaky() -> int:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise UnavailableError("down")
        return attempts

    assert await retry_async(flaky, on=(UnavailableError,), sleep=clock.asleep, clock=clock) == 3
    assert clock.slept == pytest.approx([0.1, 0.2])

    async def cancelled() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await retry_async(cancelled, on=(BaseException,), sleep=clock.asleep, clock=clock)
    assert clock.slept == pytest.approx([0.1, 0.2])


def test_poll_returns_the_first_truthy_value_or_names_what_it_waited_for() -> None:
    clock = Clock()
    values = iter([None, 0, "", "there"])
    assert poll(lambda: next(values), timeout_s=5, what="x", sleep=clock.sleep, clock=clock) == (
        "there"
    )
    assert clock.slept == pytest.approx([0.05, 0.05, 0.05])
    with pytest.raises(TimeoutError, match=r"topic t not within 0\.2s"):
        poll(lambda: False, timeout_s=0.2, what="topic t", sleep=clock.sleep, clock=clock)


def test_poll_may_take_listed_errors_for_not_yet_and_raises_the_last() -> None:
    clock = Clock()
    answers = iter([AssertionError("first"), None, 7])

    def check() -> int | None:
        answer = next(answers)
        if isinstance(answer, AssertionError):
            raise answer
        return answer

    assert (
        poll(
            check, timeout_s=5, what="x", retry_on=(AssertionError,), sleep=clock.sleep, clock=clock
        )
        == 7
    )

    def failing() -> None:
        raise AssertionError("still wrong")

    with pytest.raises(AssertionError, match="still wrong"):
        poll(
            failing,
            timeout_s=0.2,
            what="x",
            retry_on=(AssertionError,),
            sleep=clock.sleep,
            clock=clock,
        )
    with pytest.raises(ValueError, match="other"):
        poll(
            lambda: int("other"),
            timeout_s=5,
            what="x",
            retry_on=(AssertionError,),
            sleep=clock.sleep,
            clock=clock,
        )


async def test_poll_async_waits_on_the_loop() -> None:
    clock = Clock()
    values = iter([None, None, "there"])
    assert (
        await poll_async(
            lambda: next(values), timeout_s=5, what="x", sleep=clock.asleep, clock=clock
        )
        == "there"
    )
    assert clock.slept == pytest.approx([0.05, 0.05])
    with pytest.raises(TimeoutError, match=r"y not within 0\.2s"):
        await poll_async(lambda: None, timeout_s=0.2, what="y", sleep=clock.asleep, clock=clock)
