"""Stream metadata in etcd: load, watch, validate, keep the last good version.

Documents live at ``<prefix>/streams/<name>`` and the coordinator's status at
``<prefix>/status/<name>``. One watch covers both, so changes apply in etcd
revision order (the revision is the metadata generation). It restarts from the
last revision it applied after etcd restarts, and reloads everything if that
revision was compacted. A document that does not validate is logged, counted
and ignored: the previous valid version stays in force.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from multikafka.coordinator.state.etcd import (
    MALFORMED,
    Compacted,
    EtcdClient,
    WatchEvent,
    prefix_end,
)
from multikafka.coordinator.state.stream_status import StreamStatus, StreamView
from multikafka.core._background import BackgroundTasks
from multikafka.core.exceptions import NotFoundError, UnavailableError, ValidationError
from multikafka.core.model import StreamSpec
from multikafka.core.retry import Backoff, retry_async
from multikafka.core.validation import parse_stream_json

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MetadataChange:
    """A stream's view before and after one applied change (``None``: absent)."""

    name: str
    old: StreamView | None
    new: StreamView | None
    revision: int


@dataclass(frozen=True)
class Rejection:
    """A document in etcd that did not validate."""

    name: str
    revision: int
    error: str


Listener = Callable[[MetadataChange], Awaitable[None]]
RejectionListener = Callable[[Rejection], Awaitable[None]]


class MetadataStore:
    """The coordinator's in-memory copy of every stream's metadata."""

    def __init__(self, etcd: EtcdClient, prefix: str, *, retry_s: float = 0.5) -> None:
        self._etcd = etcd
        self.streams_prefix = f"{prefix}/streams/"
        self.status_prefix = f"{prefix}/status/"
        self._views: dict[str, StreamView] = {}
        #: Status documents of streams whose document is not (yet) valid.
        self._orphan_status: dict[str, tuple[StreamStatus, int]] = {}
        self._listeners: list[Listener] = []
        self._rejection_listeners: list[RejectionListener] = []
        self._tasks = BackgroundTasks("metadata")
        self._backoff = Backoff.constant(retry_s)
        self._lock = asyncio.Lock()
        # One key range holds both prefixes ("status/" < "streams/").
        self._range = (self.status_prefix, prefix_end(self.streams_prefix.encode()).decode())
        #: Highest etcd revision applied, and a condition notified when it moves.
        self._revision = 0
        self._applied = asyncio.Condition()
        self.ready = asyncio.Event()
        self.watch_restarts = 0

    # -- reading -------------------------------------------------------------

    def get(self, name: str) -> StreamView:
        view = self._views.get(name)
        if view is None:
            raise NotFoundError(f"stream {name!r} does not exist (or has no valid document)")
        return view

    def find(self, name: str) -> StreamView | None:
        return self._views.get(name)

    def views(self) -> list[StreamView]:
        return [self._views[n] for n in sorted(self._views)]

    @property
    def revision(self) -> int:
        """Highest etcd revision applied."""
        return self._revision

    def on_change(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def on_rejection(self, listener: RejectionListener) -> None:
        self._rejection_listeners.append(listener)

    def forget_listener(self, listener: Listener | RejectionListener) -> None:
        """Stop telling ``listener`` (of either kind) about changes."""
        for listeners in (self._listeners, self._rejection_listeners):
            if listener in listeners:
                listeners.remove(listener)  # type: ignore[arg-type]

    def applying(self) -> asyncio.Lock:
        """Held while a change is applied and its listeners told: take it to
        read a consistent snapshot and start listening from exactly there."""
        return self._lock

    # -- writing (admin) -------------------------------------------------------

    async def put_stream(self, spec: StreamSpec, expected_version: int = 0) -> int:
        """Store a validated document. ``expected_version`` > 0 makes the write
        conditional on the stored version. Returns the new version."""
        key = self.streams_prefix + spec.name
        raw = spec.to_json(redact=False).encode()
        if expected_version:
            return await self._etcd.put_if(key, raw, expected_version)
        return await self._etcd.put(key, raw)

    async def delete_stream(self, name: str) -> bool:
        deleted = await self._etcd.delete(self.streams_prefix + name)
        await self._etcd.delete(self.status_prefix + name)
        return deleted

    async def update(self, view: StreamView, status: StreamStatus, spec: StreamSpec) -> int:
        """Write a stream's new status and document in one transaction, only if
        neither changed since ``view`` was applied (else :class:`ConflictError`
        and nothing is written). Returns the revision (the view's generation
        when nothing changed)."""
        writes = []
        if status != view.status:
            writes.append((self.status_prefix + view.name, status.to_json(), view.status_revision))
        if spec != view.spec:
            raw = spec.to_json(redact=False).encode()
            writes.append((self.streams_prefix + view.name, raw, view.spec_revision))
        if not writes:
            return view.generation
        return await self._etcd.put_all_if(writes)

    async def wait_applied(self, revision: int, timeout_s: float = 5.0) -> None:
        """Wait until the watch has applied ``revision`` (read-your-writes for admin)."""
        async with self._applied:
            try:
                await asyncio.wait_for(
                    self._applied.wait_for(lambda: self._revision >= revision), timeout_s
                )
            except asyncio.TimeoutError:  # builtin TimeoutError only from Python 3.11
                raise UnavailableError(
                    f"metadata revision {revision} not applied within {timeout_s}s"
                ) from None

    async def _advance(self, revision: int) -> None:
        async with self._applied:
            self._revision = max(self._revision, revision)
            self._applied.notify_all()

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        await self._load()
        self.ready.set()
        self._tasks.run("watch", self._watch)

    async def stop(self) -> None:
        await self._tasks.stop()

    async def _load(self) -> None:
        """Read both prefixes at one revision and apply them."""
        kvs, revision = await self._etcd.get_range(*self._range)
        present = {
            kv.key[len(self.streams_prefix) :]
            for kv in kvs
            if kv.key.startswith(self.streams_prefix)
        }
        gone = [
            WatchEvent(self.streams_prefix + n, None, revision)
            for n in self._views
            if n not in present
        ]
        # Statuses before documents: a document that appears finds its status.
        loaded = sorted(
            (WatchEvent(kv.key, kv.value, kv.mod_revision) for kv in kvs),
            key=lambda ev: not ev.key.startswith(self.status_prefix),
        )
        async with self._lock:
            await self._apply(gone + loaded, revision)

    async def _watch(self) -> None:
        """Follow etcd for good: a broken watch resumes from the revision after
        the last one applied, after a pause."""
        await retry_async(
            self._follow, on=(UnavailableError,), backoff=self._backoff, on_retry=self._broke
        )

    async def _follow(self) -> None:
        while True:
            try:
                async for events in self._etcd.watch_range(*self._range, self._revision + 1):
                    async with self._lock:
                        await self._apply(events, events[0].revision)
            except Compacted:
                logger.warning("watch revision compacted; reloading metadata")
                await self._load()
                continue
            raise UnavailableError("watch ended")

    def _broke(self, exc: BaseException, delay_s: float) -> None:
        self.watch_restarts += 1
        logger.warning(
            "metadata watch broke; resuming from revision %d",
            self._revision + 1,
            extra={"error": str(exc)},
        )

    async def _apply(self, events: list[WatchEvent], revision: int) -> None:
        """Apply what changed up to ``revision`` (one etcd revision, or a
        reload), then tell listeners once per stream: a listener never sees
        half of a transaction, such as a new status with the old document."""
        before: dict[str, StreamView | None] = {}
        for ev in events:
            if ev.key.startswith(self.streams_prefix):
                name = ev.key[len(self.streams_prefix) :]
                before.setdefault(name, self._views.get(name))
                await self._apply_stream(name, ev.value, ev.revision)
            elif ev.key.startswith(self.status_prefix):
                name = ev.key[len(self.status_prefix) :]
                before.setdefault(name, self._views.get(name))
                self._apply_status(name, ev.value, ev.revision)
        for name, old in before.items():
            new = self._views.get(name)
            if new is not old:
                await self._notify(MetadataChange(name, old, new, revision))
        await self._advance(revision)

    async def _apply_stream(self, name: str, raw: bytes | None, revision: int) -> None:
        old = self._views.get(name)
        if raw is None:
            if old is not None:
                del self._views[name]
                self._orphan_status.pop(name, None)
            return
        if old is not None and old.spec_revision >= revision:
            return  # already applied (reload after a broken watch)
        try:
            spec = parse_stream_json(raw, expected_name=name)
        except ValidationError as exc:
            logger.error(
                "invalid stream document in etcd ignored; keeping the last good version",
                extra={"stream": name, "revision": revision, "error": str(exc)},
            )
            for rl in self._rejection_listeners:
                await rl(Rejection(name, revision, str(exc)))
            return
        if old is not None:
            self._views[name] = replace(old, spec=spec, spec_revision=revision)
        else:
            status, status_rev = self._orphan_status.pop(name, (StreamStatus(), 0))
            self._views[name] = StreamView(spec, revision, status, status_rev)

    def _apply_status(self, name: str, raw: bytes | None, revision: int) -> None:
        try:
            status = StreamStatus.from_json(raw) if raw is not None else StreamStatus()
        except MALFORMED as exc:
            logger.error(
                "invalid stream status in etcd ignored", extra={"stream": name, "error": str(exc)}
            )
            return
        old = self._views.get(name)
        if old is None:
            if raw is None:  # the status of a deleted stream went too
                self._orphan_status.pop(name, None)
            else:
                self._orphan_status[name] = (status, revision)
            return
        if old.status_revision >= revision:
            return
        self._views[name] = replace(old, status=status, status_revision=revision)

    async def _notify(self, change: MetadataChange) -> None:
        for listener in self._listeners:
            try:
                await listener(change)
            except Exception:
                logger.exception("metadata listener failed", extra={"stream": change.name})
