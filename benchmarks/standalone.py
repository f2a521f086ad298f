"""Standalone reader: what ``multikafka.Reader`` reads per second against the
reader agent alone and a plain consumer, on the same brokers in one run.

    python -m benchmarks.standalone [--records 1000000] [--repeat 3] [--out docs]

Real etcd, two tansu clusters (2 partitions each, ``--records`` 100-byte
records in all) and a coordinator, started here. Each round reads the whole
stream three ways, one after the other, in this process (after one untimed
warm-up round):

* ``raw_nogc_count``: plain confluent-kafka consumers, GC paused, counting
  only (read_rate's CPU baseline);
* ``agent``: the stream planned as one Spark batch, each task read by a
  fresh reader agent (what a Spark worker does, without Spark);
* ``reader``: ``Reader(..., starting_offsets="earliest")`` with a new query
  id, ``batches(idle_timeout_s=0)`` to the end: its coordinator calls
  (resolve, latest offsets, plan, commit-free), planning with a parallelism
  of one, and the agent's reads.

Records per second of wall time and CPU seconds per million records of the
reading threads of this process (librdkafka's included), median [min-max];
ratios per round. Results: ``benchmarks/out/standalone.json`` and
``<out>/img/standalone.png``.
"""

from __future__ import annotations

import gc
import signal
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._common import (
    Arguments,
    bars_with_range,
    console,
    figure,
    finish,
    machine,
    median_range,
    progress_bar,
    quiet_logs,
    summary,
    table,
)
from benchmarks.read_rate import STREAM, ReaderCpu, Run, Setup, read_agent, read_raw, started_stack

METHODS = ("raw_nogc_count", "agent", "reader")


def read_reader(setup: Setup) -> Run:
    """The standalone reader over the whole stream, from earliest."""
    from multikafka import Reader
    from multikafka.reader_agent import ReaderAgent

    t0 = time.perf_counter()
    meter = ReaderCpu()
    total = 0
    batches = 0
    # A fresh agent, as read_agent's: its consumers' threads start after the
    # meter, so they are counted.
    agent = ReaderAgent(heartbeat_interval_s=2.0)
    try:
        with Reader(
            setup.stack.coordinator_address,
            STREAM,
            starting_offsets="earliest",
            query_id=f"bench-reader-{uuid.uuid4().hex[:8]}",
            agent=agent,
        ) as reader:
            for batch in reader.batches(idle_timeout_s=0):
                total += batch.num_rows
                batches += 1
            cpu_s = meter.used()
    finally:
        agent.close()
        gc.unfreeze()  # as read_agent: the reader froze what was alive at its first batches
    return Run(
        "reader", 0, total, time.perf_counter() - t0, {"reader_cpu_s": cpu_s, "batches": batches}
    )


def measure(setup: Setup, repeat: int) -> list[Run]:
    runs: list[Run] = []
    with progress_bar() as progress:
        overall = progress.add_task("all runs", total=(repeat + 1) * len(METHODS), note="")
        for rnd in range(repeat + 1):
            label = "warm-up" if rnd == 0 else f"round {rnd}/{repeat}"
            for method in METHODS:
                progress.update(overall, description=f"{label}: {method}")
                if method == "raw_nogc_count":
                    run = read_raw(setup, lambda n: None, count_only=True)
                elif method == "agent":
                    run = read_agent(setup, lambda n: None)
                else:
                    run = read_reader(setup)
                if run.records != setup.expected:
                    raise RuntimeError(
                        f"{method} read {run.records:,} records, expected {setup.expected:,}"
                    )
                cpu = float(run.extra["reader_cpu_s"]) / run.records * 1e6
                console.log(
                    f"{label}: {method:<15} {run.rate:>12,.0f} records/s, {cpu:.2f} CPU-s/1M"
                )
                progress.advance(overall)
                if rnd:
                    run.round = rnd - 1
                    runs.append(run)
    return runs


def summarize(runs: list[Run], repeat: int) -> dict[str, Any]:
    by = {(r.method, r.round): r for r in runs}
    out: dict[str, Any] = {"methods": {}, "ratios": {}}
    for m in METHODS:
        mine = [by[(m, i)] for i in range(repeat)]
        out["methods"][m] = {
            "records_per_s": summary([r.rate for r in mine]),
            "cpu_s_per_million": summary(
                [float(r.extra["reader_cpu_s"]) / r.records * 1e6 for r in mine]
            ),
        }

    def ratio(a: str, b: str, cpu: bool) -> dict[str, float]:
        def value(r: Run) -> float:
            return float(r.extra["reader_cpu_s"]) / r.records if cpu else r.rate

        return summary([value(by[(a, i)]) / value(by[(b, i)]) for i in range(repeat)])

    out["ratios"] = {
        "reader/agent rate": ratio("reader", "agent", cpu=False),
        "reader/agent CPU": ratio("reader", "agent", cpu=True),
        "reader/raw_nogc_count CPU": ratio("reader", "raw_nogc_count", cpu=True),
        "agent/raw_nogc_count CPU": ratio("agent", "raw_nogc_count", cpu=True),
    }
    return out


def plot(result: dict[str, Any], path: Path) -> None:
    methods = list(result["methods"])
    with figure(path, 1, 2, figsize=(11, 4.2)) as (fig, axes):
        for ax, key, label in (
            (axes[0], "records_per_s", "records/s (wall)"),
            (axes[1], "cpu_s_per_million", "CPU s per million records (reading threads)"),
        ):
            bars_with_range(
                ax,
                methods,
                [result["methods"][m][key] for m in methods],
                label=label,
                colors=["#888", "#36c", "#6a9"],
            )
        c = result["config"]
        fig.suptitle(
            f"Standalone reader vs agent vs plain consumer: {c['records']:,} records, 2 tansu "
            f"clusters; median and min-max of {c['repeat']} rounds"
        )


def main(argv: list[str] | None = None) -> int:
    parser = Arguments(__doc__, smoke={"records": 20_000, "repeat": 3}, repeat=3)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-size", type=int, default=100)
    args = parser.parse_args(argv)
    if args.repeat < 3:
        parser.error("--repeat must be at least 3")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    quiet_logs()
    result: dict[str, Any] = {
        "benchmark": "standalone",
        "machine": machine(),
        "config": {"records": args.records, "repeat": args.repeat, "value_size": args.value_size},
    }
    console.rule("[bold]multikafka standalone reader")
    with started_stack(args.records, args.value_size) as setup:
        runs = measure(setup, args.repeat)
    result.update(summarize(runs, args.repeat))
    finish("standalone", result, args, plot)
    table(
        "Standalone reader (median \\[min-max])",
        ("method", "records/s", "CPU s / M records"),
        (
            (
                m,
                median_range(v["records_per_s"], "{:,.0f}"),
                median_range(v["cpu_s_per_million"], "{:.2f}"),
            )
            for m, v in result["methods"].items()
        ),
    )
    for name, s in result["ratios"].items():
        console.print(f"{name}: {median_range(s, '{:.2f}')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
