"""Reconcile latency: from a metadata change to every reader agent applying it.

    python -m benchmarks.reconcile_latency [--agents 1,10,100] [--spread 1,10,100,1000]
        [--workers 8] [--changes 50] [--repeat 3] [--profile] [--py-spy] [--out docs]

Starts etcd and one tansu cluster, then measures two layouts, one after the
other, each with a coordinator of its own (own etcd prefix):

* ``one`` (``--agents``): everything in the benchmark process, as before:
  the coordinator on its event-loop thread, and every agent. One GIL for
  all: pessimistic, and the figure earlier runs were compared on.
* ``procs`` (``--spread``): the coordinator in a process of its own, the
  agents spread over ``--workers`` worker processes (at most one per agent),
  as in production where every agent lives in a Spark Python worker. The
  workers run at niceness ``--nice`` (default 10): in production agents run
  on other machines, and here a thousand agents' threads would otherwise
  take the CPU from the coordinator and etcd (the coordinator loses its
  lease) on a small machine. ``--pin`` instead puts the coordinator, etcd
  and the broker on the first CPU and the agents' workers on the others
  (``sched_setaffinity`` of every thread; niceness 0 unless ``--nice``).

Every agent is a standalone ``ReaderAgent`` with its own coordinator link
(subscription, heartbeats every ``--heartbeat`` seconds) and its own TCP
connection. For each agent count, once all are subscribed and hold the
current generation, 3 untimed changes, then ``--repeat`` rounds of
``--changes`` changes per write path, one change at a time, each flipping the
stream's topics between ``[t0]`` and ``[t0, t1]``:

* ``etcd``: the document written straight to etcd (its JSON gateway);
* ``admin``: ``AdminClient.put_stream`` (validation, the etcd write, and the
  coordinator waiting until it applied the change).

For every change:

* ``e2e``: from just before the write to the last agent applying it, as
  the agents' own apply callbacks timestamp it (CLOCK_MONOTONIC, shared by
  every process of the machine; the timestamps stay in the agents' process
  until the round ends, only a "all applied" note per process and change
  goes to the benchmark); ``first``: to the first agent;
* ``watch`` (baseline): from just before the write to a bare etcd watch on
  the key (a thread reading etcd's gateway) seeing it;
* ``coordinator``: the coordinator's own ``reconciler.latencies`` entry
  (from its watch seeing the change to the last agent's acknowledgement);
* ``fan-out``: the coordinator's ``reconciler.fanouts`` entry (from its watch
  seeing the change to the last subscription handing the event to gRPC):
  its own share of the latency, apart from the agents' and the machine's;
* ``write call``: how long the write call took.

The next change is made once the coordinator has recorded its entry (every
agent acknowledged). Per round: p50 and p99 of each; reported as the median
[min - max] over rounds. CPU: the coordinator's process (and its event-loop
thread alone) per change and per agent and change, over each round, and
the agents' processes per agent and change; the coordinator's idle CPU
(heartbeats only) is measured before the rounds and given apart.

``--profile`` adds one more round at the largest count of the last layout
with cProfile on the coordinator's event-loop thread
(``benchmarks/out/reconcile_coordinator.prof``); ``--py-spy`` samples the
coordinator's process with py-spy during it (``pip install py-spy``).
Results: ``benchmarks/out/reconcile_latency.json``, ``<out>/img/reconcile_latency.png``.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import argparse
import base64
import http.client
import json
import math
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_connections
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from benchmarks._common import (
    OUT_DIR,
    Arguments,
    console,
    figure,
    finish,
    machine,
    median_range,
    percentile,
    progress_bar,
    quiet_logs,
    summary,
)
from benchmarks._processes import (
    AgentsProcess,
    CoordinatorSide,
    Fleet,
    ProbedCoordinator,
    own_connections,
    raise_fd_limit,
)
from multikafka.core.retry import poll
from multikafka.devstack import procfs

if TYPE_CHECKING:
    from multikafka.core.admin_client import AdminClient
    from multikafka.devstack.stack import LocalStack

STREAM = "reconcile-bench"
CLUSTER = "a"
TOPICS = ("t0", "t1")
MODES = ("etcd", "admin")
LAYOUTS = ("one", "procs")
WARMUP = 3


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


class EtcdHttp:
    """A tiny client of etcd's v3 JSON gateway (a kept-alive HTTP connection)."""

    def __init__(self, port: int) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = self._conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"etcd {path}: {resp.status} {data[:200]!r}")
        result: dict[str, Any] = json.loads(data)
        return result

    def get(self, key: str) -> bytes:
        kvs = self._post("/v3/kv/range", {"key": _b64(key)}).get("kvs", [])
        if not kvs:
            raise KeyError(key)
        return base64.b64decode(kvs[0]["value"])

    def put(self, key: str, value: bytes) -> int:
        """Write; returns the revision of the write."""
        return int(
            self._post("/v3/kv/put", {"key": _b64(key), "value": _b64(value)})["header"]["revision"]
        )

    def close(self) -> None:
        self._conn.close()


class EtcdWatcher(threading.Thread):
    """Watches one key through the gateway; records when (monotonic ns) each
    revision arrived."""

    def __init__(self, port: int, key: str) -> None:
        super().__init__(name="bench-etcd-watch", daemon=True)
        self._port = port
        self._key = key
        self.seen: dict[int, int] = {}
        self.ready = threading.Event()
        self._conn: http.client.HTTPConnection | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._conn = http.client.HTTPConnection("127.0.0.1", self._port)
            body = json.dumps({"create_request": {"key": _b64(self._key)}})
            self._conn.request("POST", "/v3/watch", body, {"Content-Type": "application/json"})
            resp = self._conn.getresponse()
            while True:
                line = resp.readline()
                if not line:
                    return
                now = time.monotonic_ns()
                if not line.strip():
                    continue
                result = json.loads(line).get("result", {})
                if result.get("created"):
                    self.ready.set()
                for ev in result.get("events", []):
                    self.seen.setdefault(int(ev["kv"]["mod_revision"]), now)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            self.error = exc

    def close(self) -> None:
        conn = self._conn
        if conn is not None and conn.sock is not None:
            conn.sock.close()
        self.join(5)


# -- the coordinator, in this process or its own ---------------------------------------


class Coordinator:
    """What the benchmark asks of the coordinator, wherever it runs."""

    def __init__(self, address: str, pid: int, side: CoordinatorSide | None = None) -> None:
        self.address = address
        self.pid = pid
        self._side = side
        self.process: ProbedCoordinator | None = None

    def ask(self, command: str, *args: Any) -> Any:
        if self._side is not None:
            return self._side.commands()[command](*args)
        assert self.process is not None
        return self.process.call(command, *args)


# -- agents, in this process or spread over worker processes ---------------------------


class Agents:
    """``n`` agents with their links; ``arm`` then ``wait`` for a generation
    to be applied by all, ``times`` when each applied it."""

    def __init__(
        self,
        layout: str,
        n: int,
        coordinator: str,
        workers: int,
        heartbeat_s: float,
        *,
        own_connections: bool = True,
        nice: int = 0,
        cpus: set[int] | None = None,
    ) -> None:
        self.layout = layout
        self.n = n
        self._fleet: Fleet | None = None
        self._procs: list[AgentsProcess] = []
        self._done: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.ids: list[str] = []
        if layout == "one":
            self._fleet = Fleet(coordinator, n, heartbeat_s, self._done.put)
            self.ids = self._fleet.ids
            return
        count = min(workers, n)
        sizes = [n // count + (1 if i < n % count else 0) for i in range(count)]
        try:
            self._procs = [
                AgentsProcess(f"agents-{i}", own_connections=own_connections, nice=nice)
                for i in range(count)
            ]
            _parallel([p.start for p in self._procs])
            if cpus:
                for p in self._procs:
                    pin(p.pid, cpus)
            ids = _parallel(
                [
                    (lambda p=p, k=k: p.call("start", coordinator, k, heartbeat_s))
                    for p, k in zip(self._procs, sizes, strict=True)
                ]
            )
            self.ids = [i for part in ids for i in part]
        except BaseException:
            self.close()
            raise

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def wait_applied(self, generation: int, timeout_s: float) -> None:
        if self._fleet is not None:
            fleet = self._fleet
            poll(
                lambda: fleet.lowest() >= generation,
                timeout_s=timeout_s,
                what="the snapshot applied",
            )
            return
        _parallel([lambda p=p: p.call("wait_applied", generation, timeout_s) for p in self._procs])

    def arm(self, generation: int) -> None:
        if self._fleet is not None:
            self._fleet.arm(generation)
        else:
            for p in self._procs:
                p.call("arm", generation)

    def wait(self, generation: int, timeout_s: float = 60.0) -> None:
        """Until every agent applied ``generation`` (notes from each process)."""
        deadline = time.monotonic() + timeout_s
        if self._fleet is not None:
            while True:
                got = self._done.get(timeout=max(deadline - time.monotonic(), 0.001))
                if got == generation:
                    return
        pending = {p.child.notify: p for p in self._procs}
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"agents did not apply generation {generation}")
            for conn in wait_connections(list(pending), left):
                if conn.recv() == generation:  # type: ignore[union-attr]
                    del pending[conn]  # type: ignore[arg-type]

    def times(self, generations: list[int]) -> dict[int, list[int]]:
        if self._fleet is not None:
            return self._fleet.times(generations)
        out: dict[int, list[int]] = {g: [] for g in generations}
        for part in _parallel([lambda p=p: p.call("times", generations) for p in self._procs]):
            for g, ts in part.items():
                out[g] += ts
        return {g: sorted(ts) for g, ts in out.items()}

    def cpu(self) -> float:
        """CPU seconds of the agents' processes (0 when they share this one)."""
        return sum(_parallel([lambda p=p: p.call("cpu") for p in self._procs]))

    def close(self) -> None:
        if self._fleet is not None:
            self._fleet.close()
        _parallel([p.stop for p in self._procs])
        self._procs = []


def pin(pid: int, cpus: set[int]) -> None:
    """Every thread of process ``pid`` (and so the threads they start) on
    ``cpus``."""
    for tid in procfs.threads(pid):
        os.sched_setaffinity(tid, cpus)


def split_cpus() -> tuple[set[int], set[int]]:
    """(the coordinator's side, the agents'): the first CPU, the others."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least 2 CPUs")
    return {cpus[0]}, set(cpus[1:])


def _parallel(fns: list[Any]) -> list[Any]:
    """Call each of ``fns`` on a thread of its own; their results in order
    (the first error is raised)."""
    results: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = fns[i]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


# -- one change ------------------------------------------------------------------------


@dataclass
class Change:
    mode: str
    generation: int
    t0_ns: int
    returned_ns: int
    watch_ns: int | None
    coordinator_s: list[float] = field(default_factory=list)
    #: the coordinator's own fan-out time (seen -> last subscription handed it to gRPC)
    fanout_s: list[float] = field(default_factory=list)
    #: filled from the agents' timestamps at the end of the round
    e2e_s: float = float("nan")
    first_s: float = float("nan")

    @property
    def write_call_s(self) -> float:
        return (self.returned_ns - self.t0_ns) / 1e9

    @property
    def watch_s(self) -> float | None:
        return None if self.watch_ns is None else (self.watch_ns - self.t0_ns) / 1e9


@dataclass
class Bench:
    stack: LocalStack
    admin: AdminClient
    etcd: EtcdHttp
    watcher: EtcdWatcher
    coordinator: Coordinator
    prefix: str
    flip: int = 0

    def document(self) -> dict[str, Any]:
        from multikafka.devstack.stack import stream_doc

        self.flip ^= 1
        topics = list(TOPICS[: 1 + self.flip])
        return stream_doc(STREAM, {CLUSTER: (self.stack.clusters[CLUSTER].bootstrap, topics)})

    def write(self, mode: str) -> tuple[int, int, int]:
        """Make one change: (monotonic ns just before the write, its
        revision, monotonic ns when the call returned)."""
        doc = self.document()
        if mode == "admin":
            t0 = time.monotonic_ns()
            info = self.admin.put_stream(doc)
            return t0, int(info.generation), time.monotonic_ns()
        key = f"{self.prefix}/streams/{STREAM}"
        stored = json.loads(self.etcd.get(key))
        stored["clusters"][CLUSTER]["topics"] = doc["clusters"][CLUSTER]["topics"]
        raw = json.dumps(stored, sort_keys=True).encode()
        t0 = time.monotonic_ns()
        revision = self.etcd.put(key, raw)
        return t0, revision, time.monotonic_ns()


def measure_change(bench: Bench, agents: Agents, mode: str) -> Change:
    coordinator = bench.coordinator
    before = coordinator.ask("count")
    fanouts_before = coordinator.ask("fanout_count")
    t0, generation, returned = bench.write(mode)
    agents.arm(generation)
    agents.wait(generation)
    # The coordinator's own measurement ends with the last acknowledgement;
    # the next change starts after it.
    poll(
        lambda: coordinator.ask("count") > before,
        timeout_s=60,
        what="the coordinator's latency entry",
        interval_s=0.002,
    )
    poll(lambda: generation in bench.watcher.seen, timeout_s=10, what="the etcd watch event")
    return Change(
        mode,
        generation,
        t0,
        returned,
        bench.watcher.seen.get(generation),
        coordinator.ask("latencies", before),
        coordinator.ask("fanouts", fanouts_before),
    )


def stats(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values if not math.isnan(v)]
    return {
        "n": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "min_ms": min(ms) if ms else float("nan"),
        "max_ms": max(ms) if ms else float("nan"),
    }


@dataclass
class Round:
    """One round of ``changes`` changes of one write path."""

    mode: str
    changes: list[Change]
    wall_s: float
    coordinator_cpu_s: float
    coordinator_loop_cpu_s: float
    agents_cpu_s: float


def run_round(bench: Bench, agents: Agents, mode: str, changes: int, progress: Any) -> Round:
    cpu0 = bench.coordinator.ask("cpu")
    agents_cpu0 = agents.cpu()
    start = time.monotonic()
    measured = []
    for _ in range(changes):
        c = measure_change(bench, agents, mode)
        measured.append(c)
        progress(c)
    wall = time.monotonic() - start
    cpu1 = bench.coordinator.ask("cpu")
    agents_cpu = agents.cpu() - agents_cpu0
    times = agents.times([c.generation for c in measured])
    for c in measured:
        ts = times.get(c.generation, [])
        if len(ts) == agents.n:
            c.e2e_s = (ts[-1] - c.t0_ns) / 1e9
            c.first_s = (ts[0] - c.t0_ns) / 1e9
    return Round(
        mode,
        measured,
        wall,
        cpu1["process"] - cpu0["process"],
        cpu1["loop"] - cpu0["loop"],
        agents_cpu,
    )


def _per_change(
    rounds: list[Round], cpu: list[float], idle_rate: float
) -> tuple[list[float], list[float]]:
    """CPU seconds per change of each round: gross, and net of ``idle_rate``."""
    gross = [c / len(r.changes) for c, r in zip(cpu, rounds, strict=True)]
    net = [(c - idle_rate * r.wall_s) / len(r.changes) for c, r in zip(cpu, rounds, strict=True)]
    return gross, net


def summarize(rounds: list[Round], n: int, idle: dict[str, float]) -> dict[str, Any]:
    """Per write path: each measure's p50 and p99 per round, as median
    [min - max] over rounds; the pooled percentiles; CPU per change (the
    coordinator's: gross, and net of its idle rate over the round's wall time)."""
    out: dict[str, Any] = {}
    for mode in MODES:
        rs = [r for r in rounds if r.mode == mode]
        if not rs:
            continue
        per_round: dict[str, list[dict[str, float]]] = {}
        for r in rs:
            cs = r.changes
            per_round.setdefault("e2e", []).append(stats([c.e2e_s for c in cs]))
            per_round.setdefault("first_agent", []).append(stats([c.first_s for c in cs]))
            per_round.setdefault("watch", []).append(
                stats([c.watch_s for c in cs if c.watch_s is not None])
            )
            per_round.setdefault("coordinator", []).append(
                stats([x for c in cs for x in c.coordinator_s])
            )
            per_round.setdefault("write_call", []).append(stats([c.write_call_s for c in cs]))
            per_round.setdefault("fanout", []).append(stats([x for c in cs for x in c.fanout_s]))
        entry: dict[str, Any] = {}
        for key, rows in per_round.items():
            entry[key] = {
                "p50_ms": summary([row["p50_ms"] for row in rows]),
                "p99_ms": summary([row["p99_ms"] for row in rows]),
            }
        every = [c for r in rs for c in r.changes]
        entry["pooled"] = {
            "e2e": stats([c.e2e_s for c in every]),
            "watch": stats([c.watch_s for c in every if c.watch_s is not None]),
            "coordinator": stats([x for c in every for x in c.coordinator_s]),
        }
        ratios = [percentile([c.e2e_s / c.watch_s for c in r.changes if c.watch_s], 50) for r in rs]
        entry["e2e_over_watch_p50"] = summary(ratios)
        proc_gross, proc_net = _per_change(rs, [r.coordinator_cpu_s for r in rs], idle["process"])
        loop_gross, loop_net = _per_change(rs, [r.coordinator_loop_cpu_s for r in rs], idle["loop"])
        entry["cpu"] = {
            "coordinator_ms_per_change": summary([x * 1000 for x in proc_gross]),
            "coordinator_net_ms_per_change": summary([x * 1000 for x in proc_net]),
            "coordinator_net_us_per_agent_change": summary([x * 1e6 / n for x in proc_net]),
            "loop_ms_per_change": summary([x * 1000 for x in loop_gross]),
            "loop_net_ms_per_change": summary([x * 1000 for x in loop_net]),
            "loop_net_us_per_agent_change": summary([x * 1e6 / n for x in loop_net]),
            "agents_us_per_agent_change": summary(
                [r.agents_cpu_s / len(r.changes) / n * 1e6 for r in rs]
            ),
            "agents_net_us_per_agent_change": summary(
                [
                    (r.agents_cpu_s - idle["agents"] * r.wall_s) / len(r.changes) / n * 1e6
                    for r in rs
                ]
            ),
        }
        entry["missing_timestamps"] = sum(1 for c in every if math.isnan(c.e2e_s))
        out[mode] = entry
    out["coordinator_idle_cpu_per_s"] = idle
    return out


# -- the stack and the layouts ---------------------------------------------------------


@contextmanager
def base_stack() -> Iterator[LocalStack]:
    from multikafka.devstack.feed import create_topics
    from multikafka.devstack.stack import local_stack

    with console.status("starting etcd and a tansu cluster"):
        stack_cm = local_stack((CLUSTER,), coordinator_listen=None)
        stack = stack_cm.__enter__()
    try:
        create_topics(stack.clusters[CLUSTER].bootstrap, {t: 1 for t in TOPICS})
        yield stack
    finally:
        stack_cm.__exit__(None, None, None)


@contextmanager
def layout_bench(
    stack: LocalStack, layout: str, heartbeat_s: float, pinned: bool = False
) -> Iterator[Bench]:
    """A coordinator for ``layout`` (own prefix), an admin client, the etcd
    gateway client and the watcher of the stream's key."""
    from multikafka.coordinator import CoordinatorConfig, EtcdEndpoint
    from multikafka.core.admin_client import AdminClient
    from multikafka.devstack.processes import CoordinatorThread

    prefix = f"/reconcile-{layout}"
    config: dict[str, Any] = {
        "etcd_prefix": prefix,
        "heartbeat_interval_s": heartbeat_s,
        "reader_ttl_s": max(5.0, 10 * heartbeat_s),
    }
    with ExitStack() as cleanup:
        with console.status(f"starting the coordinator ({layout})"):
            if layout == "one":
                cfg = CoordinatorConfig(
                    etcd=EtcdEndpoint.parse(stack.etcd.url), listen="127.0.0.1:0", **config
                )
                thread = CoordinatorThread(cfg).start()
                cleanup.callback(thread.stop)
                coordinator = Coordinator(thread.address, os.getpid(), CoordinatorSide(thread))
            else:
                proc = ProbedCoordinator(stack.etcd.url, **config).start()
                cleanup.callback(proc.stop)
                if pinned:
                    side = split_cpus()[0]
                    for pid in (
                        proc.pid,
                        stack.etcd.process.pid,
                        stack.clusters[CLUSTER].process.pid,
                    ):
                        pin(pid, side)
                coordinator = Coordinator(proc.address, proc.pid)
                coordinator.process = proc
        admin = cleanup.enter_context(AdminClient(coordinator.address))
        etcd = EtcdHttp(stack.etcd.port)
        cleanup.callback(etcd.close)
        watcher = EtcdWatcher(stack.etcd.port, f"{prefix}/streams/{STREAM}")
        watcher.start()
        cleanup.callback(watcher.close)
        if not watcher.ready.wait(10):
            raise TimeoutError(f"etcd watch did not start: {watcher.error}")
        bench = Bench(stack, admin, etcd, watcher, coordinator, prefix)
        admin.put_stream(bench.document())
        yield bench


def start_agents(bench: Bench, args: argparse.Namespace, layout: str, n: int) -> Agents:
    agents = Agents(
        layout,
        n,
        bench.coordinator.address,
        args.workers,
        args.heartbeat,
        own_connections=not args.shared_connections,
        nice=args.nice,
        cpus=split_cpus()[1] if args.pin and layout == "procs" else None,
    )
    try:
        ids = set(agents.ids)
        poll(
            lambda: ids <= {r.agent_id for r in bench.admin.readers() if r.subscribed},
            timeout_s=60 + n / 5,
            what=f"{n} agents subscribed",
            interval_s=0.2,
        )
        agents.wait_applied(bench.coordinator.ask("generation"), 60)
    except BaseException:
        agents.close()
        raise
    return agents


def idle_cpu(bench: Bench, agents: Agents, seconds: float) -> dict[str, float]:
    """CPU seconds per second with nothing changing (heartbeats): the
    coordinator's (process, loop thread) and the agents' processes'."""
    before = bench.coordinator.ask("cpu")
    agents_before = agents.cpu()
    time.sleep(seconds)
    after = bench.coordinator.ask("cpu")
    out = {k: (after[k] - before[k]) / seconds for k in before}
    out["agents"] = (agents.cpu() - agents_before) / seconds
    return out


def run_count(
    bench: Bench, args: argparse.Namespace, layout: str, n: int, progress: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    task = progress.add_task(f"{layout} {n} agents: starting", total=None, note="")
    agents = start_agents(bench, args, layout, n)
    rounds: list[Round] = []
    try:
        progress.update(task, description=f"{layout} {n}: warm-up", total=WARMUP)
        for _ in range(WARMUP):
            measure_change(bench, agents, "admin")
            progress.advance(task)
        idle = idle_cpu(bench, agents, args.idle)
        total = args.repeat * len(args.modes) * args.changes
        progress.update(task, description=f"{layout} {n} agents", total=total, completed=0)

        def step(c: Change) -> None:
            progress.update(task, advance=1, note=f"{c.mode} write {c.write_call_s * 1000:.1f} ms")

        for _ in range(args.repeat):
            for mode in args.modes:
                rounds.append(run_round(bench, agents, mode, args.changes, step))
    finally:
        progress.update(task, description=f"{layout} {n}: closing", note="")
        agents.close()
    poll(
        lambda: not any(r.subscribed for r in bench.admin.readers()),
        timeout_s=120,
        what="agents unsubscribed",
    )
    result = summarize(rounds, n, idle)
    progress.update(task, description=f"{layout} {n} agents: done")
    for mode in args.modes:
        s = result[mode]
        console.log(
            f"{layout:<5} {n:>4} agents {mode:<5} e2e p50 {s['e2e']['p50_ms']['median']:.1f} "
            f"p99 {s['e2e']['p99_ms']['median']:.1f} ms | watch p50 "
            f"{s['watch']['p50_ms']['median']:.2f} ms | coordinator loop CPU "
            f"{s['cpu']['loop_ms_per_change']['median']:.1f} ms/change"
        )
    raw = [
        {
            "round": i,
            "mode": r.mode,
            "wall_s": r.wall_s,
            "coordinator_cpu_s": r.coordinator_cpu_s,
            "coordinator_loop_cpu_s": r.coordinator_loop_cpu_s,
            "agents_cpu_s": r.agents_cpu_s,
            "changes": [
                {
                    "generation": c.generation,
                    "e2e_s": c.e2e_s,
                    "first_s": c.first_s,
                    "watch_s": c.watch_s,
                    "write_call_s": c.write_call_s,
                    "coordinator_s": c.coordinator_s,
                    "fanout_s": c.fanout_s,
                }
                for c in r.changes
            ],
        }
        for i, r in enumerate(rounds)
    ]
    return result, raw


def _py_spy(pid: int, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling process ``pid`` into ``out`` (raw collapsed stacks)
    until sent SIGINT."""
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen(
        [
            *(exe, "record", "--pid", str(pid), "--rate", "100"),
            *("--format", "raw", "--output", str(out), "--nonblocking"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def profile_round(bench: Bench, args: argparse.Namespace, layout: str, n: int) -> dict[str, Any]:
    """One more round at ``n`` agents with cProfile on the coordinator's
    loop thread; with ``--py-spy`` also py-spy on the coordinator's process
    and on one of the agents' processes."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    agents = start_agents(bench, args, layout, n)
    spies: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}
    out: dict[str, Any] = {"layout": layout, "agents": n}
    try:
        for _ in range(WARMUP):
            measure_change(bench, agents, "etcd")
        if args.py_spy:
            targets = {"coordinator": bench.coordinator.pid}
            if agents.pids:
                targets["agents"] = agents.pids[0]
            for name, pid in targets.items():
                path = OUT_DIR / f"reconcile_{name}.pyspy.txt"
                spies[name] = (_py_spy(pid, path), path)
            time.sleep(1.0)  # py-spy attaches
        bench.coordinator.ask("profile_start")
        with console.status(f"profiling the coordinator: {args.changes} changes, {n} agents"):
            for _ in range(args.changes):
                measure_change(bench, agents, "etcd")
        prof = OUT_DIR / "reconcile_coordinator.prof"
        out["cprofile_top"] = bench.coordinator.ask("profile_stop", str(prof))
        out["cprofile_file"] = str(prof)
    finally:
        for spy, _ in spies.values():
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        agents.close()
    for name, (_, path) in spies.items():
        if path.exists():
            out[f"py_spy_{name}"] = pyspy_top(path)
            out[f"py_spy_{name}_file"] = str(path)
    poll(
        lambda: not any(r.subscribed for r in bench.admin.readers()),
        timeout_s=120,
        what="agents unsubscribed",
    )
    return out


def pyspy_top(path: Path, top: int = 25) -> dict[str, Any]:
    """Own and inclusive shares of py-spy's samples (raw collapsed stacks)."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for f in set(frames):
            inclusive[f] = inclusive.get(f, 0) + n

    def share(d: dict[str, int]) -> list[dict[str, Any]]:
        rows = sorted(d.items(), key=lambda kv: kv[1], reverse=True)[:top]
        return [{"frame": f, "share": c / total} for f, c in rows] if total else []

    return {"samples": total, "own": share(own), "inclusive": share(inclusive)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    plan = [("one", n) for n in args.agents] + [("procs", n) for n in args.spread]
    layouts: dict[str, dict[str, Any]] = {}
    raw: dict[str, dict[str, Any]] = {}
    profile: dict[str, Any] = {}
    with base_stack() as stack, progress_bar() as progress:
        overall = progress.add_task("layouts and counts", total=len(plan), note="")
        for layout in LAYOUTS:
            counts = [n for lay, n in plan if lay == layout]
            if not counts:
                continue
            with layout_bench(stack, layout, args.heartbeat, args.pin) as bench:
                for n in counts:
                    result, rounds = run_count(bench, args, layout, n, progress)
                    layouts.setdefault(layout, {})[str(n)] = result
                    raw.setdefault(layout, {})[str(n)] = rounds
                    progress.advance(overall)
                last = layout == [lay for lay in LAYOUTS if any(p[0] == lay for p in plan)][-1]
                if last and (args.profile or args.py_spy):
                    try:
                        profile = profile_round(bench, args, layout, max(counts))
                    except Exception as exc:  # a diagnostic: the measurements stand
                        console.log(f"[red]profiling round failed: {exc!r}")
                        profile = {"layout": layout, "agents": max(counts), "error": repr(exc)}
    return {"layouts": layouts, "rounds": raw, "profile": profile}


# -- output ----------------------------------------------------------------------------


def plot(result: dict[str, Any], path: Path) -> None:
    layouts = result["summary"]["layouts"]
    modes = [m for m in MODES if m in result["config"]["modes"]]
    with figure(path, 1, len(modes), figsize=(6.5 * len(modes), 5), squeeze=False) as (_fig, axes):
        styles = {
            "one": ("#1f77b4", "one process (coordinator thread + agents)"),
            "procs": ("#2ca02c", "coordinator process + agents in worker processes"),
        }
        all_counts: set[int] = set()
        for ax, mode in zip(axes[0], modes, strict=True):
            for layout, per in layouts.items():
                counts = sorted(int(n) for n in per if mode in per[n])
                all_counts.update(counts)
                color, label = styles[layout]
                for pct, marker, alpha in (("p50_ms", "o-", 1.0), ("p99_ms", "s--", 0.7)):
                    med = [per[str(n)][mode]["e2e"][pct]["median"] for n in counts]
                    lo = [
                        m - per[str(n)][mode]["e2e"][pct]["min"]
                        for m, n in zip(med, counts, strict=True)
                    ]
                    hi = [
                        per[str(n)][mode]["e2e"][pct]["max"] - m
                        for m, n in zip(med, counts, strict=True)
                    ]
                    ax.errorbar(
                        counts,
                        med,
                        yerr=[lo, hi],
                        fmt=marker,
                        color=color,
                        alpha=alpha,
                        capsize=3,
                        label=f"write -> all applied {pct[:3]}, {label}",
                    )
                fanout = [per[str(n)][mode]["fanout"]["p50_ms"]["median"] for n in counts]
                if not all(math.isnan(x) for x in fanout):
                    ax.plot(
                        counts,
                        fanout,
                        "v-.",
                        color=color,
                        alpha=0.6,
                        label=f"coordinator fan-out p50 (its own share), {layout}",
                    )
                coord = [per[str(n)][mode]["coordinator"]["p50_ms"]["median"] for n in counts]
                ax.plot(
                    counts,
                    coord,
                    "^:",
                    color=color,
                    alpha=0.6,
                    label=f"coordinator-measured p50, {layout}",
                )
            for layout, per in layouts.items():
                counts = sorted(int(n) for n in per if mode in per[n])
                watch = [per[str(n)][mode]["watch"]["p50_ms"]["median"] for n in counts]
                ax.plot(
                    counts,
                    watch,
                    "x-",
                    color="#7f7f7f",
                    label=f"bare etcd watch p50 (baseline), {layout}",
                )
            ax.axhline(
                250, color="#d62728", lw=0.8, ls="-.", label="goal: p99 250 ms at 1,000 agents"
            )
            ax.set_xscale("log")
            ax.set_yscale("log")
            ticks = sorted(all_counts)
            ax.set_xticks(ticks)
            ax.set_xticklabels([str(n) for n in ticks])
            ax.set_xlabel("reader agents (each with its own link and connection)")
            ax.set_ylabel("ms (median of rounds; bars: min - max)")
            what = "direct etcd write" if mode == "etcd" else "AdminClient.put_stream"
            ax.set_title(f"reconcile latency, {what}")
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=6.5)


def print_summary(result: dict[str, Any]) -> None:
    latency = Table(title="reconcile latency (ms), median \\[min-max] over rounds")
    for col in (
        "layout",
        "agents",
        "write",
        "e2e p50",
        "e2e p99",
        "first agent p50",
        "coordinator p50",
        "fan-out p50",
        "etcd watch p50",
        "write call p50",
        "e2e/watch p50",
    ):
        latency.add_column(col, justify="right")
    cpu = Table(title="CPU per change (ms) and per agent and change (us), median \\[min-max]")
    for col in (
        "layout",
        "agents",
        "write",
        "coordinator process",
        "net of idle",
        "net per agent",
        "loop thread",
        "loop net per agent",
        "agents' processes per agent",
        "agents net per agent",
    ):
        cpu.add_column(col, justify="right")
    for layout, per in result["summary"]["layouts"].items():
        for n, per_mode in per.items():
            for mode in MODES:
                s = per_mode.get(mode)
                if s is None:
                    continue
                c = s["cpu"]
                latency.add_row(
                    layout,
                    n,
                    mode,
                    median_range(s["e2e"]["p50_ms"]),
                    median_range(s["e2e"]["p99_ms"]),
                    median_range(s["first_agent"]["p50_ms"]),
                    median_range(s["coordinator"]["p50_ms"]),
                    median_range(s["fanout"]["p50_ms"]),
                    median_range(s["watch"]["p50_ms"], "{:.2f}"),
                    median_range(s["write_call"]["p50_ms"]),
                    f"{s['e2e_over_watch_p50']['median']:.1f}x",
                )
                one = layout == "one"
                cpu.add_row(
                    layout,
                    n,
                    mode,
                    "-" if one else median_range(c["coordinator_ms_per_change"]),
                    "-" if one else median_range(c["coordinator_net_ms_per_change"]),
                    "-"
                    if one
                    else median_range(c["coordinator_net_us_per_agent_change"], "{:.0f}"),
                    median_range(c["loop_ms_per_change"]),
                    median_range(c["loop_net_us_per_agent_change"], "{:.0f}"),
                    "-" if one else median_range(c["agents_us_per_agent_change"], "{:.0f}"),
                    "-" if one else median_range(c["agents_net_us_per_agent_change"], "{:.0f}"),
                )
    console.print(latency)
    console.print(cpu)
    prof = result["summary"].get("profile") or {}
    if prof.get("cprofile_top"):
        t = Table(
            title=f"coordinator loop thread, cProfile, {prof['agents']} agents ({prof['layout']})"
        )
        for col in ("function", "calls", "own s", "cum s"):
            t.add_column(col, justify="right" if col != "function" else "left")
        for row in prof["cprofile_top"][:15]:
            t.add_row(
                row["function"], str(row["calls"]), f"{row['own_s']:.3f}", f"{row['cum_s']:.3f}"
            )
        console.print(t)
    for name in ("coordinator", "agents"):
        spy = prof.get(f"py_spy_{name}")
        if not spy:
            continue
        t = Table(title=f"{name} process, py-spy, {spy['samples']} samples: own / inclusive")
        t.add_column("own: frame")
        t.add_column("share", justify="right")
        t.add_column("inclusive: frame")
        t.add_column("share", justify="right")
        for own, inc in zip(spy["own"][:15], spy["inclusive"][:15], strict=False):
            t.add_row(own["frame"], f"{own['share']:.1%}", inc["frame"], f"{inc['share']:.1%}")
        console.print(t)


def _counts(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = Arguments(
        __doc__,
        smoke={
            "agents": "1,10",
            "spread": "10",
            "workers": 2,
            "changes": 3,
            "repeat": 1,
            "idle": 0.5,
        },
        repeat=3,
    )
    parser.add_argument(
        "--agents", default="1,10,100", help="agent counts, all in this process ('' for none)"
    )
    parser.add_argument(
        "--spread",
        default="1,10,100,1000",
        help="agent counts spread over worker processes, coordinator in its own ('' for none)",
    )
    parser.add_argument("--workers", type=int, default=8, help="worker processes for --spread")
    parser.add_argument("--changes", type=int, default=50, help="changes per round and write path")
    parser.add_argument("--modes", default=",".join(MODES), help="write paths: etcd,admin")
    parser.add_argument(
        "--heartbeat", type=float, default=2.0, help="agents' heartbeat, seconds (product default)"
    )
    parser.add_argument("--idle", type=float, default=2.0, help="seconds of idle CPU measurement")
    parser.add_argument(
        "--shared-connections",
        action="store_true",
        help="let the agents of a process share one TCP connection (gRPC's default pool)",
    )
    parser.add_argument(
        "--nice",
        type=int,
        default=10,
        help="niceness of the agents' worker processes (0: compete with the coordinator)",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="procs: coordinator, etcd and broker on the first CPU, agents on the others",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the coordinator")
    parser.add_argument("--py-spy", action="store_true", help="py-spy the coordinator process")
    args = parser.parse_args(argv)
    args.agents = _counts(args.agents)
    args.spread = _counts(args.spread)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(args.modes) <= set(MODES):
        parser.error(f"--modes: choose from {', '.join(MODES)}")
    if args.repeat < 1 or args.changes < 1:
        parser.error("--repeat and --changes must be at least 1")
    quiet_logs()
    fd_limit = raise_fd_limit()
    if not args.shared_connections:
        own_connections()  # for the agents of this process (layout "one")
    result: dict[str, Any] = {
        "benchmark": "reconcile_latency",
        "machine": machine(),
        "config": {
            "agents_one_process": args.agents,
            "agents_spread": args.spread,
            "workers": args.workers,
            "changes_per_round": args.changes,
            "rounds": args.repeat,
            "warmup": WARMUP,
            "modes": args.modes,
            "agent_heartbeat_s": args.heartbeat,
            "own_connections": not args.shared_connections,
            "agents_nice": args.nice,
            "pinned": args.pin,
            "fd_limit": fd_limit,
        },
    }
    console.rule("[bold]multikafka reconcile latency")
    measured = run(args)
    result["summary"] = {"layouts": measured["layouts"], "profile": measured["profile"]}
    result["rounds"] = measured["rounds"]
    finish("reconcile_latency", result, args, plot)
    print_summary(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
