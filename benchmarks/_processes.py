"""Processes of the reconcile and leak benchmarks: a coordinator of its own,
and reader agents in worker processes, each driven over a pipe.

In production the coordinator is a process of its own and every reader agent
lives in a Spark Python worker. To measure either one (its CPU, threads, file
descriptors, memory) it must not share a process with the benchmark, and 1,000
agents must not share one GIL. :class:`Child` starts a ``spawn`` process (no
fork: gRPC's threads do not survive one) that answers commands sent over a
pipe; :func:`coordinator_main` and :func:`agents_main` are the two kinds.

:class:`Fleet` is a set of reader agents that timestamp every event they apply
(``time.monotonic_ns``: CLOCK_MONOTONIC, one clock for every process of the
machine) and say when all of them applied a generation, through a callback the
benchmark gives (a pipe to the parent in a worker process). The timestamps
stay in the worker until the benchmark asks for them, so reporting costs the
agents nothing while they are measured.
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import gc
import logging
import multiprocessing
import os
import resource
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from multikafka.core.retry import poll
from multikafka.devstack import procfs

if TYPE_CHECKING:
    from multikafka.devstack.processes import CoordinatorThread
    from multikafka.reader_agent import ReadTask
    from multikafka.v1 import reader_pb2

logger = logging.getLogger(__name__)


def raise_fd_limit() -> int:
    """Raise this process's soft limit of open files to the hard one (a
    thousand agents hold a thousand connections); returns the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def thread_cpu_s(ident: int) -> float:
    """CPU seconds of one thread of this process (``Thread.ident``)."""
    return time.clock_gettime(time.pthread_getcpuclockid(ident))


def own_usage() -> dict[str, Any]:
    """:func:`~multikafka.devstack.procfs.usage` of this process, with Python's view of its threads
    (how many, and how many of each name without its number)."""
    names: dict[str, int] = {}
    for t in threading.enumerate():
        name = t.name.rstrip("0123456789").rstrip("_-")
        names[name] = names.get(name, 0) + 1
    return {**procfs.usage(), "py_threads": threading.active_count(), "thread_names": names}


def trim() -> dict[str, float]:
    """RSS before and after ``gc.collect()`` and glibc's ``malloc_trim(0)``:
    memory the allocator keeps after it was freed is not a leak."""
    before = procfs.memory_mib()
    gc.collect()
    after_gc = procfs.memory_mib()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return {"rss_mib": before, "after_gc_mib": after_gc, "after_trim_mib": procfs.memory_mib()}


def own_connections() -> None:
    """Give every gRPC channel made from now on in this process a TCP
    connection of its own, as agents in separate processes have (gRPC's
    global subchannel pool would otherwise put every agent of a process on
    one connection). Benchmark-side only; the product is unchanged."""
    from multikafka.core import transport

    transport._OPTIONS = (*transport._OPTIONS, ("grpc.use_local_subchannel_pool", 1))


# -- a process driven over a pipe ------------------------------------------------------


def serve(conn: Connection, commands: dict[str, Callable[..., Any]], ready: Any) -> None:
    """Answer ``(command, args)`` from ``conn`` until told to exit: ("ok",
    result) or ("error", text)."""
    conn.send(("ready", ready))
    while True:
        try:
            command, args = conn.recv()
        except EOFError:
            return
        if command == "exit":
            conn.send(("ok", None))
            return
        try:
            conn.send(("ok", commands[command](*args)))
        except Exception as exc:
            conn.send(("error", f"{command}: {exc!r}\n{traceback.format_exc()}"))


class Child:
    """A ``spawn`` process running ``target(conn, notify, *args)``, which
    calls :func:`serve` on ``conn`` and may send notifications on
    ``notify``."""

    def __init__(self, name: str, target: Callable[..., None], *args: Any) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.name = name
        self.conn, child = ctx.Pipe()
        self.notify, child_notify = ctx.Pipe(duplex=False)
        self._process = ctx.Process(
            target=target, args=(child, child_notify, *args), name=name, daemon=True
        )
        self._lock = threading.Lock()
        self.info: Any = None

    @property
    def pid(self) -> int:
        return self._process.pid or 0

    def start(self, timeout_s: float = 120.0) -> Child:
        self._process.start()
        if not self.conn.poll(timeout_s):
            self.kill()
            raise TimeoutError(f"{self.name} did not start within {timeout_s}s")
        kind, self.info = self.conn.recv()
        if kind != "ready":
            self.kill()
            raise RuntimeError(f"{self.name} failed to start: {self.info}")
        return self

    def call(self, command: str, *args: Any, timeout_s: float = 300.0) -> Any:
        with self._lock:
            self.conn.send((command, args))
            if not self.conn.poll(timeout_s):
                raise TimeoutError(f"{self.name}: {command} took over {timeout_s}s")
            kind, result = self.conn.recv()
        if kind != "ok":
            raise RuntimeError(f"{self.name}: {result}")
        return result

    def stop(self, timeout_s: float = 60.0) -> None:
        if self._process.is_alive():
            with contextlib.suppress(Exception):
                self.call("exit", timeout_s=timeout_s)
            self._process.join(timeout_s)
        self.kill()

    def kill(self) -> None:
        if self._process.is_alive():
            self._process.kill()
            self._process.join(10)
        self.conn.close()
        self.notify.close()


def _child_setup() -> None:
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
    from benchmarks._common import quiet_logs

    quiet_logs()
    raise_fd_limit()


# -- the coordinator's process ---------------------------------------------------------


def coordinator_main(
    conn: Connection, notify: Connection, etcd_url: str, config: dict[str, Any]
) -> None:
    """A coordinator (its own event loop thread, as in production) in this
    process, answering the benchmark's commands."""
    _child_setup()
    from multikafka.coordinator import CoordinatorConfig, EtcdEndpoint
    from multikafka.devstack.processes import CoordinatorThread

    cfg = CoordinatorConfig(etcd=EtcdEndpoint.parse(etcd_url), listen="127.0.0.1:0", **config)
    thread = CoordinatorThread(cfg).start()
    side = CoordinatorSide(thread)
    try:
        serve(conn, side.commands(), {"address": thread.address, "pid": os.getpid()})
    finally:
        thread.stop()


class CoordinatorSide:
    """What the benchmark asks a coordinator (in its process, or in the
    benchmark's own when everything shares one)."""

    def __init__(self, thread: CoordinatorThread) -> None:
        self.thread = thread
        self._profile: Any = None

    @property
    def loop_ident(self) -> int:
        """Thread identifier of the coordinator's event loop."""
        for t in threading.enumerate():
            if t.name == "coordinator" and t.ident is not None:
                return t.ident
        raise RuntimeError("no coordinator thread")

    def _duties(self) -> Any:
        coordinator = self.thread.coordinator
        if coordinator is None:
            raise RuntimeError("no coordinator")
        return coordinator.leading()

    def commands(self) -> dict[str, Callable[..., Any]]:
        return {
            "latencies": self.latencies,
            "count": self.count,
            "fanouts": self.fanouts,
            "fanout_count": lambda: len(getattr(self._duties().reconciler, "fanouts", ())),
            "generation": lambda: self._duties().reconciler.generation,
            "cpu": self.cpu,
            "usage": own_usage,
            "trim": trim,
            "state": self.state,
            "profile_start": self.profile_start,
            "profile_stop": self.profile_stop,
            "warm_pool": self.warm_pool,
        }

    def warm_pool(self) -> int:
        """Start every thread of the coordinator's Kafka-call pool (a
        ThreadPoolExecutor starts them as calls overlap, up to its size), so
        that a pool growing to its bound is not read as a leak."""
        coordinator = self.thread.coordinator
        if coordinator is None:
            raise RuntimeError("no coordinator")
        pool = coordinator._executor
        size = int(pool._max_workers)  # type: ignore[attr-defined]
        barrier = threading.Barrier(size + 1)
        futures = [pool.submit(barrier.wait, 30) for _ in range(size)]
        barrier.wait(30)
        for f in futures:
            f.result()
        return size

    def latencies(self, since: int) -> list[float]:
        """The coordinator's own reconcile latencies, from entry ``since`` on
        (a deque of bounded length: the benchmark stays far below it)."""
        return list(self._duties().reconciler.latencies)[since:]

    def fanouts(self, since: int) -> list[float]:
        """The coordinator's fan-out times (to the last subscription having
        sent the event), from entry ``since`` on (none before they existed)."""
        return list(getattr(self._duties().reconciler, "fanouts", ()))[since:]

    def count(self) -> int:
        return len(self._duties().reconciler.latencies)

    def cpu(self) -> dict[str, float]:
        """CPU seconds of this process and of the coordinator's loop thread
        (the kernel's nanosecond clocks: /proc counts in 10 ms ticks)."""
        return {"process": time.process_time(), "loop": thread_cpu_s(self.loop_ident)}

    def state(self) -> dict[str, int]:
        """Sizes of the coordinator's per-agent and per-stream state (what
        must shrink back when agents and streams go)."""

        async def sizes() -> dict[str, int]:
            import asyncio

            d = self._duties()
            coordinator = self.thread.coordinator
            metrics = coordinator.metrics if coordinator is not None else None
            agents = d.registry.agents()
            series = 0
            if metrics is not None:
                series = sum(
                    len(m.samples)
                    for m in metrics.registry.collect()
                    if m.name != "multikafka_reconcile_latency_seconds"
                )
            return {
                "agents": len(agents),
                "agent_queues": sum(1 for a in agents if a.queue is not None),
                "agent_counted": sum(len(a.counted) for a in agents),
                "agent_holdings": sum(len(a.holdings) for a in agents),
                "pending_generations": len(getattr(d.reconciler, "_pending", ())),
                "desired_streams": len(getattr(d.reconciler, "_desired", ())),
                "streams": len(d.store.views()),
                "orphan_statuses": len(getattr(d.store, "_orphan_status", ())),
                "history_streams": len(getattr(d.history, "_entries", ())),
                "marks_streams": len(getattr(d.marks, "_marks", ())),
                "discovery_clients": len(getattr(d.discovery, "_clients", ())),
                "metadata_clients": d.discovery.client_count(),
                "metric_samples": series,
                "asyncio_tasks": len(asyncio.all_tasks()),
            }

        return dict(self.thread.call(sizes(), 30))  # type: ignore[call-overload]

    def profile_start(self) -> None:
        """cProfile the coordinator's event loop thread (where all of its
        Python runs: gRPC's core threads only move bytes)."""
        import cProfile

        self._profile = cProfile.Profile()

        async def enable() -> None:
            self._profile.enable()

        self.thread.call(enable())

    def profile_stop(self, path: str, top: int = 25) -> list[dict[str, Any]]:
        """Stop profiling; write the stats to ``path``; return the ``top``
        functions by own time."""
        import pstats

        async def disable() -> None:
            self._profile.disable()

        self.thread.call(disable())
        self._profile.dump_stats(path)
        return profile_top(pstats.Stats(path), top)


def profile_top(stats: Any, top: int) -> list[dict[str, Any]]:
    """The ``top`` functions of a :class:`pstats.Stats` by own time."""
    rows = []
    for (filename, line, name), (_cc, calls, own, cum, _callers) in stats.stats.items():
        rows.append(
            {
                "function": f"{Path(filename).name}:{line}({name})",
                "calls": calls,
                "own_s": own,
                "cum_s": cum,
            }
        )
    rows.sort(key=lambda r: r["own_s"], reverse=True)
    return rows[:top]


R = TypeVar("R", bound="Remote")


class Remote:
    """What the benchmark holds of a :class:`Child`: start it, ask it, stop it."""

    def __init__(self, child: Child) -> None:
        self.child = child

    def start(self: R) -> R:
        self.child.start()
        return self

    @property
    def pid(self) -> int:
        return int(self.child.info["pid"])

    def call(self, command: str, *args: Any, timeout_s: float = 300.0) -> Any:
        return self.child.call(command, *args, timeout_s=timeout_s)

    def stop(self) -> None:
        self.child.stop()


class ProbedCoordinator(Remote):
    """A coordinator in a process of its own (:func:`coordinator_main`) that
    answers questions about its insides (its reconcile latencies, state
    sizes, loop CPU). Not the dev stack's ``CoordinatorProcess``, which runs
    the ``multikafka coordinator`` command to be killed and frozen."""

    def __init__(self, etcd_url: str, **config: Any) -> None:
        super().__init__(Child("coordinator", coordinator_main, etcd_url, config))

    @property
    def address(self) -> str:
        return str(self.child.info["address"])


# -- reader agents ---------------------------------------------------------------------


@dataclass
class _Applied:
    """One agent's applied events: generations (ascending) and when."""

    generations: list[int] = field(default_factory=list)
    times_ns: list[int] = field(default_factory=list)


class Fleet:
    """``n`` reader agents connected to one coordinator, each with its own
    link (stream, heartbeats), recording when they apply each event.
    ``notify(generation)`` is called once all of them have applied the
    generation given to :meth:`arm` (from the thread of the last one)."""

    def __init__(
        self, coordinator: str, n: int, heartbeat_s: float, notify: Callable[[int], None]
    ) -> None:
        from multikafka.reader_agent import ReaderAgent

        fleet = self

        class TimedAgent(ReaderAgent):
            index = 0

            def apply(self, event: reader_pb2.ReconcileEvent) -> None:
                super().apply(event)
                fleet._applied(self.index, event.generation)

        self._notify = notify
        self._lock = threading.Lock()
        self._log = [_Applied() for _ in range(n)]
        self._highest = [0] * n
        self._target = 0
        self._count = 0
        self.agents: list[ReaderAgent] = []
        try:
            for i in range(n):
                agent = TimedAgent(heartbeat_interval_s=heartbeat_s)
                agent.index = i
                self.agents.append(agent)
                agent.connect(coordinator)
        except BaseException:
            self.close()
            raise

    @property
    def ids(self) -> list[str]:
        return [a.agent_id for a in self.agents]

    def _applied(self, index: int, generation: int) -> None:
        now = time.monotonic_ns()
        with self._lock:
            log = self._log[index]
            if not log.generations or generation > log.generations[-1]:
                log.generations.append(generation)
                log.times_ns.append(now)
            before = self._highest[index]
            self._highest[index] = max(before, generation)
            target = self._target
            if target and before < target <= generation:
                self._count += 1
                if self._count == len(self._log):
                    self._notify(target)

    def arm(self, generation: int) -> None:
        """Notify once every agent applied ``generation`` (at once if they
        already have)."""
        with self._lock:
            self._target = generation
            self._count = sum(1 for h in self._highest if h >= generation)
            if self._count == len(self._log):
                self._notify(generation)

    def lowest(self) -> int:
        with self._lock:
            return min(self._highest, default=0)

    def times(self, generations: Iterable[int]) -> dict[int, list[int]]:
        """For each generation: when each agent first applied it (or a later
        one), in ns of CLOCK_MONOTONIC; agents that never did are left out."""
        out: dict[int, list[int]] = {}
        with self._lock:
            for g in generations:
                found = []
                for log in self._log:
                    i = bisect.bisect_left(log.generations, g)
                    if i < len(log.generations):
                        found.append(log.times_ns[i])
                out[g] = sorted(found)
        return out

    def close(self) -> None:
        threads = [threading.Thread(target=a.close, daemon=True) for a in self.agents]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        self.agents.clear()


def agents_main(conn: Connection, notify: Connection, own: bool, nice: int = 0) -> None:
    """A worker process holding reader agents (one :class:`Fleet`), at
    niceness ``nice``."""
    _child_setup()
    if nice:
        os.nice(nice)
    if own:
        own_connections()
    state: dict[str, Any] = {}
    send_lock = threading.Lock()

    def send(generation: int) -> None:
        with send_lock:
            notify.send(generation)

    def start(coordinator: str, n: int, heartbeat_s: float) -> list[str]:
        fleet = state["fleet"] = Fleet(coordinator, n, heartbeat_s, send)
        return fleet.ids

    def fleet() -> Fleet:
        return state["fleet"]  # type: ignore[no-any-return]

    def wait_applied(generation: int, timeout_s: float) -> int:
        what = f"agents applying generation {generation}"
        poll(
            lambda: fleet().lowest() >= generation, timeout_s=timeout_s, what=what, interval_s=0.01
        )
        return fleet().lowest()

    def read(tasks: list[ReadTask]) -> int:
        agent = fleet().agents[0]
        return sum(batch.num_rows for task in tasks for batch in agent.read(task))

    def tracked() -> dict[str, Any]:
        agent = fleet().agents[0]
        return {
            "sub_readers": agent.sub_readers(),
            "tracked": agent.tracked(),
            "applied": agent.applied_generation,
        }

    def close() -> None:
        f = state.pop("fleet", None)
        if f is not None:
            f.close()

    commands: dict[str, Callable[..., Any]] = {
        "start": start,
        "arm": lambda g: fleet().arm(g),
        "wait_applied": wait_applied,
        "times": lambda gens: fleet().times(gens),
        "read": read,
        "tracked": tracked,
        "usage": own_usage,
        "trim": trim,
        "cpu": time.process_time,
        "close": close,
    }
    try:
        serve(conn, commands, {"pid": os.getpid()})
    finally:
        close()


class AgentsProcess(Remote):
    """A worker process of reader agents (:func:`agents_main`)."""

    def __init__(self, name: str, *, own_connections: bool = True, nice: int = 0) -> None:
        super().__init__(Child(name, agents_main, own_connections, nice))
        self.ids: list[str] = []
