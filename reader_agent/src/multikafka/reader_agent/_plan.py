"""From a coordinator's plan of one micro-batch to the tasks an agent reads:
what the Spark source and the standalone reader both do with a plan."""

from __future__ import annotations

from collections.abc import Mapping

from multikafka.core.planner_client import Plan, PlannerClient, TaskOptions
from multikafka.core.transport import ConnectConfig
from multikafka.reader_agent._options import ReadOptions
from multikafka.reader_agent._task import ReadTask


def task_options(options: ReadOptions) -> TaskOptions:
    """How ``options`` ask the coordinator to cut a micro-batch into tasks."""
    return TaskOptions(
        min_partitions=options.min_partitions,
        max_records_per_partition=options.max_records_per_partition,
        parallelism=options.parallelism,
    )


def read_tasks(
    client: PlannerClient,
    options: ReadOptions,
    *,
    coordinator: ConnectConfig,
    query_id: str,
    start: Mapping[str, int],
    end: Mapping[str, int],
) -> list[ReadTask]:
    """The tasks of the micro-batch ``[start, end)``: planned by the
    coordinator for ``options`` (tasks sized by its partition settings and
    parallelism), then made into :class:`ReadTask` s
    (:func:`tasks_from_plan`)."""
    plan = client.plan(options.stream, query_id, start, end, **task_options(options)._asdict())
    return tasks_from_plan(plan, options, coordinator=coordinator, query_id=query_id)


def tasks_from_plan(
    plan: Plan,
    options: ReadOptions,
    *,
    coordinator: ConnectConfig | None,
    query_id: str,
) -> list[ReadTask]:
    """One :class:`ReadTask` per planned task, each with the connections of
    the clusters it reads (and only those) and what ``options`` ask of the
    read (headers, data loss, decoding, librdkafka settings).
    ``coordinator``: how the agent reaches the coordinator (files already
    read: :meth:`ReadOptions.connect_config`); ``query_id``: this run's."""
    out = []
    for ranges in plan.tasks:
        used = {r.cluster for r in ranges}
        out.append(
            ReadTask(
                coordinator=coordinator,
                stream=options.stream,
                query_id=query_id,
                generation=plan.generation,
                ranges=ranges,
                clusters={c: plan.clusters[c] for c in sorted(used)},
                include_headers=options.include_headers,
                fail_on_data_loss=options.fail_on_data_loss,
                decoding=options.decoding,
                overrides=options.kafka,
            )
        )
    return out
