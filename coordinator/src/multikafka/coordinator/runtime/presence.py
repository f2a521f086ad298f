"""Replicas announce themselves under ``<prefix>/replicas/<id>``, each under
a lease of its own (apart from the leader's: a replica is present whether it
leads or not), so ``multikafka admin status`` on any replica lists them all
and a replica that dies drops out when its lease expires."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from multikafka.coordinator.runtime.election import Replica
from multikafka.coordinator.state.etcd import Etcd
from multikafka.core.exceptions import UnavailableError

__all__ = ["Presence"]


class Presence:
    def __init__(self, etcd: Etcd, prefix: str, me: Callable[[], Replica], ttl_s: int) -> None:
        self._etcd = etcd
        self._prefix = f"{prefix}/replicas/"
        self._me = me
        self._ttl_s = ttl_s
        self._lease: int | None = None

    async def announce(self) -> None:
        """Keep this replica's entry (renew its lease, or write it again
        under a new one). Raises :class:`UnavailableError`."""
        if self._lease is not None and await self._etcd.refresh_lease(self._lease) > 0:
            return
        me = self._me()
        self._lease = await self._etcd.grant_lease(self._ttl_s)
        await self._etcd.put(f"{self._prefix}{me.id}", me.to_json(), lease=self._lease)

    async def replicas(self) -> list[Replica]:
        """The replicas that announce themselves now, by address."""
        kvs, _ = await self._etcd.get_prefix(self._prefix)
        found = [Replica.from_json(kv.value) for kv in kvs]
        return sorted((r for r in found if r is not None), key=lambda r: r.address)

    async def withdraw(self) -> None:
        """Remove this replica's entry now (if etcd answers)."""
        if self._lease is not None:
            with contextlib.suppress(UnavailableError):
                await self._etcd.revoke_lease(self._lease)
