"""Chaos soak: one Spark query reads a stream for ``--minutes`` while a seeded
random schedule of faults hits every part of the system, then checks that
nothing was lost, no failover read a record twice (only a drain that
overlapped an activation may, within its overlap, and a cluster that holds a
record twice), the query never restarted, and the coordinators did not grow.

    python -m benchmarks.soak [--minutes 20] [--seed 1] [--out docs]

The soak itself is the dev stack's (:mod:`multikafka.devstack.soak`, its
world and faults :mod:`multikafka.devstack.chaos`; ``tests/e2e/test_soak.py``
runs it for 3 minutes): three coordinator replicas (processes, lease 5 s) on
a three-member etcd, three tansu clusters each holding the same topic, one
stream over them (one cluster ACTIVE, two STANDBY), and a Spark query
(``local[2]``, tasks tried up to 4 times as on a cluster) writing through
``foreachBatch`` into this process, which counts every record. This module
is its command line, its report and its plot.

Writes ``benchmarks/out/soak.json`` and ``<out>/img/soak_timeline.png``;
exits 1 if a check fails.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

from benchmarks._common import (
    Arguments,
    console,
    figure,
    finish,
    machine,
    quiet_logs,
)
from multikafka.devstack.soak import FAULTS, run_soak


def report(result: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"chaos soak: {result['minutes']:g} min, seed {result['seed']}")
    table.add_column("check")
    table.add_column("result")
    for name, ok in result["checks"].items():
        table.add_row(name, "[green]ok" if ok else "[red]FAILED")
    console.print(table)
    console.print(f"faults: {result['faults']}")
    console.print(
        f"records {result['records']:,}, lost {result['lost']}, duplicates "
        f"{result['duplicates']} ({result['duplicates_held_by_clusters']} held twice by a "
        f"cluster, {result['duplicates_outside_bounds']} by failovers), "
        f"batches {result['query']['batches']}, run ids {len(set(result['query']['run_ids']))}"
    )
    for f in result["failovers"]:
        console.print(
            f"  {f['at_s']:7.1f} s {f['kind']:<12} {f['strategy'] or '-':<9} "
            f"duplicates {f['duplicates']} (bound {f['bound']})"
        )
        if f.get("note"):
            console.print(f"           {f['note']}")
    for d in result["lost_detail"]:
        console.print(f"[red]not read: {json.dumps(d, default=str)}")
    for r in result["growth"]["replicas"]:
        console.print(
            f"  {r['replica']} ({r['role']}, {r['from_s']:.0f}-{r['to_s']:.0f} s): "
            f"{r['start']} -> {r['end']}"
        )


def plot(result: dict[str, Any], path: Path) -> None:
    tl = result["timeline"]
    t = [p["t"] for p in tl]
    with figure(path, figsize=(14, 5)) as (_fig, ax):
        ax.plot(
            t, [p["sent"] - p["read"] for p in tl], color="tab:blue", label="read lag (records)"
        )
        ax.set_xlabel("seconds since the query started")
        ax.set_ylabel("records sent, not yet read")
        dup = ax.twinx()
        dup.plot(t, [p["duplicates"] for p in tl], color="tab:orange", label="records read twice")
        dup.set_ylabel("records read twice (cumulative)")
        import matplotlib

        colours = {k: matplotlib.colormaps["tab10"](i % 10) for i, k in enumerate(FAULTS)}
        top = ax.get_ylim()[1]
        for i, e in enumerate(result["events"]):
            colour = colours.get(e["kind"], "grey") if e["ok"] else "red"
            ax.axvline(e["start_s"], color=colour, alpha=0.7, lw=1)
            # A fault that lasts (a pause, a member down, a drain): its span shaded.
            ax.axvspan(e["start_s"], max(e["end_s"], e["start_s"]), color=colour, alpha=0.12)
            label = e["kind"] + (f" ({e['strategy']})" if e["strategy"] else "")
            # Three heights in turn, so neighbours' labels do not overlap.
            ax.text(
                e["start_s"], top * (1 - 0.2 * (i % 3)), label, rotation=90, fontsize=6,
                va="top", ha="right", color=colour,
            )  # fmt: skip
        lines = ax.get_legend_handles_labels()
        more = dup.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
        ax.set_title(
            f"chaos soak, {result['minutes']:g} min, seed {result['seed']}: "
            f"lost {result['lost']}, read twice {result['duplicates']} "
            f"({result['duplicates_outside_bounds']} by failovers)"
        )


def main() -> None:
    parser = Arguments(__doc__, smoke={"minutes": 0.75})
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--keep-logs",
        action="store_true",
        help="keep every process's logs when the soak passes too",
    )
    args = parser.parse_args()
    quiet_logs()
    facts = machine()
    result = {
        "machine": facts,
        **run_soak(args.minutes, args.seed, keep_logs=args.keep_logs, console=console),
    }
    finish("soak", result, args, plot, png_name="soak_timeline.png")
    report(result)
    sys.exit(0 if result["ok"] else 1)


if __name__ == "__main__":
    main()
