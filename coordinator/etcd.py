"""A small typed layer over ``aetcd``: the few etcd operations the coordinator
uses, with etcd failures mapped to :class:`UnavailableError`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aetcd
import aetcd.exceptions

from coordinator.config import EtcdEndpoint
from multikafka_core.exceptions import ConflictError, UnavailableError

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class KV:
    key: str
    value: bytes
    mod_revision: int
    create_revision: int


@dataclass(frozen=True)
class WatchEvent:
    key: str
    #: ``None`` for a delete.
    value: bytes | None
    revision: int


class Compacted(Exception):
    """The watch start revision was compacted away: reload everything."""


def prefix_end(prefix: bytes) -> bytes:
    """The end of the key range holding every key that starts with ``prefix``."""
    return aetcd.utils.prefix_range_end(prefix)  # type: ignore[no-any-return]


class Etcd:
    """The coordinator's etcd client."""

    def __init__(self, endpoint: EtcdEndpoint, *, timeout_s: float = 5.0) -> None:
        self.endpoint = endpoint
        self._client = aetcd.Client(host=endpoint.host, port=endpoint.port, timeout=timeout_s)

    async def connect(self) -> None:
        await self._call(self._client.connect)

    async def close(self) -> None:
        await self._client.close()

    async def _call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        try:
            return await fn(*args, **kwargs)
        except aetcd.exceptions.ClientError as exc:
            raise UnavailableError(f"etcd at {self.endpoint}: {type(exc).__name__}: {exc}") from exc

    async def get(self, key: str) -> KV | None:
        res = await self._call(self._client.get, key.encode())
        if res is None:
            return None
        return KV(key, res.value, res.mod_revision, res.create_revision)

    async def get_prefix(self, prefix: str) -> tuple[list[KV], int]:
        """Every key under ``prefix``, and the store revision they were read at."""
        return await self.get_range(prefix, prefix_end(prefix.encode()).decode())

    async def get_range(self, start: str, end: str) -> tuple[list[KV], int]:
        """Every key in ``[start, end)``, and the store revision they were read at."""
        res = await self._call(self._client.get_range, start.encode(), end.encode())
        kvs = [KV(kv.key.decode(), kv.value, kv.mod_revision, kv.create_revision) for kv in res]
        return kvs, int(res.header.revision)

    async def put(self, key: str, value: bytes, *, lease: int | None = None) -> int:
        res = await self._call(self._client.put, key.encode(), value, lease=lease)
        return int(res.header.revision)

    async def put_if(self, key: str, value: bytes, expected_mod_revision: int) -> int:
        """Put only if the key's mod revision is ``expected_mod_revision``
        (0: only if the key does not exist). Returns the new revision."""
        tx = self._client.transactions
        compare = [tx.mod(key.encode()) == expected_mod_revision]
        ok, responses = await self._call(
            self._client.transaction,
            compare=compare,
            success=[tx.put(key.encode(), value)],
            failure=[],
        )
        if not ok:
            raise ConflictError(
                f"{key} changed concurrently (expected version {expected_mod_revision})"
            )
        return int(responses[0].response_put.header.revision)

    async def delete(self, key: str) -> bool:
        res = await self._call(self._client.delete, key.encode())
        return res is not None and res.deleted > 0

    async def delete_prefix(self, prefix: str) -> int:
        res = await self._call(self._client.delete_prefix, prefix.encode())
        return int(res.deleted)

    async def watch_range(
        self, start: str, end: str, start_revision: int
    ) -> AsyncIterator[WatchEvent]:
        """Events on keys in ``[start, end)`` from ``start_revision`` on, in
        revision order. Raises :class:`Compacted` or :class:`UnavailableError`
        when the watch breaks."""
        try:
            watch = await self._client.watch(
                start.encode(), range_end=end.encode(), start_revision=start_revision
            )
        except aetcd.exceptions.RevisionCompactedError as exc:
            raise Compacted(str(exc)) from exc
        except aetcd.exceptions.ClientError as exc:
            raise UnavailableError(f"etcd watch at {self.endpoint}: {exc!r}") from exc
        try:
            async for ev in watch:
                kv = ev.kv
                value = None if ev.kind == aetcd.rtypes.EventKind.DELETE else kv.value
                yield WatchEvent(kv.key.decode(), value, int(kv.mod_revision))
        except aetcd.exceptions.RevisionCompactedError as exc:
            raise Compacted(str(exc)) from exc
        except Exception as exc:  # any break of the stream (gRPC errors surface unwrapped)
            raise UnavailableError(f"etcd watch at {self.endpoint} broke: {exc!r}") from exc
        finally:
            try:
                await asyncio.wait_for(watch.cancel(), 1.0)
            except Exception:
                logger.debug("watch cancel failed", exc_info=True)

    # Leases (reader registrations, leader election).

    async def grant_lease(self, ttl_s: int) -> int:
        lease = await self._call(self._client.lease, ttl_s)
        return int(lease.id)

    async def refresh_lease(self, lease_id: int) -> int:
        """Keep a lease alive; returns its remaining TTL (0 or less: it expired)."""
        res = await self._call(self._client.refresh_lease, lease_id)
        return int(res.TTL)

    async def revoke_lease(self, lease_id: int) -> None:
        await self._call(self._client.revoke_lease, lease_id)

    async def create_if_absent(
        self, key: str, value: bytes, lease_id: int
    ) -> tuple[bool, bytes | None]:
        """Create ``key`` bound to a lease unless it exists (create_revision == 0).
        Returns whether it was created and, if not, the current value."""
        tx = self._client.transactions
        k = key.encode()
        ok, responses = await self._call(
            self._client.transaction,
            compare=[tx.create(k) == 0],
            success=[tx.put(k, value, lease=lease_id)],
            failure=[tx.get(k)],
        )
        if ok:
            return True, None
        kvs = responses[0].response_range.kvs
        return False, (kvs[0].value if kvs else None)
