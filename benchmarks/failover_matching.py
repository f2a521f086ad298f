"""What exact failover costs the coordinator: one failover of a stream of
``--partitions`` partitions, the mirror read for the copies of the last
records read, against the same failover with the strategy's estimate alone.

    python -m benchmarks.failover_matching [--partitions 1000] [--repeat 3] [--out docs]

A local stack (etcd, two tansu clusters, a coordinator in a thread of this
process): a topic of ``--partitions`` partitions on both, the same records
(same keys, values, times) on each, ``--records`` per partition sent 100 ms
of record time apart. Per run, a new stream (``a`` ACTIVE, ``b`` STANDBY):
what a query read of ``a`` up to 3/4 of each partition reported as agents
report it (``ReportReads``: each partition's last record, how far the read
went, and, for ``matched``, the fingerprints of its last 4 records, taken
from a plain consumer of ``a``), a ``timestamp`` failover a -> b (2 s
margin), then the query's next ``LatestOffsets``: the call that translates
every partition. Measured: its wall time and this process's CPU time
meanwhile (the coordinator's threads and librdkafka's; the calling thread
waits), per variant, alternating:

* ``matched``: marks with fingerprints: each partition's estimate looked up,
  then ``b`` read from it for the copy;
* ``estimate``: marks without: the estimate alone (what it cost before).

Every ``matched`` run must start each partition right after the copy of
the last record read; ``estimate`` earlier (the margin's records). Writes
``benchmarks/out/failover_matching.json`` and
``<out>/img/failover_matching.png``.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from benchmarks._common import (
    Arguments,
    bars_with_range,
    console,
    figure,
    finish,
    machine,
    progress_bar,
    quiet_logs,
    summary,
)
from multikafka.core._fingerprint import TRAILING, fingerprint
from multikafka.core.admin_client import AdminClient
from multikafka.core.planner_client import PlannerClient
from multikafka.core.transport import ConnectConfig, Coordinators
from multikafka.devstack.feed import SequenceProducer, create_topics
from multikafka.devstack.stack import TANSU_PROPERTIES, local_stack, stream_doc
from multikafka.v1 import reader_pb2, reader_pb2_grpc

TOPIC = "matching"
MARGIN_MS = 2000
VARIANTS = ("matched", "estimate")
T0_MS = 1_700_000_000_000


def produce(bootstrap: str, partitions: int, records: int) -> None:
    """``records`` per partition, a chunk of one record per partition every
    100 ms of record time, and a last one per partition in a batch of its
    own (tansu's high watermark is then right)."""
    producer = SequenceProducer(bootstrap)
    last = SequenceProducer(bootstrap, batched=False)
    try:
        for i in range(records):
            p = last if i == records - 1 else producer
            p.produce(
                TOPIC,
                partitions,
                "r",
                range(i * partitions, (i + 1) * partitions),
                timestamp_ms=T0_MS + 100 * i,
            )
            if i % 50 == 0 or i == records - 1:
                p.flush()
    finally:
        producer.close()
        last.close()


def tails(bootstrap: str, partitions: int, position: int) -> list[reader_pb2.ReadMark]:
    """Per partition, what an agent reports of a range read up to
    ``position``: its last record and the fingerprints of the last ones."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False}
        | TANSU_PROPERTIES
    )
    start = position - TRAILING
    try:
        consumer.assign([TopicPartition(TOPIC, p, start) for p in range(partitions)])
        got: dict[int, list[Any]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 120
        while sum(len(v) for v in got.values()) < partitions * TRAILING:
            if time.monotonic() > deadline:
                raise TimeoutError("the records before the position were not read")
            for m in consumer.consume(10_000, timeout=1.0):
                if m.error() is None and (m.offset() or 0) < position:
                    got[m.partition() or 0].append(m)
    finally:
        consumer.close()
    marks = []
    for p, msgs in got.items():
        msgs.sort(key=lambda m: m.offset())
        fps = [fingerprint(m.key(), m.value(), m.timestamp()[1]) for m in msgs]
        marks.append(
            reader_pb2.ReadMark(
                split=f"a/{TOPIC}/{p}",
                last_offset=position - 1,
                last_timestamp_ms=fps[-1].timestamp_ms,
                next_offset=position,
                from_offset=start,
                fingerprint_times=[f.timestamp_ms for f in fps],
                fingerprint_digests=[f.digest for f in fps],
            )
        )
    return marks


def one_run(
    address: str,
    a: str,
    b: str,
    i: int,
    variant: str,
    marks: list[reader_pb2.ReadMark],
    position: int,
) -> dict[str, Any]:
    partitions = len(marks)
    name = f"match-{i}-{variant}"
    doc = stream_doc(name, {"a": (a, [TOPIC]), "b": (b, [TOPIC])}, states={"b": "STANDBY"})
    with AdminClient(address) as admin:
        admin.put_stream(doc)
        report = reader_pb2.ReportReadsRequest(agent_id="bench", stream=name, query_id=name)
        for m in marks:
            mark = report.marks.add()
            mark.CopyFrom(m)
            if variant == "estimate":
                del mark.fingerprint_times[:]
                del mark.fingerprint_digests[:]
        coordinators = Coordinators(ConnectConfig.parse(address))
        try:
            _, channel = coordinators.target()
            reader_pb2_grpc.ReaderStub(channel).ReportReads(report, timeout=60)
        finally:
            coordinators.close()
        admin.failover(name, "a", "b", strategy="timestamp", margin_ms=MARGIN_MS, reason="bench")
        start = {f"a/{TOPIC}/{p}": position for p in range(partitions)}
        planner = PlannerClient(ConnectConfig.parse(address), timeout_s=120)
        try:
            cpu0, t0 = time.process_time(), time.perf_counter()
            got = planner.latest_offsets(
                name, name, start, max_records=0, cap=None, fail_on_data_loss=True
            )
            wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        finally:
            planner.close()
        entered = {s: o for s, o in got.end.items() if s.startswith("b/")}
        translated = [e.detail for e in admin.history(name) if e.kind == "translated"]
        admin.delete_stream(name)
    if len(entered) != partitions:
        raise RuntimeError(f"{variant}: {len(entered)} of {partitions} partitions entered")
    matched = sum("matched the last" in d for d in translated)
    # b holds the same records at the same offsets: the copy of the last one
    # read is at position - 1
    exact = sum(1 for o in entered.values() if o == position)
    if variant == "matched" and exact != partitions:
        raise RuntimeError(f"only {exact} of {partitions} partitions start after the copy")
    return {
        "variant": variant,
        "wall_s": wall,
        "cpu_s": cpu,
        "matched": matched,
        "read_again": sum(position - o for o in entered.values()),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    per = result["summary"]
    with figure(path, 1, 2, figsize=(9, 3.6)) as (_fig, (wall, cpu)):
        colors = ["tab:green", "tab:gray"]
        bars_with_range(
            wall, VARIANTS, [per[v]["wall_s"] for v in VARIANTS], label="seconds", colors=colors
        )
        wall.set_title(
            f"failover of {result['partitions']:,} partitions: LatestOffsets wall time", fontsize=9
        )
        bars_with_range(
            cpu, VARIANTS, [per[v]["cpu_s"] for v in VARIANTS], label="CPU seconds", colors=colors
        )
        cpu.set_title("coordinator CPU (process, during the call)", fontsize=9)


def main() -> None:
    parser = Arguments(__doc__, smoke={"partitions": 20, "repeat": 1}, repeat=3)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--records", type=int, default=200, help="per partition")
    args = parser.parse_args()
    quiet_logs()
    position = args.records * 3 // 4
    runs: list[dict[str, Any]] = []
    with ExitStack() as cleanup:
        with console.status("starting etcd, two clusters and a coordinator"):
            stack = cleanup.enter_context(local_stack(("a", "b")))
        a, b = stack.clusters["a"].bootstrap, stack.clusters["b"].bootstrap
        with console.status(f"{args.records:,} records in each of {args.partitions:,} partitions"):
            for bs in (a, b):
                create_topics(bs, {TOPIC: args.partitions}, timeout_s=120)
                produce(bs, args.partitions, args.records)
            marks = tails(a, args.partitions, position)
        with progress_bar() as progress:
            task = progress.add_task("failovers", total=args.repeat * len(VARIANTS), note="")
            for i in range(args.repeat):
                for variant in VARIANTS:
                    progress.update(task, note=variant)
                    run = one_run(stack.coordinator_address, a, b, i, variant, marks, position)
                    runs.append(run)
                    progress.console.print(
                        f"{variant:>9}: {run['wall_s']:.2f} s, {run['cpu_s']:.2f} CPU-s, "
                        f"{run['read_again']:,} records read again"
                    )
                    progress.advance(task)
    per = {
        v: {
            k: summary([r[k] for r in runs if r["variant"] == v])
            for k in ("wall_s", "cpu_s", "read_again")
        }
        for v in VARIANTS
    }
    ratios = {
        k: summary([m[k] / e[k] for m, e in zip(runs[0::2], runs[1::2], strict=True) if e[k] > 0])
        for k in ("wall_s", "cpu_s")
    }
    result = {
        "machine": machine(),
        "partitions": args.partitions,
        "records_per_partition": args.records,
        "position": position,
        "margin_ms": MARGIN_MS,
        "runs": runs,
        "summary": per,
        "matched_over_estimate": ratios,
    }
    finish("failover_matching", result, args, plot)
    console.print(per)
    console.print(f"matched / estimate: {ratios}")


if __name__ == "__main__":
    main()
