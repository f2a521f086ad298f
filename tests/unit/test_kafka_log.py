"""librdkafka's log lines through Python logging: levels, context, and
repeats held back (a fake clock; the lines are handed over the way
confluent-kafka does it, ``log(level, "%s [%s] %s", facility, client, line)``)."""

from __future__ import annotations

import logging

import pytest

from multikafka.core.kafka_log import (
    LOGGER_NAME,
    SYSLOG_LEVELS,
    ClientLog,
    RateLimiter,
    python_level,
    record_level,
    repeat_interval_s,
)

REFUSED = (
    "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 "
    "failed: Connection refused (after 0ms in state CONNECT)"
)
SSL = "[thrd:b:9093/1]: b:9093/1: SSL handshake failed: certificate verify failed"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_syslog_levels_map_to_python_levels() -> None:
    assert [python_level(n) for n in range(8)] == [
        logging.CRITICAL,
        logging.CRITICAL,
        logging.CRITICAL,
        logging.ERROR,
        logging.WARNING,
        logging.INFO,
        logging.INFO,
        logging.DEBUG,
    ]
    assert SYSLOG_LEVELS[3] == logging.ERROR
    # confluent-kafka hands over Python levels already: they stay
    assert python_level(logging.ERROR) == logging.ERROR
    assert python_level(logging.DEBUG) == logging.DEBUG


def test_unreachable_brokers_are_warnings_debug_when_known_down_other_errors_stay() -> None:
    assert record_level(logging.ERROR, REFUSED) == logging.WARNING
    assert record_level(3, REFUSED) == logging.WARNING  # the same as a syslog level
    assert record_level(logging.ERROR, REFUSED, unreachable_level=logging.INFO) == logging.INFO
    assert record_level(logging.ERROR, REFUSED, expected_down=True) == logging.DEBUG
    # "Disconnected" is logged at INFO (log.connection.close): never raised
    assert record_level(logging.INFO, "[thrd:b:1/1]: b:1/1: Disconnected") == logging.INFO
    # a configuration problem is no outage: it stays an error
    assert record_level(logging.ERROR, SSL) == logging.ERROR
    assert record_level(logging.ERROR, SSL, expected_down=True) == logging.ERROR
    assert record_level(logging.DEBUG, REFUSED) == logging.DEBUG
    # a stream's properties serve readers and the coordinator's AdminClient alike
    ignored = (
        "[thrd:app]: Configuration property fetch.wait.max.ms is a consumer property "
        "and will be ignored by this producer instance"
    )
    assert record_level(logging.WARNING, ignored) == logging.DEBUG
    assert record_level(logging.WARNING, "[thrd:app]: property x is deprecated") == logging.WARNING


def test_rate_limiter_lets_one_through_per_interval_and_counts_the_others() -> None:
    clock = Clock()
    limiter = RateLimiter(10.0, clock=clock)
    assert limiter.admit("a") == 0
    assert limiter.admit("a") is None
    assert limiter.admit("b") == 0  # keys are separate
    clock.now += 9.9
    assert limiter.admit("a") is None
    clock.now += 0.1
    assert limiter.admit("a") == 2  # two held back since the last one
    assert limiter.admit("a") is None
    clock.now += 100
    assert limiter.admit("a") == 1
    assert limiter.admit("b") == 0


def test_rate_limiter_without_interval_and_its_bounded_memory() -> None:
    clock = Clock()
    every = RateLimiter(0.0, clock=clock)
    assert [every.admit("k") for _ in range(3)] == [0, 0, 0]
    small = RateLimiter(10.0, clock=clock, max_keys=2)
    for key in ("a", "b", "c"):
        assert small.admit(key) == 0
    assert small.admit("a") == 0  # forgotten: the oldest went first
    assert small.admit("c") is None


def _feed(log: ClientLog, level: int, line: str, facility: str = "FAIL") -> None:
    log.log(level, "%s [%s] %s", facility, "multikafka-reader#consumer-1", line)


def test_client_log_records_carry_stream_and_cluster_and_hold_repeats_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    clock = Clock()
    log = ClientLog("coordinator", "east", stream="orders", interval_s=30.0, clock=clock)
    for _ in range(50):
        _feed(log, logging.ERROR, REFUSED)
        clock.now += 0.05
    _feed(log, logging.ERROR, SSL)  # another kind of line is not held back by those
    clock.now += 30
    _feed(log, logging.ERROR, REFUSED)
    records = [r for r in caplog.records if r.name == f"{LOGGER_NAME}.coordinator"]
    assert [(r.levelno, r.suppressed) for r in records] == [  # type: ignore[attr-defined]
        (logging.WARNING, 0),
        (logging.ERROR, 0),
        (logging.WARNING, 49),
    ]
    first, _, last = records
    assert (first.stream, first.cluster, first.facility) == ("orders", "east", "FAIL")  # type: ignore[attr-defined]
    assert first.getMessage() == f"FAIL [multikafka-reader#consumer-1] {REFUSED}"
    assert last.getMessage().endswith("(suppressed 49 similar)")


def test_client_log_users_and_a_cluster_known_down(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    log = ClientLog("coordinator", "east", interval_s=0.0)
    log.set_users([("payments", "eu"), ("orders", "east")])
    _feed(log, logging.ERROR, REFUSED)
    (record,) = caplog.records
    assert (record.stream, record.cluster) == ("orders,payments", "east,eu")  # type: ignore[attr-defined]
    caplog.clear()
    log.set_users([("orders", "east")], expected_down=True)
    _feed(log, logging.ERROR, REFUSED)  # DEBUG: below the level set, not logged
    assert caplog.records == []
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    _feed(log, logging.ERROR, REFUSED)
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]


def test_client_log_never_raises_and_takes_plain_calls(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    log = ClientLog("devstack", "127.0.0.1:9092")
    log.log(logging.WARNING, "plain %s", "line")
    log.log(logging.WARNING, "bad format %d", "not a number")  # dropped, no exception
    assert [r.getMessage() for r in caplog.records] == ["plain line"]
    assert not hasattr(caplog.records[0], "stream")


def test_debug_contexts_turn_the_rate_limit_off() -> None:
    assert repeat_interval_s({"debug": "broker,fetch"}) == 0.0
    assert repeat_interval_s({"bootstrap.servers": "x"}) > 0
