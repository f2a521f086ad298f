"""The confluent-kafka releases ``multikafka-reader`` accepts are those whose
``Message`` layout the compiled converter reads directly (it reads the C
struct, so an unknown layout would be read wrong rather than refused):
``reader_agent/pyproject.toml`` pins ``confluent-kafka>=A,<B``, and here the
reader's wheel, with the oldest and with the newest release of that range in
environments of their own, reads real messages with ``auto`` = ``c-direct``,
to the same columns as the accessor mode and the Python converter.

Outside the range (confluent-kafka 2.14.2, the newest release before it,
whose ``Message`` is 8 bytes shorter) ``auto`` takes the accessor mode,
never Python, and says why once. How the range was found: docs/operations.md,
"The reader's converter".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.conftest import Env, Topic, confluent_kafka_range, convert_consumed

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

#: A release before the range: its ``Message`` is 112 bytes, the mirror 120.
BEFORE_THE_RANGE = "2.14.2"


def _reads_directly(env: Env, topic: Topic) -> str:
    out, log = convert_consumed(env, topic)
    assert out["auto"] == "c-direct", (out, log)
    # Every converter took the batch (none fell back to Python) and gave
    # the Python converter's columns.
    assert out["compiled"] == out["equal"] == ["auto", "c", "c-accessors"], out
    assert "compiled converter" not in log
    return str(out["confluent_kafka"])


def test_the_oldest_release_of_the_range_is_read_directly(
    oldest_reader: Env, consumed_topic: Topic
) -> None:
    lowest, _ = confluent_kafka_range()
    assert _reads_directly(oldest_reader, consumed_topic).startswith(f"{lowest}.")


def test_the_newest_release_of_the_range_is_read_directly(
    newest_reader: Env, consumed_topic: Topic
) -> None:
    lowest, below = confluent_kafka_range()
    got = _reads_directly(newest_reader, consumed_topic)
    assert _version(lowest) <= _version(got) < _version(below)


def test_a_layout_it_does_not_know_is_read_through_the_accessors(
    newest_reader: Env, consumed_topic: Topic, tmp_path: Path
) -> None:
    """A confluent-kafka before the range, ahead of the environment's own on
    the path: ``auto`` is ``c-accessors`` (about half the Python converter's
    CPU), not Python, and the log says why once."""
    before = tmp_path / "before"
    got = newest_reader.pip(
        "install",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--target",
        str(before),
        f"confluent-kafka=={BEFORE_THE_RANGE}",
    )
    assert got.returncode == 0, got.stderr[-3000:]
    out, log = convert_consumed(newest_reader, consumed_topic, PYTHONPATH=str(before))
    assert out["confluent_kafka"] == BEFORE_THE_RANGE
    assert out["auto"] == "c-accessors", out
    assert out["compiled"] == out["equal"] == ["auto", "c", "c-accessors"], out
    said = [line for line in log.splitlines() if "compiled converter:" in line]
    assert len(said) == 1, log
    assert "Message is 112 bytes, the mirrored struct 120" in said[0], said
    assert f"confluent-kafka {BEFORE_THE_RANGE} is installed" in said[0], said


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))
