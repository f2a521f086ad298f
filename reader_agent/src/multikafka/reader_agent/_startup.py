"""Where a process's first read goes: time stamps taken once per process (our
modules imported, the coordinator link up, each cluster's sub-reader ready,
the first batch out), written as one JSON line, with the process's start
time, to the file the environment variable ``MULTIKAFKA_STARTUP_TRACE``
names (``benchmarks/cold_start.py`` sets it for Spark's Python workers).
Unset, a stamp is one dict lookup and nothing is written."""

from __future__ import annotations

import json
import os
import threading
import time

ENV = "MULTIKAFKA_STARTUP_TRACE"

_stamps: dict[str, float] = {}
_lock = threading.Lock()
_written = False


def stamp(name: str, *, at: float | None = None) -> None:
    """The first time ``name`` happened in this process (``at``, or now;
    later ones are ignored)."""
    if name not in _stamps:
        _stamps.setdefault(name, time.time() if at is None else at)


def process_started() -> float | None:
    """When this process started (epoch seconds), from ``/proc``; None elsewhere."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    except (OSError, ValueError, StopIteration, IndexError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def write() -> None:
    """Append this process's stamps to the trace file, once (when it is set)."""
    global _written
    path = os.environ.get(ENV)
    if not path or _written:
        return
    with _lock:
        if _written:
            return
        _written = True
        line = {"pid": os.getpid(), "started": process_started(), "stamps": dict(_stamps)}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")
