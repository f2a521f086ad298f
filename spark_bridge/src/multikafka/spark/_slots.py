"""How many tasks a Spark application runs at once, from its configuration.

The planner sizes a micro-batch by it: about as many tasks as Spark runs at
once, since a Python task costs Spark far more than a JVM one (a task per
split, right for Spark's Kafka source, is wrong for us on small batches).

Where the number comes from:

* :func:`multikafka.spark.register` asks the session (:func:`parallelism_of`
  in :mod:`multikafka.spark._source`, with these rules on Spark Connect);
* the source PySpark discovers by itself cannot ask: its planning worker on
  the driver gets no Spark configuration. A task's local properties carry the
  session's, so the reader agent of the first micro-batch's tasks works it out
  (:func:`task_slots`) and tells the coordinator, which plans the query's
  later micro-batches by it.

The rules, first that applies: ``spark.default.parallelism``; a ``local``
master (``local``: 1, ``local[N]`` and ``local[N,F]``: N, ``local[*]``: the
machine's cores); ``spark.executor.instances`` x ``spark.executor.cores``;
``spark.cores.max`` (standalone); else unknown (0).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

__all__ = ["slots_of", "task_slots"]

#: ``local``, ``local[N]``, ``local[*]``, with an optional ``,F`` (retries).
_LOCAL = re.compile(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?")


def slots_of(conf: Callable[[str], str | None], *, cores: int) -> int:
    """The tasks Spark runs at once by the configuration ``conf`` answers
    (a key -> its value, or None/"" when unset); 0 when it cannot tell.
    ``cores``: what ``local[*]`` means here (0: unknown)."""

    def get(key: str) -> str:
        return str(conf(key) or "").strip()

    def number(key: str) -> int:
        value = get(key)
        return int(value) if value.isdigit() else 0

    if number("spark.default.parallelism") > 0:
        return number("spark.default.parallelism")
    local = _LOCAL.fullmatch(get("spark.master"))
    if local is not None:
        threads = local.group(1)
        if threads is None:
            return 1
        return cores if threads == "*" else int(threads)
    executors, per_executor = number("spark.executor.instances"), number("spark.executor.cores")
    if executors and per_executor:
        return executors * per_executor
    return number("spark.cores.max")


def task_slots() -> int:
    """The tasks this task's Spark application runs at once, from the task
    context's local properties (0: not in a Spark task, or unknown).
    ``local[*]``: this machine's cores (a local executor is the driver's
    machine)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        return 0
    return slots_of(context.getLocalProperty, cores=_cores())


def _cores() -> int:
    """The cores this process may use (Spark's ``availableProcessors``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 0
