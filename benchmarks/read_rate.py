"""Read rate: Spark ``format("multikafka")`` against plain consumers.

    python -m benchmarks.read_rate [--records 1000000] [--repeat 3] [--out docs]

Starts a local stack (etcd, two tansu clusters, a coordinator in a thread,
Spark ``local[2]``), produces ``--records`` records (values of ``--value-size``
bytes) split over 2 clusters x 1 topic x 4 partitions, then measures,
alternating, ``--repeat`` times each (after ``--warmup`` untimed rounds):

* ``raw``: one plain confluent-kafka ``Consumer`` per cluster, read one after
  the other in this process (assign every partition from offset 0, batch
  ``consume`` until every record is read; the product's fetch settings);
* ``agent``: multikafka's reader agent reading the whole stream, planned as
  Spark would plan one batch, in this process (no Spark): the product's read
  path including Arrow building, without Spark;
* ``spark``: a Structured Streaming query with ``Trigger.AvailableNow`` into
  the ``noop`` sink with default source options (one micro-batch);
* ``spark_batched``: the same with ``maxOffsetsPerTrigger`` = a tenth and
  ``minPartitions`` = cores, so that the rate after the first micro-batch
  (steady state) can be read from ``query.recentProgress``.

Rates are records per second of wall time; ratios are taken per round against
that round's ``raw`` (so both sides saw the same machine load). Results go to
``benchmarks/out/read_rate.json`` and ``<out>/img/read_rate.png``.
``--profile`` also runs one agent read under cProfile and prints where the
time goes (``benchmarks/out/agent_read.prof``).
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

import argparse
import cProfile
import functools
import gc
import io
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from benchmarks._common import (
    console,
    finish,
    machine,
    progress_bar,
    quiet_logs,
    resolve_out,
    summary,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from multikafka.devstack.stack import LocalStack
    from reader_agent import ReadTask


STREAM = "bench"
TOPIC = "bench"
CLUSTERS = ("east", "west")
PARTITIONS = 4
#: What KafkaRangeReader asks consume() for at most per call.
CONSUME_BATCH = 20_000
CORES = 2

METHODS = ("raw", "agent", "spark", "spark_batched")


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


def read_raw(setup: Setup, on_batch: Callable[[int], None]) -> Run:
    """Plain consumers, one cluster after the other, in this process."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from multikafka.devstack.stack import TANSU_PROPERTIES
    from multikafka_core.providers.kafka import _READER_DEFAULTS

    t0 = time.perf_counter()
    total = 0
    for name, bootstrap in setup.bootstraps.items():
        config: dict[str, str | int] = {
            **_READER_DEFAULTS,
            **TANSU_PROPERTIES,
            "bootstrap.servers": bootstrap,
            "group.id": "bench-raw",
            "client.id": f"bench-raw-{name}",
        }
        consumer = Consumer(config)
        try:
            consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
            left = setup.per_cluster[name]
            while left > 0:
                msgs = consumer.consume(min(CONSUME_BATCH, left), timeout=0.5)
                good = 0
                for m in msgs:
                    err = m.error()
                    if err is None:
                        good += 1
                    elif err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"{name}: {err.str()}")
                left -= good
                total += good
                on_batch(good)
        finally:
            consumer.close()
    return Run("raw", 0, total, time.perf_counter() - t0)


def plan_tasks(address: str, query_id: str) -> list[ReadTask]:
    """The whole stream planned as one Spark batch with default options."""
    from multikafka_core.planner_client import PlannerClient
    from multikafka_core.v1 import planner_pb2
    from spark_bridge.options import SourceOptions
    from spark_bridge.partition import partitions_from_plan

    defaults = SourceOptions.parse({"coordinator": address, "stream": STREAM}, streaming=False)
    client = PlannerClient(address, timeout_s=30)
    try:
        start, _ = client.resolve(STREAM, planner_pb2.Position(kind=planner_pb2.Position.EARLIEST))
        end, _ = client.resolve(STREAM, planner_pb2.Position(kind=planner_pb2.Position.LATEST))
        plan = client.plan(
            STREAM,
            query_id,
            start,
            end,
            min_partitions=defaults.min_partitions,
            max_records_per_partition=defaults.max_records_per_partition,
        )
    finally:
        client.close()
    parts = partitions_from_plan(
        plan,
        coordinator=address,
        stream=STREAM,
        query_id=query_id,
        include_headers=False,
        fail_on_data_loss=True,
    )
    return [p.task for p in parts]


def read_agent(setup: Setup, on_batch: Callable[[int], None]) -> Run:
    """A fresh reader agent reads every task, one after the other."""
    from reader_agent import ReaderAgent

    t0 = time.perf_counter()
    tasks = plan_tasks(setup.stack.coordinator_address, f"bench-agent-{uuid.uuid4().hex[:8]}")
    planned = time.perf_counter()
    agent = ReaderAgent(heartbeat_interval_s=2.0)
    total = 0
    try:
        for task in tasks:
            for batch in agent.read(task):
                total += batch.num_rows
                on_batch(batch.num_rows)
    finally:
        agent.close()
    return Run(
        "agent",
        0,
        total,
        time.perf_counter() - t0,
        {"tasks": len(tasks), "plan_s": planned - t0},
    )


def _proc_table() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds used, command line) of every process."""
    tick = os.sysconf("SC_CLK_TCK")
    table: dict[int, tuple[int, float, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        table[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, cmd)
    return table


def descendants(root: int, table: dict[int, tuple[int, float, str]]) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


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
    table = _proc_table()
    return {
        pid: (_role(pid, table[pid][2]), table[pid][1])
        for pid in descendants(os.getpid(), table)
        if pid in table
    }


def cpu_by_role(before: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds used since ``before``, by role (processes that exited
    meanwhile are not counted)."""
    out: dict[str, float] = {}
    for pid, (role, seconds) in cpu_snapshot().items():
        used = seconds - before[pid][1] if pid in before else seconds
        out[role] = round(out.get(role, 0.0) + used, 2)
    return out


def read_spark(
    spark: SparkSession,
    setup: Setup,
    on_rows: Callable[[int], None],
    *,
    method: str,
    options: dict[str, str],
    source: str = "multikafka",
) -> Run:
    """An AvailableNow query over the whole stream into the noop sink."""
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
        query = (
            reader.load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        try:
            while not query.awaitTermination(0.5):
                on_rows(sum(int(p["numInputRows"]) for p in query.recentProgress))
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
    }
    total_ms = sum(ms for _, ms in batches)
    extra["trigger_rate"] = sum(r for r, _ in batches) / (total_ms / 1000) if total_ms else None
    if len(batches) > 1:
        rest_rows = sum(r for r, _ in batches[1:])
        rest_ms = sum(ms for _, ms in batches[1:])
        extra["steady_rate"] = rest_rows / (rest_ms / 1000) if rest_ms else None
    return Run(method, 0, sum(rows), elapsed, extra)


# -- profile ------------------------------------------------------------------


def profile_agent(setup: Setup, top: int = 25) -> str:
    """One agent read under cProfile; returns the top functions by own time."""
    from reader_agent import ReaderAgent

    tasks = plan_tasks(setup.stack.coordinator_address, f"bench-profile-{uuid.uuid4().hex[:8]}")
    agent = ReaderAgent(heartbeat_interval_s=2.0)
    profiler = cProfile.Profile()
    try:
        profiler.enable()
        for task in tasks:
            for _ in agent.read(task):
                pass
        profiler.disable()
    finally:
        agent.close()
    out_dir = resolve_out("benchmarks/out")
    out_dir.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(str(out_dir / "agent_read.prof"))
    buf = io.StringIO()
    stats = pstats.Stats(profiler, stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    return buf.getvalue()


class GcTimer:
    """Counts garbage collections per generation and the time spent in them."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.seconds = 0.0
        self._t0 = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t0
            self.collections[info["generation"]] += 1

    @contextmanager
    def active(self) -> Iterator[GcTimer]:
        gc.callbacks.append(self)
        try:
            yield self
        finally:
            gc.callbacks.remove(self)


def register_gc_off_source(spark: SparkSession) -> str:
    """Register ``multikafka_gc_off``: the product's source, with Python's
    cyclic garbage collector disabled while a task reads (a diagnostic, not a
    product change: pyspark runs ``gc.collect()`` after every task anyway).
    Defined here in ``__main__``, so cloudpickle ships it to the workers."""
    from spark_bridge import MultiKafkaDataSource
    from spark_bridge.options import SourceOptions
    from spark_bridge.source import MultiKafkaStreamReader

    class GcOffStreamReader(MultiKafkaStreamReader):
        def read(self, partition: Any) -> Iterator[Any]:
            import gc as worker_gc

            enabled = worker_gc.isenabled()
            worker_gc.disable()
            try:
                yield from super().read(partition)
            finally:
                if enabled:
                    worker_gc.enable()

    class GcOffSource(MultiKafkaDataSource):
        @classmethod
        def name(cls) -> str:
            return "multikafka_gc_off"

        def streamReader(self, schema: Any) -> GcOffStreamReader:
            return GcOffStreamReader(SourceOptions.parse(self.options, streaming=True))

    spark.dataSource.register(GcOffSource)
    return GcOffSource.name()


def spark_gc_diagnosis(spark: SparkSession, setup: Setup, repeat: int) -> dict[str, Any]:
    """The ``spark`` run with the workers' garbage collector on and off while reading."""
    gc_off = register_gc_off_source(spark)
    runs: list[dict[str, Any]] = []
    for rnd in range(repeat + 1):  # the first round warms the new source up
        for source in ("multikafka", gc_off):
            cpu0 = cpu_snapshot()
            run = read_spark(
                spark, setup, lambda n: None, method="spark", options={}, source=source
            )
            if run.records != setup.expected:
                raise RuntimeError(f"{source} read {run.records:,} of {setup.expected:,}")
            runs.append(
                {
                    "gc": source == "multikafka",
                    "round": rnd - 1,
                    "rate": run.rate,
                    "in_batch_rate": run.extra.get("trigger_rate"),
                    "cpu_s": cpu_by_role(cpu0),
                }
            )
    runs = [r for r in runs if r["round"] >= 0]
    out: dict[str, Any] = {"runs": runs}
    for enabled in (True, False):
        mine = [r for r in runs if r["gc"] == enabled]
        key = f"spark_gc_{'on' if enabled else 'off'}"
        out[key] = summary([r["rate"] for r in mine])
        out[f"{key}_in_batch"] = summary([r["in_batch_rate"] for r in mine if r["in_batch_rate"]])
        out[f"{key}_worker_cpu_s"] = summary(
            [r["cpu_s"].get("spark python workers", 0.0) for r in mine]
        )
    return out


def gc_diagnosis(setup: Setup, repeat: int) -> dict[str, Any]:
    """The raw and agent reads with the garbage collector on (timed) and off."""
    out: dict[str, Any] = {"runs": []}
    readers: dict[str, Callable[[Setup, Callable[[int], None]], Run]] = {
        "raw": read_raw,
        "agent": read_agent,
    }
    for rnd in range(repeat):
        for name, reader in readers.items():
            for enabled in (True, False):
                gc.collect()
                timer = GcTimer()
                if not enabled:
                    gc.disable()
                try:
                    with timer.active():
                        run = reader(setup, lambda n: None)
                finally:
                    gc.enable()
                out["runs"].append(
                    {
                        "method": name,
                        "gc": enabled,
                        "round": rnd,
                        "rate": run.rate,
                        "seconds": run.seconds,
                        "gc_seconds": timer.seconds,
                        "collections": timer.collections,
                    }
                )
    for name in readers:
        for enabled in (True, False):
            runs = [r for r in out["runs"] if r["method"] == name and r["gc"] == enabled]
            key = f"{name}_gc_{'on' if enabled else 'off'}"
            out[key] = summary([r["rate"] for r in runs])
            out[f"{key}_gc_share"] = summary([r["gc_seconds"] / r["seconds"] for r in runs])
    return out


def _function(frame: str) -> str:
    """``name (file:line)`` -> ``name (file)``."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def pyspy_spark(spark: SparkSession, setup: Setup, top: int = 20) -> dict[str, Any]:
    """One more ``spark`` run with py-spy sampling Spark's Python workers:
    where their CPU time goes (on-CPU samples only)."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(exe).exists():
        raise FileNotFoundError("py-spy not found: pip install py-spy")
    table = _proc_table()
    mine = descendants(os.getpid(), table)
    daemons = {p for p in mine if p in table and "pyspark.daemon" in table[p][2]}
    managers = sorted(p for p in daemons if table[p][0] not in daemons)
    if not managers:
        raise RuntimeError("no pyspark daemon runs yet (run the spark benchmark first)")
    out_dir = resolve_out("benchmarks/out")
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("spark_workers.*.pyspy.txt"):
        stale.unlink()
    files = [out_dir / f"spark_workers.{i}.pyspy.txt" for i in range(len(managers))]
    record = [exe, "record", "--subprocesses", "--nonblocking", "--rate", "100", "--format", "raw"]
    samplers = [
        subprocess.Popen(
            [*record, "--pid", str(pid), "-o", str(f)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid, f in zip(managers, files, strict=True)
    ]
    try:
        time.sleep(1.5)
        run = read_spark(spark, setup, lambda n: None, method="spark", options={})
    finally:
        for sampler in samplers:
            sampler.send_signal(signal.SIGINT)
        for sampler in samplers:
            try:
                sampler.wait(30)
            except subprocess.TimeoutExpired:
                sampler.kill()
                sampler.wait()
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for f in files:
        if not f.exists():
            continue
        for line in f.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = [fr for fr in stack.split(";") if not fr.startswith("process ")]
            if not frames:
                continue
            total += n
            own[frames[-1]] = own.get(frames[-1], 0) + n
            for fn in {_function(fr) for fr in frames}:
                inclusive[fn] = inclusive.get(fn, 0) + n

    def top_of(counts: dict[str, int]) -> list[tuple[str, float]]:
        ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
        return [(k, round(v / total, 4)) for k, v in ranked] if total else []

    return {
        "rate": run.rate,
        "samples": total,
        "files": [str(f) for f in files],
        "self": top_of(own),
        "inclusive": top_of(inclusive),
    }


def print_pyspy(prof: dict[str, Any]) -> None:
    for kind in ("self", "inclusive"):
        table = Table(title=f"Spark Python workers, py-spy, {kind} share of on-CPU samples")
        table.add_column("share", justify="right")
        table.add_column("frame")
        for frame, share in prof[kind]:
            table.add_row(f"{share:.1%}", frame)
        console.print(table)


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
    from multikafka.devstack.stack import local_stack, stream_doc
    from multikafka_core.admin_client import AdminClient

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
    batched = {"maxOffsetsPerTrigger": str(max_per_trigger), "minPartitions": str(CORES)}
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
                if method == "raw":
                    run = read_raw(setup, step)
                elif method == "agent":
                    run = read_agent(setup, step)
                else:
                    options = batched if method == "spark_batched" else {}
                    run = read_spark(
                        spark,
                        setup,
                        lambda n: progress.update(current, completed=n),
                        method=method,
                        options=options,
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
                    f"{label}: {method:<14} {run.rate:>12,.0f} records/s ({run.seconds:.2f} s)"
                )
    return runs


#: Rates derived from Spark runs: (name, method, key of Run.extra).
DERIVED = (
    ("spark_in_batch", "spark", "trigger_rate"),
    ("spark_batched_steady", "spark_batched", "steady_rate"),
)


def summarize(runs: list[Run], repeat: int) -> dict[str, Any]:
    by_round = {(r.method, r.round): r for r in runs}
    per_round: dict[str, list[float | None]] = {
        m: [by_round[(m, i)].rate for i in range(repeat)] for m in METHODS
    }
    for name, method, key in DERIVED:
        per_round[name] = [by_round[(method, i)].extra.get(key) for i in range(repeat)]
    ratios: dict[str, list[float]] = {}
    for name, values in per_round.items():
        if name != "raw":
            ratios[f"{name}/raw"] = [
                v / raw for v, raw in zip(values, per_round["raw"], strict=True) if v and raw
            ]
    ratios["spark/agent"] = [
        by_round[("spark", i)].rate / by_round[("agent", i)].rate for i in range(repeat)
    ]
    return {
        "rates": {k: summary([v for v in vs if v]) for k, vs in per_round.items()},
        "ratios": {k: summary(v) for k, v in ratios.items()},
    }


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rates = result["summary"]["rates"]
    names = ["raw", "agent", "spark", "spark_in_batch", "spark_batched", "spark_batched_steady"]
    labels = {
        "raw": "plain consumer",
        "agent": "reader agent\n(Arrow, no Spark)",
        "spark": "Spark AvailableNow\n(1 micro-batch)",
        "spark_in_batch": "same, inside\nthe micro-batch",
        "spark_batched": "Spark AvailableNow\n(maxOffsetsPerTrigger\n"
        f"={result['config']['spark_batched_options']['maxOffsetsPerTrigger']:,})",
        "spark_batched_steady": "same, after\n1st micro-batch",
    }
    med = [rates[n]["median"] / 1000 for n in names]
    lo = [max(m - rates[n]["min"] / 1000, 0) for m, n in zip(med, names, strict=True)]
    hi = [max(rates[n]["max"] / 1000 - m, 0) for m, n in zip(med, names, strict=True)]
    fig, ax = plt.subplots(figsize=(11, 5))
    colors = ["#7f7f7f", "#1f77b4", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a"]
    bars = ax.bar(
        [labels[n] for n in names], med, yerr=[lo, hi], capsize=6, color=colors[: len(names)]
    )
    ratios = result["summary"]["ratios"]
    for bar, n, h in zip(bars, names, hi, strict=True):
        ratio = ratios[f"{n}/raw"]["median"] if n != "raw" else 1.0
        ax.annotate(
            f"{ratio:.2f}x raw",
            (bar.get_x() + bar.get_width() / 2, bar.get_height() + h),
            xytext=(0, 4),
            textcoords="offset points",
            ha="center",
            fontsize=9,
        )
    cfg = result["config"]
    ax.set_ylabel("thousand records / s (median, min-max)")
    ax.set_title(
        f"Read rate, {cfg['records']:,} records x {cfg['value_size']} B, "
        f"2 tansu clusters x {PARTITIONS} partitions, {result['machine']['nproc']} cores"
    )
    top = max(m + h for m, h in zip(med, hi, strict=True))
    gc_off = result.get("gc_diagnosis", {}).get("raw_gc_off")
    if gc_off:  # the stricter baseline (--profile): the plain consumer without GC
        level = gc_off["median"] / 1000
        ax.axhline(level, color="#7f7f7f", linestyle="--", linewidth=1)
        ax.annotate(
            f"plain consumer with the garbage collector off: {level:,.0f}k/s",
            (0, level),
            xytext=(-30, 4),
            textcoords="offset points",
            fontsize=9,
            color="#4f4f4f",
        )
        top = max(top, level)
    ax.set_ylim(0, top * 1.2)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_summary(result: dict[str, Any]) -> None:
    table = Table(title="read rate (records/s): median \\[min - max]")
    table.add_column("method")
    table.add_column("rate", justify="right")
    table.add_column("ratio to raw (per round)", justify="right")
    rates, ratios = result["summary"]["rates"], result["summary"]["ratios"]
    for name, s in rates.items():
        r = ratios.get(f"{name}/raw")
        table.add_row(
            name,
            f"{s['median']:,.0f} [{s['min']:,.0f} - {s['max']:,.0f}]",
            f"{r['median']:.3f} [{r['min']:.3f} - {r['max']:.3f}]" if r else "1",
        )
    console.print(table)
    s = ratios["spark/agent"]
    console.print(f"spark/agent: {s['median']:.3f} [{s['min']:.3f} - {s['max']:.3f}]")


def print_gc(diag: dict[str, Any]) -> None:
    table = Table(title="garbage collector diagnosis (records/s, median \\[min - max])")
    for col in ("read", "gc on", "gc off", "off/on", "time in gc (gc on)"):
        table.add_column(col, justify="right")
    for name in ("raw", "agent"):
        on, off = diag[f"{name}_gc_on"], diag[f"{name}_gc_off"]
        share = diag[f"{name}_gc_on_gc_share"]
        table.add_row(
            name,
            f"{on['median']:,.0f} [{on['min']:,.0f} - {on['max']:,.0f}]",
            f"{off['median']:,.0f} [{off['min']:,.0f} - {off['max']:,.0f}]",
            f"{off['median'] / on['median']:.2f}",
            f"{share['median']:.0%} [{share['min']:.0%} - {share['max']:.0%}]",
        )
    sp = diag.get("spark")
    if sp:
        for suffix, label in (("", "spark"), ("_in_batch", "spark, in batch")):
            on, off = sp[f"spark_gc_on{suffix}"], sp[f"spark_gc_off{suffix}"]
            table.add_row(
                label,
                f"{on['median']:,.0f} [{on['min']:,.0f} - {on['max']:,.0f}]",
                f"{off['median']:,.0f} [{off['min']:,.0f} - {off['max']:,.0f}]",
                f"{off['median'] / on['median']:.2f}",
                "",
            )
        on, off = sp["spark_gc_on_worker_cpu_s"], sp["spark_gc_off_worker_cpu_s"]
        table.add_row(
            "worker CPU s",
            f"{on['median']:.2f} [{on['min']:.2f} - {on['max']:.2f}]",
            f"{off['median']:.2f} [{off['min']:.2f} - {off['max']:.2f}]",
            f"{off['median'] / on['median']:.2f}",
            "",
        )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--value-size", type=int, default=100, help="bytes per value")
    parser.add_argument(
        "--max-per-trigger",
        type=int,
        default=0,
        help="maxOffsetsPerTrigger of spark_batched (default: records/10)",
    )
    parser.add_argument("--out", default="docs", help="docs directory (the PNG goes to img/)")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile one agent read; time the raw and agent reads with gc on and off",
    )
    parser.add_argument(
        "--py-spy",
        action="store_true",
        help="sample Spark's Python workers with py-spy during one more spark run",
    )
    args = parser.parse_args(argv)
    quiet_logs()
    from multikafka.devstack.stack import TANSU_PROPERTIES

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
        },
    }
    console.rule("[bold]multikafka read rate")
    with spark_session() as spark, started_stack(args.records, args.value_size) as setup:
        console.print(
            f"produced {setup.produced:,} records in {setup.produce_s:.1f} s; "
            f"stream holds {setup.expected:,} (with {len(CLUSTERS) * PARTITIONS} fences)"
        )
        # Ten equal micro-batches of the whole stream (fences included).
        max_per_trigger = args.max_per_trigger or max(-(-setup.expected // 10), 1)
        result["config"]["spark_batched_options"] = {
            "maxOffsetsPerTrigger": max_per_trigger,
            "minPartitions": CORES,
        }
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
        result["summary"] = summarize(runs, args.repeat)
        if args.profile:
            with console.status("profiling one agent read (cProfile)"):
                result["profile_top"] = profile_agent(setup)
            console.print(result["profile_top"])
            with console.status("raw and agent reads with the garbage collector on and off"):
                result["gc_diagnosis"] = gc_diagnosis(setup, args.repeat)
            with console.status("spark runs with the workers' garbage collector on and off"):
                result["gc_diagnosis"]["spark"] = spark_gc_diagnosis(spark, setup, args.repeat)
            print_gc(result["gc_diagnosis"])
        if args.py_spy:
            with console.status("one more spark run under py-spy"):
                result["py_spy"] = pyspy_spark(spark, setup)
            print_pyspy(result["py_spy"])
    json_path, png = finish("read_rate", result, args.out, plot)
    print_summary(result)
    console.print(f"wrote {json_path} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
