"""Leader takeover: how long a coordinator service is without a leader when
its leader dies (``kill -9``) or is stopped (SIGTERM: it resigns first).

    python -m benchmarks.takeover [--rounds 6] [--ttl 5] [--out docs]

Two replicas (``multikafka coordinator`` processes) on one local etcd. Each
round kills (or stops) the leader and measures, by polling each replica's
``/leader`` every 10 ms, the time until the other one leads; then the
stopped replica starts again as a standby. The bound to meet after a kill:
the lease TTL + 2 s.

Writes ``benchmarks/out/takeover.json`` and ``<out>/img/takeover.png``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import Arguments, console, figure, finish, machine, progress_bar, summary
from multikafka.core.retry import poll
from multikafka.devstack import EtcdServer
from multikafka.devstack.replicas import ReplicaSet


def takeover(replicas: ReplicaSet, how: str) -> float:
    """Kill or stop the leader; seconds until another replica leads."""
    leader = replicas.leader()
    others = [r for r in replicas if r is not leader]
    started = time.monotonic()
    if how == "kill -9":
        leader.kill()
    else:
        leader.stop()
    poll(
        lambda: any(r.is_leader() for r in others), timeout_s=60, what="a takeover", interval_s=0.01
    )
    elapsed = time.monotonic() - started
    leader.start()
    return elapsed


def plot(result: dict[str, Any], path: Path) -> None:
    with figure(path, figsize=(7, 3.5)) as (_fig, ax):
        hows = list(result["rounds"])
        ax.boxplot([result["rounds"][h] for h in hows], tick_labels=hows, orientation="horizontal")
        for i, h in enumerate(hows, start=1):
            ys = result["rounds"][h]
            ax.scatter(ys, [i] * len(ys), s=12, color="black", zorder=3)
        ax.axvline(
            result["config"]["ttl_s"] + 2, color="red", linestyle="--", label="bound: TTL + 2 s"
        )
        ax.set_xlabel("seconds without a leader")
        ax.set_title(f"leader takeover, lease TTL {result['config']['ttl_s']} s")
        ax.legend(loc="lower right")


def main() -> None:
    parser = Arguments(__doc__, smoke={"rounds": 1, "ttl": 2.0})
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--ttl", type=float, default=5.0, help="lease TTL (s)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="multikafka-takeover-"))
    etcd = EtcdServer(work).start()
    replicas = ReplicaSet(work, etcd=etcd.url, prefix="/takeover", lease_ttl_s=args.ttl)
    rounds: dict[str, list[float]] = {"kill -9": [], "SIGTERM": []}
    try:
        replicas.add(2)
        with progress_bar() as progress:
            for how in rounds:
                task = progress.add_task(how, total=args.rounds, note="")
                for _ in range(args.rounds):
                    rounds[how].append(takeover(replicas, how))
                    progress.update(task, advance=1, note=f"last {rounds[how][-1]:.2f} s")
    finally:
        replicas.stop()
        etcd.stop()
        shutil.rmtree(work, ignore_errors=True)
    result = {
        "benchmark": "takeover",
        "machine": machine(),
        "config": {"ttl_s": args.ttl, "rounds": args.rounds, "replicas": len(replicas)},
        "rounds": rounds,
        "summary": {how: summary(values) for how, values in rounds.items()},
    }
    for how, s in result["summary"].items():
        console.print(
            f"{how:>8}: median {s['median']:.2f} s \\[min {s['min']:.2f} - max {s['max']:.2f}] "
            f"over {s['n']} rounds (bound after a kill: {args.ttl + 2:.1f} s)"
        )
    finish("takeover", result, args, plot)


if __name__ == "__main__":
    main()
