"""The soak's leak check (:func:`multikafka.devstack.soak.coordinator_growth`) on
made-up samples: a cluster replaced at the start of a stint is no leak, a
replica that keeps gaining threads is."""

from __future__ import annotations

from typing import Any

from multikafka.devstack.soak import GROWTH_ALLOWED, SETTLE_S, coordinator_growth


def _samples(threads: list[int]) -> list[dict[str, Any]]:
    """A leader sampled every 5 s, ``threads`` once settled (``SETTLE_S``
    after its first sample, which has fewer: its clients still opening)."""
    warming = [20] * int(SETTLE_S // 5)
    return [
        {
            "t": 5.0 * i,
            "replica": "coordinator-0",
            "pid": 1,
            "role": "leader",
            "os_threads": n,
            "fds": 60,
            "rss_mib": 150.0,
        }
        for i, n in enumerate(warming + threads)
    ]


def test_a_cluster_replaced_at_the_start_of_a_stint_is_no_leak() -> None:
    # Seen in CI: a killed broker's clients closed (45 -> 37), its
    # replacement's opened (-> 50), and a median baseline of 41 read as +9.
    threads = [45, 37, 41, 50, 50, 50, 50, 50]
    growth = coordinator_growth(_samples(threads), total_s=30.0)
    assert growth["replicas"][0]["growth"]["os_threads"] == 5
    assert growth["ok"]


def test_threads_that_keep_coming_are_a_leak() -> None:
    threads = [45, 45, 45, 48, 51, 54, 57, 60]
    growth = coordinator_growth(_samples(threads), total_s=30.0)
    assert growth["replicas"][0]["growth"]["os_threads"] > GROWTH_ALLOWED["os_threads"]
    assert not growth["ok"]
