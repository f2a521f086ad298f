"""The chaos soak (:mod:`multikafka.devstack.soak`, which the benchmark
``benchmarks/soak.py`` runs for 20 minutes) for three minutes with a fixed
seed: every kind of fault while a Spark query reads, then nothing lost,
nothing read twice by a failover (each resumes right after the mirror's copy
of the last record read), the query never restarted, the coordinators did
not grow.

It runs :func:`multikafka.devstack.soak.run_soak` in a process of its own (spawned,
so a function call and not a command line): the soak kills Spark's Python
workers, and a killed worker fails its task once, which needs a Spark that
tries tasks more than once (``local[2,4]``, as a cluster's default); the
test session's Spark tries each task once, as a failing test wants, and one
process holds one Spark. Real etcd, tansu, coordinators and Spark."""

from __future__ import annotations

import json
import multiprocessing
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from multikafka.devstack.chaos import STRATEGIES
from multikafka.devstack.soak import FAULTS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.spark,
    pytest.mark.soak,
    pytest.mark.timeout(420),
]

MINUTES = 3.0
SEED = 7


def _soak(minutes: float, seed: int, work_dir: str) -> dict[str, Any]:
    """In the child: the soak, stopping what it started when the pool is
    terminated (a test that times out), as it does when it ends."""
    from multikafka.devstack.soak import run_soak

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    return run_soak(minutes, seed, work_dir=Path(work_dir))


def test_chaos_soak_three_minutes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        result = pool.apply(_soak, (MINUTES, SEED, str(tmp_path)))
    # Everything the soak saw, next to its processes' logs (kept by pytest for a while).
    (tmp_path / "soak.json").write_text(json.dumps(result, indent=1))
    failed = [e for e in result["events"] if not e["ok"]]
    assert not failed, f"faults that did not recover: {failed}"
    # Every kind of fault ran (the schedule goes through all of them in rounds).
    assert set(result["faults"]) == set(FAULTS)
    # ... and failed over with every strategy (mm2 with the syncs it tailed).
    assert {f["strategy"] for f in result["failovers"]} >= set(STRATEGIES), result["failovers"]
    mm2 = [f["note"] for f in result["failovers"] if f["strategy"] == "mm2"]
    assert any("by the sync" in note for note in mm2), mm2
    assert result["records"] > 10_000
    assert result["lost"] == 0
    assert result["read_not_sent"] == 0
    assert result["duplicates_outside_bounds"] == 0, result["failovers"]
    for f in result["failovers"]:
        assert f["duplicates"] <= f["bound"], f
    query = result["query"]
    assert query["active"]
    assert query["exception"] is None
    assert len(set(query["run_ids"])) == 1
    growth = result["growth"]
    assert growth["measured"], growth
    grew = [
        (r["replica"], r["role"], r["from_s"], r["to_s"], r["growth"]) for r in growth["replicas"]
    ]
    assert all(r["ok"] for r in growth["replicas"]), f"allowed {growth['allowed']}: {grew}"
    assert result["ok"], result["checks"]
