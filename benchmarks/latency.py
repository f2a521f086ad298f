"""Latency: produce -> sink of a continuous feed through a Spark query with
the default trigger, and what multikafka adds to each micro-batch.

    python -m benchmarks.latency [--seconds 60] [--rate 440] [--repeat 3] [--out docs]

Setup (the issue's): records produced at ``--rate`` per second in total into
2 clusters x 1 topic x 2 partitions (single-record produce batches, so tansu's
high watermark is right at once), a query with the default trigger (the next
micro-batch starts when the previous one ends) writing through
``foreachBatch``. Each record's latency is the wall time at which the batch
function has it minus its producer timestamp (one machine, one clock).

Three readers run in each round, one after the other, each reader of the
brokers on a fresh pair of them fed at the same rate (tansu slows down as its
partitions fill with single-record batches):

* ``consumer`` (baseline): a plain confluent-kafka consumer in this process,
  same fetch settings: what the brokers and the client give;
* ``python`` (Spark baseline): a minimal Python data source (this module's
  :class:`ClockSource`) whose records "arrive" at the same rate and are made
  up in memory by as many tasks as multikafka plans (2): what a micro-batch
  of a Python data source costs Spark without any source I/O;
* ``multikafka``: the query under test.

Reported per reader: latency p50/p99/max, micro-batch duration median and max
(and max / median), Spark's per-phase durations, and multikafka's own part of
a micro-batch: ``latestOffset`` (one RPC) plus the micro-batch time above the
``python`` baseline's (planning RPC, task start, first fetch, reading);
and the lookup floor: what the brokers take to answer the high watermarks of
both clusters at once, measured from a process of its own while the query
runs (:class:`LookupFloor`), which any Kafka source pays per micro-batch;
``added_net_ms`` is the time added net of it; ``added_source_phases_ms``
the difference of the phases that involve the source (all but Spark's
commit log write). Medians with [min - max] over the rounds. Writes
``benchmarks/out/latency.json`` and a histogram, ``<out>/img/latency.png``.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks._common import (
    Arguments,
    console,
    figure,
    finish,
    machine,
    percentile,
    progress_bar,
    quiet_logs,
    summary,
)
from benchmarks._processes import ProbedCoordinator
from multikafka.core.admin_client import AdminClient
from multikafka.devstack.feed import create_topics
from multikafka.devstack.spark import local_spark
from multikafka.devstack.stack import TANSU_PROPERTIES, LocalStack, local_stack, stream_doc

CLUSTERS = ("a", "b")
PARTITIONS = 2
TOPIC = "latency"
#: Tasks of the ``python`` baseline: what multikafka plans for this stream on
#: ``local[2]`` (one per core while there are at least as many splits).
TASKS = 2
#: Spark's per-micro-batch phases (``durationMs`` of a progress report).
PHASES = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
#: Those that ask the source something or read through it.
SOURCE_PHASES = PHASES[:4]


class Feed(threading.Thread):
    """``rate`` records per second in total, spread evenly over the clusters'
    partitions, each its own produce batch, stamped by the producer."""

    def __init__(self, bootstraps: list[str], rate: int) -> None:
        super().__init__(name="latency-feed", daemon=True)
        self._producers = [
            Producer({"bootstrap.servers": bs, "linger.ms": 0, "batch.num.messages": 1})
            for bs in bootstraps
        ]
        self._interval_s = 0.01
        self._per_tick = rate * self._interval_s
        self._halt = threading.Event()
        self.sent = 0

    def run(self) -> None:
        owed = 0.0
        next_tick = time.monotonic()
        while not self._halt.is_set():
            owed += self._per_tick
            while owed >= 1:
                producer = self._producers[self.sent % len(self._producers)]
                producer.produce(TOPIC, value=b"x" * 100, partition=(self.sent // 2) % PARTITIONS)
                producer.poll(0)
                self.sent += 1
                owed -= 1
            next_tick += self._interval_s
            time.sleep(max(0.0, next_tick - time.monotonic()))

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
        for producer in self._producers:
            producer.flush(10)


class LookupFloor:
    """What asking the brokers for the high watermarks costs now: every
    ``interval_s``, one ``ListOffsets`` (latest) of every partition per
    cluster, both clusters at once, through confluent-kafka's AdminClient as
    the coordinator asks, from a process of its own (as the coordinator is:
    in this busy one the answers would wait for the GIL). Any Kafka source
    asks this on each trigger (Spark's own does too). On tansu it grows with
    the produce batches a partition holds (it goes through them: 0.6 ms at
    50 batches, 9 ms at 10,000), so it is measured while the query runs
    (after its warm-up), on the same brokers."""

    def __init__(self, bootstraps: list[str], delay_s: float, interval_s: float = 0.1) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(
            target=_lookups, args=(bootstraps, delay_s, interval_s, child), daemon=True
        )
        self.ms: list[float] = []

    def start(self) -> None:
        self._process.start()

    def stop(self) -> None:
        self._conn.send("stop")
        if self._conn.poll(10):
            self.ms = self._conn.recv()
        self._process.join(10)


def _lookups(bootstraps: list[str], delay_s: float, interval_s: float, conn: Connection) -> None:
    from confluent_kafka.admin import AdminClient as KafkaAdmin
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    admins = [KafkaAdmin({"bootstrap.servers": bs}) for bs in bootstraps]
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    request = {TopicPartition(TOPIC, p): latest for p in range(PARTITIONS)}
    ms: list[float] = []
    if not conn.poll(delay_s):
        while not conn.poll(interval_s):
            t0 = time.perf_counter()
            answers = [a.list_offsets(request, request_timeout=5) for a in admins]
            for answer in answers:
                for future in answer.values():
                    future.result()
            ms.append((time.perf_counter() - t0) * 1000)
    conn.send(ms)


class ClockReader:
    """Offsets are records "arrived" so far at ``rate`` per second since the
    query started; a task makes its share of them up, stamped with the time
    each one arrived."""

    def __init__(self, rate: int, tasks: int, t0: float) -> None:
        self.rate = rate
        self.tasks = tasks
        #: Spark builds several readers of one query (planning, tasks): they
        #: share the start time through the options.
        self.t0 = t0

    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        return {"n": int((time.time() - self.t0) * self.rate)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
        from pyspark.sql.datasource import InputPartition

        return [InputPartition((start["n"] + i, end["n"], self.tasks)) for i in range(self.tasks)]

    def read(self, partition: Any) -> Iterator[tuple[Any, ...]]:
        from datetime import datetime, timezone

        first, end, step = partition.value
        for n in range(first, end, step):
            yield (n, datetime.fromtimestamp(self.t0 + n / self.rate, timezone.utc))

    def commit(self, end: dict[str, int]) -> None:
        pass


def register_clock_source(spark: Any) -> None:
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader

    class Reader(ClockReader, DataSourceStreamReader):
        pass

    class ClockSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "latency_clock"

        def schema(self) -> str:
            return "n long, timestamp timestamp"

        def streamReader(self, schema: Any) -> Reader:
            o = self.options
            return Reader(int(o["rate"]), int(o["tasks"]), float(o["t0"]))

    spark.dataSource.register(ClockSource)


@dataclass
class Sample:
    #: per record: sink wall time - producer timestamp, in ms
    latency_ms: list[float] = field(default_factory=list)
    #: per micro-batch: Spark's durationMs of the progress report
    batches: list[dict[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, latencies: list[float]) -> None:
        with self.lock:
            self.latency_ms.extend(latencies)


def consumer_baseline(stack: LocalStack, seconds: float, warmup_s: float) -> Sample:
    """A plain consumer at the end of every partition: broker + client latency."""
    sample = Sample()
    consumers = []
    for name in CLUSTERS:
        c = Consumer(
            {
                "bootstrap.servers": stack.clusters[name].bootstrap,
                "group.id": "latency-baseline",
                "enable.auto.commit": False,
                **TANSU_PROPERTIES,
            }
        )
        ends = [TopicPartition(TOPIC, p, -1) for p in range(PARTITIONS)]  # OFFSET_END
        c.assign(ends)
        consumers.append(c)
    t_end = time.time() + warmup_s + seconds
    t_keep = time.time() + warmup_s
    try:
        while time.time() < t_end:
            for c in consumers:
                msgs = c.consume(1000, timeout=0.005)
                now = time.time() * 1000
                if now / 1000 >= t_keep:
                    sample.add([now - m.timestamp()[1] for m in msgs if m.error() is None])
    finally:
        for c in consumers:
            c.close()
    return sample


def run_query(spark: Any, reader: Any, seconds: float, warmup_s: float, ts_col: str) -> Sample:
    """Run ``reader`` (a streaming DataFrame) into ``foreachBatch`` with the
    default trigger for warm-up + ``seconds``."""
    sample = Sample()
    keep_from = time.time() + warmup_s

    def on_batch(df: Any, batch_id: int) -> None:
        stamps = df.selectExpr(f"cast(unix_micros({ts_col}) as long) as t").collect()
        now = time.time() * 1000
        if now / 1000 >= keep_from:
            sample.add([now - r["t"] / 1000 for r in stamps])

    query = reader.writeStream.foreachBatch(on_batch).start()
    try:
        time.sleep(warmup_s + seconds)
    finally:
        query.stop()
    for p in query.recentProgress:
        if p["timestamp"] and _epoch(p["timestamp"]) >= keep_from:
            sample.batches.append({k: int(v) for k, v in p["durationMs"].items()})
    return sample


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def stats(sample: Sample) -> dict[str, Any]:
    lat = sample.latency_ms
    out: dict[str, Any] = {
        "records": len(lat),
        "p50_ms": percentile(lat, 50),
        "p99_ms": percentile(lat, 99),
        "max_ms": max(lat, default=float("nan")),
    }
    if sample.batches:
        total = [b.get("triggerExecution", 0) for b in sample.batches]
        median = percentile(total, 50)
        out.update(
            batches=len(total),
            batch_median_ms=median,
            batch_max_ms=max(total),
            batch_max_over_median=max(total) / median if median else float("nan"),
            phases_median_ms={
                ph: percentile([b.get(ph, 0) for b in sample.batches], 50) for ph in PHASES
            },
            # Where the slowest micro-batch spent its time.
            slowest_phases_ms=max(sample.batches, key=lambda b: b.get("triggerExecution", 0)),
        )
    return out


@contextmanager
def latency_stack() -> Iterator[tuple[LocalStack, str]]:
    """etcd, two clusters, and a coordinator in a process of its own, as in
    production (in this process it would share the GIL with the sink)."""
    with local_stack(CLUSTERS, coordinator_listen=None) as stack:
        coordinator = ProbedCoordinator(stack.etcd.url).start()
        try:
            with AdminClient(coordinator.address) as admin:
                for name in CLUSTERS:
                    create_topics(stack.clusters[name].bootstrap, {TOPIC: PARTITIONS})
                admin.put_stream(
                    stream_doc(
                        "latency",
                        {name: (stack.clusters[name].bootstrap, [TOPIC]) for name in CLUSTERS},
                    )
                )
            yield stack, coordinator.address
        finally:
            coordinator.stop()


@contextmanager
def fed(stack: LocalStack, rate: int) -> Iterator[Feed]:
    feed = Feed([stack.clusters[n].bootstrap for n in CLUSTERS], rate)
    feed.start()
    try:
        yield feed
    finally:
        feed.stop()


def one_round(spark: Any, rate: int, seconds: float, i: int) -> dict[str, Any]:
    """The three readers, one after the other; each reader of the brokers on
    fresh ones (tansu's ``ListOffsets`` and fetches slow down as partitions
    fill with single-record batches: a reader that came later would pay
    for the records fed while the ones before it ran)."""
    warmup_s = 5.0
    python = run_query(
        spark,
        spark.readStream.format("latency_clock")
        .option("rate", rate)
        .option("tasks", TASKS)
        .option("t0", time.time())
        .load(),
        seconds,
        warmup_s,
        "timestamp",
    )
    with latency_stack() as (stack, _), fed(stack, rate):
        consumer = consumer_baseline(stack, seconds, warmup_s=1.0)
    with latency_stack() as (stack, address), fed(stack, rate):
        lookups = LookupFloor([stack.clusters[n].bootstrap for n in CLUSTERS], warmup_s)
        lookups.start()
        try:
            mk = run_query(
                spark,
                spark.readStream.format("multikafka")
                .option("coordinator", address)
                .option("stream", "latency")
                .option("startingOffsets", "latest")
                .option("queryId", f"latency-{i}")
                .load(),
                seconds,
                warmup_s,
                "timestamp",
            )
        finally:
            lookups.stop()
    result = {"consumer": stats(consumer), "python": stats(python), "multikafka": stats(mk)}
    mk_b, py_b = result["multikafka"], result["python"]
    mk_b["lookup_floor_ms"] = percentile(lookups.ms, 50)
    if "batch_median_ms" in mk_b and "batch_median_ms" in py_b:
        mk_b["added_ms"] = mk_b["batch_median_ms"] - py_b["batch_median_ms"]
        # Net of what the brokers take to say where the partitions end.
        mk_b["added_net_ms"] = mk_b["added_ms"] - mk_b["lookup_floor_ms"]
        # The source's phases only: Spark's commit log write (commitOffsets)
        # took either ~30 or ~50 ms for the floor from one round to the next.
        mk_b["added_source_phases_ms"] = sum(
            mk_b["phases_median_ms"][ph] - py_b["phases_median_ms"][ph] for ph in SOURCE_PHASES
        )
    result["hist"] = {
        "consumer": consumer.latency_ms,
        "python": python.latency_ms,
        "multikafka": mk.latency_ms,
    }
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    hist = result["rounds"][0]["hist"]
    with figure(path, figsize=(8, 3.8)) as (_fig, ax):
        top = max(max(hist["multikafka"], default=1), 1)
        bins = [i * top / 60 for i in range(61)]
        for name, colour in (
            ("consumer", "tab:gray"),
            ("python", "tab:green"),
            ("multikafka", "tab:blue"),
        ):
            ax.hist(hist[name], bins=bins, alpha=0.6, color=colour, label=name)
        s = result["summary"]["multikafka"]
        ax.axvline(s["p50_ms"]["median"], color="black", linestyle="--", label="multikafka p50")
        ax.axvline(s["p99_ms"]["median"], color="red", linestyle="--", label="multikafka p99")
        ax.set_xlabel("produce -> sink latency (ms)")
        ax.set_ylabel("records")
        ax.set_yscale("log")
        ax.set_title(f"latency at {result['rate']} records/s, default trigger (round 1)")
        ax.legend(fontsize=8)


def main(argv: list[str] | None = None) -> int:
    parser = Arguments(__doc__, smoke={"seconds": 3.0, "repeat": 1}, repeat=3)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--rate", type=int, default=440)
    args = parser.parse_args(argv)
    quiet_logs()
    rounds: list[dict[str, Any]] = []
    with ExitStack() as cleanup:
        with console.status("starting Spark"):
            spark = local_spark("latency")
        cleanup.callback(spark.stop)
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "100000")
        register_clock_source(spark)
        with progress_bar() as bar:
            task = bar.add_task("rounds", total=args.repeat, note="")
            for i in range(args.repeat):
                r = one_round(spark, args.rate, args.seconds, i)
                rounds.append(r)
                m = r["multikafka"]
                bar.update(
                    task,
                    advance=1,
                    note=f"p50 {m['p50_ms']:.0f} ms, p99 {m['p99_ms']:.0f} ms",
                )
                console.print(
                    {k: {kk: vv for kk, vv in v.items()} for k, v in r.items() if k != "hist"}
                )
    keys = (
        "p50_ms",
        "p99_ms",
        "max_ms",
        "batch_median_ms",
        "batch_max_ms",
        "batch_max_over_median",
        "added_ms",
        "lookup_floor_ms",
        "added_net_ms",
        "added_source_phases_ms",
    )
    summ = {
        name: {k: summary([r[name][k] for r in rounds if k in r[name]]) for k in keys}
        for name in ("consumer", "python", "multikafka")
    }
    result = {
        "machine": machine(),
        "rate": args.rate,
        "seconds": args.seconds,
        "rounds": rounds,
        "summary": summ,
    }
    finish("latency", result, args, plot)
    console.print(summ)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
