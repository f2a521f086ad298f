"""Failover precision: how many records a failover reads twice, per
translation strategy, against what the strategy's estimate alone would read
twice (the same run), and how long the query waits for the new cluster.

    python -m benchmarks.failover_precision [--repeat 3] [--out docs]

Each run is ``failover_gap``'s admin run (``failover_gap.one_run``): a
primary and its mirror (STANDBY), a continuous feed (2 partitions, about
2,000 records/s), a Spark query (100 ms trigger) writing through
``foreachBatch``; once the query has read 10,000 records and caught up
(its last 5 micro-batches each held at most 1,000), the primary is killed and
``Failover`` is called with the strategy. The mirror, per strategy
(``multikafka.devstack.mirror``):

* ``timestamp`` (2 s margin): the same topic and record times;
* ``mm2`` with ``offset.lag.max`` 100 (MM2's default) and 1,000: MM2's
  replica, remote topic ``primary.<topic>`` at shifted offsets, offset syncs
  on the primary as MM2's ``OffsetSyncWriter`` writes them;
* ``identity``: the same topic and offsets.

Reported per run: records read twice (each partition resumes right after
the mirror's copy of the last record read: 0), what the estimate alone
would read twice (the records matching spared, from the history, plus those
read twice: the margin's records, MM2's rule with the syncs known), the gap
(failover call -> first mirror row in the sink), lost records. The run exits
non-zero when a record is lost or read twice. Writes
``benchmarks/out/failover_precision.json`` and
``<out>/img/failover_precision.png``.
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

from benchmarks._common import (
    Arguments,
    bars_with_range,
    console,
    figure,
    finish,
    machine,
    progress_bar,
    quiet_logs,
    summary,
)
from benchmarks.failover_gap import failover_world, one_run
from multikafka.core.admin_client import AdminClient

MARGIN_MS = 2000
#: Records read from the primary before it dies (about 5 s of the feed):
#: every strategy then fails over from a steady state, with syncs older than
#: the coordinator's tail interval.
MIN_ROWS = 10_000

#: (label, strategy, offset.lag.max of the mm2 mirror)
CASES = [
    ("timestamp 2 s", "timestamp", 0),
    ("mm2 lag 100", "mm2", 100),
    ("mm2 lag 1,000", "mm2", 1000),
    ("identity", "identity", 0),
]


def allowed(result: dict[str, Any]) -> bool:
    """Nothing read twice, and every partition matched (identity: exact by
    its offsets)."""
    matched = result["strategy"] == "identity" or result["matched"] == result["partitions"]
    return bool(result["duplicates"] == 0 and matched)


def _mm2_line(result: dict[str, Any]) -> str:
    """What MM2's rule gives with every sync, the bound, and how far behind
    the newest sync at or below each position the coordinator's was."""
    behind = [t["position"] - t["sync_used"] for t in result["translations"]]
    missed = [
        t["newest_sync_at_or_below"] - t["sync_used"]
        for t in result["translations"]
        if t["newest_sync_at_or_below"] is not None
    ]
    return (
        f" (with every sync MM2's rule: {result['expected_with_every_sync']:,},"
        f" bound {result['bound']:,}; positions past the sync used: {behind},"
        f" newer syncs at or below them it did not use: {missed})"
    )


def plot(result: dict[str, Any], path: Path) -> None:
    labels = [c[0] for c in CASES]
    per_case = result["summary"]
    colors = ["tab:orange", "tab:blue", "tab:cyan", "tab:green"]
    with figure(path, 1, 2, figsize=(10, 3.8)) as (_fig, (dup, gap)):
        # log scale: a 0 is drawn at 0.5
        estimates = [
            {
                k: max(v, 0.5)
                for k, v in per_case[c]["estimate_would_read_twice"].items()
                if k != "n"
            }
            for c in labels
        ]
        bars_with_range(
            dup,
            labels,
            estimates,
            label="records read twice per failover",
            colors=["lightgray"] * len(labels),
            log=True,
        )
        for x, label in enumerate(labels):  # each run: read twice, with matching
            mine = [r for r in result["runs"] if r["case"] == label]
            dup.scatter(
                [x] * len(mine), [max(r["duplicates"], 0.5) for r in mine], color="black", s=12
            )
        dup.set_title(
            "read twice: bars, the estimate alone; dots, each run (0 drawn at 0.5)", fontsize=9
        )
        bars_with_range(
            gap, labels, [per_case[c]["gap_s"] for c in labels], label="seconds", colors=colors
        )
        gap.set_title("failover call -> first mirror row")
        for ax in (dup, gap):
            ax.tick_params(axis="x", labelsize=8)


def main() -> None:
    parser = Arguments(__doc__, smoke={"repeat": 1}, repeat=3)
    args = parser.parse_args()
    quiet_logs()
    runs: list[dict[str, Any]] = []
    with ExitStack() as cleanup:
        spark, stack = failover_world(cleanup, "failover-precision")
        admin = cleanup.enter_context(AdminClient(stack.coordinator_address))
        order = [case for _ in range(args.repeat) for case in CASES]  # alternating
        with progress_bar() as progress:
            task = progress.add_task("failovers", total=len(order), note="")
            for i, (label, strategy, lag) in enumerate(order):
                progress.update(task, note=label)
                _, result = one_run(
                    spark,
                    stack,
                    admin,
                    i,
                    "admin",
                    strategy=strategy,
                    margin_ms=MARGIN_MS,
                    offset_lag_max=lag or 100,
                    min_rows=MIN_ROWS,
                )
                result["case"] = label
                result["within_allowed"] = allowed(result)
                runs.append(result)
                progress.console.print(
                    f"{label:>14}: lost {result['lost']}, read twice {result['duplicates']:,} "
                    f"(the estimate alone: {result['estimate_would_read_twice']:,}; "
                    f"{result['matched']} of {result['partitions']} partitions matched)"
                    + (_mm2_line(result) if strategy == "mm2" else "")
                    + f", gap {result['gap_s']:.2f} s"
                )
                progress.advance(task)
    per_case = {
        label: {
            "duplicates": summary([r["duplicates"] for r in runs if r["case"] == label]),
            "estimate_would_read_twice": summary(
                [r["estimate_would_read_twice"] for r in runs if r["case"] == label]
            ),
            "gap_s": summary([r["gap_s"] for r in runs if r["case"] == label]),
            "lost": sum(r["lost"] for r in runs if r["case"] == label),
            "records": summary([r["records"] for r in runs if r["case"] == label]),
            "all_within_allowed": all(r["within_allowed"] for r in runs if r["case"] == label),
        }
        for label, _, _ in CASES
    }
    finish(
        "failover_precision",
        {"machine": machine(), "margin_ms": MARGIN_MS, "runs": runs, "summary": per_case},
        args,
        plot,
    )
    console.print(per_case)
    lost = sum(r["lost"] for r in runs)
    over = [r["case"] for r in runs if not r["within_allowed"]]
    if lost or over:
        console.print(f"[red]FAILED[/red]: {lost} records lost; read twice or not matched: {over}")
        sys.exit(1)


if __name__ == "__main__":
    main()
