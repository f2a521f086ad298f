"""Planner load: what one leader's Planner service costs per trigger when
many queries plan their micro-batches at once, and how far it goes.

    python -m benchmarks.planner_load [--queries 1,10,100,300,1000] [--trigger 1.0]
        [--seconds 10] [--workers 8] [--nice 5] [--floor 100,1000]
        [--watermark-max-age 0.1] [--client source|wire] [--profile] [--py-spy]
        [--access] [--access-rounds 2] [--out docs]

Starts etcd, two tansu clusters with 5 topics x 10 partitions each (100
splits) and a coordinator in a process of its own (the product, real Kafka
metadata client; :class:`benchmarks.splits_scale.CoordinatorChild`). A
producer thread writes about 200 records a second over every partition, so
that most triggers plan a small batch.

For each ``N`` in ``--queries``, N simulated queries run in ``--workers``
processes of their own (at niceness ``--nice``), each query a thread driving
the **driver side of the Spark source itself**
(:class:`multikafka.spark._source.MultiKafkaStreamReader`, no Spark) through
what Spark's micro-batch loop calls once per trigger, in Spark's order:
``latestOffset(start, ReadAllAvailable)``, then (a new batch) ``commit`` of
the previous batch's end and ``partitions(start, end)``. With ``--client
wire`` each query sends the same requests on its own channel, built from the
answers' bytes without the source (a tenth of its CPU: the source's driver
side takes 2-4 ms a trigger, so 1,000 of them do not fit on 2 cores). Each query triggers
every ``--trigger`` seconds (their phases spread over the interval); after
a warm-up, a window of ``--seconds``:

* ``cpu_ms_per_trigger``: the coordinator process's CPU (every thread) over
  the window, divided by the triggers of all queries in it; ``net_``: above
  its idle CPU (measured first, with no query: heartbeats, discovery);
  ``loop_``: its event loop's thread alone;
* ``p50``/``p99``: the client's wall time per trigger (Spark's calls of it: one
  ``LatestOffsets``, a message on the stream the query keeps open);
* ``triggers_per_s``: triggers completed per second (a query whose trigger
  takes longer than its interval falls behind: then fewer than N per interval;
  below 80 % the run is *saturated*: the machine, which runs the simulated
  queries too, could not keep up, and the plot leaves it out);
* ``client_cpu_ms_per_trigger``: the simulated queries' own CPU per trigger.

The floors (``--floor``: at those N): the same clients making one gRPC health
check per trigger instead, what any call to a Python gRPC server costs it;
and one message each way per trigger on a stream kept open to a bare gRPC
asyncio echo server in a process of its own (its CPU per message), what a
trigger's transport costs any Python server.

The Planner alone: its ``LatestOffsets`` called in the coordinator's
process without gRPC (:func:`benchmarks.splits_scale._handler_cpu`), 100
queries' calls back to back, and for each N from 100 spaced as N queries'
calls arrive (the CPU of the loop's wake-ups alone left out): a call that
finds the loop asleep and the CPU's caches cold costs more than one of a
busy loop.

Access control (``--access``): for each N, the same load against
a second coordinator (its own etcd prefix, the same clusters) given an
access policy of ``--principals`` (50) principals, each a reader of its own
team's glob and of the stream, the queries spread over all of their tokens;
runs alternate, ``--access-rounds`` of each (the median is compared). The
goal: at most 5 % more coordinator CPU per trigger than without a policy.

The goal: at most 1 ms of coordinator CPU per trigger of a
100-split query, so one leader serves 1,000 such queries at one trigger a
second, and a client p99 at most 50 ms at 100 queries. ``--profile``
records a cProfile of the coordinator's event loop at the largest N.

Writes ``benchmarks/out/planner_load.json`` and ``<out>/img/planner_load.png``.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import argparse
import json
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from rich.table import Table

from benchmarks._common import (
    OUT_DIR,
    ROOT,
    Arguments,
    console,
    figure,
    finish,
    machine,
    percentile,
    progress_bar,
    quiet_logs,
)
from benchmarks.splits_scale import (
    WATERMARK_AGE_VARIABLE,
    CoordinatorChild,
    LineChild,
    etcd_server,
    process_usage,
    py_spy,
    spy_top,
)
from multikafka.core.retry import poll

STREAM = "load"
TOPICS = 5
PARTITIONS = 10
CLUSTERS = ("a", "b")
GOAL_CPU_MS = 1.0
GOAL_P99_MS = 50.0
GOAL_AT = 100
#: Records a second the producer writes over all partitions.
RATE = 200
#: Queries of the Planner-alone measurement (back to back, and spaced).
HANDLER_QUERIES = 100
#: The Planner alone is also measured with its calls spaced as N queries'
#: are, for N from here (fewer would take minutes).
SPACED_FROM = 100


# -- the simulated queries (a process of their own) ---------------------------------------


def queries_main(address: str, count: int, first: int, plan: dict[str, Any]) -> None:
    """Set up ``count`` simulated queries, print ``{"ready": ...}`` once all
    are, read the run's times (``start``, ``window_start``, ``window_end``,
    ``end``) as one JSON line from stdin, and run them until ``end``; print
    one JSON line: the wall times of triggers that started inside the
    window, and how many triggers each phase completed. ``plan["mode"]``
    ``ping``: each trigger is one gRPC health check instead (the floor of a
    call); ``wire``: the source's requests without the source (``--client``)."""
    quiet_logs()
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from multikafka.core.transport import ConnectConfig, bearer
    from multikafka.spark._compat import ReadAllAvailable
    from multikafka.spark._options import parse_options
    from multikafka.spark._source import MultiKafkaStreamReader

    trigger_s = plan["trigger_s"]
    walls: list[float] = []
    tokens: list[str] = plan.get("tokens") or [""]
    token_files: list[str] = plan.get("token_files") or [""]

    def token_of(i: int) -> str:
        return tokens[(first + i) % len(tokens)]

    counts = {"window": 0, "all": 0, "errors": 0}
    first_error: list[str] = []
    lock = threading.Lock()

    def failed(exc: Exception) -> None:
        with lock:
            counts["errors"] += 1
            if not first_error:
                first_error.append(f"{type(exc).__name__}: {exc}"[:500])

    ready = threading.Semaphore(0)
    go = threading.Event()
    times: dict[str, float] = {}

    def triggers(i: int, trigger: Callable[[], object]) -> None:
        """Once every query is set up: call ``trigger`` once every trigger
        interval, timing each."""
        ready.release()
        go.wait()
        start, end = times["start"], times["end"]
        window = (times["window_start"], times["window_end"])
        at = start + trigger_s * (first + i) / plan["queries"] % trigger_s
        while at < end:
            time.sleep(max(0.0, at - time.time()))
            t0 = time.time()
            try:
                trigger()
            except Exception as exc:
                failed(exc)
            t1 = time.time()
            with lock:
                counts["all"] += 1
                if window[0] <= t0 and t1 <= window[1]:
                    walls.append((t1 - t0) * 1000)
                    counts["window"] += 1
            at = max(at + trigger_s, t1)

    def ping(i: int) -> None:
        channel = grpc.insecure_channel(address)
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest(service="")
        triggers(i, lambda: stub.Check(request, timeout=30))
        channel.close()

    def wire(i: int) -> None:
        """The source's requests as it sends them on its stream, each built
        from the bytes of the answer before (its start the end it was
        answered, its commit the start before that once a batch ran, its
        tasks asked): the driver's own work (offset documents, the plan's
        tasks) left out, so that a thousand queries fit on this machine
        beside the coordinator."""
        from multikafka.core import _offsets as ov
        from multikafka.core.planner_client import PlannerClient
        from multikafka.v1 import planner_pb2, planner_pb2_grpc

        try:
            resolver = PlannerClient(ConnectConfig.parse(address, token=token_of(i)))
            latest = planner_pb2.Position(kind=planner_pb2.Position.LATEST)
            start = ov.to_columns(resolver.resolve(STREAM, latest)[0])
            resolver.close()
            channel = grpc.insecure_channel(address)
            outbox: queue.SimpleQueue[planner_pb2.LatestOffsetsRequest | None] = queue.SimpleQueue()
            call = planner_pb2_grpc.PlannerStub(channel).LatestOffsetsStream(
                iter(outbox.get, None), metadata=bearer(token_of(i))
            )
        except Exception as exc:
            failed(exc)
            ready.release()
            return
        at = {"start": start, "committed": planner_pb2.OffsetColumns()}
        tasks = planner_pb2.TaskOptions(parallelism=2)

        def trigger() -> None:
            request = planner_pb2.LatestOffsetsRequest(
                stream=STREAM,
                query_id=f"load-{first + i}",
                start=at["start"],
                committed=at["committed"],
                fail_on_data_loss=True,
                tasks=tasks,
            )
            outbox.put(request)
            answer = next(call)
            at["committed"] = planner_pb2.OffsetColumns()  # sent once
            if answer.end != at["start"]:  # a batch: Spark commits it before the next
                at["committed"], at["start"] = at["start"], answer.end

        triggers(i, trigger)
        outbox.put(None)
        channel.close()

    def one(i: int) -> None:
        options = parse_options(
            {
                "coordinator": address,
                "stream": STREAM,
                "startingOffsets": "latest",
                "queryId": f"load-{first + i}",
                **(
                    {"coordinatorTokenFile": token_files[(first + i) % len(token_files)]}
                    if token_files[0]
                    else {}
                ),
            },
            streaming=True,
            parallelism=2,
        )
        try:
            reader = MultiKafkaStreamReader(options)
            at: dict[str, Any] = {"begin": reader.initialOffset(), "previous": None}
        except Exception as exc:
            failed(exc)
            ready.release()  # set up as far as it goes: the run does not wait for it
            return

        def trigger() -> None:
            """Spark's calls of a trigger, in its order."""
            begin = at["begin"]
            latest = reader.latestOffset(begin, ReadAllAvailable())
            if latest != begin:
                if at["previous"] is not None:
                    reader.commit(at["previous"])
                reader.partitions(begin, latest)
                at["previous"] = at["begin"] = latest

        triggers(i, trigger)
        reader.stop()

    def echo(i: int) -> None:
        """One message each way on a stream kept open to the bare echo
        server, the size of a trigger's request."""
        channel = grpc.insecure_channel(address)
        outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        call: Any = channel.stream_stream(ECHO_METHOD)(iter(outbox.get, None))  # type: ignore[arg-type]
        payload = b"x" * ECHO_BYTES

        def trigger() -> None:
            outbox.put(payload)
            next(call)

        triggers(i, trigger)
        outbox.put(None)
        channel.close()

    target = {"ping": ping, "wire": wire, "echo": echo}.get(plan["mode"], one)
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    for _ in threads:
        ready.acquire()
    sys.stdout.write(json.dumps({"ready": count}) + "\n")
    sys.stdout.flush()
    times.update(json.loads(sys.stdin.readline()))
    go.set()
    for t in threads:
        t.join()
    cpu = time.process_time()
    out = {"walls_ms": walls, "cpu_s": cpu, "first_error": first_error, **counts}
    sys.stdout.write(json.dumps(out) + "\n")


# -- the bare echo server (the floor of a message on a stream) -------------------------

#: The echo's method, and its message: about a trigger's ``LatestOffsetsRequest``
#: of a 100-split query (positions in columns).
ECHO_METHOD = "/bench.Echo/Stream"
ECHO_BYTES = 400


def echo_main() -> None:
    """A gRPC asyncio server with nothing but a stream that answers each
    message with itself, driven as a :class:`benchmarks.splits_scale.LineChild`:
    its address, then its usage for each line read until ``quit``."""
    import asyncio

    import grpc

    async def stream(requests: Any, context: Any) -> Any:
        async for message in requests:
            yield message

    async def serve() -> None:
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            "bench.Echo", {"Stream": grpc.stream_stream_rpc_method_handler(stream)}
        )
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        loop = asyncio.get_running_loop()
        sys.stdout.write(json.dumps({"address": f"127.0.0.1:{port}", "pid": os.getpid()}) + "\n")
        sys.stdout.flush()
        # "usage" lines until "quit" (or stdin closed: an empty line)
        while (await loop.run_in_executor(None, sys.stdin.readline)).strip() not in ("", "quit"):
            sys.stdout.write(json.dumps(process_usage()) + "\n")  # on the loop's thread
            sys.stdout.flush()
        await server.stop(0)

    asyncio.run(serve())


# -- the benchmark ----------------------------------------------------------------------


def layout(work: Path, cleanup: ExitStack) -> dict[str, tuple[str, list[str]]]:
    from multikafka.devstack import TansuBroker
    from multikafka.devstack.feed import create_topics

    out: dict[str, tuple[str, list[str]]] = {}
    for name in CLUSTERS:
        broker = TansuBroker(work, name).start()
        cleanup.callback(broker.stop)
        topics = [f"t{t}" for t in range(TOPICS)]
        create_topics(broker.bootstrap, dict.fromkeys(topics, PARTITIONS), timeout_s=120)
        out[name] = (broker.bootstrap, topics)
    return out


def produce(clusters: dict[str, tuple[str, list[str]]], stop: threading.Event) -> None:
    """About :data:`RATE` records a second, round robin over every partition."""
    from confluent_kafka import Producer

    producers = [
        (Producer({"bootstrap.servers": bs, "linger.ms": 20}), topics)
        for bs, topics in clusters.values()
    ]
    n = 0
    while not stop.wait(0.05):
        for _ in range(RATE // 20):
            producer, topics = producers[n % len(producers)]
            k = n // len(producers)
            producer.produce(topics[k % TOPICS], value=b"x" * 100, partition=k // TOPICS % 10)
            n += 1
        for producer, _ in producers:
            producer.poll(0)
    for producer, _ in producers:
        producer.flush(10)


def idle_cpu(child: LineChild, seconds: float) -> float:
    """The server's CPU-seconds per second with no query planning."""
    before = child.usage()
    time.sleep(seconds)
    after = child.usage()
    return (after["cpu_s"] - before["cpu_s"]) / seconds


def run_load(
    child: LineChild,
    n: int,
    args: argparse.Namespace,
    work: Path,
    idle_cpu_s_per_s: float,
    mode: str = "source",
    spy_to: Path | None = None,
    tokens: tuple[list[str], list[str]] | None = None,
) -> dict[str, Any]:
    """N queries for a warm-up and a window; the coordinator's CPU per
    trigger and the clients' wall times. ``tokens``: the queries' tokens
    and files holding them (spread over the queries)."""
    workers = max(1, min(args.workers, n))
    plan: dict[str, Any] = {"trigger_s": args.trigger, "queries": n, "mode": mode}
    if tokens is not None:
        plan["tokens"], plan["token_files"] = tokens
    procs = []
    first = 0
    for w in range(workers):
        count = n // workers + (w < n % workers)
        log = (work / f"q{n}-{w}.log").open("w")
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "benchmarks.planner_load",
                    "queries",
                    child.address,
                    str(count),
                    str(first),
                    json.dumps(plan),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=ROOT,
                preexec_fn=lambda: os.nice(args.nice),
            )
        )
        first += count
    # Every query set up (processes started, connected, positions resolved)
    # before the run's clock starts: else a large N may still be starting
    # when its window ends.
    for p in procs:
        assert p.stdout is not None
        if not p.stdout.readline():
            raise RuntimeError(f"a query process failed; see {work}/q{n}-*.log")
    start = time.time() + 1.0
    window_start = start + args.warmup
    window_end = window_start + args.seconds
    times = {
        "start": start,
        "window_start": window_start,
        "window_end": window_end,
        "end": window_end + args.trigger,
    }
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(json.dumps(times) + "\n")
        p.stdin.flush()
    time.sleep(max(0.0, window_start - time.time()))
    before = child.usage()
    with py_spy(child.pid, spy_to):
        time.sleep(max(0.0, window_end - time.time()))
    after = child.usage()
    walls: list[float] = []
    triggers = errors = every = 0
    client_cpu_s = 0.0
    first_errors: list[str] = []
    for p in procs:
        out, _ = p.communicate(timeout=120 + n)
        if p.returncode:
            raise RuntimeError(f"a query process failed; see {work}/q{n}-*.log")
        got = json.loads(out.strip().splitlines()[-1])
        walls += got["walls_ms"]
        triggers += got["window"]
        errors += got["errors"]
        first_errors += got["first_error"]
        every += got["all"]
        client_cpu_s += got["cpu_s"]

    def grew(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    cpu_ms = (after["cpu_s"] - before["cpu_s"]) * 1000
    loop_ms = (after["loop_cpu_s"] - before["loop_cpu_s"]) * 1000
    idle_ms = idle_cpu_s_per_s * 1000 * args.seconds
    return {
        "queries": n,
        "mode": mode,
        "workers": workers,
        "triggers": triggers,
        "errors": errors,
        "first_error": first_errors[0] if first_errors else None,
        "triggers_per_s": triggers / args.seconds,
        # The clients' own CPU per trigger (every trigger they made, start-up
        # included): what simulating N queries takes from the same machine.
        "client_cpu_ms_per_trigger": client_cpu_s * 1000 / max(every, 1),
        # Fewer triggers than asked for: the machine (clients and
        # coordinator on its cores) could not keep up.
        "saturated": triggers < 0.8 * n * args.seconds / args.trigger,
        "cpu_ms_per_trigger": cpu_ms / max(triggers, 1),
        # Above what the coordinator spends idle (heartbeats, discovery).
        "net_cpu_ms_per_trigger": max(cpu_ms - idle_ms, 0.0) / max(triggers, 1),
        "loop_cpu_ms_per_trigger": loop_ms / max(triggers, 1),
        "coordinator_cpu_share": cpu_ms / 1000 / args.seconds,
        "p50_ms": percentile(walls, 50) if walls else float("nan"),
        "p99_ms": percentile(walls, 99) if walls else float("nan"),
        "rss_mb": after["rss_mb"],
        # The leader lost its leadership (and its queries' streams) in the
        # window; its lease renewals, and those that took over 0.1 s (none
        # of these for the echo server).
        "elections": grew("elections"),
        "renewals": grew("renewals"),
        "slow_renewals": grew("renewals_over_100ms"),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    runs = [r for r in result["runs"] if not r["saturated"]]
    ns = [r["queries"] for r in runs]
    with figure(path, 1, 2, figsize=(11, 4.2)) as (fig, (left, right)):
        left.plot(ns, [r["cpu_ms_per_trigger"] for r in runs], "o-", label="coordinator process")
        left.plot(
            ns, [r["net_cpu_ms_per_trigger"] for r in runs], "o--", label="above its idle CPU"
        )
        for key, marker, color, label in (
            ("floor", "s", "tab:green", "floor: one gRPC ping"),
            ("echo", "v", "tab:olive", "floor: a message on a bare server's stream"),
        ):
            points = result.get(key, [])
            if points:
                left.plot(
                    [f["queries"] for f in points],
                    [f["net_cpu_ms_per_trigger"] for f in points],
                    marker,
                    color=color,
                    label=label,
                )
        handler = result.get("handler")
        if handler:
            left.axhline(
                handler["us_per_call"] / 1000,
                color="tab:purple",
                ls=":",
                label="the Planner alone, calls back to back (in-process)",
            )
        spaced = result.get("handler_spaced", [])
        if spaced:
            left.plot(
                [result["config"]["trigger_s"] / h["spacing_s"] for h in spaced],
                [h["us_per_call"] / 1000 for h in spaced],
                "D-",
                color="tab:purple",
                label="the Planner alone, calls as far apart as N queries'",
            )
        left.axhline(GOAL_CPU_MS, color="grey", ls="--", label=f"goal {GOAL_CPU_MS:g} ms")
        # Log scales need points: every run saturated leaves none.
        scale = "log" if runs else "linear"
        left.set_xscale(scale)
        left.set_yscale(scale)  # one query's 5-12 ms would flatten the rest
        left.set_xlabel("concurrent queries (one trigger a second)")
        left.set_ylabel("coordinator CPU per trigger (ms)")
        left.legend(fontsize="small")
        right.plot(ns, [r["p99_ms"] for r in runs], "o-", label="p99")
        right.plot(ns, [r["p50_ms"] for r in runs], "o--", label="p50")
        right.axhline(
            GOAL_P99_MS, color="grey", ls="--", label=f"goal p99 {GOAL_P99_MS:g} ms at 100"
        )
        right.set_xscale(scale)
        right.set_yscale(scale)
        right.set_xlabel("concurrent queries (one trigger a second)")
        right.set_ylabel("client wall time per trigger (ms)")
        right.legend()
        fig.suptitle("Planner load: 100-split queries against one leader")


def print_summary(result: dict[str, Any]) -> None:
    table = Table(title="planner load (100 splits per query)")
    cols = ("queries", "triggers/s", "CPU ms/trigger", "above idle", "event loop")
    for col in (*cols, "coordinator CPU", "p50 ms", "p99 ms", "client CPU ms"):
        table.add_column(col, justify="right")
    for r in result["runs"]:
        table.add_row(
            f"{r['queries']:,}",
            f"{r['triggers_per_s']:.0f}" + (" (saturated)" if r["saturated"] else ""),
            f"{r['cpu_ms_per_trigger']:.2f}",
            f"{r['net_cpu_ms_per_trigger']:.2f}",
            f"{r['loop_cpu_ms_per_trigger']:.2f}",
            f"{r['coordinator_cpu_share']:.0%}",
            f"{r['p50_ms']:.1f}",
            f"{r['p99_ms']:.1f}",
            f"{r['client_cpu_ms_per_trigger']:.2f}",
        )
    console.print(table)
    for r in result["runs"]:
        console.print(
            f"{r['queries']:,} queries: {r['slow_renewals']:.0f} of the leader's "
            f"{r['renewals']:.0f} lease renewals in the window took over 0.1 s"
        )
    for r in (*result["runs"], *result["floor"], *result.get("echo", [])):
        if r.get("elections"):
            console.print(
                f"[red]{r['mode']}, {r['queries']:,} queries: the coordinator lost its "
                f"leadership {r['elections']} time(s) and was elected again"
            )
        if r["errors"]:
            console.print(
                f"[red]{r['mode']}, {r['queries']:,} queries: {r['errors']:,} triggers failed; "
                f"the first: {r['first_error']}"
            )
    for f in result["floor"]:
        console.print(
            f"floor, {f['queries']:,} clients of one gRPC ping a second: "
            f"{f['net_cpu_ms_per_trigger']:.2f} ms of coordinator CPU per ping above idle "
            f"(event loop {f['loop_cpu_ms_per_trigger']:.2f}), p99 {f['p99_ms']:.1f} ms"
        )
    for f in result.get("echo", []):
        console.print(
            f"floor, {f['queries']:,} clients of one message a second on a stream kept open to "
            f"a bare gRPC asyncio echo server: {f['net_cpu_ms_per_trigger']:.2f} ms of its CPU "
            f"per message (event loop {f['loop_cpu_ms_per_trigger']:.2f}), p99 {f['p99_ms']:.1f} ms"
        )
    console.print(f"idle coordinator: {result['idle_cpu_s_per_s']:.1%} of a core")
    if result.get("access"):
        table = Table(title=f"access policy of {result['config']['access_principals']} principals")
        for col in (
            "queries",
            "CPU ms/trigger, none",
            "with policy",
            "ratio",
            "above idle, none",
            "with policy",
            "ratio",
            "errors",
        ):
            table.add_column(col, justify="right")
        for a in result["access"]:
            table.add_row(
                f"{a['queries']:,}",
                f"{a['none_cpu_ms_per_trigger']:.3f}",
                f"{a['policy_cpu_ms_per_trigger']:.3f}",
                f"{a['cpu_ratio']:.3f}",
                f"{a['none_net_cpu_ms_per_trigger']:.3f}",
                f"{a['policy_net_cpu_ms_per_trigger']:.3f}",
                f"{a['net_cpu_ratio']:.3f}",
                f"{a['none_errors']}/{a['policy_errors']}",
            )
        console.print(table)
        call = result.get("access_call")
        if call:
            console.print(
                "access control's own work per Planner call, in-process: "
                f"{call['us_per_call']:.2f} us of CPU ({call['calls']:,} calls, "
                f"{result['config']['access_principals']} principals)"
            )
    if "handler" in result:
        console.print(
            f"in-process, no gRPC: {result['handler']['us_per_call']:.0f} us of CPU per "
            f"LatestOffsets (tasks and commit included) of {result['handler']['queries']} queries"
        )
    for h in result.get("handler_spaced", []):
        console.print(
            f"  the same, calls {h['spacing_s'] * 1000:.2f} ms apart: {h['us_per_call']:.0f} us "
            f"per call (the loop's wake-ups alone, {h['wake_us']:.0f} us each, left out)"
        )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["queries"]:
        queries_main(argv[1], int(argv[2]), int(argv[3]), json.loads(argv[4]))
        return 0
    if argv[:1] == ["echo"]:
        echo_main()
        return 0
    parser = Arguments(
        __doc__,
        smoke={
            "queries": "1,10",
            "floor": "10",
            "warmup": 1.0,
            "seconds": 2.0,
            "workers": 2,
            "client": "wire",
        },
    )
    parser.add_argument("--queries", default="1,10,100,300,1000", help="comma-separated N")
    parser.add_argument("--trigger", type=float, default=1.0, help="seconds between triggers")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds before the window")
    parser.add_argument("--seconds", type=float, default=10.0, help="the measured window")
    parser.add_argument("--workers", type=int, default=8, help="processes of simulated queries")
    parser.add_argument("--nice", type=int, default=5, help="niceness of the query processes")
    parser.add_argument(
        "--client",
        choices=("source", "wire"),
        default="source",
        help="simulated queries: the Spark source's driver side, or its requests built from "
        "the answers' bytes (light enough for 1,000 queries on 2 cores)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the largest N")
    parser.add_argument(
        "--py-spy", action="store_true", help="py-spy the coordinator at the largest N"
    )
    parser.add_argument(
        "--floor", default="100,1000", help="N at which to measure the floor (gRPC pings)"
    )
    parser.add_argument(
        "--watermark-max-age", type=float, default=0.1, help="the coordinator's option (s)"
    )
    parser.add_argument(
        "--access",
        action="store_true",
        help="each N also against a coordinator with an access policy (and without, alternating)",
    )
    parser.add_argument("--access-rounds", type=int, default=2, help="runs of each, alternating")
    parser.add_argument("--principals", type=int, default=50, help="principals in that policy")
    args = parser.parse_args(argv)
    counts = sorted(int(x) for x in args.queries.split(",") if x.strip())
    quiet_logs()
    os.environ[WATERMARK_AGE_VARIABLE] = str(args.watermark_max_age)
    result: dict[str, Any] = {
        "benchmark": "planner_load",
        "machine": machine(),
        "config": {
            "queries": counts,
            "trigger_s": args.trigger,
            "seconds": args.seconds,
            "workers": args.workers,
            "nice": args.nice,
            "splits": len(CLUSTERS) * TOPICS * PARTITIONS,
            "records_per_s": RATE,
            "watermark_max_age_s": args.watermark_max_age,
            "client": args.client,
            "access_principals": args.principals if args.access else 0,
            "access_rounds": args.access_rounds if args.access else 0,
        },
        "runs": [],
        "floor": [],
        "echo": [],
        # The Planner alone, its calls as far apart as N queries' are.
        "handler_spaced": [],
        # --access: per N, the runs without and with a policy.
        "access": [],
    }
    console.rule("[bold]multikafka planner load")
    work = Path(tempfile.mkdtemp(prefix="multikafka-load-"))
    stop = threading.Event()
    try:
        with ExitStack() as cleanup, progress_bar() as progress:
            task = progress.add_task("starting", total=len(counts), note="etcd, tansu")
            etcd_url = cleanup.enter_context(etcd_server(work))
            clusters = layout(work, cleanup)
            feeder = threading.Thread(target=produce, args=(clusters, stop), daemon=True)
            feeder.start()
            cleanup.callback(feeder.join)
            cleanup.callback(stop.set)
            child = CoordinatorChild(etcd_url, "/load", fake=False, log=work / "coordinator.log")
            cleanup.callback(child.stop)
            _put_stream(child.address, clusters)
            progress.update(task, description="idle", note="baseline")
            idle = result["idle_cpu_s_per_s"] = idle_cpu(child, args.seconds)
            guarded: LineChild | None = None
            if args.access:
                guarded, tokens = _guarded_child(etcd_url, clusters, work, args.principals)
                cleanup.callback(guarded.stop)
                result["access_call"] = access_call_cost(work / "policy.yaml", tokens[0])
                guarded_idle = result["access_idle_cpu_s_per_s"] = idle_cpu(guarded, args.seconds)
            echo = LineChild(
                [sys.executable, "-m", "benchmarks.planner_load", "echo"],
                work / "echo.log",
                "echo server",
            )
            cleanup.callback(echo.stop)
            echo_idle = result["echo_idle_cpu_s_per_s"] = idle_cpu(echo, 2.0)
            progress.update(task, note="in-process Planner calls")
            result["handler"] = child.ask(f"handler {STREAM} {HANDLER_QUERIES} 20")
            floor_at = {int(x) for x in args.floor.split(",") if x.strip()}
            for n in counts:
                progress.update(task, description=f"{n:,} queries", note="running")
                if args.profile and n == counts[-1]:
                    child.ask("profile-start")
                spy = work / "spy.txt" if args.py_spy and n == counts[-1] else None
                result["runs"].append(run_load(child, n, args, work, idle, args.client, spy_to=spy))
                if spy is not None and spy.exists():
                    result["py_spy"] = spy_top(spy, 25)
                if args.profile and n == counts[-1]:
                    prof = OUT_DIR / "planner_load.prof"
                    result["profile_top"] = child.ask(f"profile-stop {prof}")
                if guarded is not None:
                    progress.update(task, note="with and without an access policy")
                    runs: dict[str, list[dict[str, Any]]] = {"none": [], "policy": []}
                    for _ in range(args.access_rounds):
                        runs["none"].append(run_load(child, n, args, work, idle, args.client))
                        runs["policy"].append(
                            run_load(
                                guarded, n, args, work, guarded_idle, args.client, tokens=tokens
                            )
                        )
                    result["access"].append(_access_summary(n, runs))
                if n >= SPACED_FROM:
                    progress.update(task, note="in-process Planner calls, spaced")
                    result["handler_spaced"].append(
                        child.ask(f"handler {STREAM} {HANDLER_QUERIES} 6 {args.trigger / n}")
                    )
                if n in floor_at:
                    progress.update(task, note="floor: gRPC pings")
                    result["floor"].append(run_load(child, n, args, work, idle, "ping"))
                    progress.update(task, note="floor: a bare server's stream")
                    result["echo"].append(run_load(echo, n, args, work, echo_idle, "echo"))
                progress.update(task, advance=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("planner_load", result, args, plot)
    print_summary(result)
    for kind, rows in (result.get("py_spy") or {}).items():
        console.print(f"py-spy of the coordinator process ({kind}, share of samples):")
        for row in rows[:25]:
            console.print(f"  {row['share']:6.1%} {row['function']}")
    for row in result.get("profile_top") or []:
        console.print(f"  {row['cumtime_s']:8.3f} s {row['calls']:>9} {row['function']}")
    return 0


def _guarded_child(
    etcd_url: str, clusters: dict[str, tuple[str, list[str]]], work: Path, principals: int
) -> tuple[LineChild, tuple[list[str], list[str]]]:
    """A second coordinator (prefix ``/load-access``) with a policy of
    ``principals`` readers (each of ``team-<i>-*`` and of the stream) and an
    admin; returns it and the readers' tokens and token files."""
    import secrets

    from multikafka.coordinator.access import token_sha256
    from multikafka.core import env

    tokens = [f"team-{i}-{secrets.token_hex(16)}" for i in range(principals)]
    admin = secrets.token_hex(16)
    files = []
    lines = ["principals:", f'  platform: {{token_sha256: "{token_sha256(admin)}"}}']
    grants = ["grants:", "  - {principal: platform, role: admin}"]
    for i, token in enumerate(tokens):
        lines.append(f'  team-{i}: {{token_sha256: "{token_sha256(token)}"}}')
        grants.append(
            f'  - {{principal: team-{i}, role: reader, streams: ["team-{i}-*", "{STREAM}"]}}'
        )
        path = work / f"team-{i}.token"
        path.write_text(token)
        files.append(str(path))
    policy = work / "policy.yaml"
    policy.write_text("\n".join(lines + grants) + "\n")
    os.environ[env.ACCESS_POLICY] = str(policy)
    try:
        child = CoordinatorChild(etcd_url, "/load-access", fake=False, log=work / "guarded.log")
    finally:
        del os.environ[env.ACCESS_POLICY]
    _put_stream(child.address, clusters, token=admin)
    return child, (tokens, files)


def access_call_cost(policy: Path, tokens: list[str], calls: int = 50_000) -> dict[str, float]:
    """CPU per call of what access control adds to a Planner call, in this
    process with the product's classes and the benchmark's policy: the
    interceptor's identification (header, SHA-256, the policy's lookup,
    the method's rule) and the service's per-stream decision; a token of
    each principal in turn."""
    from multikafka.coordinator.access import AccessControl, Caller, Role
    from multikafka.coordinator.api.auth import RULES, AuthInterceptor

    access = AccessControl(str(policy))
    access.load()
    interceptor = AuthInterceptor(access, mtls=False)
    method = "/multikafka.v1.Planner/LatestOffsets"
    rule = RULES[method]

    class Context:
        def __init__(self, token: str) -> None:
            self.metadata = (("user-agent", "grpc-python"), ("authorization", f"Bearer {token}"))

        def invocation_metadata(self) -> Any:
            return self.metadata

    contexts = [Context(t) for t in tokens]

    def run(n: int) -> None:
        for i in range(n):
            context = contexts[i % len(contexts)]
            caller: Caller = interceptor._caller(context, method, rule)  # type: ignore[arg-type]
            caller.require(Role.READER, STREAM)

    run(1000)  # warm: every principal's rights made once
    t0 = time.process_time()
    run(calls)
    cpu = time.process_time() - t0
    return {"calls": calls, "us_per_call": cpu / calls * 1e6}


def _access_summary(n: int, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Median CPU per trigger without and with the policy, and their ratio."""

    def median(rows: list[dict[str, Any]], key: str) -> float:
        return statistics.median(r[key] for r in rows)

    out: dict[str, Any] = {"queries": n, "runs": runs}
    for kind, rows in runs.items():
        for key in (
            "cpu_ms_per_trigger",
            "net_cpu_ms_per_trigger",
            "loop_cpu_ms_per_trigger",
            "p99_ms",
            "triggers_per_s",
        ):
            out[f"{kind}_{key}"] = median(rows, key)
        out[f"{kind}_errors"] = sum(r["errors"] for r in rows)
        out[f"{kind}_saturated"] = any(r["saturated"] for r in rows)
    out["cpu_ratio"] = out["policy_cpu_ms_per_trigger"] / max(out["none_cpu_ms_per_trigger"], 1e-9)
    out["net_cpu_ratio"] = out["policy_net_cpu_ms_per_trigger"] / max(
        out["none_net_cpu_ms_per_trigger"], 1e-9
    )
    return out


def _put_stream(address: str, clusters: dict[str, tuple[str, list[str]]], token: str = "") -> None:
    from multikafka.core.admin_client import AdminClient
    from multikafka.core.planner_client import PlannerClient
    from multikafka.core.transport import ConnectConfig
    from multikafka.devstack.stack import stream_doc
    from multikafka.v1 import planner_pb2

    with AdminClient(ConnectConfig.parse(address, token=token)) as admin:
        admin.put_stream(stream_doc(STREAM, clusters))
    planner = PlannerClient(ConnectConfig.parse(address, token=token))
    latest = planner_pb2.Position(kind=planner_pb2.Position.LATEST)
    splits = len(CLUSTERS) * TOPICS * PARTITIONS
    try:
        poll(
            lambda: len(planner.resolve(STREAM, latest)[0]) >= splits,
            timeout_s=120,
            what="splits discovered",
        )
    finally:
        planner.close()


if __name__ == "__main__":
    raise SystemExit(main())
