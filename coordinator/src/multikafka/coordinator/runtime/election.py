"""Leader election with fencing, on an etcd lease (etcd's
``client/v3/concurrency`` is the model; patroni's loop sets the timing).

One replica leads: it created ``<prefix>/leader`` under its own lease, in a
transaction that succeeds only while the key is absent, and keeps the lease
alive. Standbys poll the key and campaign as soon as it is gone.

Timing, for a lease of ``ttl`` seconds: the leader renews every ``ttl / 3``
and gives a renewal ``ttl / 3`` to answer; it counts itself leader only
until ``ttl * 2 / 3`` after the start of its last renewal that succeeded, so
it stops acting before etcd can expire the lease (patroni: TTL > loop wait +
2 x retry timeout). A leader that was paused (GC, SIGSTOP, a partition) wakes
past that point and knows it no longer leads before it tries anything.

Renewals run on a thread of their own, with a blocking etcd client of their
own (:class:`LeaseKeeper`, :class:`~multikafka.coordinator.state.leases.LeaseRenewals`),
when the coordinator gives one: a busy event loop (a reconcile fanned out
to a thousand agents, a large plan, a thousand queries' triggers) then
cannot starve them and cost the leadership. Without one they run on the
loop.

Fencing: :meth:`Election.fence` gives the leader key and the revision that
created it; every write of the leader's components is a transaction guarded
by ``create_revision(leader key) == that revision``
(:class:`multikafka.coordinator.state.etcd.FencedEtcd`). A write refused by that guard calls
:meth:`Election.lost`: step down at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from multikafka.coordinator.metrics import Metrics
from multikafka.coordinator.state.etcd import MALFORMED, Etcd, Fence
from multikafka.core.exceptions import UnavailableError

if TYPE_CHECKING:
    from multikafka.coordinator.state.leases import LeaseRenewals

logger = logging.getLogger(__name__)

Callback = Callable[[], Awaitable[None]]
#: Makes the blocking etcd client a :class:`LeaseKeeper` renews through (called on its thread).
RenewalsFactory = Callable[[], "LeaseRenewals"]


@dataclass(frozen=True)
class Replica:
    """One coordinator replica, as the others see it."""

    id: str
    #: ``host:port`` clients reach it at.
    address: str
    #: When it started (ms since the epoch).
    since_ms: int = 0

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Replica | None:
        try:
            doc = json.loads(raw)
            replica_id, address = doc["id"], doc["address"]
            if not isinstance(replica_id, str) or not isinstance(address, str):
                return None
            return cls(replica_id, address, int(doc.get("since_ms", 0)))
        except MALFORMED:
            return None


class Election:
    """Campaigns for leadership and keeps it; tells the coordinator when it
    is elected and deposed (both callbacks are awaited in order, never at
    the same time)."""

    def __init__(
        self,
        etcd: Etcd,
        prefix: str,
        me: Replica,
        *,
        ttl_s: float,
        metrics: Metrics,
        on_elected: Callback,
        on_deposed: Callback,
        clock: Callable[[], float] = time.monotonic,
        renewals: RenewalsFactory | None = None,
    ) -> None:
        self.key = f"{prefix}/leader"
        self.me = me
        self._etcd = etcd
        self._ttl_s = ttl_s
        self._loop_s = ttl_s / 3
        self._metrics = metrics
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._clock = clock
        #: None: renew on the event loop, through ``etcd``.
        self._renewals = renewals
        #: The keeper of the leadership held now, or last (renewals on their own thread).
        self.keeper: LeaseKeeper | None = None
        #: Create revision of our leader key while we lead.
        self._revision: int | None = None
        self._valid_until = 0.0
        self._lease: int | None = None
        self._lost = asyncio.Event()
        self._stopping = False
        #: Set when :meth:`run` has ended (after :meth:`resign`).
        self.finished = asyncio.Event()
        #: The leader as last seen (ourselves while we lead).
        self.leader: Replica | None = None
        self.elections = 0

    # -- what others ask ---------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this replica leads now: elected, and its lease renewed
        recently enough that etcd cannot have expired it."""
        return self._revision is not None and self._clock() < self._valid_until

    @property
    def role(self) -> str:
        return "leader" if self.is_leader else "standby"

    def fence(self) -> Fence | None:
        """The guard of the leader's writes, or None when not leading."""
        if not self.is_leader or self._revision is None:
            return None
        return Fence(self.key, self._revision)

    def lost(self) -> None:
        """A write was refused by the fence, or attempted while not leading:
        stop acting now; the loop steps down and campaigns again."""
        self._metrics.fenced_writes.inc()
        if self._revision is not None:
            logger.warning("a write was fenced: this replica no longer leads; stepping down")
        self._step_down()

    def _step_down(self) -> None:
        self._valid_until = 0.0
        self._lost.set()

    # -- the loop ------------------------------------------------------------------

    async def run(self) -> None:
        """Campaign, lead, step down, campaign again: until :meth:`resign`."""
        try:
            while not self._stopping:
                try:
                    if await self._campaign():
                        await self._lead()
                    else:
                        await self._wait_for_vacancy()
                except UnavailableError as exc:
                    logger.warning("election: etcd unavailable (%s); trying again", exc)
                    await asyncio.sleep(self._loop_s)
                except Exception:
                    logger.exception("election: unexpected error; campaigning again")
                    await asyncio.sleep(self._loop_s)
        finally:
            self.finished.set()

    async def _campaign(self) -> bool:
        # The lease's time runs from its grant: count validity from before it.
        started = self._clock()
        lease = await self._etcd.grant_lease(max(math.ceil(self._ttl_s), 1))
        try:
            created, kv = await self._etcd.create_if_absent(self.key, self.me.to_json(), lease)
        except BaseException:
            with contextlib.suppress(UnavailableError):
                await self._etcd.revoke_lease(lease)
            raise
        if created and kv is not None:
            self._lease, self._revision = lease, kv.create_revision
            self._valid_until = started + self._ttl_s * 2 / 3
            self.leader = self.me
            took = self._clock() - started
            if took > self._loop_s:
                logger.warning(
                    "etcd took %.1f s to elect this replica: leadership lasts %.1f s "
                    "from the lease grant (2/3 of the lease TTL), so a slow etcd can "
                    "depose it before its first renewal; check etcd's latency (disk "
                    "fsync) or raise the lease TTL",
                    took,
                    self._ttl_s * 2 / 3,
                )
            return True
        await self._etcd.revoke_lease(lease)
        holder = Replica.from_json(kv.value) if kv is not None else None
        if holder is not None and holder.id == self.me.id and self._lease is not None:
            # Our own key from before a step-down, its lease still alive:
            # give it up so the election starts afresh.
            await self._etcd.revoke_lease(self._lease)
            self._lease = None
            return False
        self.leader = holder
        return False

    async def _lead(self) -> None:
        self.elections += 1
        self._lost.clear()
        self._metrics.elections.inc()
        self._metrics.leader.set(1)
        logger.warning(
            "elected leader", extra={"address": self.me.address, "generation": self._revision}
        )
        keeper = None
        if self._renewals is not None and self._lease is not None:
            assert self._revision is not None
            keeper = self.keeper = LeaseKeeper(self, self._renewals, self._lease, self._revision)
            keeper.start()
        try:
            await self._on_elected()
            while self.is_leader and not self._stopping:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._lost.wait(), self._loop_s)
                if self._lost.is_set():
                    break
                if keeper is None and not await self._renew():
                    break
        finally:
            if keeper is not None:
                keeper.stop()
            self._revision = None
            self._valid_until = 0.0
            self._metrics.leader.set(0)
            if self._stopping:  # resigned: a shutdown, not a loss
                logger.info("resigned the leadership", extra={"address": self.me.address})
            else:
                logger.warning("no longer the leader", extra={"address": self.me.address})
            try:
                await self._on_deposed()
            finally:
                await self._let_go()

    async def _renew(self) -> bool:
        """Renew the lease through the loop's client and check the key is
        still ours; False: deposed."""
        lease, revision = self._lease, self._revision
        started = self._clock()
        try:
            with self._metrics.lease_renewal_seconds.time():
                ttl = await asyncio.wait_for(self._etcd.refresh_lease(lease or 0), self._loop_s)
                kv = await asyncio.wait_for(self._etcd.get(self.key), self._loop_s)
        except (UnavailableError, asyncio.TimeoutError):
            self._metrics.lease_renewals_failed.inc()
            return self.is_leader  # keep going while the last renewal still covers us
        return self._renewed(started, ttl, None if kv is None else kv.create_revision, revision)

    def _renew_blocking(self, renewals: LeaseRenewals, lease: int, revision: int) -> bool:
        """:meth:`_renew` for a :class:`LeaseKeeper`: on its thread, through
        its blocking client, for the lease and leadership it keeps."""
        started = self._clock()
        try:
            with self._metrics.lease_renewal_seconds.time():
                ttl = renewals.keep_alive(lease, self._loop_s)
                created = renewals.create_revision(self.key, self._loop_s)
        except UnavailableError:
            self._metrics.lease_renewals_failed.inc()
            return self.is_leader
        return self._renewed(started, ttl, created, revision)

    def _renewed(self, started: float, ttl: int, created: int | None, revision: int | None) -> bool:
        """A renewal begun at ``started`` found the lease's ``ttl`` and the
        leader key ``created`` at that revision: whether the leadership of
        ``revision`` goes on (then valid for 2/3 of the TTL from ``started``)."""
        if ttl <= 0 or created is None or created != revision:
            self._metrics.lease_renewals_failed.inc()
            return False
        if self._revision == revision:  # still the leadership this renewal is for
            self._valid_until = started + self._ttl_s * 2 / 3
        return True

    async def _let_go(self) -> None:
        """Free the lease (the key goes with it) so a standby can take over
        at once. When etcd is away the lease is remembered: it expires by
        itself, or the next campaign finds our own key and frees it then."""
        if self._lease is None:
            return
        with contextlib.suppress(UnavailableError, asyncio.TimeoutError):
            await asyncio.wait_for(self._etcd.revoke_lease(self._lease), self._loop_s)
            self._lease = None

    async def _wait_for_vacancy(self) -> None:
        """Poll the leader key until it is gone (its holder resigned or its
        lease expired), then return: time to campaign."""
        poll_s = min(0.5, self._ttl_s / 10)
        while not self._stopping:
            await asyncio.sleep(poll_s)
            kv = await self._etcd.get(self.key)
            if kv is None:
                return
            self.leader = Replica.from_json(kv.value)

    def resign(self) -> None:
        """Stop leading and campaigning (on shutdown); the loop then frees the
        lease, so a standby takes over without waiting for it to expire."""
        self._stopping = True
        self._step_down()


class LeaseKeeper:
    """Renews a leader's lease every ``ttl / 3`` on a thread of its own,
    through a blocking etcd client of its own, so a busy coordinator loop
    cannot delay a renewal past the leadership's validity. A renewal that
    finds the lease or key gone deposes the leader (through its loop); the
    thread ends when :meth:`stop` is called or the leadership is over."""

    def __init__(
        self, election: Election, make_renewals: RenewalsFactory, lease: int, revision: int
    ) -> None:
        self._election = election
        self._make_renewals = make_renewals
        self._lease = lease
        self._revision = revision
        self._loop = asyncio.get_running_loop()
        self._stopped = threading.Event()
        self.renewals = 0
        self._thread = threading.Thread(
            target=self._run, name="multikafka-lease-keeper", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ends the thread (at once, or after the renewal under way); never
        blocks the caller."""
        self._stopped.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        election = self._election
        try:
            renewals = self._make_renewals()
        except Exception:
            logger.exception("lease keeper failed; the leader steps down")
            self._depose()
            return
        try:
            while not self._stopped.wait(election._loop_s):
                if election._revision != self._revision:
                    return
                try:
                    renewed = election._renew_blocking(renewals, self._lease, self._revision)
                except Exception:
                    logger.exception("lease renewal failed unexpectedly; trying again")
                    renewed = election.is_leader
                self.renewals += 1
                if not renewed:
                    self._depose()
                    return
        finally:
            with contextlib.suppress(Exception):
                renewals.close()

    def _depose(self) -> None:
        if not self._stopped.is_set():
            with contextlib.suppress(RuntimeError):  # the loop has closed
                self._loop.call_soon_threadsafe(self._election._step_down)
