"""From a coordinator's plan of one micro-batch to the tasks an agent reads:
what the Spark source and the standalone reader both do with a plan."""

from __future__ import annotations

from multikafka.core.planner_client import Plan
from multikafka.core.transport import ConnectConfig
from multikafka.reader_agent.overrides import Overrides
from multikafka.reader_agent.payloads import PayloadDecoding
from multikafka.reader_agent.task import ReadTask


def tasks_from_plan(
    plan: Plan,
    *,
    coordinator: ConnectConfig,
    stream: str,
    query_id: str,
    include_headers: bool,
    fail_on_data_loss: bool,
    decoding: PayloadDecoding | None = None,
    overrides: Overrides | None = None,
) -> list[ReadTask]:
    """One :class:`ReadTask` per planned task, each with the connections of
    the clusters it reads (and only those)."""
    out = []
    for ranges in plan.tasks:
        used = {r.cluster for r in ranges}
        out.append(
            ReadTask(
                coordinator=coordinator,
                stream=stream,
                query_id=query_id,
                generation=plan.generation,
                ranges=ranges,
                clusters={c: plan.clusters[c] for c in sorted(used)},
                include_headers=include_headers,
                fail_on_data_loss=fail_on_data_loss,
                decoding=decoding or PayloadDecoding(),
                overrides=overrides or Overrides(),
            )
        )
    return out
