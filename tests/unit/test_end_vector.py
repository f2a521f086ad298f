"""Micro-batch planning (multikafka.coordinator.planning.end_vector): budget allocation and end vectors."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping

import pytest

from multikafka.coordinator.planning.end_vector import (
    ClusterSnapshot,
    allocate,
    cap_at_stops,
    new_splits,
    plan_end,
)
from multikafka.core._offsets import NO_SPLITS, as_offsets, to_json
from multikafka.core.exceptions import DataLossError
from multikafka.core.model import ClusterState, SplitId

INTERNALS = (
    "multikafka.coordinator.planning.end_vector",
    "multikafka.core._offsets",
)


ACTIVE = ClusterState.ACTIVE


def snap(
    latest: Mapping[str, int],
    *,
    state: ClusterState = ACTIVE,
    topics: Iterable[str] = ("t",),
    reachable: bool = True,
    splits: Iterable[str] | None = None,
    drain: Mapping[str, int] | None = None,
    stop: Mapping[str, int] | None = None,
    stable: Mapping[str, int] | None = None,
) -> ClusterSnapshot:
    return ClusterSnapshot(
        state=state,
        topics=frozenset(topics),
        reachable=reachable,
        splits=frozenset(latest if splits is None else splits),
        latest=dict(latest),
        drain=drain,
        stop=stop,
        stable=stable,
    )


# -- allocate -------------------------------------------------------------------


def test_allocate_without_budget_returns_the_backlog() -> None:
    backlog = {"a": 10, "b": 0, "c": 7}
    assert allocate(backlog, None) == backlog


@pytest.mark.parametrize("budget", [17, 18, 10**9])
def test_allocate_budget_at_least_total_returns_the_backlog(budget: int) -> None:
    assert allocate({"a": 10, "b": 7}, budget) == {"a": 10, "b": 7}


def test_allocate_proportional_example() -> None:
    assert allocate({"a": 30, "b": 10}, 20) == {"a": 15, "b": 5}


def test_allocate_largest_remainder_gets_the_rounding() -> None:
    # exact shares 2.5, 1.5, 1.0: a and b tie on the remainder, the name breaks it
    assert allocate({"a": 5, "b": 3, "c": 2}, 5) == {"a": 3, "b": 1, "c": 1}
    # exact shares 0.75 and 0.25
    assert allocate({"x": 3, "y": 1}, 1) == {"x": 1, "y": 0}


def test_allocate_zero_budget() -> None:
    assert allocate({"a": 5, "b": 3}, 0) == {"a": 0, "b": 0}


def test_allocate_empty() -> None:
    assert allocate({}, 10) == {}
    assert allocate({}, None) == {}


@pytest.mark.parametrize("seed", range(300))
def test_allocate_properties(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randrange(1, 12)
    backlog = {
        f"c/t/{i}": rng.choice([0, 1, rng.randrange(1, 100), rng.randrange(10**6)])
        for i in range(n)
    }
    total = sum(backlog.values())
    budget = rng.randrange(0, total + 2)
    shares = allocate(backlog, budget)
    assert set(shares) == set(backlog)
    if budget >= total:
        assert shares == backlog
        return
    assert sum(shares.values()) == budget
    for s, b in backlog.items():
        assert 0 <= shares[s] <= b
        # within one record of the exact proportional share
        assert abs(shares[s] * total - budget * b) < total
    # deterministic, and independent of insertion order
    assert allocate(backlog, budget) == shares
    assert allocate(dict(reversed(list(backlog.items()))), budget) == shares


@pytest.mark.parametrize("seed", range(50))
def test_allocate_exact_with_huge_backlogs(seed: int) -> None:
    """Backlogs whose products overflow 64 bits are still split exactly."""
    rng = random.Random(seed)
    backlog = {f"c/t/{i}": rng.randrange(1, 2**62) for i in range(rng.randrange(1, 20))}
    total = sum(backlog.values())
    budget = rng.randrange(0, min(total, 2**63 - 1))
    shares = allocate(backlog, budget)
    assert sum(shares.values()) == budget
    for s, b in backlog.items():
        assert abs(shares[s] * total - budget * b) < total


# -- plan_end: advancing --------------------------------------------------------


def test_reachable_splits_advance_to_the_high_watermark() -> None:
    plan = plan_end(
        {"east/t/0": 10, "east/t/1": 0},
        {"east": snap({"east/t/0": 50, "east/t/1": 7})},
        {},
    )
    assert plan.end == {"east/t/0": 50, "east/t/1": 7}
    assert plan.retired == {}
    assert plan.data_loss == {}
    assert plan.entered == []


def test_split_at_its_high_watermark_stays() -> None:
    plan = plan_end({"east/t/0": 50}, {"east": snap({"east/t/0": 50})}, {})
    assert plan.end == {"east/t/0": 50}


def test_readers_of_committed_records_are_planned_to_the_last_stable_offset() -> None:
    """A transaction open at offset 30 of t/0: readers of committed records
    stop there, so the batch does too (and reports it as available); t/1
    has none open. Budget shares follow what can be read."""
    clusters = {"east": snap({"east/t/0": 50, "east/t/1": 20}, stable={"east/t/0": 30})}
    plan = plan_end({"east/t/0": 10, "east/t/1": 10}, clusters, {})
    assert plan.end == {"east/t/0": 30, "east/t/1": 20}
    assert plan.available == plan.end
    assert plan.data_loss == {}
    budgeted = plan_end({"east/t/0": 10, "east/t/1": 10}, clusters, {}, budget=15)
    assert budgeted.end == {"east/t/0": 20, "east/t/1": 15}


def test_a_split_past_its_last_stable_offset_waits_without_data_loss() -> None:
    """A position inside a transaction still open (a checkpoint written by a
    query reading uncommitted records, a translated failover position): no
    new range, no data loss, as long as the high watermark is not below it."""
    clusters = {"east": snap({"east/t/0": 50}, stable={"east/t/0": 30})}
    plan = plan_end({"east/t/0": 40}, clusters, {})
    assert plan.end == {"east/t/0": 40}
    assert plan.data_loss == {}
    lower = {"east": snap({"east/t/0": 35}, stable={"east/t/0": 30})}
    with pytest.raises(DataLossError, match="went backwards from 40 to 35"):
        plan_end({"east/t/0": 40}, lower, {})


def test_budget_is_split_proportionally_to_backlog() -> None:
    start = {"east/t/0": 0, "west/t/0": 100}
    clusters = {"east": snap({"east/t/0": 30}), "west": snap({"west/t/0": 110})}
    plan = plan_end(start, clusters, {}, budget=20)
    assert plan.end == {"east/t/0": 15, "west/t/0": 105}


def test_budget_larger_than_backlog_reads_everything() -> None:
    plan = plan_end({"east/t/0": 0}, {"east": snap({"east/t/0": 30})}, {}, budget=1000)
    assert plan.end == {"east/t/0": 30}


@pytest.mark.parametrize("seed", range(50))
def test_budget_is_never_exceeded(seed: int) -> None:
    rng = random.Random(seed)
    start: dict[str, int] = {}
    latest: dict[str, int] = {}
    for p in range(rng.randrange(1, 8)):
        s = f"east/t/{p}"
        start[s] = rng.randrange(1000)
        latest[s] = start[s] + rng.randrange(500)
    budget = rng.randrange(1, 2000)
    plan = plan_end(start, {"east": snap(latest)}, {}, budget=budget)
    read = sum(plan.end[s] - start[s] for s in start)
    assert read == min(budget, sum(latest[s] - start[s] for s in start))
    for s in start:
        assert start[s] <= plan.end[s] <= latest[s]


def test_unreachable_cluster_stays_while_others_advance() -> None:
    start = {"east/t/0": 10, "west/t/0": 20}
    clusters = {
        "east": snap({"east/t/0": 50}),
        "west": snap({}, reachable=False, splits={"west/t/0"}),
    }
    plan = plan_end(start, clusters, {}, budget=100)
    assert plan.end == {"east/t/0": 50, "west/t/0": 20}
    assert plan.retired == {}
    assert plan.data_loss == {}


def test_unreachable_cluster_does_not_take_budget() -> None:
    start = {"east/t/0": 0, "west/t/0": 0}
    clusters = {
        "east": snap({"east/t/0": 100}),
        "west": snap({"west/t/0": 100}, reachable=False),
    }
    plan = plan_end(start, clusters, {}, budget=40)
    assert plan.end == {"east/t/0": 40, "west/t/0": 0}


# -- plan_end: new splits -------------------------------------------------------


def test_new_split_enters_at_its_entry_offset_without_advancing() -> None:
    start = {"east/t/0": 5}
    clusters = {"east": snap({"east/t/0": 10, "east/t/1": 100})}
    plan = plan_end(start, clusters, {"east/t/1": 3})
    assert plan.end == {"east/t/0": 10, "east/t/1": 3}
    assert plan.entered == ["east/t/1"]


def test_new_split_without_entry_is_left_out() -> None:
    start = {"east/t/0": 5}
    clusters = {"east": snap({"east/t/0": 10, "east/t/1": 100, "east/t/2": 9})}
    plan = plan_end(start, clusters, {"east/t/2": 0})
    assert plan.end == {"east/t/0": 10, "east/t/2": 0}
    assert plan.entered == ["east/t/2"]
    assert "east/t/1" not in plan.end


def test_new_splits_of_a_new_cluster_enter() -> None:
    plan = plan_end(
        {},
        {"east": snap({"east/t/0": 10, "east/t/1": 4})},
        {"east/t/0": 0, "east/t/1": 4},
    )
    assert plan.end == {"east/t/0": 0, "east/t/1": 4}
    assert plan.entered == ["east/t/0", "east/t/1"]


def test_new_splits_of_unreadable_clusters_do_not_enter() -> None:
    clusters = {
        "a": snap({"a/t/0": 10}, state=ClusterState.STANDBY),
        "b": snap({"b/t/0": 10}, state=ClusterState.FAILED),
        "c": snap({"c/t/0": 10}, state=ClusterState.DRAINING),
    }
    entry = {"a/t/0": 0, "b/t/0": 0, "c/t/0": 0}
    assert new_splits({}, clusters) == []
    plan = plan_end({}, clusters, entry)
    assert plan.end == {NO_SPLITS: 0}
    assert plan.entered == []


def test_draining_cluster_admits_no_new_split() -> None:
    """A query reads the splits it holds to the drain end and retires them;
    a drained split that left the vector must never come back (it would be
    read again)."""
    clusters = {
        "c": snap(
            {"c/t/0": 10, "c/t/1": 10},
            state=ClusterState.DRAINING,
            drain={"c/t/0": 10, "c/t/1": 10},
        )
    }
    assert new_splits({}, clusters) == []
    assert plan_end({}, clusters, {"c/t/0": 2, "c/t/1": 2}).end == {NO_SPLITS: 0}
    retired = plan_end({"c/t/0": 10, "c/t/1": 10}, clusters, {})
    assert retired.end == {NO_SPLITS: 0}
    again = plan_end(retired.end, clusters, {"c/t/0": 0, "c/t/1": 0})
    assert again.end == {NO_SPLITS: 0}


def test_new_splits_is_sorted_and_skips_known() -> None:
    clusters = {"b": snap({"b/t/1": 1, "b/t/0": 1}), "a": snap({"a/t/0": 1})}
    assert new_splits({"b/t/0": 0}, clusters) == ["a/t/0", "b/t/1"]


# -- plan_end: retiring ---------------------------------------------------------


def test_split_of_removed_cluster_is_retired() -> None:
    plan = plan_end({"east/t/0": 1, "west/t/0": 2}, {"east": snap({"east/t/0": 5})}, {})
    assert plan.end == {"east/t/0": 5}
    assert plan.retired == {"west/t/0": "cluster removed from the stream"}


def test_split_of_removed_topic_is_retired() -> None:
    plan = plan_end(
        {"east/t/0": 1, "east/gone/0": 2},
        {"east": snap({"east/t/0": 5, "east/gone/0": 9})},
        {},
    )
    assert plan.end == {"east/t/0": 5}
    assert plan.retired == {"east/gone/0": "topic removed from the stream"}


@pytest.mark.parametrize(
    ("state", "reason"),
    [(ClusterState.FAILED, "cluster failed"), (ClusterState.STANDBY, "cluster is standby")],
)
def test_split_of_unread_cluster_is_retired(state: ClusterState, reason: str) -> None:
    plan = plan_end(
        {"east/t/0": 1, "west/t/0": 2},
        {"east": snap({"east/t/0": 5}), "west": snap({"west/t/0": 9}, state=state)},
        {},
    )
    assert plan.end == {"east/t/0": 5}
    assert plan.retired == {"west/t/0": reason}


def test_retired_split_even_when_unreachable() -> None:
    plan = plan_end(
        {"west/t/0": 2},
        {"west": snap({}, state=ClusterState.FAILED, reachable=False)},
        {},
    )
    assert plan.retired == {"west/t/0": "cluster failed"}
    assert plan.end == {NO_SPLITS: 0}


def test_draining_caps_at_the_drain_offset() -> None:
    plan = plan_end(
        {"d/t/0": 10, "d/t/1": 0},
        {
            "d": snap(
                {"d/t/0": 50, "d/t/1": 5},
                state=ClusterState.DRAINING,
                drain={"d/t/0": 40, "d/t/1": 8},
            )
        },
        {},
    )
    assert plan.end == {"d/t/0": 40, "d/t/1": 5}
    assert plan.retired == {}


@pytest.mark.parametrize("pos", [40, 41])
def test_draining_split_retires_once_drained(pos: int) -> None:
    plan = plan_end(
        {"d/t/0": pos},
        {"d": snap({"d/t/0": 50}, state=ClusterState.DRAINING, drain={"d/t/0": 40})},
        {},
    )
    assert plan.retired == {"d/t/0": "drained"}
    assert plan.end == {NO_SPLITS: 0}


def test_draining_split_without_drain_offset_retires() -> None:
    plan = plan_end(
        {"d/t/0": 3},
        {"d": snap({"d/t/0": 50}, state=ClusterState.DRAINING, drain={})},
        {},
    )
    assert plan.retired == {"d/t/0": "drained"}


def test_draining_without_captured_drain_keeps_splits_frozen() -> None:
    plan = plan_end(
        {"d/t/0": 3, "d/t/1": 7},
        {"d": snap({"d/t/0": 50, "d/t/1": 60}, state=ClusterState.DRAINING, drain=None)},
        {},
    )
    assert plan.end == {"d/t/0": 3, "d/t/1": 7}
    assert plan.retired == {}


def test_draining_unreachable_keeps_splits() -> None:
    plan = plan_end(
        {"d/t/0": 3},
        {"d": snap({}, state=ClusterState.DRAINING, reachable=False, drain={"d/t/0": 10})},
        {},
    )
    assert plan.end == {"d/t/0": 3}


# -- plan_end: data loss --------------------------------------------------------


def test_offsets_gone_backwards_raise_data_loss() -> None:
    with pytest.raises(DataLossError) as info:
        plan_end({"east/t/0": 100}, {"east": snap({"east/t/0": 40})}, {})
    message = str(info.value)
    assert "east/t/0" in message
    assert "backwards" in message
    assert "failOnDataLoss=false" in message


def test_offsets_gone_backwards_without_failing_restart_at_zero() -> None:
    plan = plan_end(
        {"east/t/0": 100, "east/t/1": 5},
        {"east": snap({"east/t/0": 40, "east/t/1": 6})},
        {},
        fail_on_data_loss=False,
    )
    assert plan.end == {"east/t/0": 0, "east/t/1": 6}
    assert set(plan.data_loss) == {"east/t/0"}
    assert "100" in plan.data_loss["east/t/0"]
    assert "40" in plan.data_loss["east/t/0"]


def test_split_missing_from_latest_is_data_loss() -> None:
    clusters = {"east": snap({"east/t/1": 6}, splits={"east/t/1"})}
    with pytest.raises(DataLossError) as info:
        plan_end({"east/t/0": 5, "east/t/1": 5}, clusters, {})
    assert "east/t/0" in str(info.value)


def test_split_missing_from_latest_without_failing_is_recorded() -> None:
    clusters = {"east": snap({"east/t/1": 6}, splits={"east/t/1"})}
    plan = plan_end({"east/t/0": 5, "east/t/1": 5}, clusters, {}, fail_on_data_loss=False)
    assert set(plan.data_loss) == {"east/t/0"}
    assert "no longer exists" in plan.data_loss["east/t/0"]
    assert plan.end == {"east/t/1": 6}
    assert plan.retired == {}


def test_missing_latest_on_unreachable_cluster_is_not_data_loss() -> None:
    plan = plan_end({"east/t/0": 5}, {"east": snap({}, reachable=False)}, {})
    assert plan.end == {"east/t/0": 5}
    assert plan.data_loss == {}


# -- plan_end: cap (Trigger.AvailableNow) --------------------------------------


def test_cap_limits_the_end() -> None:
    start = {"east/t/0": 10, "east/t/1": 10}
    clusters = {"east": snap({"east/t/0": 50, "east/t/1": 50})}
    plan = plan_end(start, clusters, {}, cap={"east/t/0": 30})
    assert plan.end == {"east/t/0": 30, "east/t/1": 10}


def test_cap_below_start_does_not_move_backwards() -> None:
    plan = plan_end({"east/t/0": 10}, {"east": snap({"east/t/0": 50})}, {}, cap={"east/t/0": 5})
    assert plan.end == {"east/t/0": 10}


def test_cap_excludes_new_splits_not_in_cap() -> None:
    clusters = {"east": snap({"east/t/0": 50, "east/t/1": 50, "east/t/2": 50})}
    plan = plan_end(
        {"east/t/0": 10},
        clusters,
        {"east/t/1": 0, "east/t/2": 0},
        cap={"east/t/0": 50, "east/t/1": 50},
    )
    assert plan.end == {"east/t/0": 50, "east/t/1": 0}
    assert plan.entered == ["east/t/1"]


def test_cap_and_budget_together() -> None:
    start = {"east/t/0": 0, "east/t/1": 0}
    clusters = {"east": snap({"east/t/0": 100, "east/t/1": 100})}
    plan = plan_end(start, clusters, {}, budget=30, cap={"east/t/0": 10, "east/t/1": 100})
    # backlogs 10 and 100 share 30 -> 3 (2.72..) and 27 (27.27..)
    assert plan.end == {"east/t/0": 3, "east/t/1": 27}


# -- plan_end: the end vector ---------------------------------------------------


def test_end_vector_is_canonical() -> None:
    start = {"west/t/0": 1, "east/t/1": 1, "east/t/0": 1}
    clusters = {
        "west": snap({"west/t/0": 2}),
        "east": snap({"east/t/1": 2, "east/t/0": 2, "east/t/2": 0}),
    }
    plan = plan_end(start, clusters, {"east/t/2": 0})
    # sorted by (cluster, topic, partition), and one JSON text for one vector
    assert list(plan.end) == ["east/t/0", "east/t/1", "east/t/2", "west/t/0"]
    assert to_json(plan.end) == json.dumps({"east": {"t": [2, 2, 0]}, "west": {"t": [2]}})
    reordered = plan_end(dict(reversed(start.items())), clusters, {"east/t/2": 0})
    assert to_json(reordered.end) == to_json(plan.end)


def test_end_vector_of_nothing_is_the_placeholder() -> None:
    assert plan_end({}, {}, {}).end == {NO_SPLITS: 0}
    assert plan_end({NO_SPLITS: 0}, {}, {}).end == {NO_SPLITS: 0}
    assert plan_end({"gone/t/0": 4}, {}, {}).end == {NO_SPLITS: 0}


def test_placeholder_in_start_is_ignored() -> None:
    plan = plan_end({NO_SPLITS: 0}, {"east": snap({"east/t/0": 9})}, {"east/t/0": 0})
    assert plan.end == {"east/t/0": 0}
    assert plan.retired == {}


def test_plan_is_deterministic() -> None:
    start = {"east/t/0": 0, "east/t/1": 0, "west/t/0": 0}
    clusters = {
        "east": snap({"east/t/0": 33, "east/t/1": 33}),
        "west": snap({"west/t/0": 33, "west/t/1": 9}),
    }
    plan = plan_end(start, clusters, {"west/t/1": 0}, budget=50)
    # The same plan whatever order the vector and the clusters come in.
    reordered = plan_end(
        dict(reversed(start.items())),
        dict(reversed(clusters.items())),
        {"west/t/1": 0},
        budget=50,
    )
    assert reordered == plan
    assert sum(v for k, v in plan.end.items() if k in start) == 50


# -- plan_end: stopping offsets --------------------------------------------------


def test_stop_caps_the_end_and_unnamed_splits_read_on() -> None:
    plan = plan_end(
        {"a/t/0": 10, "a/t/1": 0, "b/t/0": 0},
        {
            "a": snap({"a/t/0": 50, "a/t/1": 50}, stop={"a/t/0": 30}),
            "b": snap({"b/t/0": 50}),
        },
        {},
    )
    assert plan.end == {"a/t/0": 30, "a/t/1": 50, "b/t/0": 50}
    assert plan.retired == {}


@pytest.mark.parametrize("pos", [30, 45])
def test_split_at_or_past_its_stop_has_no_more_data_and_stays(pos: int) -> None:
    """A stopped split is not retired (nor data loss): it just gets no range,
    and takes no share of the budget."""
    plan = plan_end(
        {"a/t/0": pos, "a/t/1": 0},
        {"a": snap({"a/t/0": 50, "a/t/1": 50}, stop={"a/t/0": 30})},
        {},
        budget=10,
    )
    assert plan.end == {"a/t/0": pos, "a/t/1": 10}
    assert plan.retired == {}
    assert plan.data_loss == {}
    assert plan.lag == {"a": 50}  # only a/t/1's records count as lag


def test_stop_above_the_high_watermark_reads_to_the_watermark() -> None:
    plan = plan_end({"a/t/0": 0}, {"a": snap({"a/t/0": 20}, stop={"a/t/0": 100})}, {})
    assert plan.end == {"a/t/0": 20}


def test_stop_with_budget_and_cap_takes_the_lowest() -> None:
    clusters = {"a": snap({"a/t/0": 100, "a/t/1": 100}, stop={"a/t/0": 40, "a/t/1": 90})}
    start = {"a/t/0": 0, "a/t/1": 0}
    plan = plan_end(start, clusters, {}, cap={"a/t/0": 60, "a/t/1": 60})
    assert plan.end == {"a/t/0": 40, "a/t/1": 60}
    # Backlogs up to the stops, 40 and 90: a budget of 50 goes 15 and 35.
    assert plan_end(start, clusters, {}, budget=50).end == {"a/t/0": 15, "a/t/1": 35}


def test_new_split_enters_even_past_its_stop_and_reads_nothing() -> None:
    clusters = {"a": snap({"a/t/0": 100}, stop={"a/t/0": 40})}
    entered = plan_end({}, clusters, {"a/t/0": 70})
    assert entered.end == {"a/t/0": 70}
    assert plan_end(entered.end, clusters, {}).end == {"a/t/0": 70}


def test_offsets_above_the_watermark_are_still_data_loss_with_a_stop() -> None:
    with pytest.raises(DataLossError, match="went backwards"):
        plan_end({"a/t/0": 80}, {"a": snap({"a/t/0": 50}, stop={"a/t/0": 40})}, {})


def test_draining_cluster_with_a_lower_stop_drains_to_the_stop() -> None:
    clusters = {
        "d": snap(
            {"d/t/0": 50}, state=ClusterState.DRAINING, drain={"d/t/0": 45}, stop={"d/t/0": 30}
        )
    }
    assert plan_end({"d/t/0": 10}, clusters, {}).end == {"d/t/0": 30}
    done = plan_end({"d/t/0": 30}, clusters, {})
    assert done.retired == {"d/t/0": "drained"}


def test_cap_at_stops() -> None:
    offsets = as_offsets({"a/t/0": 100, "a/t/1": 5, "b/t/0": 100})
    capped = cap_at_stops(offsets, as_offsets({"a/t/0": 40, "a/t/1": 40, "a/u/0": 1}))
    assert capped == {"a/t/0": 40, "a/t/1": 5, "b/t/0": 100}
    assert cap_at_stops(offsets, as_offsets({})) is offsets


# -- plan_end: accounting -------------------------------------------------------


def test_planned_and_lag_per_cluster() -> None:
    start = {"east/t/0": 0, "east/t/1": 10, "west/t/0": 5}
    clusters = {
        "east": snap({"east/t/0": 30, "east/t/1": 20}),
        "west": snap({}, reachable=False, splits={"west/t/0"}),
    }
    plan = plan_end(start, clusters, {}, budget=20)
    assert plan.planned == {"east": 20, "west": 0}
    assert plan.lag == {"east": 40}


# -- plan_end against a per-split model ------------------------------------------


def model_plan(
    start: Mapping[str, int],
    clusters: Mapping[str, ClusterSnapshot],
    entry: Mapping[str, int],
    budget: int | None,
    cap: Mapping[str, int] | None,
) -> tuple[dict[str, int], dict[str, str], set[str]]:
    """What plan_end does, one split at a time (the code before columns),
    with the rounding of the budget going to earlier splits in
    (cluster, topic, partition) order. Returns end, retired, data lost."""
    order = sorted(start, key=SplitId.parse)
    end: dict[str, int] = {}
    retired: dict[str, str] = {}
    lost: set[str] = set()
    backlog: dict[str, int] = {}
    for s in order:
        pos, split = start[s], SplitId.parse(s)
        c = clusters.get(split.cluster)
        if c is None:
            retired[s] = "cluster removed from the stream"
            continue
        drain = dict(c.drain) if c.drain is not None else None
        if split.topic not in c.topics:
            retired[s] = "topic removed from the stream"
            continue
        if c.state is ClusterState.FAILED:
            retired[s] = "cluster failed"
            continue
        if c.state is ClusterState.STANDBY:
            retired[s] = "cluster is standby"
            continue
        draining = c.state is ClusterState.DRAINING
        if draining and drain is not None and (s not in drain or pos >= drain[s]):
            retired[s] = "drained"
            continue
        if not c.reachable or (draining and drain is None):
            end[s] = pos
            continue
        high = dict(c.latest).get(s)
        if high is None:
            lost.add(s)
            continue
        if high < pos:
            lost.add(s)
            end[s] = 0
            continue
        if draining and drain is not None:
            high = min(high, drain[s])
        if cap is not None:
            high = min(high, cap.get(s, pos))
        end[s] = pos
        if high > pos:
            backlog[s] = high - pos
    total = sum(backlog.values())
    if budget is not None and total > budget:
        keys = sorted(backlog, key=SplitId.parse)
        shares = {s: budget * backlog[s] // total for s in keys}
        left = budget - sum(shares.values())
        by_rest = sorted(keys, key=lambda s: (-(budget * backlog[s] % total), SplitId.parse(s)))
        for s in by_rest[:left]:
            shares[s] += 1
    else:
        shares = backlog
    for s, n in shares.items():
        end[s] += n
    for s in new_splits(start, clusters):
        if s in entry and (cap is None or s in cap):
            end[s] = entry[s]
    return end, retired, lost


@pytest.mark.parametrize("seed", range(200))
def test_plan_end_matches_the_per_split_model(seed: int) -> None:
    rng = random.Random(seed)
    states = [ClusterState.ACTIVE] * 3 + [
        ClusterState.DRAINING,
        ClusterState.FAILED,
        ClusterState.STANDBY,
    ]
    clusters: dict[str, ClusterSnapshot] = {}
    start: dict[str, int] = {}
    entry: dict[str, int] = {}
    for c in ("a", "b", "c", "d"):
        topics = ["t", "u10", "u2"][: rng.randrange(1, 4)]
        latest: dict[str, int] = {}
        for t in ["t", "u10", "u2", "gone"]:
            for p in range(rng.randrange(0, 13)):
                s = f"{c}/{t}/{p}"
                pos = rng.randrange(0, 1000)
                held = rng.random() < 0.7
                if held:
                    start[s] = pos
                elif rng.random() < 0.7:
                    entry[s] = rng.randrange(0, 100)
                if t in topics and rng.random() < 0.97:
                    latest[s] = pos + rng.randrange(-3, 500) if held else rng.randrange(0, 900)
        if c == "d" and rng.random() < 0.5:
            continue  # removed from the stream
        state = rng.choice(states)
        drain = None
        if state is ClusterState.DRAINING and rng.random() < 0.8:
            drain = {
                s: o + rng.randrange(-50, 300) for s, o in latest.items() if rng.random() < 0.9
            }
        clusters[c] = snap(
            latest,
            state=state,
            topics=topics,
            reachable=rng.random() < 0.85,
            drain=drain,
        )
    budget = rng.choice([None, 0, 1, 17, 1000, 10**6])
    cap = None
    if rng.random() < 0.3:
        cap = {s: o + rng.randrange(0, 200) for s, o in start.items() if rng.random() < 0.8}
        cap.update({s: 0 for s in entry if rng.random() < 0.5})
    end, retired, lost = model_plan(start, clusters, entry, budget, cap)
    plan = plan_end(start, clusters, entry, budget=budget, cap=cap, fail_on_data_loss=False)
    assert plan.end.to_dict() == end
    assert plan.retired == retired
    assert set(plan.data_loss) == lost
    if lost:
        with pytest.raises(DataLossError):
            plan_end(start, clusters, entry, budget=budget, cap=cap)


def test_snapshot_takes_ids_and_mappings() -> None:
    s = ClusterSnapshot(ACTIVE, frozenset({"t"}), True, frozenset({"c/t/1", "c/t/0"}), {"c/t/0": 4})
    assert s.splits.ids() == ["c/t/0", "c/t/1"]
    assert s.latest == {"c/t/0": 4}
