"""How many tasks each query's Spark application runs at once, as its
reader agents report it.

A Spark source found by PySpark's discovery cannot ask Spark for its
parallelism: the Python worker that plans micro-batches on the driver gets
no Spark configuration. The executors' Python workers do (a task's local
properties carry the session's configuration), so the agent reading a task
works the number out and sends it with the reads it reports
(``ReportReadsRequest.task_slots``). The planner then sizes the query's next
micro-batches by it whenever the planning request does not say.

Memory only, for the term: a new leader learns it again from the next
task's report (until then the query is planned as with no parallelism).
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["MAX_TASK_SLOTS", "TaskSlots"]

#: Larger reported values are refused (INVALID_ARGUMENT): no Spark
#: application runs more tasks at once.
MAX_TASK_SLOTS = 1_000_000


class TaskSlots:
    """The last number reported per query id, for the ``keep`` queries
    reported last (a query id is per run: old runs fall out)."""

    def __init__(self, keep: int = 10_000) -> None:
        self._keep = keep
        self._slots: OrderedDict[str, int] = OrderedDict()

    def note(self, query_id: str, slots: int) -> None:
        """``query_id``'s Spark runs ``slots`` tasks at once (0: unknown,
        which changes nothing)."""
        if not query_id or slots <= 0:
            return
        self._slots[query_id] = slots
        self._slots.move_to_end(query_id)
        while len(self._slots) > self._keep:
            self._slots.popitem(last=False)

    def of(self, query_id: str) -> int:
        """What was reported for ``query_id`` (0: nothing yet)."""
        return self._slots.get(query_id, 0)
