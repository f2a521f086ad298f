"""A small typed layer over ``aetcd``: the few etcd operations the coordinator
uses, with etcd failures mapped to :class:`UnavailableError`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
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


#: What decoding one of the coordinator's own JSON records raises when the
#: stored value is malformed: not JSON, a list where an object belongs, a
#: missing field, a wrong type. Loaders catch exactly these, log and skip.
MALFORMED = (ValueError, KeyError, TypeError, AttributeError)


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
        return await self.put_all_if([(key, value, expected_mod_revision)])

    async def put_all_if(self, writes: Sequence[tuple[str, bytes, int]]) -> int:
        """Put every ``(key, value, expected mod revision)`` in one transaction,
        only if every key is still at its expected revision (0: absent): all
        are written, at one revision, or none (:class:`ConflictError`)."""
        tx = self._client.transactions
        ok, responses = await self._call(
            self._client.transaction,
            compare=[tx.mod(k.encode()) == rev for k, _, rev in writes],
            success=[tx.put(k.encode(), v) for k, v, _ in writes],
            failure=[],
        )
        if not ok:
            expected = ", ".join(f"{k} at version {rev}" for k, _, rev in writes)
            raise ConflictError(f"changed concurrently; nothing written (expected {expected})")
        return int(responses[0].response_put.header.revision)

    async def delete(self, key: str) -> bool:
        res = await self._call(self._client.delete, key.encode())
        return res is not None and res.deleted > 0

    async def delete_prefix(self, prefix: str) -> int:
        res = await self._call(self._client.delete_prefix, prefix.encode())
        return int(res.deleted)

    async def watch_range(
        self, start: str, end: str, start_revision: int
    ) -> AsyncIterator[list[WatchEvent]]:
        """The changes of keys in ``[start, end)`` from ``start_revision`` on,
        one list per etcd revision (the writes of one transaction arrive
        together), in revision order. Raises :class:`Compacted` or
        :class:`UnavailableError` when the watch breaks."""
        try:
            watch = await self._client.watch(
                start.encode(), range_end=end.encode(), start_revision=start_revision
            )
        except aetcd.exceptions.RevisionCompactedError as exc:
            raise Compacted(str(exc)) from exc
        except aetcd.exceptions.ClientError as exc:
            raise UnavailableError(f"etcd watch at {self.endpoint}: {exc!r}") from exc
        # aetcd hands out the events of one watch response one at a time; a
        # pump moves each response's events into this queue in one go, so the
        # events of one revision can be taken together.
        queue: asyncio.Queue[WatchEvent | BaseException | None] = asyncio.Queue()

        async def pump() -> None:
            try:
                async for ev in watch:
                    kv = ev.kv
                    value = None if ev.kind == aetcd.rtypes.EventKind.DELETE else kv.value
                    queue.put_nowait(WatchEvent(kv.key.decode(), value, int(kv.mod_revision)))
            except Exception as exc:
                queue.put_nowait(exc)
            else:
                queue.put_nowait(None)

        pumping = asyncio.create_task(pump(), name="etcd watch pump")
        try:
            ahead: WatchEvent | BaseException | None = None
            while True:
                item = ahead if ahead is not None else await queue.get()
                ahead = None
                if item is None:
                    return
                if isinstance(item, aetcd.exceptions.RevisionCompactedError):
                    raise Compacted(str(item)) from item
                if isinstance(item, BaseException):
                    # any break of the stream (gRPC errors surface unwrapped)
                    raise UnavailableError(
                        f"etcd watch at {self.endpoint} broke: {item!r}"
                    ) from item
                batch = [item]
                while not queue.empty():
                    nxt = queue.get_nowait()
                    if isinstance(nxt, WatchEvent) and nxt.revision == item.revision:
                        batch.append(nxt)
                    else:
                        ahead = nxt
                        break
                yield batch
        finally:
            pumping.cancel()
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
