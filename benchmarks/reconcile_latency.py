"""Reconcile latency: from a metadata change to every reader agent applying it.

    python -m benchmarks.reconcile_latency [--agents 1,10,100] [--changes 50]

Starts etcd, one tansu cluster and a coordinator (in a thread of this
process). For each agent count it starts that many standalone
``ReaderAgent``s in this process (``heartbeat_interval_s=0.5``), waits until
the coordinator lists them all as subscribed, then makes ``--changes``
metadata changes per write path, one at a time, each flipping the stream's
topic list between ``[t0]`` and ``[t0, t1]``:

* ``etcd``: the document written straight to etcd (its JSON gateway);
* ``admin``: ``AdminClient.put_stream`` (validation, the etcd write, and the
  coordinator waiting until it applied the change).

For every change it measures, in this process:

* ``e2e``: from just before the write to the moment every agent's
  ``applied_generation`` reaches the write's revision (a tight polling loop,
  100 us sleeps); ``first``: to the first agent;
* ``watch``: from just before the write to a bare etcd watch on the key (a
  thread on etcd's gateway) seeing it: the baseline every ratio is taken
  against (what a change costs before multikafka does anything);
* ``coordinator``: the coordinator's own ``reconciler.latencies`` entry (from
  pushing the event, after partition discovery, to the last agent's
  acknowledging heartbeat).

Agents are closed between rounds. Everything shares one GIL: the
coordinator, 100 agents (3 threads each) and the poller, which is a
pessimistic setup (in production every agent is its own process).
Results: ``benchmarks/out/reconcile_latency.json``, ``<out>/img/reconcile_latency.png``.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import argparse
import base64
import http.client
import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from benchmarks._common import (
    console,
    finish,
    machine,
    percentile,
    progress_bar,
    quiet_logs,
    wait_until,
)

if TYPE_CHECKING:
    from coordinator import Coordinator
    from multikafka.devstack.stack import LocalStack
    from multikafka_core.admin_client import AdminClient
    from reader_agent import ReaderAgent


STREAM = "reconcile-bench"
CLUSTER = "a"
TOPICS = ("t0", "t1")
PREFIX = "/multikafka"
AGENT_HEARTBEAT_S = 0.5
POLL_SLEEP_S = 0.0001
MODES = ("etcd", "admin")


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
    """Watches one key through the gateway; records when each revision arrived."""

    def __init__(self, port: int, key: str) -> None:
        super().__init__(name="bench-etcd-watch", daemon=True)
        self._port = port
        self._key = key
        self.seen: dict[int, float] = {}
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
                now = time.perf_counter()
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


@dataclass
class Change:
    mode: str
    generation: int
    e2e_s: float
    first_s: float
    watch_s: float | None
    coordinator_s: list[float] = field(default_factory=list)
    #: how long the write call took (the admin call waits for the coordinator)
    write_call_s: float = 0.0


@dataclass
class Bench:
    stack: LocalStack
    coordinator: Coordinator
    admin: AdminClient
    etcd: EtcdHttp
    watcher: EtcdWatcher
    flip: int = 0

    def document(self) -> dict[str, Any]:
        self.flip ^= 1
        topics = list(TOPICS[: 1 + self.flip])
        bootstrap = self.stack.clusters[CLUSTER].bootstrap
        from multikafka.devstack.stack import stream_doc

        return stream_doc(STREAM, {CLUSTER: (bootstrap, topics)})

    def write(self, mode: str) -> tuple[float, int]:
        """Make one change; returns (time just before the write, its revision)."""
        doc = self.document()
        if mode == "admin":
            t0 = time.perf_counter()
            info = self.admin.put_stream(doc)
            return t0, int(info.generation)
        key = f"{PREFIX}/streams/{STREAM}"
        stored = json.loads(self.etcd.get(key))
        stored["clusters"][CLUSTER]["topics"] = doc["clusters"][CLUSTER]["topics"]
        raw = json.dumps(stored, sort_keys=True).encode()
        t0 = time.perf_counter()
        return t0, self.etcd.put(key, raw)


def start_agents(bench: Bench, n: int) -> list[ReaderAgent]:
    from reader_agent import ReaderAgent

    agents: list[ReaderAgent] = []
    try:
        for _ in range(n):
            agent = ReaderAgent(heartbeat_interval_s=AGENT_HEARTBEAT_S)
            agents.append(agent)
            agent.connect(bench.stack.coordinator_address)
        ids = {a.agent_id for a in agents}
        wait_until(
            lambda: ids <= {r.agent_id for r in bench.admin.readers() if r.subscribed},
            60 + n,
            f"{n} agents subscribed",
        )
        generation = bench.coordinator.leading().reconciler.generation
        wait_until(
            lambda: all(a.applied_generation >= generation for a in agents),
            30,
            "the snapshot applied",
        )
    except BaseException:
        close_agents(agents)
        raise
    return agents


def close_agents(agents: list[ReaderAgent]) -> None:
    threads = [threading.Thread(target=a.close, daemon=True) for a in agents]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)


def measure_change(bench: Bench, agents: list[ReaderAgent], mode: str) -> Change:
    """One change: written from a helper thread while this thread polls the
    agents, so that agents applying it before the write call returns (the
    admin call waits for the coordinator) are timed right."""
    latencies = bench.coordinator.leading().reconciler.latencies
    before = len(latencies)
    written: dict[str, float] = {}
    failed: list[BaseException] = []

    def write() -> None:
        try:
            t0, generation = bench.write(mode)
            written.update(t0=t0, generation=generation, returned=time.perf_counter())
        except BaseException as exc:
            failed.append(exc)

    writer = threading.Thread(target=write, name="bench-writer", daemon=True)
    # (time, lowest and highest applied generation) whenever either changed
    trace: list[tuple[float, int, int]] = []
    low = high = -1
    deadline = time.perf_counter() + 60
    writer.start()
    while True:
        gens = [a.applied_generation for a in agents]
        now = time.perf_counter()
        if min(gens) != low or max(gens) != high:
            low, high = min(gens), max(gens)
            trace.append((now, low, high))
        if failed:
            raise RuntimeError(f"{mode} write failed") from failed[0]
        if "generation" in written and low >= written["generation"]:
            break
        if now > deadline:
            raise TimeoutError(f"agents did not apply the {mode} change")
        time.sleep(POLL_SLEEP_S)
    writer.join()
    t0, generation = written["t0"], int(written["generation"])
    done = next(t for t, lo, _ in trace if lo >= generation)
    first = next(t for t, _, hi in trace if hi >= generation)
    # Let the coordinator record its own measurement of this change.
    wait_until(lambda: len(latencies) > before, 30, "the coordinator's latency entry")
    coordinator_s = list(latencies)[before:]
    wait_until(lambda: generation in bench.watcher.seen, 10, "the etcd watch event")
    watch_s = bench.watcher.seen[generation] - t0
    return Change(
        mode,
        generation,
        done - t0,
        first - t0,
        watch_s,
        coordinator_s,
        written["returned"] - t0,
    )


def stats(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "n": len(ms),
        "p50_ms": percentile(ms, 50),
        "p99_ms": percentile(ms, 99),
        "min_ms": min(ms) if ms else float("nan"),
        "max_ms": max(ms) if ms else float("nan"),
    }


def summarize(changes: list[Change]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in MODES:
        cs = [c for c in changes if c.mode == mode]
        if not cs:
            continue
        e2e = stats([c.e2e_s for c in cs])
        watch = stats([c.watch_s for c in cs if c.watch_s is not None])
        ratios = [c.e2e_s / c.watch_s for c in cs if c.watch_s]
        out[mode] = {
            "e2e": e2e,
            "first_agent": stats([c.first_s for c in cs]),
            "watch": watch,
            "coordinator": stats([x for c in cs for x in c.coordinator_s]),
            "write_call": stats([c.write_call_s for c in cs]),
            "e2e_over_watch": {
                "p50": percentile(ratios, 50),
                "p99": percentile(ratios, 99),
                "min": min(ratios) if ratios else float("nan"),
                "max": max(ratios) if ratios else float("nan"),
            },
        }
    return out


@contextmanager
def bench_stack() -> Iterator[Bench]:
    from multikafka.devstack.feed import create_topics
    from multikafka.devstack.stack import local_stack
    from multikafka_core.admin_client import AdminClient

    with ExitStack() as cleanup:
        with console.status("starting etcd, a tansu cluster and the coordinator"):
            stack = cleanup.enter_context(
                local_stack(
                    (CLUSTER,),
                    heartbeat_interval_s=AGENT_HEARTBEAT_S,
                    reader_ttl_s=5.0,
                )
            )
        create_topics(stack.clusters[CLUSTER].bootstrap, {t: 1 for t in TOPICS})
        admin = cleanup.enter_context(AdminClient(stack.coordinator_address))
        etcd = EtcdHttp(stack.etcd.port)
        cleanup.callback(etcd.close)
        watcher = EtcdWatcher(stack.etcd.port, f"{PREFIX}/streams/{STREAM}")
        watcher.start()
        cleanup.callback(watcher.close)
        if not watcher.ready.wait(10):
            raise TimeoutError(f"etcd watch did not start: {watcher.error}")
        coordinator = stack.coordinator.coordinator if stack.coordinator else None
        if coordinator is None:
            raise RuntimeError("no coordinator")
        bench = Bench(stack, coordinator, admin, etcd, watcher)
        admin.put_stream(bench.document())
        yield bench
        console.log("stopping the stack")


def run(counts: list[int], changes: int, warmup: int, modes: list[str]) -> dict[str, Any]:
    results: dict[str, Any] = {}
    raw: dict[str, list[dict[str, Any]]] = {}
    with (
        bench_stack() as bench,
        progress_bar() as progress,
    ):
        overall = progress.add_task("agent counts", total=len(counts), note="")
        for n in counts:
            task = progress.add_task(f"{n} agents: starting", total=None, note="")
            agents = start_agents(bench, n)
            try:
                progress.update(task, description=f"{n} agents: warm-up", total=warmup)
                for _ in range(warmup):
                    measure_change(bench, agents, "admin")
                    progress.advance(task)
                measured: list[Change] = []
                for mode in modes:
                    progress.update(
                        task, description=f"{n} agents: {mode}", total=changes, completed=0
                    )
                    for _ in range(changes):
                        c = measure_change(bench, agents, mode)
                        measured.append(c)
                        progress.update(task, advance=1, note=f"last {c.e2e_s * 1000:.1f} ms")
                        time.sleep(0.02)
            finally:
                progress.update(task, description=f"{n} agents: closing")
                close_agents(agents)
            wait_until(
                lambda: not any(r.subscribed for r in bench.admin.readers()),
                60,
                "agents unsubscribed",
            )
            results[str(n)] = summarize(measured)
            raw[str(n)] = [c.__dict__ for c in measured]
            progress.update(task, description=f"{n} agents: done", note="")
            progress.advance(overall)
            for mode in modes:
                s = results[str(n)][mode]
                console.log(
                    f"{n:>4} agents {mode:<5} e2e p50 {s['e2e']['p50_ms']:.1f} ms "
                    f"p99 {s['e2e']['p99_ms']:.1f} ms | watch p50 {s['watch']['p50_ms']:.2f} ms "
                    f"| coordinator p50 {s['coordinator']['p50_ms']:.1f} ms"
                )
    return {"per_agents": results, "changes": raw}


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per = result["summary"]["per_agents"]
    counts = sorted(int(n) for n in per)
    modes = [m for m in MODES if m in per[str(counts[0])]]
    fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4.5), squeeze=False)
    series = [
        ("e2e", "write -> all agents applied", "#1f77b4"),
        ("coordinator", "coordinator-measured", "#ff7f0e"),
        ("watch", "bare etcd watch (baseline)", "#7f7f7f"),
    ]
    for ax, mode in zip(axes[0], modes, strict=True):
        for key, label, color in series:
            p50 = [per[str(n)][mode][key]["p50_ms"] for n in counts]
            p99 = [per[str(n)][mode][key]["p99_ms"] for n in counts]
            ax.plot(counts, p50, "o-", color=color, label=f"{label} p50")
            ax.plot(counts, p99, "s--", color=color, alpha=0.6, label=f"{label} p99")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(counts)
        ax.set_xticklabels([str(n) for n in counts])
        ax.set_xlabel("reader agents (one process, one GIL)")
        ax.set_ylabel("ms")
        what = "direct etcd write" if mode == "etcd" else "AdminClient.put_stream"
        ax.set_title(f"reconcile latency, {what}")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_summary(result: dict[str, Any]) -> None:
    table = Table(title="reconcile latency (ms): p50 / p99")
    for col in (
        "agents",
        "write",
        "e2e",
        "first agent",
        "coordinator",
        "etcd watch",
        "write call",
        "e2e/watch p50",
    ):
        table.add_column(col, justify="right")
    for n, per_mode in result["summary"]["per_agents"].items():
        for mode, s in per_mode.items():
            table.add_row(
                n,
                mode,
                f"{s['e2e']['p50_ms']:.1f} / {s['e2e']['p99_ms']:.1f}",
                f"{s['first_agent']['p50_ms']:.1f} / {s['first_agent']['p99_ms']:.1f}",
                f"{s['coordinator']['p50_ms']:.1f} / {s['coordinator']['p99_ms']:.1f}",
                f"{s['watch']['p50_ms']:.2f} / {s['watch']['p99_ms']:.2f}",
                f"{s['write_call']['p50_ms']:.1f} / {s['write_call']['p99_ms']:.1f}",
                f"{s['e2e_over_watch']['p50']:.1f}x",
            )
    console.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", default="1,10,100", help="comma-separated agent counts")
    parser.add_argument("--changes", type=int, default=50, help="changes per write path")
    parser.add_argument("--warmup", type=int, default=3, help="untimed changes per count")
    parser.add_argument("--modes", default=",".join(MODES), help="write paths: etcd,admin")
    parser.add_argument("--out", default="docs", help="docs directory (the PNG goes to img/)")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.agents.split(",") if x.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(modes) <= set(MODES):
        parser.error(f"--modes: choose from {', '.join(MODES)}")
    quiet_logs()
    result: dict[str, Any] = {
        "benchmark": "reconcile_latency",
        "machine": machine(),
        "config": {
            "agents": counts,
            "changes_per_mode": args.changes,
            "warmup": args.warmup,
            "modes": modes,
            "agent_heartbeat_s": AGENT_HEARTBEAT_S,
            "poll_sleep_s": POLL_SLEEP_S,
        },
    }
    console.rule("[bold]multikafka reconcile latency")
    measured = run(counts, args.changes, args.warmup, modes)
    result["summary"] = {"per_agents": measured["per_agents"]}
    result["changes"] = measured["changes"]
    json_path, png = finish("reconcile_latency", result, args.out, plot)
    print_summary(result)
    console.print(f"wrote {json_path} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
