"""A small typed layer over ``aetcd``: the etcd operations the coordinator
uses, with etcd failures mapped to :class:`UnavailableError`.

* Several endpoints: a call that finds its member unreachable moves the
  client to the next one (the caller's retry then reaches it).
* TLS (a CA, and optionally a client certificate) and username/password
  authentication.
* :class:`FencedEtcd`: the same operations, with every write guarded by the
  leader's fence (see :mod:`multikafka.coordinator.runtime.election`).

The leader's lease renewals have a blocking client of their own
(:mod:`.leases`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import aetcd
import aetcd.exceptions
import grpc
from aetcd import rpc, watcher

from multikafka.coordinator.config import EtcdConfig, EtcdEndpoint
from multikafka.core.exceptions import ConflictError, UnavailableError
from multikafka.core.transport import read_pem

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: What decoding one of the coordinator's own JSON records raises when the
#: stored value is malformed: not JSON, a list where an object belongs, a
#: missing field, a wrong type. Loaders catch exactly these, log and skip.
MALFORMED = (ValueError, KeyError, TypeError, AttributeError)

#: Errors that say the member we talk to is gone (move to the next one).
_MEMBER_DOWN = (
    aetcd.exceptions.ConnectionFailedError,
    aetcd.exceptions.ConnectionTimeoutError,
    aetcd.exceptions.InternalError,
)


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


class FencedError(UnavailableError):
    """A write was refused because this replica no longer leads."""


class EtcdClient(Protocol):
    """The operations the coordinator's components use: met by :class:`Etcd`
    and by :class:`FencedEtcd` (the leader's components get the latter)."""

    async def get(self, key: str) -> KV | None: ...
    async def get_prefix(self, prefix: str) -> tuple[list[KV], int]: ...
    async def get_range(self, start: str, end: str) -> tuple[list[KV], int]: ...
    async def put(self, key: str, value: bytes, *, lease: int | None = None) -> int: ...
    async def put_if(self, key: str, value: bytes, expected_mod_revision: int) -> int: ...
    async def put_all_if(self, writes: Sequence[tuple[str, bytes, int]]) -> int: ...
    async def put_all(self, writes: Sequence[tuple[str, bytes]]) -> int: ...
    async def delete(self, key: str) -> bool: ...
    async def delete_prefix(self, prefix: str) -> int: ...
    def watch_range(
        self, start: str, end: str, start_revision: int
    ) -> AsyncIterator[list[WatchEvent]]: ...
    async def grant_lease(self, ttl_s: int) -> int: ...
    async def refresh_lease(self, lease_id: int) -> int: ...
    async def revoke_lease(self, lease_id: int) -> None: ...


def prefix_end(prefix: bytes) -> bytes:
    """The end of the key range holding every key that starts with ``prefix``."""
    return aetcd.utils.prefix_range_end(prefix)  # type: ignore[no-any-return]


class _Client(aetcd.Client):  # type: ignore[misc]
    """aetcd's client with TLS: aetcd 1.0 opens plaintext channels only, so
    this ``connect`` is aetcd's own (``aetcd/client.py``) opening a secure
    channel when credentials are given."""

    def __init__(self, *, credentials: grpc.ChannelCredentials | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._credentials = credentials

    async def connect(self) -> None:
        if self._connected.is_set():
            return
        if self._is_connecting:  # type: ignore[has-type]
            await asyncio.wait_for(self._connected.wait(), self._connect_wait_timeout)
            return
        try:
            self._is_connecting = True
            target = f"{self._host}:{self._port}"
            options = list(self._options.items())
            if self._credentials is None:
                self.channel = rpc.insecure_channel(target, options=options)
            else:
                self.channel = rpc.secure_channel(target, self._credentials, options=options)
            if self._username is not None and self._password is not None:
                self.auth_stub = rpc.AuthStub(self.channel)
                request = rpc.AuthenticateRequest(name=self._username, password=self._password)
                try:
                    resp = await self.auth_stub.Authenticate(request, timeout=self._timeout)
                except rpc.AioRpcError as exc:
                    aetcd.exceptions._handle_exception(exc)
                self.metadata = (("token", resp.token),)
            self.kvstub = rpc.KVStub(self.channel)
            self.clusterstub = rpc.ClusterStub(self.channel)
            self.leasestub = rpc.LeaseStub(self.channel)
            self.maintenancestub = rpc.MaintenanceStub(self.channel)
            self._watcher = watcher.Watcher(
                rpc.WatchStub(self.channel), timeout=self._timeout, metadata=self.metadata
            )
            self._connected.set()
        finally:
            self._is_connecting = False


def credentials(config: EtcdConfig) -> grpc.ChannelCredentials | None:
    if not config.tls:
        return None
    return grpc.ssl_channel_credentials(
        root_certificates=read_pem(config.ca),
        private_key=read_pem(config.key),
        certificate_chain=read_pem(config.cert),
    )


class Etcd:
    """The coordinator's etcd client."""

    def __init__(self, config: EtcdConfig, *, timeout_s: float = 5.0) -> None:
        self.config = config
        self._timeout_s = timeout_s
        self._credentials = credentials(self.config)
        self._index = 0
        self._client = self._new_client()

    @property
    def endpoint(self) -> EtcdEndpoint:
        """The member this client talks to now."""
        return self.config.endpoints[self._index]

    def _new_client(self) -> _Client:
        ep = self.endpoint
        return _Client(
            host=ep.host,
            port=ep.port,
            username=self.config.username or None,
            password=self.config.password or None,
            timeout=self._timeout_s,
            credentials=self._credentials,
        )

    async def _move(self, why: BaseException, failed: _Client) -> None:
        """Leave the member ``failed`` for the next one (a single one:
        reconnect), unless another call has moved on already."""
        if failed is not self._client:
            return
        old = self._client
        self._index = (self._index + 1) % len(self.config.endpoints)
        self._client = self._new_client()
        if len(self.config.endpoints) > 1:
            logger.warning(
                "etcd member unreachable; moving on",
                extra={"address": str(self.endpoint), "error": type(why).__name__},
            )
        try:
            await asyncio.wait_for(old.close(), 1.0)
        except Exception:
            logger.debug("closing the old etcd client failed", exc_info=True)

    async def connect(self) -> None:
        await self._call(lambda c: c.connect())

    async def close(self) -> None:
        await self._client.close()

    async def _call(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        client = self._client
        try:
            return await fn(client)
        except aetcd.exceptions.UnauthenticatedError as exc:
            if client is self._client:  # the auth token expired: authenticate again
                self._client = self._new_client()
                await client.close()
            raise UnavailableError(f"etcd at {self.endpoint}: {exc}") from exc
        except aetcd.exceptions.ClientError as exc:
            if isinstance(exc, _MEMBER_DOWN):
                await self._move(exc, client)
            raise UnavailableError(
                f"etcd at {self.endpoint}: {type(exc).__name__}: {str(exc)[:300]}"
            ) from exc

    async def get(self, key: str) -> KV | None:
        res = await self._call(lambda c: c.get(key.encode()))
        if res is None:
            return None
        return KV(key, res.value, res.mod_revision, res.create_revision)

    async def get_prefix(self, prefix: str) -> tuple[list[KV], int]:
        """Every key under ``prefix``, and the store revision they were read at."""
        return await self.get_range(prefix, prefix_end(prefix.encode()).decode())

    async def get_range(self, start: str, end: str) -> tuple[list[KV], int]:
        """Every key in ``[start, end)``, and the store revision they were read at."""
        res = await self._call(lambda c: c.get_range(start.encode(), end.encode()))
        kvs = [KV(kv.key.decode(), kv.value, kv.mod_revision, kv.create_revision) for kv in res]
        return kvs, int(res.header.revision)

    async def txn(
        self, compare: list[Any], success: list[Any], failure: list[Any]
    ) -> tuple[bool, list[Any]]:
        """One etcd transaction (aetcd's compare and request objects)."""
        ok, responses = await self._call(
            lambda c: c.transaction(compare=compare, success=success, failure=failure)
        )
        return bool(ok), list(responses)

    @property
    def ops(self) -> Any:
        """aetcd's builders of compares and requests (``ops.put(...)``, ``ops.mod(...)``)."""
        return self._client.transactions

    async def _write(
        self, fence: Fence | None, compare: list[Any], success: list[Any]
    ) -> tuple[bool, list[Any]]:
        """One transaction of writes, behind ``fence`` when given: (whether
        ``compare`` held, the responses). Raises :class:`FencedError` when the
        fence no longer holds (another replica leads)."""
        tx = self.ops
        if fence is None:
            return await self.txn(compare, success, [])
        key = fence.key.encode()
        ok, responses = await self.txn(
            [tx.create(key) == fence.revision, *compare], success, [tx.get(key)]
        )
        if ok:
            return True, responses
        found = _range(responses[0])
        if found is None or found.create_revision != fence.revision:
            raise FencedError("not the leader any more: the write was refused (fenced)")
        return False, responses

    async def put(
        self, key: str, value: bytes, *, lease: int | None = None, fence: Fence | None = None
    ) -> int:
        _, responses = await self._write(
            fence, [], [self.ops.put(key.encode(), value, lease=lease)]
        )
        return int(responses[0].response_put.header.revision)

    async def put_if(
        self, key: str, value: bytes, expected_mod_revision: int, *, fence: Fence | None = None
    ) -> int:
        """Put only if the key's mod revision is ``expected_mod_revision``
        (0: only if the key does not exist). Returns the new revision."""
        return await self.put_all_if([(key, value, expected_mod_revision)], fence=fence)

    async def put_all_if(
        self, writes: Sequence[tuple[str, bytes, int]], *, fence: Fence | None = None
    ) -> int:
        """Put every ``(key, value, expected mod revision)`` in one transaction,
        only if every key is still at its expected revision (0: absent): all
        are written, at one revision, or none (:class:`ConflictError`)."""
        tx = self.ops
        ok, responses = await self._write(
            fence,
            [tx.mod(k.encode()) == rev for k, _, rev in writes],
            [tx.put(k.encode(), v) for k, v, _ in writes],
        )
        if not ok:
            raise _conflict(writes)
        return int(responses[0].response_put.header.revision)

    async def put_all(
        self, writes: Sequence[tuple[str, bytes]], *, fence: Fence | None = None
    ) -> int:
        """Put every ``(key, value)`` in one transaction (at one revision)."""
        _, responses = await self._write(
            fence, [], [self.ops.put(k.encode(), v) for k, v in writes]
        )
        return int(responses[0].response_put.header.revision)

    async def delete(self, key: str, *, fence: Fence | None = None) -> bool:
        _, responses = await self._write(fence, [], [self.ops.delete(key.encode())])
        return int(responses[0].response_delete_range.deleted) > 0

    async def delete_prefix(self, prefix: str, *, fence: Fence | None = None) -> int:
        p = prefix.encode()
        _, responses = await self._write(fence, [], [self.ops.delete(p, range_end=prefix_end(p))])
        return int(responses[0].response_delete_range.deleted)

    async def watch_range(
        self, start: str, end: str, start_revision: int
    ) -> AsyncIterator[list[WatchEvent]]:
        """The changes of keys in ``[start, end)`` from ``start_revision`` on,
        one list per etcd revision (the writes of one transaction arrive
        together), in revision order. Raises :class:`Compacted` or
        :class:`UnavailableError` when the watch breaks."""
        client = self._client
        try:
            watch = await self._call(
                lambda c: c.watch(
                    start.encode(), range_end=end.encode(), start_revision=start_revision
                )
            )
        except UnavailableError as exc:
            if isinstance(exc.__cause__, aetcd.exceptions.RevisionCompactedError):
                raise Compacted(str(exc.__cause__)) from exc
            raise
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
                    if isinstance(item, _MEMBER_DOWN):
                        await self._move(item, client)
                    # any break of the stream (gRPC errors surface unwrapped)
                    raise UnavailableError(
                        f"etcd watch at {self.endpoint} broke: {str(item)[:300]}"
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
        lease = await self._call(lambda c: c.lease(ttl_s))
        return int(lease.id)

    async def refresh_lease(self, lease_id: int) -> int:
        """Keep a lease alive; returns its remaining TTL (0 or less: it expired)."""
        res = await self._call(lambda c: c.refresh_lease(lease_id))
        return int(res.TTL)

    async def revoke_lease(self, lease_id: int) -> None:
        await self._call(lambda c: c.revoke_lease(lease_id))

    async def create_if_absent(
        self, key: str, value: bytes, lease_id: int
    ) -> tuple[bool, KV | None]:
        """Create ``key`` bound to a lease unless it exists (create_revision == 0).
        Returns whether it was created and the key as it is now (after the
        write, or the one that was there)."""
        tx = self.ops
        k = key.encode()
        ok, responses = await self.txn(
            [tx.create(k) == 0], [tx.put(k, value, lease=lease_id)], [tx.get(k)]
        )
        if ok:
            revision = int(responses[0].response_put.header.revision)
            return True, KV(key, value, revision, revision)
        return False, _range(responses[0])

    async def version(self) -> str:
        """The etcd version of the member this client talks to."""
        res = await self._call(lambda c: c.status())
        return str(res.version)


def _range(response: list[tuple[bytes, Any]]) -> KV | None:
    """The first key of a range read inside a transaction (aetcd gives
    ``[(value, Get)]`` for those), or None."""
    if not response:
        return None
    value, meta = response[0]
    return KV(meta.key.decode(), value, int(meta.mod_revision), int(meta.create_revision))


def _conflict(writes: Sequence[tuple[str, bytes, int]]) -> ConflictError:
    expected = ", ".join(f"{k} at version {rev}" for k, _, rev in writes)
    return ConflictError(f"changed concurrently; nothing written (expected {expected})")


@dataclass(frozen=True)
class Fence:
    """Writes that must happen only while ``key`` (the leader key) is the
    one created at ``revision``: this replica's leadership."""

    key: str
    revision: int


class FencedEtcd:
    """The :class:`Etcd` operations for the leader's components: reads pass
    through; every write carries this replica's fence, so a leader that was
    paused or cut off past its lease can never overwrite its successor. A
    write without a fence (not leading) or refused by it raises
    :class:`FencedError` and calls ``on_fenced``: step down."""

    def __init__(
        self, etcd: Etcd, fence: Callable[[], Fence | None], on_fenced: Callable[[], None]
    ) -> None:
        self._etcd = etcd
        self._fence = fence
        self._on_fenced = on_fenced
        self.get = etcd.get
        self.get_prefix = etcd.get_prefix
        self.get_range = etcd.get_range
        self.watch_range = etcd.watch_range
        self.grant_lease = etcd.grant_lease
        self.refresh_lease = etcd.refresh_lease
        self.revoke_lease = etcd.revoke_lease

    async def _fenced(self, write: Callable[[Fence], Awaitable[T]]) -> T:
        fence = self._fence()
        if fence is None:
            self._on_fenced()
            raise FencedError("not the leader: this replica does not write")
        try:
            return await write(fence)
        except FencedError:
            self._on_fenced()
            raise

    async def put(self, key: str, value: bytes, *, lease: int | None = None) -> int:
        return await self._fenced(lambda f: self._etcd.put(key, value, lease=lease, fence=f))

    async def put_if(self, key: str, value: bytes, expected_mod_revision: int) -> int:
        return await self._fenced(
            lambda f: self._etcd.put_if(key, value, expected_mod_revision, fence=f)
        )

    async def put_all_if(self, writes: Sequence[tuple[str, bytes, int]]) -> int:
        return await self._fenced(lambda f: self._etcd.put_all_if(writes, fence=f))

    async def put_all(self, writes: Sequence[tuple[str, bytes]]) -> int:
        return await self._fenced(lambda f: self._etcd.put_all(writes, fence=f))

    async def delete(self, key: str) -> bool:
        return await self._fenced(lambda f: self._etcd.delete(key, fence=f))

    async def delete_prefix(self, prefix: str) -> int:
        return await self._fenced(lambda f: self._etcd.delete_prefix(prefix, fence=f))
