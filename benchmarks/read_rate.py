"""Read rate and read-path CPU: Spark ``format("multikafka")`` against plain consumers.

    python -m benchmarks.read_rate [--records 1000000] [--repeat 3] [--out docs]

Starts a local stack (etcd, two tansu clusters, a coordinator in a thread,
Spark ``local[2]``), produces ``--records`` records (values of ``--value-size``
bytes) split over 2 clusters x 1 topic x 4 partitions, then measures,
alternating, ``--repeat`` times each (after ``--warmup`` untimed rounds):

* ``raw``: one plain confluent-kafka ``Consumer`` per cluster, read one after
  the other in this process (assign every partition from offset 0, batch
  ``consume`` until every record is read; the product's fetch settings),
  checking ``error()`` of every message, the garbage collector left on;
* ``raw_nogc_count`` (the CPU baseline): the same with Python's garbage
  collector disabled, only counting what ``consume`` returns (the consumers'
  end positions are checked against the watermarks afterwards);
* ``agent`` / ``agent_python``: multikafka's reader agent reading the whole
  stream, planned as Spark would plan one batch, in this process (no Spark),
  with the default converter (the compiled one when built) / with
  ``MULTIKAFKA_CONVERTER=python``;
* ``spark`` / ``spark_python``: a Structured Streaming query with
  ``Trigger.AvailableNow`` into the ``noop`` sink with default source options
  (one micro-batch), with the default converter / with the Python converter in
  the workers (a benchmark-side subclass of the source sets the variable);
* ``spark_batched``: the same with ``maxOffsetsPerTrigger`` = a tenth and
  otherwise default options, so that the rate after the first micro-batch
  (steady state) can be read from ``query.recentProgress``.

Then ``--ab-pairs`` pairs of agent reads in ABBA order, one with the
fingerprints the reader keeps of each range's last records (for exact
failover) and one without (switched off here, benchmark-side): their CPU
ratio per pair (goal: at most 1.02).

Rates are records per second of wall time; rate ratios are per round against
that round's ``raw``. CPU seconds per million records: for the in-process
readers, of the threads that read (the calling thread and those started for
the read: librdkafka's, the agent's; not the coordinator's, which shares the
process), from consumer creation to the last ``consume``; for Spark's Python
workers, Spark's JVM and the brokers, of their processes (``/proc/<pid>/stat``).
CPU ratios are per round against ``raw_nogc_count``.

Results go to ``benchmarks/out/read_rate.json`` and ``<out>/img/read_rate.png``.
"""

from __future__ import annotations

import os

# Launching Spark's JVM forks; gRPC's fork handlers must stay out of it (the
# coordinator runs gRPC in a thread of this process). Set before grpc loads.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
# Spark's console progress bar would fight with ours.
os.environ.setdefault(
    "PYSPARK_SUBMIT_ARGS", "--conf spark.ui.showConsoleProgress=false pyspark-shell"
)

import functools
import gc
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from benchmarks._common import (
    Arguments,
    console,
    figure,
    finish,
    machine,
    median_range,
    progress_bar,
    quiet_logs,
    summary,
)
from multikafka.devstack import procfs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from multikafka.devstack.stack import LocalStack
    from multikafka.reader_agent import ReadTask


STREAM = "bench"
TOPIC = "bench"
CLUSTERS = ("east", "west")
PARTITIONS = 4
#: What KafkaRangeConsumer asks consume() for at most per call.
CONSUME_BATCH = 20_000
CORES = 2

METHODS = (
    "raw",
    "raw_nogc_count",
    "agent",
    "agent_python",
    "spark",
    "spark_python",
    "spark_batched",
)
#: The CPU baseline: a plain consumer, GC off, that only counts.
BASELINE = "raw_nogc_count"
#: Readers that run in the benchmark process (their CPU is the process's).
IN_PROCESS = ("raw", "raw_nogc_count", "agent", "agent_python")
#: Goal of exact failover: the read path's CPU per record with fingerprints
#: over without (:func:`fingerprint_ab`).
FINGERPRINT_GOAL = 1.02
#: How often spark_batched splits the stream (maxOffsetsPerTrigger = 1/10).
BATCHES = 10
#: Goals: worker CPU / baseline CPU; batched steady / in-batch rate.
CPU_GOAL = 1.5
STEADY_GOAL = 0.8


@dataclass
class Setup:
    """The stack and what was produced to it."""

    stack: LocalStack
    #: cluster -> records in the topic (volume + fences), from the watermarks
    per_cluster: dict[str, int]
    produced: int
    produce_s: float

    @property
    def bootstraps(self) -> dict[str, str]:
        """cluster -> bootstrap"""
        return {name: b.bootstrap for name, b in self.stack.clusters.items()}

    @property
    def expected(self) -> int:
        return sum(self.per_cluster.values())


@dataclass
class Run:
    method: str
    round: int
    records: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def plain_consumer(bootstrap: str, client_id: str) -> Any:
    """A confluent-kafka consumer with the readers' settings (and the dev
    stack's stream properties) on ``bootstrap``, for assigning partitions:
    the plain-consumer baselines."""
    from confluent_kafka import Consumer

    from multikafka.core._kafka_config import READER_DEFAULTS
    from multikafka.devstack.stack import TANSU_PROPERTIES

    return Consumer(
        {
            **READER_DEFAULTS,
            **TANSU_PROPERTIES,
            "bootstrap.servers": bootstrap,
            "group.id": "bench-plain",
            "client.id": client_id,
        }
    )


# -- setup ------------------------------------------------------------------


def produce(stack: LocalStack, records: int, value_size: int) -> tuple[int, float]:
    """Create the topics and produce ``records`` split over the clusters."""
    from multikafka.devstack.feed import SequenceProducer, create_topics, fence

    per = records // len(stack.clusters)
    t0 = time.perf_counter()
    total = 0
    with progress_bar(transient=True) as progress:
        task = progress.add_task("producing", total=per * len(stack.clusters), note="")
        for name, broker in stack.clusters.items():
            create_topics(broker.bootstrap, {TOPIC: PARTITIONS})
            producer = SequenceProducer(broker.bootstrap, value_size=value_size)
            step = 50_000
            for lo in range(0, per, step):
                hi = min(lo + step, per)
                total += producer.produce(TOPIC, PARTITIONS, name, range(lo, hi))
                progress.update(task, completed=total, note=name)
            producer.flush(120)
            fence(broker.bootstrap, TOPIC, PARTITIONS)
    return total, time.perf_counter() - t0


def watermarks(bootstrap: str) -> int:
    """Records in the topic (high - low over the partitions)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        n = 0
        for p in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
            n += high - low
        return n
    finally:
        consumer.close()


# -- the measured readers ---------------------------------------------------


class ReaderCpu:
    """CPU seconds of the threads that read in this process: the calling
    thread and every thread started since (a consumer's librdkafka threads,
    an agent's, also those that ended meanwhile, such as a task's per-cluster
    readers), not the threads that were there before (the coordinator's, the
    Spark driver's), which share the process: the process's CPU time less
    what those older threads used meanwhile. Read it before the consumers
    close (their threads end, and a thread of before that ends would count)."""

    def __init__(self) -> None:
        self._me = threading.get_native_id()
        self._before = procfs.thread_cpu_s()
        self._process = time.process_time()

    def used(self) -> float:
        before = self._before
        others = sum(
            v - before[tid]
            for tid, v in procfs.thread_cpu_s().items()
            if tid in before and tid != self._me
        )
        return time.process_time() - self._process - others


def read_raw(setup: Setup, on_batch: Callable[[int], None], *, count_only: bool = False) -> Run:
    """Plain consumers, one cluster after the other, in this process.
    ``count_only``: the strict baseline, GC disabled, no per-message work."""
    from confluent_kafka import KafkaError, TopicPartition

    t0 = time.perf_counter()
    total = 0
    cpu_s = 0.0
    gc_was = gc.isenabled()
    if count_only:
        gc.collect()
        gc.disable()
    try:
        for name, bootstrap in setup.bootstraps.items():
            meter = ReaderCpu()
            consumer = plain_consumer(bootstrap, f"bench-raw-{name}")
            try:
                tps = [TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)]
                consumer.assign(tps)
                left = setup.per_cluster[name]
                while left > 0:
                    msgs = consumer.consume(min(CONSUME_BATCH, left), timeout=0.5)
                    if count_only:
                        good = len(msgs)
                    else:
                        good = 0
                        for m in msgs:
                            err = m.error()
                            if err is None:
                                good += 1
                            elif err.code() != KafkaError._PARTITION_EOF:
                                raise RuntimeError(f"{name}: {err.str()}")
                    del msgs
                    left -= good
                    total += good
                    on_batch(good)
                cpu_s += meter.used()
                if count_only:  # nothing but records was counted: all read, no more
                    end = sum(tp.offset for tp in consumer.position(tps))
                    if end != setup.per_cluster[name]:
                        raise RuntimeError(f"{name}: ended at {end}, not {setup.per_cluster[name]}")
            finally:
                consumer.close()
    finally:
        if count_only and gc_was:
            gc.enable()
    method = "raw_nogc_count" if count_only else "raw"
    return Run(method, 0, total, time.perf_counter() - t0, {"reader_cpu_s": cpu_s})


def plan_tasks(address: str, query_id: str) -> list[ReadTask]:
    """The whole stream planned as one Spark batch with default options."""
    from multikafka.core.planner_client import PlannerClient
    from multikafka.core.transport import ConnectConfig
    from multikafka.reader_agent._plan import read_tasks
    from multikafka.spark._options import parse_options
    from multikafka.v1 import planner_pb2

    defaults = parse_options({"coordinator": address, "stream": STREAM}, streaming=False)
    client = PlannerClient(address, timeout_s=30)
    try:
        start, _ = client.resolve(STREAM, planner_pb2.Position(kind=planner_pb2.Position.EARLIEST))
        end, _ = client.resolve(STREAM, planner_pb2.Position(kind=planner_pb2.Position.LATEST))
        return read_tasks(
            client,
            defaults,
            coordinator=ConnectConfig.parse(address),
            query_id=query_id,
            start=start,
            end=end,
        )
    finally:
        client.close()


@contextmanager
def converter_env(name: str | None) -> Iterator[None]:
    """``MULTIKAFKA_CONVERTER=name`` in this process for a while (None: as it was)."""
    from multikafka.core import env

    before = os.environ.get(env.CONVERTER)
    if name is not None:
        os.environ[env.CONVERTER] = name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(env.CONVERTER, None)
        else:
            os.environ[env.CONVERTER] = before


@contextmanager
def fingerprints_off() -> Iterator[None]:
    """The range consumer without its failover fingerprints (what it kept of
    each batch's last rows, and their hashing at a range's end), for the
    A/B of their cost: benchmark-side, the product has no such switch."""
    from multikafka.reader_agent import _range_consumer as range_consumer

    tail = range_consumer._Tail
    saved = tail.add, tail.fingerprints
    tail.add = lambda self, cols, rows, last: setattr(self, "last", last)  # type: ignore[method-assign]
    tail.fingerprints = lambda self: ()  # type: ignore[method-assign]
    try:
        yield
    finally:
        tail.add, tail.fingerprints = saved  # type: ignore[method-assign]


def read_agent(
    setup: Setup,
    on_batch: Callable[[int], None],
    *,
    converter: str | None = None,
    fingerprints: bool = True,
) -> Run:
    """A fresh reader agent reads every task, one after the other."""
    from multikafka.reader_agent import ReaderAgent
    from multikafka.reader_agent import _arrow as arrow

    t0 = time.perf_counter()
    tasks = plan_tasks(setup.stack.coordinator_address, f"bench-agent-{uuid.uuid4().hex[:8]}")
    planned = time.perf_counter()
    total = 0
    cpu_s = 0.0
    with converter_env(converter), ExitStack() as variant:
        if not fingerprints:
            variant.enter_context(fingerprints_off())
        meter = ReaderCpu()
        agent = ReaderAgent(heartbeat_interval_s=2.0)
        try:
            for task in tasks:
                for batch in agent.read(task):
                    total += batch.num_rows
                    on_batch(batch.num_rows)
            cpu_s = meter.used()
        finally:
            agent.close()
            # The reader freezes what is alive at its first batches (for a
            # Spark worker: see _collector_paused); give it back to the
            # collector, so that ``raw`` always meets the same heap.
            gc.unfreeze()
        used = arrow.active_converter()
    name = "agent" if converter is None else f"agent_{converter}"
    return Run(
        name if fingerprints else "agent_no_fingerprints",
        0,
        total,
        time.perf_counter() - t0,
        {
            "tasks": len(tasks),
            "plan_s": planned - t0,
            "converter": used,
            "reader_cpu_s": cpu_s,
        },
    )


def fingerprint_ab(setup: Setup, pairs: int) -> dict[str, Any]:
    """The reader agent's CPU per record with its failover fingerprints and
    without (:func:`fingerprints_off`), ``pairs`` times each, in ABBA order;
    the ratio per pair."""
    scale = 1_000_000 / setup.expected
    cpu: dict[bool, list[float]] = {True: [], False: []}
    with progress_bar() as progress:
        task = progress.add_task("fingerprints A/B", total=2 * pairs, note="")
        for i in range(pairs):
            for fingerprints in (True, False) if i % 2 == 0 else (False, True):
                run = read_agent(setup, lambda n: None, fingerprints=fingerprints)
                cpu[fingerprints].append(run.extra["reader_cpu_s"] * scale)
                progress.advance(task)
    return {
        "pairs": pairs,
        "with_cpu_s_per_million": summary(cpu[True]),
        "without_cpu_s_per_million": summary(cpu[False]),
        "cpu_ratio": summary([w / o for w, o in zip(cpu[True], cpu[False], strict=True)]),
        "goal": FINGERPRINT_GOAL,
    }


def _role(pid: int, cmd: str) -> str:
    if pid == os.getpid():
        return "benchmark process (driver, coordinator)"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
        return "spark python workers"
    if "java" in cmd.split(" ", 1)[0]:
        return "spark jvm"
    if "tansu" in cmd:
        return "tansu brokers"
    if "etcd" in cmd:
        return "etcd"
    return "other"


def cpu_snapshot() -> dict[int, tuple[str, float]]:
    """pid -> (role, CPU seconds used so far) of this process and its descendants."""
    table = procfs.processes()
    return {
        pid: (_role(pid, table[pid].cmdline), table[pid].cpu_s)
        for pid in procfs.descendants(os.getpid(), table)
        if pid in table
    }


def cpu_by_role(before: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds used since ``before``, by role (processes that exited
    meanwhile are not counted)."""
    out: dict[str, float] = {}
    for pid, (role, seconds) in cpu_snapshot().items():
        used = seconds - before[pid][1] if pid in before else seconds
        out[role] = out.get(role, 0.0) + used
    return out


def read_spark(
    spark: SparkSession,
    setup: Setup,
    on_rows: Callable[[int], None],
    *,
    method: str,
    options: dict[str, str],
    source: str = "multikafka",
    available_now: bool = True,
    until: int | None = None,
) -> Run:
    """An AvailableNow query over the whole stream into the noop sink; with
    ``available_now=False``, a query with the default trigger (each
    micro-batch as soon as the last ends), stopped when all is read (or
    ``until`` records)."""
    until = setup.expected if until is None else until
    checkpoint = Path(tempfile.mkdtemp(prefix="bench-checkpoint-"))
    try:
        reader = (
            spark.readStream.format(source)
            .option("coordinator", setup.stack.coordinator_address)
            .option("stream", STREAM)
            .option("startingOffsets", "earliest")
        )
        for k, v in options.items():
            reader = reader.option(k, v)
        t0 = time.perf_counter()
        writer = reader.load().writeStream.format("noop")
        writer = writer.option("checkpointLocation", str(checkpoint))
        query = (writer.trigger(availableNow=True) if available_now else writer).start()
        try:
            while not query.awaitTermination(1 if available_now else 0.05):
                read = sum(int(p["numInputRows"]) for p in query.recentProgress)
                on_rows(read)
                if not available_now and read >= until:
                    break
            elapsed = time.perf_counter() - t0
            progress = list(query.recentProgress)
        finally:
            query.stop()
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    rows = [int(p["numInputRows"]) for p in progress]
    trigger_ms = [int(p["durationMs"].get("triggerExecution", 0)) for p in progress]
    batches = [(r, ms) for r, ms in zip(rows, trigger_ms, strict=True) if r > 0]
    extra: dict[str, Any] = {
        "batches": len(batches),
        "batch_rows": [r for r, _ in batches],
        "batch_ms": [ms for _, ms in batches],
        "first_batch_ms": batches[0][1] if batches else None,
        # Spark's own split of each micro-batch's time (addBatch is the read)
        "batch_durations_ms": [
            dict(p["durationMs"]) for p in progress if int(p["numInputRows"]) > 0
        ],
        "options": options,
        # Spark's job group of the query's micro-batches (its status tracker)
        "run_id": progress[0]["runId"] if progress else None,
    }
    total_ms = sum(ms for _, ms in batches)
    extra["trigger_rate"] = sum(r for r, _ in batches) / (total_ms / 1000) if total_ms else None
    if len(batches) > 1:
        rest_rows = sum(r for r, _ in batches[1:])
        rest_ms = sum(ms for _, ms in batches[1:])
        extra["steady_rate"] = rest_rows / (rest_ms / 1000) if rest_ms else None
    return Run(method, 0, sum(rows), elapsed, extra)


def register_python_source(spark: SparkSession, name: str) -> str:
    """Register ``name``: the product's source with ``MULTIKAFKA_CONVERTER=python``
    in the workers while a task reads (benchmark-side, not a product change).
    Defined here in ``__main__``, so cloudpickle ships it to the workers."""
    from multikafka.spark import MultiKafkaDataSource
    from multikafka.spark._options import parse_options
    from multikafka.spark._source import MultiKafkaStreamReader

    class PythonConverterReader(MultiKafkaStreamReader):
        def read(self, partition: Any) -> Iterator[Any]:
            import os as worker_os

            from multikafka.core import env

            before = worker_os.environ.get(env.CONVERTER)
            worker_os.environ[env.CONVERTER] = "python"
            try:
                yield from super().read(partition)
            finally:
                if before is None:
                    worker_os.environ.pop(env.CONVERTER, None)
                else:
                    worker_os.environ[env.CONVERTER] = before

    class PythonConverterSource(MultiKafkaDataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def streamReader(self, schema: Any) -> PythonConverterReader:
            return PythonConverterReader(parse_options(self.options, streaming=True))

    spark.dataSource.register(PythonConverterSource)
    return name


# -- orchestration ----------------------------------------------------------


@contextmanager
def spark_session() -> Iterator[SparkSession]:
    from multikafka.devstack.spark import local_spark

    with console.status(f"starting Spark (local[{CORES}])"):
        spark = local_spark("multikafka-bench-read-rate", cores=CORES)
    try:
        yield spark
    finally:
        spark.stop()


@contextmanager
def started_stack(records: int, value_size: int) -> Iterator[Setup]:
    """etcd, the clusters and a coordinator; the data produced and the stream put."""
    from multikafka.core.admin_client import AdminClient
    from multikafka.devstack.stack import local_stack, stream_doc

    with ExitStack() as cleanup:
        with console.status("starting etcd, 2 tansu clusters and the coordinator"):
            stack = cleanup.enter_context(local_stack(CLUSTERS))
        produced, produce_s = produce(stack, records, value_size)
        bootstraps = {name: b.bootstrap for name, b in stack.clusters.items()}
        with AdminClient(stack.coordinator_address) as admin:
            admin.put_stream(stream_doc(STREAM, {n: (bs, [TOPIC]) for n, bs in bootstraps.items()}))
        per_cluster = {name: watermarks(bs) for name, bs in bootstraps.items()}
        yield Setup(stack, per_cluster, produced, produce_s)
        console.log("stopping the stack")


def measure(
    spark: SparkSession,
    setup: Setup,
    *,
    repeat: int,
    warmup: int,
    max_per_trigger: int,
) -> list[Run]:
    runs: list[Run] = []
    batched = {"maxOffsetsPerTrigger": str(max_per_trigger)}
    python_source = register_python_source(spark, "multikafka_python_decoder")
    rounds = warmup + repeat
    with progress_bar() as progress:
        overall = progress.add_task("all runs", total=rounds * len(METHODS), note="")
        current = progress.add_task("", total=setup.expected, note="")
        for rnd in range(rounds):
            label = f"warm-up {rnd + 1}" if rnd < warmup else f"round {rnd - warmup + 1}/{repeat}"
            for method in METHODS:
                progress.update(
                    current, description=f"{label}: {method}", completed=0, note="reading"
                )
                step = functools.partial(progress.advance, current)
                cpu0 = cpu_snapshot()
                if method in ("raw", "raw_nogc_count"):
                    run = read_raw(setup, step, count_only=method == "raw_nogc_count")
                elif method in ("agent", "agent_python"):
                    run = read_agent(setup, step, converter="python" if method != "agent" else None)
                else:
                    run = read_spark(
                        spark,
                        setup,
                        lambda n: progress.update(current, completed=n),
                        method=method,
                        options=batched if method == "spark_batched" else {},
                        source=python_source if method == "spark_python" else "multikafka",
                    )
                run.extra["cpu_s"] = cpu_by_role(cpu0)
                if run.records != setup.expected:
                    raise RuntimeError(
                        f"{method} read {run.records:,} records, expected {setup.expected:,}"
                    )
                progress.update(current, completed=run.records, note=f"{run.rate:,.0f} rec/s")
                progress.advance(overall)
                if rnd >= warmup:
                    run.round = rnd - warmup
                    runs.append(run)
                console.log(
                    f"{label}: {method:<14} {run.rate:>12,.0f} records/s ({run.seconds:.2f} s, "
                    f"{reader_cpu(run) / run.records * 1e6:.2f} CPU-s/1M)"
                )
    return runs


def reader_cpu(run: Run) -> float:
    """CPU seconds of the processes that read: the benchmark process for the
    in-process readers, Spark's Python workers otherwise."""
    if run.method in IN_PROCESS:
        return float(run.extra["reader_cpu_s"])
    return float(run.extra["cpu_s"].get(WORKERS, 0.0))


WORKERS = "spark python workers"
BROKERS = "tansu brokers"
JVM = "spark jvm"

#: Rates derived from Spark runs: (name, method, key of Run.extra).
DERIVED = (
    ("spark_in_batch", "spark", "trigger_rate"),
    ("spark_batched_steady", "spark_batched", "steady_rate"),
)


def summarize(runs: list[Run], repeat: int, records: int) -> dict[str, Any]:
    """Medians [min-max] of rates, rate ratios, CPU per million records and
    CPU ratios, each ratio taken per round."""
    by_round = {(r.method, r.round): r for r in runs}
    rounds = range(repeat)
    per_round: dict[str, list[float | None]] = {
        m: [by_round[(m, i)].rate for i in rounds] for m in METHODS
    }
    for name, method, key in DERIVED:
        per_round[name] = [by_round[(method, i)].extra.get(key) for i in rounds]
    ratios: dict[str, list[float]] = {}
    for name, values in per_round.items():
        if name != "raw":
            ratios[f"{name}/raw"] = [
                v / raw for v, raw in zip(values, per_round["raw"], strict=True) if v and raw
            ]
    ratios["spark/agent"] = [
        by_round[("spark", i)].rate / by_round[("agent", i)].rate for i in rounds
    ]
    steady = [
        s / b
        for s, b in zip(per_round["spark_batched_steady"], per_round["spark_in_batch"], strict=True)
        if s and b
    ]
    ratios["spark_batched_steady/spark_in_batch"] = steady

    scale = 1_000_000 / records
    cpu: dict[str, dict[str, list[float]]] = {}
    for m in METHODS:
        mine = [by_round[(m, i)] for i in rounds]
        cpu[m] = {
            "reader": [reader_cpu(r) * scale for r in mine],
            "brokers": [r.extra["cpu_s"].get(BROKERS, 0.0) * scale for r in mine],
        }
        if m not in IN_PROCESS:
            cpu[m]["jvm"] = [r.extra["cpu_s"].get(JVM, 0.0) * scale for r in mine]
    base = cpu[BASELINE]["reader"]
    cpu_ratios = {
        f"{m}/{BASELINE}": [v / b for v, b in zip(cpu[m]["reader"], base, strict=True) if b]
        for m in METHODS
        if m != BASELINE
    }
    return {
        "rates": {k: summary([v for v in vs if v]) for k, vs in per_round.items()},
        "ratios": {k: summary(v) for k, v in ratios.items()},
        "cpu_s_per_million": {
            m: {part: summary(v) for part, v in parts.items()} for m, parts in cpu.items()
        },
        "cpu_ratios": {k: summary(v) for k, v in cpu_ratios.items()},
        "goals": {
            "worker_cpu_over_baseline": CPU_GOAL,
            "batched_steady_over_in_batch": STEADY_GOAL,
        },
    }


def plot(result: dict[str, Any], path: Path) -> None:
    cfg = result["config"]
    summ = result["summary"]
    rates, ratios = summ["rates"], summ["ratios"]
    names = [
        "raw",
        "raw_nogc_count",
        "agent",
        "agent_python",
        "spark",
        "spark_python",
        "spark_in_batch",
        "spark_batched",
        "spark_batched_steady",
    ]
    labels = {
        "raw": "plain\nconsumer",
        "raw_nogc_count": "plain consumer\nGC off, count",
        "agent": "reader agent\n(no Spark)",
        "agent_python": "agent,\nPython converter",
        "spark": "Spark\nAvailableNow",
        "spark_python": "Spark,\nPython converter",
        "spark_in_batch": "Spark, inside\nthe micro-batch",
        "spark_batched": f"Spark, {BATCHES}\nmicro-batches",
        "spark_batched_steady": "same, after\n1st micro-batch",
    }
    with figure(path, 1, 2, figsize=(16, 5.5), width_ratios=[3, 2]) as (fig, (left, right)):
        med = [rates[n]["median"] / 1000 for n in names]
        lo = [max(m - rates[n]["min"] / 1000, 0) for m, n in zip(med, names, strict=True)]
        hi = [max(rates[n]["max"] / 1000 - m, 0) for m, n in zip(med, names, strict=True)]
        colors = ["#7f7f7f", "#4f4f4f", "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#ffdd99"]
        colors += ["#2ca02c", "#98df8a"]
        bars = left.bar([labels[n] for n in names], med, yerr=[lo, hi], capsize=5, color=colors)
        for bar, n, h in zip(bars, names, hi, strict=True):
            ratio = ratios[f"{n}/raw"]["median"] if n != "raw" else 1.0
            left.annotate(
                f"{ratio:.2f}x",
                (bar.get_x() + bar.get_width() / 2, bar.get_height() + h),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                fontsize=8,
            )
        left.set_ylabel("thousand records / s (median, min-max)")
        left.set_title(
            f"Read rate (ratio to plain consumer); steady/in-batch "
            f"{ratios['spark_batched_steady/spark_in_batch']['median']:.2f} (goal >= {STEADY_GOAL})",
            fontsize=10,
        )
        left.tick_params(axis="x", labelsize=8)
        left.grid(axis="y", alpha=0.3)

        cpu = summ["cpu_s_per_million"]
        shown = [
            "raw_nogc_count",
            "agent",
            "agent_python",
            "spark",
            "spark_python",
            "spark_batched",
        ]
        parts = [
            ("reader", "reader threads / Python workers", "#1f77b4"),
            ("jvm", "Spark JVM", "#ff7f0e"),
        ]
        parts.append(("brokers", "tansu brokers", "#bcbd22"))
        bottom = [0.0] * len(shown)
        for key, label, color in parts:
            vals = [cpu[m].get(key, {}).get("median", 0.0) for m in shown]
            right.bar([labels[m] for m in shown], vals, bottom=bottom, color=color, label=label)
            bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
        base = cpu[BASELINE]["reader"]["median"]
        for i, m in enumerate(shown):
            reader = cpu[m]["reader"]["median"]
            note = (
                "baseline"
                if m == BASELINE
                else f"{summ['cpu_ratios'][f'{m}/{BASELINE}']['median']:.2f}x"
            )
            right.annotate(
                f"{reader:.2f} ({note})",
                (i, bottom[i]),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                fontsize=8,
            )
        right.axhline(
            base * CPU_GOAL,
            color="#d62728",
            linestyle="--",
            linewidth=1,
            label=f"goal: reader CPU <= {CPU_GOAL} x baseline",
        )
        right.set_ylabel("CPU seconds per million records (median)")
        right.set_title("CPU per million records, by process", fontsize=10)
        right.tick_params(axis="x", labelsize=8)
        right.legend(fontsize=8, loc="upper left")
        right.set_ylim(0, max(bottom) * 1.25)
        right.grid(axis="y", alpha=0.3)
        fig.suptitle(
            f"{cfg['records']:,} records x {cfg['value_size']} B, 2 tansu clusters x {PARTITIONS} "
            f"partitions, {result['machine']['nproc']} cores, converter {cfg.get('converter', '?')}",
            fontsize=11,
        )


def print_summary(result: dict[str, Any]) -> None:
    summ = result["summary"]
    table = Table(title="read rate (records/s): median \\[min - max]")
    table.add_column("method")
    table.add_column("rate", justify="right")
    table.add_column("ratio to raw (per round)", justify="right")
    rates, ratios = summ["rates"], summ["ratios"]
    for name, s in rates.items():
        r = ratios.get(f"{name}/raw")
        table.add_row(name, median_range(s, "{:,.0f}"), median_range(r, "{:.3f}") if r else "1")
    console.print(table)
    for key in ("spark/agent", "spark_batched_steady/spark_in_batch"):
        console.print(f"{key}: {median_range(ratios[key], '{:.3f}')}")

    table = Table(title="CPU seconds per million records: median \\[min - max]")
    for col in (
        "method",
        "reader threads / workers",
        f"reader / {BASELINE}",
        "Spark JVM",
        "brokers",
    ):
        table.add_column(col, justify="right")
    cpu, cpu_ratios = summ["cpu_s_per_million"], summ["cpu_ratios"]
    for m in METHODS:
        r = cpu_ratios.get(f"{m}/{BASELINE}")
        table.add_row(
            m,
            median_range(cpu[m]["reader"], "{:.3f}"),
            median_range(r, "{:.2f}") if r else "1",
            median_range(cpu[m]["jvm"], "{:.3f}") if "jvm" in cpu[m] else "",
            median_range(cpu[m]["brokers"], "{:.3f}"),
        )
    console.print(table)
    worker = cpu_ratios[f"spark/{BASELINE}"]["median"]
    steady = ratios["spark_batched_steady/spark_in_batch"]["median"]
    console.print(
        f"goals: Spark worker CPU / baseline {worker:.2f} (<= {CPU_GOAL}: "
        f"{'met' if worker <= CPU_GOAL else 'not met'}); batched steady / in-batch "
        f"{steady:.2f} (>= {STEADY_GOAL}: {'met' if steady >= STEADY_GOAL else 'not met'})"
    )
    ab = result.get("fingerprints_ab")
    if ab:
        ratio = ab["cpu_ratio"]
        console.print(
            f"read path CPU with fingerprints / without ({ab['pairs']} pairs): "
            f"{median_range(ratio, '{:.3f}')} (<= {FINGERPRINT_GOAL}: "
            f"{'met' if ratio['median'] <= FINGERPRINT_GOAL else 'not met'}); "
            f"{median_range(ab['with_cpu_s_per_million'], '{:.3f}')} against "
            f"{median_range(ab['without_cpu_s_per_million'], '{:.3f}')} CPU-s/1M"
        )


def main(argv: list[str] | None = None) -> int:
    parser = Arguments(
        __doc__, smoke={"records": 20_000, "repeat": 1, "warmup": 0, "ab_pairs": 1}, repeat=3
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--value-size", type=int, default=100, help="bytes per value")
    parser.add_argument(
        "--max-per-trigger",
        type=int,
        default=0,
        help="maxOffsetsPerTrigger of spark_batched (default: records/10)",
    )
    parser.add_argument(
        "--ab-pairs",
        type=int,
        default=10,
        help="agent reads with and without fingerprints, each this many times (0: skip)",
    )
    args = parser.parse_args(argv)
    # A SIGTERM (timeout, a cancelled CI job) unwinds like Ctrl-C does, so
    # the stack this run started (etcd, brokers, Spark) is stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    quiet_logs()
    from multikafka.devstack.stack import TANSU_PROPERTIES
    from multikafka.reader_agent import _arrow as arrow

    result: dict[str, Any] = {
        "benchmark": "read_rate",
        "machine": machine(),
        "config": {
            "records": args.records,
            "repeat": args.repeat,
            "warmup": args.warmup,
            "value_size": args.value_size,
            "clusters": len(CLUSTERS),
            "partitions_per_cluster": PARTITIONS,
            "spark_cores": CORES,
            "stream_properties": TANSU_PROPERTIES,
            "converter": arrow.active_converter(),
        },
    }
    console.rule("[bold]multikafka read rate")
    with spark_session() as spark, started_stack(args.records, args.value_size) as setup:
        console.print(
            f"produced {setup.produced:,} records in {setup.produce_s:.1f} s; "
            f"stream holds {setup.expected:,} (with {len(CLUSTERS) * PARTITIONS} fences)"
        )
        # Ten equal micro-batches of the whole stream (fences included).
        max_per_trigger = args.max_per_trigger or max(-(-setup.expected // BATCHES), 1)
        result["config"]["spark_batched_options"] = {"maxOffsetsPerTrigger": max_per_trigger}
        runs = measure(
            spark,
            setup,
            repeat=args.repeat,
            warmup=args.warmup,
            max_per_trigger=max_per_trigger,
        )
        result["config"]["records_read_per_run"] = setup.expected
        result["produce"] = {"records": setup.produced, "seconds": setup.produce_s}
        result["runs"] = [
            {
                "method": r.method,
                "round": r.round,
                "records": r.records,
                "seconds": r.seconds,
                "rate": r.rate,
                **r.extra,
            }
            for r in runs
        ]
        result["summary"] = summarize(runs, args.repeat, setup.expected)
        if args.ab_pairs:
            result["fingerprints_ab"] = fingerprint_ab(setup, args.ab_pairs)
    finish("read_rate", result, args, plot)
    print_summary(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
