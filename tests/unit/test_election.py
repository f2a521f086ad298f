"""Leader election (``coordinator/election.py``) over :class:`FakeEtcd`.

Validity is decided on a fake clock each test moves by hand; wall time only
paces the loop (``ttl / 3`` renewals, ``ttl / 10`` standby polls) in the
tests where it runs, with a small TTL. The rest calls the election's steps
(``_campaign``, ``_renew``, ``lost``, ``resign``) directly.

The last three tests each showed a bug found by this file (now fixed).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

import pytest

from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.runtime.election import Election, Replica
from multikafka.coordinator.state.etcd import KV, Fence, FencedError, FencedEtcd
from multikafka.core.exceptions import UnavailableError
from tests.fakes import BlockingRenewals, FakeEtcd
from tests.helpers import eventually_async

INTERNALS = (
    "multikafka.coordinator.metrics",
    "multikafka.coordinator.runtime.election",
    "multikafka.coordinator.state.etcd",
)


PREFIX = "/t"
KEY = f"{PREFIX}/leader"
DATA = f"{PREFIX}/streams/s"
#: For tests that call the steps by hand: validity is 2/3 of it, 2.0 s of
#: the fake clock exactly (no rounding at the boundaries).
TTL = 3.0
#: For tests where the loop runs: renewals every 0.1 s, standby polls every 0.03 s.
LOOP_TTL = 0.3
#: What the loop must do within an interval or two, bounded generously.
SOON = LOOP_TTL + 1.0
T0 = 1000.0


class FakeClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class InstrumentedEtcd(FakeEtcd):
    """FakeEtcd that counts lease refreshes (to wait for the loop's renewals
    without sleeping), and can fail the next ``create_if_absent`` or run a
    hook after granting a lease."""

    def __init__(self) -> None:
        super().__init__()
        self.refreshes = 0
        self.fail_next_create = False
        self.after_grant: Callable[[], None] | None = None

    async def refresh_lease(self, lease_id: int) -> int:
        self.refreshes += 1
        return await super().refresh_lease(lease_id)

    async def grant_lease(self, ttl_s: int) -> int:
        lease = await super().grant_lease(ttl_s)
        if self.after_grant is not None:
            self.after_grant()
        return lease

    async def create_if_absent(
        self, key: str, value: bytes, lease_id: int
    ) -> tuple[bool, KV | None]:
        if self.fail_next_create:
            self.fail_next_create = False
            raise UnavailableError("etcd at fake-etcd: the create timed out")
        return await super().create_if_absent(key, value, lease_id)


def lease_of(etcd: FakeEtcd, key: str) -> int | None:
    """The lease ``key`` is bound to in the fake, if any."""
    found = [lid for lid, lease in etcd._leases.items() if key in lease.keys]
    assert len(found) <= 1, f"{key} bound to several leases: {found}"
    return found[0] if found else None


def metric(metrics: Metrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    return 0.0 if value is None else value


class Node:
    """One replica: its election, metrics, fake clock, and what its callbacks saw."""

    def __init__(
        self,
        etcd: FakeEtcd,
        name: str,
        *,
        ttl_s: float,
        deposed_raises: int,
        clock: Callable[[], float] | None = None,
        keeper: bool = False,
    ) -> None:
        self.etcd = etcd
        self.clock = FakeClock()
        self.metrics = Metrics()
        self.me = Replica(name, f"{name}.example:9090", since_ms=1_700_000_000_000 + ord(name[0]))
        self.elected = 0
        self.deposed = 0
        #: (leader gauge, is_leader) as each on_deposed saw them.
        self.seen_at_deposed: list[tuple[float, bool]] = []
        self._deposed_raises = deposed_raises
        self.election = Election(
            etcd,  # type: ignore[arg-type]
            PREFIX,
            self.me,
            ttl_s=ttl_s,
            metrics=self.metrics,
            on_elected=self._on_elected,
            on_deposed=self._on_deposed,
            clock=clock or self.clock,
            # The keeper's own client: the same fake, called from its thread.
            renewals=(lambda: BlockingRenewals(etcd)) if keeper else None,  # type: ignore[arg-type,return-value]
        )
        self.task: asyncio.Task[None] | None = None

    async def _on_elected(self) -> None:
        await asyncio.sleep(0)  # counted only if awaited to the end
        self.elected += 1

    async def _on_deposed(self) -> None:
        await asyncio.sleep(0)
        self.deposed += 1
        self.seen_at_deposed.append((self.metric("multikafka_leader"), self.election.is_leader))
        if self._deposed_raises:
            self._deposed_raises -= 1
            raise RuntimeError("on_deposed failed")

    def start(self) -> None:
        self.task = asyncio.create_task(self.election.run(), name=f"election {self.me.id}")

    def metric(self, name: str) -> float:
        return metric(self.metrics, name)

    def writer(self, fence: Callable[[], Fence | None] | None = None) -> FencedEtcd:
        """What this replica's components write through."""
        return FencedEtcd(
            self.etcd,  # type: ignore[arg-type]
            fence or self.election.fence,
            self.election.lost,
        )


MakeNode = Callable[..., Node]


@pytest.fixture
async def replicas() -> AsyncIterator[MakeNode]:
    made: list[Node] = []

    def make(
        etcd: FakeEtcd,
        name: str,
        *,
        ttl_s: float = TTL,
        deposed_raises: int = 0,
        clock: Callable[[], float] | None = None,
        keeper: bool = False,
    ) -> Node:
        node = Node(
            etcd, name, ttl_s=ttl_s, deposed_raises=deposed_raises, clock=clock, keeper=keeper
        )
        made.append(node)
        return node

    yield make
    running = [n for n in made if n.task is not None]
    for node in running:
        node.election.resign()
    for node in running:
        assert node.task is not None
        await asyncio.wait_for(node.task, 2.0)


async def renewals(etcd: InstrumentedEtcd, n: int) -> None:
    """Wait until the loop has tried ``n`` more renewals."""
    target = etcd.refreshes + n
    await eventually_async(lambda: etcd.refreshes >= target, timeout_s=SOON * n)


# -- Replica ----------------------------------------------------------------------


def test_replica_json_round_trip() -> None:
    r = Replica("c-1", "10.0.0.7:9090", 1_700_000_000_123)
    raw = r.to_json()
    assert json.loads(raw) == {
        "id": "c-1",
        "address": "10.0.0.7:9090",
        "since_ms": 1_700_000_000_123,
    }
    assert Replica.from_json(raw) == r
    assert Replica.from_json(b'{"id": "x", "address": "h:1"}') == Replica("x", "h:1", 0)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"not json",
        b"\xff",
        b"[]",
        b"null",
        b'"a"',
        b"5",
        b"{}",
        b'{"id": "a"}',
        b'{"address": "h:1"}',
        b'{"id": "a", "address": "h:1", "since_ms": "soon"}',
        b'{"id": "a", "address": "h:1", "since_ms": null}',
        b'{"id": "a", "address": "h:1", "since_ms": [1]}',
    ],
)
def test_replica_from_malformed_json_is_none(raw: bytes) -> None:
    assert Replica.from_json(raw) is None


# -- campaign ---------------------------------------------------------------------


async def test_first_replica_leads_and_the_second_knows_it(replicas: MakeNode) -> None:
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=LOOP_TTL)
    a.start()
    await eventually_async(lambda: a.elected == 1, timeout_s=SOON)

    kv = etcd.kv(KEY)
    assert kv is not None
    assert json.loads(kv.value) == {"id": "a", "address": a.me.address, "since_ms": a.me.since_ms}
    assert Replica.from_json(kv.value) == a.me
    lease = lease_of(etcd, KEY)
    assert lease is not None, "the leader key must be bound to a lease"
    assert a.election.is_leader
    assert a.election.role == "leader"
    assert a.election.fence() == Fence(KEY, kv.create_revision)
    assert a.election.leader == a.me
    assert a.metric("multikafka_leader") == 1
    assert a.metric("multikafka_elections_total") == 1

    await renewals(etcd, 2)  # renewing does not elect it again
    assert (a.elected, a.deposed) == (1, 0)
    assert a.metric("multikafka_elections_total") == 1
    assert a.election.elections == 1

    b = replicas(etcd, "b", ttl_s=LOOP_TTL)
    assert await b.election._campaign() is False
    assert not b.election.is_leader
    assert b.election.role == "standby"
    assert b.election.leader == a.me
    assert b.election.leader.address == "a.example:9090"
    assert b.election.fence() is None
    assert set(etcd._leases) == {lease}, "the failed campaign's lease must be revoked"
    assert etcd.kv(KEY) == kv
    assert b.elected == 0
    assert b.metric("multikafka_leader") == 0
    assert b.metric("multikafka_elections_total") == 0


async def test_a_campaign_whose_create_fails_revokes_its_lease(replicas: MakeNode) -> None:
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a")
    etcd.fail_next_create = True
    with pytest.raises(UnavailableError):
        await a.election._campaign()
    assert etcd._leases == {}
    assert not a.election.is_leader
    assert etcd.kv(KEY) is None
    assert await a.election._campaign() is True  # the next one goes through


# -- validity ---------------------------------------------------------------------


async def test_is_leader_holds_until_two_thirds_of_the_ttl_after_the_last_renewal(
    replicas: MakeNode,
) -> None:
    a = replicas(FakeEtcd(), "a")
    assert await a.election._campaign()
    a.clock.now = T0 + 1.0
    assert await a.election._renew() is True  # started at T0 + 1: valid until T0 + 3

    a.clock.now = T0 + 2.5  # past what the campaign alone covered (T0 + 2)
    assert a.election.is_leader
    a.clock.now = T0 + 1.0 + 2.0 - 0.001
    assert a.election.is_leader
    assert a.election.fence() is not None
    a.clock.now = T0 + 1.0 + 2.0
    assert not a.election.is_leader
    assert a.election.role == "standby"
    assert a.election.fence() is None


async def test_a_paused_leader_knows_it_and_its_write_never_reaches_etcd(
    replicas: MakeNode,
) -> None:
    etcd = FakeEtcd()
    a = replicas(etcd, "a")
    assert await a.election._campaign()
    writer = a.writer()
    await writer.put(DATA, b"v1")  # while it leads, writes go through
    assert etcd.value(DATA) == b"v1"

    a.clock.advance(TTL)  # paused (GC, SIGSTOP) past its validity
    assert not a.election.is_leader
    assert a.election.fence() is None
    revision, puts = etcd.revision, etcd.puts
    with pytest.raises(FencedError):
        await writer.put(DATA, b"v2")
    assert (etcd.revision, etcd.puts) == (revision, puts)
    assert etcd.value(DATA) == b"v1"
    assert a.metric("multikafka_fenced_writes_total") == 1  # lost() ran
    assert a.election._lost.is_set(), "lost() must tell the loop to step down"


# -- renewal ----------------------------------------------------------------------


async def test_a_failed_renewal_is_counted_and_leadership_lasts_while_valid(
    replicas: MakeNode,
) -> None:
    etcd = FakeEtcd()
    a = replicas(etcd, "a")
    assert await a.election._campaign()  # valid until T0 + 2
    etcd.down = True
    refused = etcd.refused

    a.clock.now = T0 + 1.0
    assert await a.election._renew() is True
    assert etcd.refused > refused  # it did try
    assert a.metric("multikafka_lease_renewals_failed_total") == 1
    a.clock.now = T0 + 1.999
    assert await a.election._renew() is True
    assert a.metric("multikafka_lease_renewals_failed_total") == 2
    assert a.election.is_leader  # failed renewals did not extend it past T0 + 2:
    a.clock.now = T0 + 2.0
    assert await a.election._renew() is False
    assert a.metric("multikafka_lease_renewals_failed_total") == 3
    assert not a.election.is_leader


async def test_the_loop_leads_through_failed_renewals_until_validity_ends(
    replicas: MakeNode,
) -> None:
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=LOOP_TTL)
    a.start()
    await eventually_async(lambda: a.elected == 1, timeout_s=SOON)

    etcd.down = True
    await renewals(etcd, 3)
    assert a.metric("multikafka_lease_renewals_failed_total") >= 3
    assert a.election.is_leader  # the fake clock stands still: still valid
    assert a.deposed == 0
    assert a.metric("multikafka_leader") == 1
    etcd.down = False
    await renewals(etcd, 2)
    assert a.election.is_leader

    etcd.down = True
    a.clock.advance(LOOP_TTL)  # past the last good renewal's 2/3 ttl
    await eventually_async(lambda: a.deposed == 1, timeout_s=SOON)
    assert a.seen_at_deposed == [(0.0, False)]
    assert a.metric("multikafka_leader") == 0


async def test_a_renewal_that_finds_the_lease_gone_fails(replicas: MakeNode) -> None:
    etcd = FakeEtcd()
    a = replicas(etcd, "a")
    assert await a.election._campaign()
    lease = lease_of(etcd, KEY)
    assert lease is not None
    etcd.expire_lease(lease)
    assert await a.election._renew() is False
    assert a.metric("multikafka_lease_renewals_failed_total") == 1


async def test_the_leader_is_deposed_when_its_lease_expires(replicas: MakeNode) -> None:
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=LOOP_TTL)
    a.start()
    await eventually_async(lambda: a.elected == 1, timeout_s=SOON)
    first = etcd.kv(KEY)
    lease = lease_of(etcd, KEY)
    assert first is not None
    assert lease is not None

    etcd.expire_lease(lease)
    await eventually_async(lambda: a.deposed == 1, timeout_s=SOON)
    assert a.seen_at_deposed == [(0.0, False)]
    assert a.metric("multikafka_lease_renewals_failed_total") >= 1
    # the key is vacant: it campaigns again, alone, and wins a new term
    await eventually_async(lambda: a.elected == 2, timeout_s=SOON)
    kv = etcd.kv(KEY)
    assert kv is not None
    assert kv.create_revision > first.create_revision
    assert a.election.fence() == Fence(KEY, kv.create_revision)
    assert a.metric("multikafka_elections_total") == 2
    assert a.metric("multikafka_leader") == 1


async def test_a_leader_whose_key_was_recreated_by_another_is_deposed(
    replicas: MakeNode,
) -> None:
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=LOOP_TTL)
    a.start()
    await eventually_async(lambda: a.elected == 1, timeout_s=SOON)
    a_lease = lease_of(etcd, KEY)
    b = replicas(etcd, "b", ttl_s=LOOP_TTL)

    # FakeEtcd's calls never suspend: a's loop cannot run between these two.
    assert await etcd.delete(KEY)
    assert await b.election._campaign()
    b_fence = b.election.fence()
    assert b_fence is not None

    await eventually_async(lambda: a.deposed == 1, timeout_s=SOON)
    assert a.seen_at_deposed == [(0.0, False)]
    assert a.metric("multikafka_lease_renewals_failed_total") >= 1
    await eventually_async(lambda: a.election.leader == b.me, timeout_s=SOON)
    assert not a.election.is_leader
    assert a.elected == 1
    assert a_lease not in etcd._leases
    kv = etcd.kv(KEY)
    assert kv is not None
    assert kv.create_revision == b_fence.revision
    assert Replica.from_json(kv.value) == b.me


# -- fencing across replicas ---------------------------------------------------------


async def test_a_deposed_leaders_stale_write_is_refused_by_etcd(replicas: MakeNode) -> None:
    etcd = FakeEtcd()
    a = replicas(etcd, "a")
    b = replicas(etcd, "b")
    assert await a.election._campaign()
    a_fence = a.election.fence()
    assert a_fence is not None
    a_writer = a.writer(lambda: a_fence)  # A's components hold on to A's fence
    await a_writer.put(DATA, b"from a")

    # A is cut off: its lease expires and B wins. A's own clock stands still,
    # so A still believes it leads: only etcd's guard can stop it now.
    a_lease = lease_of(etcd, KEY)
    assert a_lease is not None
    etcd.expire_lease(a_lease)
    assert await b.election._campaign()
    b_key = etcd.kv(KEY)
    await b.writer().put(DATA, b"from b")
    assert a.election.is_leader

    revision = etcd.revision
    with pytest.raises(FencedError):
        await a_writer.put(DATA, b"stale a")
    with pytest.raises(FencedError):
        await a_writer.delete(DATA)
    assert etcd.value(DATA) == b"from b"
    assert etcd.kv(KEY) == b_key
    assert etcd.revision == revision
    assert a.metric("multikafka_fenced_writes_total") == 2  # on_fenced: A.lost()
    assert not a.election.is_leader
    assert a.election.fence() is None
    assert b.election.is_leader
    assert b.metric("multikafka_fenced_writes_total") == 0


# -- takeover and resign ---------------------------------------------------------------


async def test_a_standby_takes_over_within_a_poll_when_the_leaders_lease_expires(
    replicas: MakeNode,
) -> None:
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=LOOP_TTL)
    assert await a.election._campaign()  # then A dies: no loop renews its lease
    b = replicas(etcd, "b", ttl_s=LOOP_TTL)
    b.start()
    await eventually_async(lambda: b.election.leader == a.me, timeout_s=SOON)
    assert b.election.role == "standby"

    lease = lease_of(etcd, KEY)
    assert lease is not None
    started = time.monotonic()
    etcd.expire_lease(lease)
    await eventually_async(lambda: b.elected == 1, timeout_s=SOON)
    assert time.monotonic() - started < LOOP_TTL  # polls every LOOP_TTL / 10
    assert b.election.is_leader
    kv = etcd.kv(KEY)
    assert kv is not None
    assert Replica.from_json(kv.value) == b.me
    assert b.election.fence() == Fence(KEY, kv.create_revision)
    await renewals(etcd, 2)
    assert b.elected == 1
    assert b.metric("multikafka_elections_total") == 1
    assert b.metric("multikafka_leader") == 1


async def test_resign_ends_the_leaders_loop_and_frees_the_key_at_once(
    replicas: MakeNode,
) -> None:
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=LOOP_TTL)
    a.start()
    await eventually_async(lambda: a.elected == 1, timeout_s=SOON)
    b = replicas(etcd, "b", ttl_s=LOOP_TTL)
    b.start()
    await eventually_async(lambda: b.election.leader == a.me, timeout_s=SOON)
    a_lease = lease_of(etcd, KEY)
    assert a_lease is not None
    a_fence = a.election.fence()
    assert a_fence is not None

    a.election.resign()
    await asyncio.wait_for(a.election.finished.wait(), SOON)
    assert a.task is not None
    await asyncio.wait_for(a.task, SOON)
    assert a.deposed == 1
    assert a.seen_at_deposed == [(0.0, False)]
    assert not a.election.is_leader
    # FakeEtcd never expires a lease: the key is gone because A revoked it
    assert a_lease not in etcd._leases
    kv = etcd.kv(KEY)
    assert kv is None or kv.create_revision != a_fence.revision
    await eventually_async(lambda: b.elected == 1, timeout_s=SOON)
    assert a.elected == 1  # and A did not campaign again


async def test_resign_on_a_standby_ends_its_loop(replicas: MakeNode) -> None:
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=LOOP_TTL)
    assert await a.election._campaign()
    a_key, a_lease = etcd.kv(KEY), lease_of(etcd, KEY)
    b = replicas(etcd, "b", ttl_s=LOOP_TTL)
    b.start()
    await eventually_async(lambda: b.election.leader == a.me, timeout_s=SOON)

    b.election.resign()
    await asyncio.wait_for(b.election.finished.wait(), SOON)
    assert b.task is not None
    await asyncio.wait_for(b.task, SOON)
    assert (b.elected, b.deposed) == (0, 0)
    assert etcd.kv(KEY) == a_key
    assert set(etcd._leases) == {a_lease}


# -- its own old key -----------------------------------------------------------------


async def test_a_replica_gives_up_its_own_old_key_left_by_a_failed_step_down(
    replicas: MakeNode,
) -> None:
    """on_deposed raised, so the step-down did not free the lease: the next
    campaign finds its own key and revokes it, then wins afresh."""
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=LOOP_TTL, deposed_raises=1)
    a.start()
    await eventually_async(lambda: a.elected == 1, timeout_s=SOON)
    old = lease_of(etcd, KEY)
    assert old is not None

    a.election.lost()
    await eventually_async(lambda: a.deposed == 1, timeout_s=SOON)
    await eventually_async(lambda: a.elected == 2, timeout_s=SOON)
    assert old not in etcd._leases
    assert lease_of(etcd, KEY) != old


async def test_own_old_key_is_freed_when_the_step_down_could_not_revoke_it(
    replicas: MakeNode,
) -> None:
    """A step-down whose revoke fails (etcd away) keeps the lease id, so the
    next campaign finds its own key and frees it instead of waiting as a
    standby of itself until the lease expires. (A bug this file found:
    ``_let_go`` forgot the lease before revoking it.)"""
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=LOOP_TTL)
    a.start()
    await eventually_async(lambda: a.elected == 1, timeout_s=SOON)
    old = lease_of(etcd, KEY)
    assert old is not None

    etcd.down = True
    a.election.lost()  # e.g. a write was fenced; then the revoke fails
    await eventually_async(lambda: a.deposed == 1, timeout_s=SOON)
    refused = etcd.refused
    await eventually_async(lambda: etcd.refused > refused, timeout_s=SOON)
    assert old in etcd._leases  # the revoke did fail: its key is still there
    etcd.down = False

    def gave_it_up() -> bool:
        assert old not in etcd._leases, (
            f"replica a kept its own old key (lease {old}) and waits for it as a "
            f"standby of itself (leader seen: {a.election.leader})"
        )
        return a.elected == 2

    await eventually_async(gave_it_up, timeout_s=SOON)


# -- what this file found (fixed) ----------------------------------------------------


async def test_campaign_validity_counts_from_before_the_lease_grant(
    replicas: MakeNode,
) -> None:
    """Time spent in the lease grant (a slow answer, or a pause right after
    it) counts against validity: the lease's TTL runs from the grant, so the
    replica must not count itself leader past it. (A bug this file found:
    ``_campaign`` read the clock after ``grant_lease`` returned.)"""
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a")
    # etcd grants the lease at T0; its answer arrives half a TTL later
    etcd.after_grant = lambda: a.clock.advance(TTL / 2)
    assert await a.election._campaign()
    a.clock.now = T0 + TTL  # etcd may expire the lease from here on
    assert not a.election.is_leader, (
        "leader past the lease's TTL: validity must end by T0 + 2/3 ttl "
        f"= {T0 + TTL * 2 / 3}, counted from before the grant"
    )


async def test_a_campaign_slower_than_a_renewal_interval_is_logged(
    replicas: MakeNode, caplog: pytest.LogCaptureFixture
) -> None:
    """An election etcd answered slowly (a disk slow to fsync) leaves the new
    term little or no validity: the operator is told why it may end at once.
    A prompt one says nothing."""
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a")
    with caplog.at_level("WARNING", logger="multikafka.coordinator.runtime.election"):
        assert await a.election._campaign()
    assert "etcd took" not in caplog.text
    slow = InstrumentedEtcd()
    b = replicas(slow, "b")
    slow.after_grant = lambda: b.clock.advance(TTL * 0.8)
    with caplog.at_level("WARNING", logger="multikafka.coordinator.runtime.election"):
        assert await b.election._campaign()
    assert not b.election.is_leader  # the term lapsed before it began
    assert "etcd took 2.4 s to elect this replica: leadership lasts 2.0 s" in caplog.text


async def test_resign_frees_the_key_even_when_on_deposed_raises(replicas: MakeNode) -> None:
    """Resign frees the lease even when ``on_deposed`` fails, so a standby
    does not wait for it to expire. (A bug this file found: ``_let_go`` ran
    only if ``on_deposed`` returned.)"""
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=LOOP_TTL, deposed_raises=1)
    a.start()
    await eventually_async(lambda: a.elected == 1, timeout_s=SOON)
    lease = lease_of(etcd, KEY)
    assert lease is not None

    a.election.resign()
    await asyncio.wait_for(a.election.finished.wait(), SOON)
    assert a.deposed == 1
    assert lease not in etcd._leases, "resign must free the lease even if on_deposed fails"
    assert etcd.kv(KEY) is None


# -- renewals on their own thread ---------------------------------------------------


@pytest.mark.parametrize("keeper", [True, False])
async def test_a_busy_loop_costs_the_leadership_unless_a_keeper_renews(
    replicas: MakeNode, keeper: bool
) -> None:
    """The loop is blocked (a large reconcile, say) for longer than the
    leadership's validity (2/3 of the TTL, on the real clock): renewed on
    the keeper's thread it still leads; renewed on the loop it does not."""
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=0.6, clock=time.monotonic, keeper=keeper)
    a.start()
    await eventually_async(lambda: a.elected == 1, timeout_s=SOON)
    before = etcd.refreshes
    time.sleep(1.0)  # noqa: ASYNC251 -- blocking the event loop is what this tests
    assert a.election.is_leader is keeper
    if keeper:
        assert etcd.refreshes >= before + 3, "the keeper renews while the loop is blocked"
        assert a.deposed == 0


async def test_a_keeper_that_finds_the_lease_gone_deposes_the_leader(
    replicas: MakeNode,
) -> None:
    etcd = InstrumentedEtcd()
    a = replicas(etcd, "a", ttl_s=LOOP_TTL, keeper=True)
    a.start()
    await eventually_async(lambda: a.elected == 1, timeout_s=SOON)
    first = a.election.keeper
    assert first is not None
    assert first.alive
    lease = lease_of(etcd, KEY)
    assert lease is not None
    etcd.expire_lease(lease)
    await eventually_async(lambda: a.deposed == 1, timeout_s=SOON)
    assert a.metric("multikafka_lease_renewals_failed_total") >= 1
    # It campaigns again and wins a new term, with a new keeper for it.
    await eventually_async(lambda: a.elected == 2, timeout_s=SOON)
    second = a.election.keeper
    assert second is not None
    assert second is not first
    await eventually_async(lambda: not first.alive, timeout_s=SOON)
    assert second.alive
    a.election.resign()
    assert a.task is not None
    await asyncio.wait_for(a.task, 2.0)
    await eventually_async(lambda: not second.alive, timeout_s=SOON)
