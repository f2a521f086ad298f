"""The startup trace of a process's first read (``reader_agent._startup``):
written once, to the file the environment names, with the first time of each
stamp and the process's start; nothing without the variable."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from multikafka.reader_agent import _startup as startup

INTERNALS = ("multikafka.reader_agent._startup",)


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup, "_stamps", {})
    monkeypatch.setattr(startup, "_written", False)


def test_one_line_per_process_with_the_first_time_of_each_stamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "startup.jsonl"
    monkeypatch.setenv(startup.ENV, str(trace))
    startup.stamp("imported")
    first = startup._stamps["imported"]
    startup.stamp("imported", at=first + 5)  # happened again later: the first is kept
    startup.stamp("linked")
    startup.write()
    startup.write()
    (line,) = trace.read_text().splitlines()
    got = json.loads(line)
    assert got["pid"] == os.getpid()
    assert got["stamps"]["imported"] == first
    assert got["stamps"]["linked"] >= first
    started = startup.process_started()
    assert started is not None
    assert started <= first <= time.time()
    assert got["started"] == pytest.approx(started)


def test_nothing_is_written_without_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(startup.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    startup.stamp("imported")
    startup.write()
    assert list(tmp_path.iterdir()) == []
