"""Failover gap: how long a running Spark query gets no records after its
cluster dies, until the first record from the cluster that takes over lands
in the sink.

    python -m benchmarks.failover_gap [--repeat 3] [--out docs]

Each run: a primary cluster and its mirror (STANDBY, same records, same
timestamps), a continuous feed, a query writing through ``foreachBatch`` (the
batch function runs in this process and timestamps every batch per cluster).
The primary is killed; then either the admin Failover call is made at once
("admin"), or the coordinator fails over by itself after a 2 s unreachability
window ("automatic"). Reported per run:

* gap: failover call (admin) or kill (automatic) -> first mirror row in the sink;
* lost records (must be 0) and duplicates (0: each partition resumed right
  after the mirror's copy of the last record read), how many of those lie
  outside the 1 s margin (must be 0; ``Feed.margin_window``), and how many
  the strategy's estimate alone would have read twice.

Writes ``benchmarks/out/failover_gap.json`` and a timeline plot of rows per
batch and cluster around one failover, ``<out>/img/failover_timeline.png``.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

from benchmarks._common import (
    Arguments,
    console,
    figure,
    img_path,
    json_folder,
    machine,
    percentile,
    quiet_logs,
    resolve_out,
    summary,
    write_json,
)
from multikafka.coordinator.translation.mm2.bound import read_again
from multikafka.core.admin_client import AdminClient
from multikafka.core.retry import poll
from multikafka.devstack.counts import count_keys, split_key
from multikafka.devstack.feed import is_stream_key
from multikafka.devstack.mirror import Mm2Copy, mirrored_stream
from multikafka.devstack.offset_syncs import OFFSET_LAG_MAX
from multikafka.devstack.spark import local_spark
from multikafka.devstack.stack import LocalStack, local_stack

MARGIN_MS = 1000


@dataclass
class Run:
    mode: str
    #: (wall time at the end of the batch, {cluster: rows})
    batches: list[tuple[float, dict[str, int]]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    #: sequence numbers read from the primary
    from_primary: list[int] = field(default_factory=list)
    #: partition -> one past the last offset read from the primary
    primary_positions: dict[int, int] = field(default_factory=dict)
    killed_at: float = 0.0
    failover_at: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_batch(self, df: Any, batch_id: int) -> None:
        rows = df.selectExpr("cluster", "partition", "offset", "cast(key as string) as k").collect()
        counts: dict[str, int] = {}
        with self.lock:
            for r in rows:
                if not is_stream_key(r["k"]):
                    continue
                counts[r["cluster"]] = counts.get(r["cluster"], 0) + 1
                self.keys.append(r["k"])
                if r["cluster"] == "primary":
                    self.from_primary.append(int(r["k"].split(":")[1]))
                    p = int(r["partition"])
                    self.primary_positions[p] = max(
                        self.primary_positions.get(p, 0), int(r["offset"]) + 1
                    )
            self.batches.append((time.time(), counts))

    def rows_from(self, cluster: str) -> int:
        with self.lock:
            return sum(c.get(cluster, 0) for _, c in self.batches)

    def caught_up(self, cluster: str, batches: int = 5, rows: int = 1000) -> bool:
        """The query's last ``batches`` batches all read ``cluster`` and were
        small: the backlog from before the query started is behind it."""
        with self.lock:
            last = self.batches[-batches:]
            return len(last) == batches and all(0 < c.get(cluster, 0) <= rows for _, c in last)

    def first_from(self, cluster: str) -> float:
        with self.lock:
            return min((t for t, c in self.batches if c.get(cluster)), default=float("nan"))


def failover_world(cleanup: ExitStack, name: str) -> tuple[Any, LocalStack]:
    """A Spark session and the stack a failover run needs (etcd, the mirror
    cluster, a coordinator that notices an unreachable cluster quickly),
    both stopped by ``cleanup``."""
    with console.status("starting Spark"):
        spark = local_spark(name)
    cleanup.callback(spark.stop)
    with console.status("starting etcd, mirror cluster, coordinator"):
        stack = cleanup.enter_context(
            local_stack(
                ("mirror",),
                discovery_interval_s=0.5,
                cluster_timeout_s=1.0,
                unreachable_backoff_s=0.5,
            )
        )
    return spark, stack


def one_run(
    spark: Any,
    stack: LocalStack,
    admin: AdminClient,
    i: int,
    mode: str,
    *,
    strategy: str = "timestamp",
    margin_ms: int = MARGIN_MS,
    offset_lag_max: int = OFFSET_LAG_MAX,
    min_rows: int = 3000,
) -> tuple[Run, dict[str, Any]]:
    """One failover of a fresh primary (killed) to the mirror cluster with
    ``strategy`` (``mm2``: an MM2-format mirror with ``offset_lag_max``),
    once the query read ``min_rows`` from the primary and caught up."""
    primary = stack.add_cluster(f"primary{i}")
    mirror = stack.clusters["mirror"]
    stream = mirrored_stream(
        strategy,
        ("primary", primary.bootstrap),
        ("mirror", mirror.bootstrap),
        f"gap{i}",
        2,
        shifts=(1000 + 100 * i, 300),
        marker_every=10,
        offset_lag_max=offset_lag_max,
    )
    name = f"gap-{mode}-{i}"
    extra: dict[str, Any] = {}
    if mode == "automatic":
        extra["auto_failover"] = {
            "standby": "mirror",
            "unreachable_after": "2s",
            "strategy": strategy,
            "margin_ms": margin_ms,
        }
    admin.put_stream(stream.document(name, **extra))
    run = Run(mode)
    query = (
        spark.readStream.format("multikafka")
        .option("coordinator", stack.coordinator_address)
        .option("stream", name)
        .option("startingOffsets", "earliest")
        .option("queryId", name)
        .load()
        .writeStream.foreachBatch(run.on_batch)
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    feed = stream.feed("r", chunk=100, pause_s=0.05)
    feed.start()
    try:
        poll(
            lambda: (
                _alive(query) and run.rows_from("primary") > min_rows and run.caught_up("primary")
            ),
            timeout_s=120,
            what="the query catching up with the primary",
            interval_s=0.02,
        )
        cut = feed.route([mirror.bootstrap])
        primary.process.kill()
        run.killed_at = time.time()
        if mode == "admin":
            run.failover_at = time.time()
            admin.failover(
                name,
                "primary",
                "mirror",
                strategy=strategy,
                margin_ms=None if strategy == "identity" else margin_ms,
            )
        poll(
            lambda: _alive(query) and run.rows_from("mirror") > 0,
            timeout_s=120,
            what="a record from the mirror",
            interval_s=0.02,
        )
        time.sleep(3)
        total = feed.stop()
        poll(
            lambda: len(set(run.keys)) >= total,
            timeout_s=120,
            what="every record read",
            interval_s=0.02,
        )
    finally:
        query.stop()
    start = run.failover_at if mode == "admin" else run.killed_at
    counted = count_keys(run.keys).report({"r": total})
    window = feed.margin_window(run.from_primary, cut, margin_ms)
    result = {
        "mode": mode,
        "strategy": strategy,
        "gap_s": run.first_from("mirror") - start,
        "kill_to_first_mirror_row_s": run.first_from("mirror") - run.killed_at,
        "records": total,
        "lost": counted.lost,
        "duplicates": counted.read_again,
        # re-read records that lie outside the failover margin (must be 0)
        "duplicates_outside_margin": sum(
            1 for k in counted.duplicated if split_key(k)[1] not in window
        ),
    }
    history = admin.history(name)
    translated = [e.detail for e in history if e.kind == "translated"]
    # What the strategy's estimate alone would have read twice: the records
    # matching kept from being read again, and those read twice anyway.
    spared = sum(int(m.group(1)) for d in translated if (m := _SPARED.search(d)))
    result["matched"] = sum("matched the last" in d for d in translated)
    result["partitions"] = len(translated)
    result["estimate_would_read_twice"] = spared + result["duplicates"]
    if stream.copy is not None:
        result.update(_mm2_expectation(stream.copy, stream.topic, run, history))
    # Runs share the coordinator: a finished run's stream would keep it busy.
    admin.delete_stream(name)
    return run, result


def _alive(query: Any) -> bool:
    """True while the query runs; its error, raised, once it failed."""
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"the query failed: {error}")
    return True


#: What a translation's matching kept from being read twice.
_SPARED = re.compile(r"(\d+) records not read again")
#: A translated history entry of an mm2 failover.
_MM2_TRANSLATED = re.compile(r"mm2 from [^@]+/(\d+)@(\d+) by the sync (\d+) -> \d+")


def _mm2_expectation(copy: Mm2Copy, topic: str, run: Run, history: Sequence[Any]) -> dict[str, Any]:
    """What MM2's rule reads again at the primary's last positions, with
    every sync written, and at most (``offset_syncs.read_again``); and per
    partition which sync the coordinator used, against the newest written at
    or below the position (and how long before the kill that was written)."""
    positions = {(topic, p): o for p, o in run.primary_positions.items()}
    again = read_again(
        copy.syncs, positions, copy.offset_lag_max, surely_known=copy.known_by(run.killed_at)
    )
    used = []
    for e in history:
        m = _MM2_TRANSLATED.search(e.detail) if e.kind == "translated" else None
        if m is None:
            continue
        partition, position, up = (int(g) for g in m.groups())
        below = [
            (s.upstream_offset, t)
            for s, t in zip(copy.syncs, copy.synced_at, strict=True)
            if s.partition == partition and s.upstream_offset <= position
        ]
        newest, written = max(below) if below else (None, None)
        used.append(
            {
                "partition": partition,
                "position": position,
                "sync_used": up,
                "newest_sync_at_or_below": newest,
                "newest_written_s_before_kill": None
                if written is None
                else round(run.killed_at - written, 3),
            }
        )
    return {
        "offset_lag_max": copy.offset_lag_max,
        "syncs_written": len(copy.syncs),
        "expected_with_every_sync": again.expected,
        "bound": again.bound,
        "unsynced_partitions": len(again.unsynced),
        "translations": used,
    }


def plot(run: Run, path: Path) -> None:
    t0 = run.killed_at
    with figure(path, figsize=(8, 3.5)) as (_fig, ax):
        for cluster, colour in (("primary", "tab:blue"), ("mirror", "tab:orange")):
            pts = [(t - t0, c.get(cluster, 0)) for t, c in run.batches if -2 < t - t0 < 5]
            ax.bar(
                [p[0] for p in pts],
                [p[1] for p in pts],
                width=0.08,
                color=colour,
                label=f"rows from {cluster}",
            )
        ax.axvline(0, color="red", linestyle="--", label="primary killed")
        if run.failover_at:
            ax.axvline(run.failover_at - t0, color="black", linestyle=":", label="failover call")
        ax.set_xlabel("seconds since the primary was killed")
        ax.set_ylabel("rows per micro-batch")
        ax.set_title(f"one query across a failover ({run.mode})")
        ax.legend(loc="upper left", fontsize=8)


def main() -> None:
    parser = Arguments(__doc__, smoke={"repeat": 1}, repeat=3)
    args = parser.parse_args()
    quiet_logs()
    out = resolve_out(args.out)
    results: list[dict[str, Any]] = []
    with ExitStack() as cleanup:
        spark, stack = failover_world(cleanup, "failover-gap")
        with AdminClient(stack.coordinator_address) as admin:
            for i, mode in enumerate(
                [m for m in ("admin", "automatic") for _ in range(args.repeat)]
            ):
                with console.status(f"run {i + 1}: {mode} failover"):
                    run, result = one_run(spark, stack, admin, i, mode)
                results.append(result)
                console.print(
                    f"{mode:>9}: gap {result['gap_s']:.2f} s, lost {result['lost']}, "
                    f"duplicates {result['duplicates']} of {result['records']} "
                    f"({result['duplicates_outside_margin']} outside the margin)"
                )
                if i == 0:
                    plot(run, img_path(out, "failover_timeline.png"))
    per_mode = {
        mode: {
            "gap_s": summary([r["gap_s"] for r in results if r["mode"] == mode]),
            "gap_p99_s": percentile([r["gap_s"] for r in results if r["mode"] == mode], 99),
            "lost": sum(r["lost"] for r in results if r["mode"] == mode),
            "duplicates_outside_margin": sum(
                r["duplicates_outside_margin"] for r in results if r["mode"] == mode
            ),
        }
        for mode in ("admin", "automatic")
    }
    path = write_json(
        "failover_gap.json",
        {"machine": machine(), "runs": results, "summary": per_mode},
        json_folder(args),
    )
    console.print(per_mode)
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
