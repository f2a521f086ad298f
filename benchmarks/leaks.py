"""Leaks: what an agent and a coordinator hold after many comings and goings.

    python -m benchmarks.leaks [--agent-cycles 100] [--stream-cycles 1000]
        [--expiry-cycles 1000] [--repeat 3] [--out docs]

Starts etcd and two tansu clusters once, then per round a coordinator in a
process of its own and a reader agent in another (so each process's threads,
file descriptors and memory are its own), and runs three phases:

* ``agent``: ``--agent-cycles`` times, cluster ``b`` joins stream
  ``leak-agent`` (cluster ``a`` stays), the agent reads every planned range
  of both clusters (a sub-reader, i.e. a Kafka consumer, per cluster), then
  ``b`` leaves again and the agent applies that;
* ``streams``: ``--stream-cycles`` times, a new stream (a new name each
  time) is put, planned (``LatestOffsets``, which sets its per-cluster
  metrics), read marks are reported for it, and it is deleted
  (``AdminClient``); every ``--failover-every``-th stream has a standby
  cluster and fails over to it first (a status document, failover metrics
  and history entries);
* ``expiry``: ``--expiry-cycles`` agents register, subscribe, heartbeat
  with sub-reader stats and report reads (raw gRPC, in batches of
  ``--batch``), then go silent and are expired by the coordinator.

Before the phases, one warm-up of each (imports, channels and caches in
place), and every thread of the coordinator's bounded Kafka-call pool
started; the baseline is read after it. Samples along the
way: OS threads (``/proc/<pid>/task``), Python threads
(``threading.active_count``), open file descriptors (``/proc/<pid>/fd``),
resident memory (``VmRSS``) of both processes, and the sizes of the
coordinator's per-agent and per-stream state. At the end (after the last
agents expired): the same, then again after ``gc.collect()`` and glibc's
``malloc_trim(0)`` in each process, to tell memory the allocator keeps
(fragmentation) from memory still referenced (a leak). The verdict: each
resource back to its baseline within 5 %, per round; the report gives the
end/baseline ratios as median [min - max] over rounds, and CPU seconds per
cycle of each process. Results: ``benchmarks/out/leaks.json``,
``<out>/img/leaks.png``.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import argparse
import time
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
from benchmarks._processes import AgentsProcess, ProbedCoordinator, raise_fd_limit
from multikafka.core.retry import poll

if TYPE_CHECKING:
    from multikafka.core.admin_client import AdminClient
    from multikafka.devstack.stack import LocalStack
    from multikafka.reader_agent import ReadTask

TOPIC = "leak"
PARTITIONS = 2
RECORDS = 20
TOLERANCE = 0.05
#: Resources given a verdict, per process.
RESOURCES = ("os_threads", "py_threads", "fds", "rss_mib")


# -- one round --------------------------------------------------------------------------


@dataclass
class Round:
    stack: LocalStack
    coordinator: ProbedCoordinator
    agent: AgentsProcess
    admin: AdminClient
    args: argparse.Namespace
    #: A Reader stub of phase "expiry" (raw gRPC, one connection).
    expiry_stub: Any = None
    samples: list[dict[str, Any]] = field(default_factory=list)

    # -- what the processes hold ------------------------------------------------------

    def sample(self, phase: str, cycle: int) -> dict[str, Any]:
        row = {
            "phase": phase,
            "cycle": cycle,
            "coordinator": self.coordinator.call("usage"),
            "agent": self.agent.call("usage"),
            "state": self.coordinator.call("state"),
        }
        self.samples.append(row)
        return row

    def reading(self) -> dict[str, Any]:
        """Both processes now, then after gc.collect() + malloc_trim(0)."""
        out: dict[str, Any] = {}
        for name, proc in (("coordinator", self.coordinator), ("agent", self.agent)):
            out[name] = proc.call("usage")
            out[name]["trim"] = proc.call("trim")
        out["state"] = self.coordinator.call("state")
        return out

    # -- phase "agent": a cluster joins and leaves ---------------------------------------

    def agent_cycle(self, stream: str) -> None:
        from multikafka.devstack.stack import stream_doc

        a, b = self.stack.clusters["a"], self.stack.clusters["b"]
        base = stream_doc(stream, {"a": (a.bootstrap, [TOPIC])})
        full = stream_doc(stream, {"a": (a.bootstrap, [TOPIC]), "b": (b.bootstrap, [TOPIC])})
        self.admin.put_stream(full)
        tasks = self.tasks(stream)
        if not any(r.cluster == "b" for t in tasks for r in t.ranges):
            raise RuntimeError("no range of the joining cluster was planned")
        read = self.agent.call("read", tasks)
        if read < 2 * RECORDS:
            raise RuntimeError(f"the agent read {read} records, expected {2 * RECORDS}+")
        info = self.admin.put_stream(base)

        def applied() -> bool:
            t = self.agent.call("tracked")
            return bool(
                t["applied"] >= info.generation and (stream, "b") not in map(tuple, t["tracked"])
            )

        poll(applied, timeout_s=30, what="the agent applied the removal")

    def tasks(self, stream: str) -> list[ReadTask]:
        """Plan the whole stream (earliest to latest) as Spark would."""
        from multikafka.core.planner_client import PlannerClient
        from multikafka.reader_agent._options import ReadOptions
        from multikafka.reader_agent._plan import tasks_from_plan
        from multikafka.v1 import planner_pb2

        client = PlannerClient(self.coordinator.address, timeout_s=10)
        try:
            start, _ = client.resolve(
                stream, planner_pb2.Position(kind=planner_pb2.Position.EARLIEST)
            )
            end, _ = client.resolve(stream, planner_pb2.Position(kind=planner_pb2.Position.LATEST))
            plan = client.plan(
                stream, "leaks", start, end, min_partitions=1, max_records_per_partition=1_000_000
            )
        finally:
            client.close()
        options = ReadOptions(stream=stream, coordinator=self.coordinator.address)
        return tasks_from_plan(
            plan, options, coordinator=self.coordinator.address, query_id="leaks"
        )

    # -- phase "streams": a stream is put, planned, read and deleted ---------------------

    def stream_cycle(self, name: str, reader: Any, *, failover: bool) -> None:
        from multikafka.core.planner_client import PlannerClient
        from multikafka.devstack.stack import stream_doc
        from multikafka.v1 import planner_pb2, reader_pb2

        a, b = self.stack.clusters["a"], self.stack.clusters["b"]
        if failover:
            clusters = {"a": (a.bootstrap, [TOPIC]), "b": (b.bootstrap, [TOPIC])}
            self.admin.put_stream(stream_doc(name, clusters, states={"b": "STANDBY"}))
        else:
            self.admin.put_stream(stream_doc(name, {"a": (a.bootstrap, [TOPIC])}))
        client = reader.planner
        assert isinstance(client, PlannerClient)
        start, _ = client.resolve(name, planner_pb2.Position(kind=planner_pb2.Position.EARLIEST))
        client.latest(name, "leaks", start, max_records=0, cap=None, fail_on_data_loss=True)
        reader.stub.ReportReads(
            reader_pb2.ReportReadsRequest(
                agent_id=reader.agent_id,
                stream=name,
                query_id="leaks",
                marks=[
                    reader_pb2.ReadMark(split=f"a/{TOPIC}/0", last_offset=3, last_timestamp_ms=1)
                ],
            ),
            timeout=10,
        )
        if failover:  # the stream gets a status document, failover metrics and history
            self.admin.failover(name, "a", "b", strategy="identity")
        self.admin.delete_stream(name)

    # -- phase "expiry": agents come, heartbeat, report, and go silent ------------------

    def expiry_batch(self, first: int, count: int, stream: str, known: int) -> None:
        from multikafka.v1 import reader_pb2

        stub = self.expiry_stub
        calls = []
        for i in range(first, first + count):
            agent_id = f"leak-agent-{i}"
            stub.Register(
                reader_pb2.RegisterRequest(agent_id=agent_id, host="bench", pid=i), timeout=10
            )
            call = stub.Subscribe(reader_pb2.SubscribeRequest(agent_id=agent_id), timeout=60)
            snapshot = next(call)
            calls.append(call)
            stats = reader_pb2.SubReaderStats(
                stream=stream, cluster="a", records_read=10 + i, restarts=1, splits=[f"a/{TOPIC}/0"]
            )
            stub.Heartbeat(
                reader_pb2.HeartbeatRequest(
                    agent_id=agent_id, applied_generation=snapshot.generation, sub_readers=[stats]
                ),
                timeout=10,
            )
            stub.ReportReads(
                reader_pb2.ReportReadsRequest(
                    agent_id=agent_id,
                    stream=stream,
                    query_id="leaks",
                    marks=[
                        reader_pb2.ReadMark(
                            split=f"a/{TOPIC}/1", last_offset=i, last_timestamp_ms=1
                        )
                    ],
                ),
                timeout=10,
            )
        for call in calls:
            call.cancel()
        poll(
            lambda: len(self.admin.readers()) <= known,
            timeout_s=30 + self.args.ttl * 3,
            what="the silent agents expired",
            interval_s=0.2,
        )


@dataclass
class RawReader:
    """A Reader service stub that reports reads (as an agent's task would;
    it needs no registration), and a planner client: phase "streams"."""

    agent_id: str
    stub: Any
    planner: Any


@contextmanager
def raw_reader(address: str, agent_id: str) -> Iterator[RawReader]:
    import grpc

    from multikafka.core.planner_client import PlannerClient
    from multikafka.v1 import reader_pb2_grpc

    channel = grpc.insecure_channel(address)
    planner = PlannerClient(address, timeout_s=10)
    try:
        yield RawReader(agent_id, reader_pb2_grpc.ReaderStub(channel), planner)
    finally:
        planner.close()
        channel.close()


def run_round(
    stack: LocalStack, args: argparse.Namespace, index: int, progress: Any
) -> dict[str, Any]:
    import grpc

    from multikafka.core.admin_client import AdminClient
    from multikafka.devstack.stack import stream_doc
    from multikafka.v1 import reader_pb2_grpc

    with ExitStack() as cleanup:
        task = progress.add_task(f"round {index + 1}: starting", total=None, note="")
        coordinator = ProbedCoordinator(
            stack.etcd.url,
            etcd_prefix=f"/leaks-{index}",
            reader_ttl_s=args.ttl,
            heartbeat_interval_s=0.5,
            discovery_interval_s=1.0,
        ).start()
        cleanup.callback(coordinator.stop)
        agent = AgentsProcess("agent").start()
        cleanup.callback(agent.stop)
        admin = cleanup.enter_context(AdminClient(coordinator.address))
        [agent_id] = agent.call("start", coordinator.address, 1, 0.5)
        r = Round(stack, coordinator, agent, admin, args)
        channel = grpc.insecure_channel(coordinator.address)
        cleanup.callback(channel.close)
        r.expiry_stub = reader_pb2_grpc.ReaderStub(channel)
        reader = cleanup.enter_context(raw_reader(coordinator.address, "leak-reporter"))
        poll(
            lambda: agent_id in {x.agent_id for x in admin.readers() if x.subscribed},
            timeout_s=30,
            what="the agent subscribed",
        )
        # A stream that stays: the expiring agents report stats and reads of it.
        a = stack.clusters["a"]
        admin.put_stream(stream_doc("leak-base", {"a": (a.bootstrap, [TOPIC])}))
        agent_stream = f"leak-agent-{index}"

        base_known = len(admin.readers())  # the agent
        coordinator.call("warm_pool")

        progress.update(task, description=f"round {index + 1}: warm-up", total=3)
        for _ in range(2):
            r.agent_cycle(agent_stream)
        progress.advance(task)
        for i in range(10):
            r.stream_cycle(f"leak-warm-{index}-{i}", reader, failover=i % 5 == 0)
        progress.advance(task)
        r.expiry_batch(0, args.batch, "leak-base", base_known)
        progress.advance(task)

        baseline = r.reading()
        r.sample("baseline", 0)
        phases: dict[str, Any] = {}

        def phase(name: str, cycles: int, step: Callable[[int], int], every: int) -> None:
            progress.update(
                task, description=f"round {index + 1}: {name}", total=cycles, completed=0
            )
            cpu0 = {"coordinator": coordinator.call("cpu")["process"], "agent": agent.call("cpu")}
            start = time.monotonic()
            done = 0
            while done < cycles:
                n = step(done)
                done += n
                progress.advance(task, n)
                if done % every < n or done >= cycles:
                    r.sample(name, done)
            phases[name] = {
                "cycles": cycles,
                "wall_s": time.monotonic() - start,
                "coordinator_cpu_s": coordinator.call("cpu")["process"] - cpu0["coordinator"],
                "agent_cpu_s": agent.call("cpu") - cpu0["agent"],
            }

        def one_agent_cycle(_: int) -> int:
            r.agent_cycle(agent_stream)
            return 1

        def one_stream_cycle(i: int) -> int:
            r.stream_cycle(f"leak-{index}-{i}", reader, failover=i % args.failover_every == 0)
            return 1

        def one_batch(i: int) -> int:
            n = min(args.batch, args.expiry_cycles - i)
            r.expiry_batch(10_000 + i, n, "leak-base", base_known)
            return n

        phase("agent", args.agent_cycles, one_agent_cycle, 1)
        phase("streams", args.stream_cycles, one_stream_cycle, max(args.stream_cycles // 50, 1))
        phase("expiry", args.expiry_cycles, one_batch, args.batch)
        end = r.reading()
        progress.update(task, description=f"round {index + 1}: done")
        return {
            "baseline": baseline,
            "end": end,
            "phases": phases,
            "samples": r.samples,
            "verdict": verdict(baseline, end),
        }


def verdict(baseline: dict[str, Any], end: dict[str, Any]) -> dict[str, Any]:
    """end / baseline of every resource of both processes, raw and (RSS)
    after gc + malloc_trim; ``ok`` within :data:`TOLERANCE`."""
    out: dict[str, Any] = {}
    for proc in ("coordinator", "agent"):
        per: dict[str, Any] = {}
        for res in RESOURCES:
            b, e = float(baseline[proc][res]), float(end[proc][res])
            per[res] = {"baseline": b, "end": e, "ratio": e / b if b else float("nan")}
        b = float(baseline[proc]["trim"]["after_trim_mib"])
        e = float(end[proc]["trim"]["after_trim_mib"])
        per["rss_trimmed_mib"] = {"baseline": b, "end": e, "ratio": e / b}
        for row in per.values():
            row["ok"] = abs(row["ratio"] - 1) <= TOLERANCE or row["end"] <= row["baseline"]
        out[proc] = per
    out["state"] = {
        k: {
            "baseline": baseline["state"][k],
            "end": end["state"][k],
            "ok": end["state"][k] <= baseline["state"][k],
        }
        for k in baseline["state"]
    }
    return out


# -- the run ----------------------------------------------------------------------------


@contextmanager
def base_stack() -> Iterator[LocalStack]:
    from multikafka.devstack.feed import SequenceProducer, create_topics, fence
    from multikafka.devstack.stack import local_stack

    with console.status("starting etcd and two tansu clusters"):
        cm = local_stack(("a", "b"), coordinator_listen=None)
        stack = cm.__enter__()
    try:
        for c in stack.clusters.values():
            create_topics(c.bootstrap, {TOPIC: PARTITIONS})
            producer = SequenceProducer(c.bootstrap)
            try:
                producer.produce(TOPIC, PARTITIONS, c.name, range(RECORDS))
                producer.flush()
            finally:
                producer.close()
            fence(c.bootstrap, TOPIC, PARTITIONS)
        yield stack
    finally:
        cm.__exit__(None, None, None)


def run(args: argparse.Namespace) -> dict[str, Any]:
    rounds = []
    with base_stack() as stack, progress_bar() as progress:
        overall = progress.add_task("rounds", total=args.repeat, note="")
        for i in range(args.repeat):
            rounds.append(run_round(stack, args, i, progress))
            progress.advance(overall)
            v = rounds[-1]["verdict"]
            for proc in ("coordinator", "agent"):
                console.log(
                    f"round {i + 1} {proc}: "
                    + ", ".join(
                        f"{res} {v[proc][res]['baseline']:.0f}->{v[proc][res]['end']:.0f}"
                        f"{'' if v[proc][res]['ok'] else ' (!)'}"
                        for res in (*RESOURCES, "rss_trimmed_mib")
                    )
                )
    return {"rounds": rounds, "summary": summarize(rounds)}


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for proc in ("coordinator", "agent"):
        out[proc] = {}
        for res in (*RESOURCES, "rss_trimmed_mib"):
            rows = [r["verdict"][proc][res] for r in rounds]
            out[proc][res] = {
                "baseline": summary([x["baseline"] for x in rows]),
                "end": summary([x["end"] for x in rows]),
                "ratio": summary([x["ratio"] for x in rows]),
                "ok_rounds": sum(1 for x in rows if x["ok"]),
                "rounds": len(rows),
            }
        trims = [r["end"][proc]["trim"] for r in rounds]
        out[proc]["end_rss_freed_by_gc_mib"] = summary(
            [t["rss_mib"] - t["after_gc_mib"] for t in trims]
        )
        out[proc]["end_rss_freed_by_trim_mib"] = summary(
            [t["after_gc_mib"] - t["after_trim_mib"] for t in trims]
        )
    cpu: dict[str, Any] = {}
    for name in ("agent", "streams", "expiry"):
        ph = [r["phases"][name] for r in rounds]
        cpu[name] = {
            "cycles": ph[0]["cycles"],
            "coordinator_ms_per_cycle": summary(
                [p["coordinator_cpu_s"] / p["cycles"] * 1000 for p in ph]
            ),
            "agent_ms_per_cycle": summary([p["agent_cpu_s"] / p["cycles"] * 1000 for p in ph]),
            "wall_ms_per_cycle": summary([p["wall_s"] / p["cycles"] * 1000 for p in ph]),
        }
    out["cpu"] = cpu
    out["state"] = {
        k: {
            "baseline": summary([r["verdict"]["state"][k]["baseline"] for r in rounds]),
            "end": summary([r["verdict"]["state"][k]["end"] for r in rounds]),
            "ok_rounds": sum(1 for r in rounds if r["verdict"]["state"][k]["ok"]),
        }
        for k in rounds[0]["verdict"]["state"]
    }
    out["ok"] = all(
        out[p][res]["ok_rounds"] == out[p][res]["rounds"]
        for p in ("coordinator", "agent")
        for res in (*RESOURCES, "rss_trimmed_mib")
    ) and all(v["ok_rounds"] == len(rounds) for v in out["state"].values())
    return out


# -- output -----------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> None:
    panels = (
        ("os_threads", "OS threads"),
        ("fds", "open file descriptors"),
        ("rss_mib", "RSS (MiB)"),
    )
    with figure(path, 2, 3, figsize=(15, 7.5)) as (fig, axes):
        colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
        for row, proc in enumerate(("agent", "coordinator")):
            for col, (res, title) in enumerate(panels):
                ax = axes[row][col]
                for i, rnd in enumerate(result["rounds"]):
                    if proc == "agent":
                        samples = [s for s in rnd["samples"] if s["phase"] in ("baseline", "agent")]
                        xs = [s["cycle"] for s in samples]
                    else:
                        samples = rnd["samples"]
                        xs = list(range(len(samples)))
                    ys = [s[proc][res] for s in samples]
                    color = colors[i % len(colors)]
                    ax.plot(xs, ys, "-", color=color, lw=1, label=f"round {i + 1}")
                    if res == "os_threads":
                        py = [s[proc]["py_threads"] for s in samples]
                        ax.plot(
                            xs, py, ":", color=color, lw=1, label=f"round {i + 1}, Python threads"
                        )
                    base = rnd["baseline"][proc][res]
                    ax.axhspan(
                        base * (1 - TOLERANCE), base * (1 + TOLERANCE), color=color, alpha=0.08
                    )
                    if res == "rss_mib":
                        trimmed = [
                            rnd["baseline"][proc]["trim"]["after_trim_mib"],
                            rnd["end"][proc]["trim"]["after_trim_mib"],
                        ]
                        ax.plot(
                            [xs[0], xs[-1]],
                            trimmed,
                            "x",
                            color=color,
                            ms=8,
                            label=f"round {i + 1}, after gc + malloc_trim",
                        )
                if proc == "agent":
                    ax.set_xlabel("cluster add/remove cycles")
                else:
                    rnd = result["rounds"][0]
                    bounds, last = [], None
                    for j, s in enumerate(rnd["samples"]):
                        if s["phase"] != last:
                            bounds.append((j, s["phase"]))
                            last = s["phase"]
                    for j, name in bounds[1:]:
                        ax.axvline(j - 0.5, color="#7f7f7f", lw=0.6, ls="--")
                        ax.text(
                            j, ax.get_ylim()[1], f" {name}", va="top", fontsize=7, color="#555555"
                        )
                    ax.set_xlabel("samples: streams put/deleted, then agents registered/expired")
                ax.set_title(f"{proc} process: {title}")
                ax.grid(alpha=0.3)
                if col == 0:
                    ax.legend(fontsize=6)
        fig.suptitle("leaks: each resource vs cycle (shaded: baseline +/- 5 %)")


def print_summary(result: dict[str, Any]) -> None:
    s = result["summary"]
    table = Table(title="baseline vs end, median \\[min-max] over rounds (verdict: within 5 %)")
    for col in ("process", "resource", "baseline", "end", "end / baseline", "verdict"):
        table.add_column(col, justify="right")
    for proc in ("agent", "coordinator"):
        for res in (*RESOURCES, "rss_trimmed_mib"):
            row = s[proc][res]
            table.add_row(
                proc,
                res,
                median_range(row["baseline"]),
                median_range(row["end"]),
                median_range(row["ratio"], "{:.3f}"),
                f"ok {row['ok_rounds']}/{row['rounds']}",
            )
    console.print(table)
    state = Table(title="coordinator state, baseline -> end (median over rounds)")
    state.add_column("what")
    state.add_column("baseline", justify="right")
    state.add_column("end", justify="right")
    state.add_column("verdict (end <= baseline)", justify="right")
    n = len(result["rounds"])
    for k, v in s["state"].items():
        state.add_row(
            k,
            f"{v['baseline']['median']:.0f}",
            f"{v['end']['median']:.0f}",
            f"ok {v['ok_rounds']}/{n}" + ("" if v["ok_rounds"] == n else " (!)"),
        )
    console.print(state)
    cpu = Table(title="CPU ms per cycle and wall ms per cycle, median \\[min-max]")
    for col in ("phase", "cycles", "coordinator CPU", "agent CPU", "wall"):
        cpu.add_column(col, justify="right")
    for name, c in s["cpu"].items():
        cpu.add_row(
            name,
            str(c["cycles"]),
            median_range(c["coordinator_ms_per_cycle"], "{:.2f}"),
            median_range(c["agent_ms_per_cycle"], "{:.2f}"),
            median_range(c["wall_ms_per_cycle"]),
        )
    console.print(cpu)
    for proc in ("agent", "coordinator"):
        console.print(
            f"{proc}: at the end gc.collect() freed {median_range(s[proc]['end_rss_freed_by_gc_mib'])} MiB "
            f"of RSS and malloc_trim(0) {median_range(s[proc]['end_rss_freed_by_trim_mib'])} MiB more"
        )
    console.print(
        "[bold]" + ("no leak: every resource back within 5 %" if s["ok"] else "LEAK: see (!)")
    )


def main(argv: list[str] | None = None) -> int:
    parser = Arguments(
        __doc__,
        smoke={"agent_cycles": 3, "stream_cycles": 20, "expiry_cycles": 50, "repeat": 1},
        repeat=3,
    )
    parser.add_argument("--agent-cycles", type=int, default=100, help="cluster add/remove cycles")
    parser.add_argument("--stream-cycles", type=int, default=1000, help="stream put/delete cycles")
    parser.add_argument("--expiry-cycles", type=int, default=1000, help="agents registered/expired")
    parser.add_argument(
        "--failover-every", type=int, default=10, help="every Nth stream cycle fails over"
    )
    parser.add_argument("--batch", type=int, default=50, help="agents registered per expiry batch")
    parser.add_argument("--ttl", type=float, default=2.0, help="the coordinator's reader TTL, s")
    args = parser.parse_args(argv)
    if (
        min(
            args.agent_cycles,
            args.stream_cycles,
            args.expiry_cycles,
            args.batch,
            args.repeat,
            args.failover_every,
        )
        < 1
    ):
        parser.error("cycle counts, --batch and --repeat must be at least 1")
    quiet_logs()
    raise_fd_limit()
    result: dict[str, Any] = {
        "benchmark": "leaks",
        "machine": machine(),
        "config": {
            "agent_cycles": args.agent_cycles,
            "stream_cycles": args.stream_cycles,
            "expiry_cycles": args.expiry_cycles,
            "batch": args.batch,
            "failover_every": args.failover_every,
            "reader_ttl_s": args.ttl,
            "rounds": args.repeat,
            "tolerance": TOLERANCE,
        },
    }
    console.rule("[bold]multikafka leaks")
    result.update(run(args))
    finish("leaks", result, args, plot)
    print_summary(result)
    return 0 if result["summary"]["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
