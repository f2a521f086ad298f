"""The agent's connection to the coordinator's Reader service.

Two background threads: one holds the Subscribe stream with an Acknowledge
call beside it (registering and subscribing again whenever either breaks, at
the leader: a standby's answer names it), and one sends heartbeats. A
coordinator without Acknowledge (older) gets a heartbeat at once after every
applied event instead.

Per event the agent does as little as it can, because a thousand agents
share the machines of a job: gRPC's thread that writes the Acknowledge
call's messages is the one that receives the event (its request iterator,
:class:`_Follower`, reads the subscription), applies it and writes its
acknowledgement, a single small message on the open call. No thread hands
the event or the acknowledgement to another, and the subscription is a
single-threaded call (no gRPC thread polls it for Python).
"""

from __future__ import annotations

import collections
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import grpc

import multikafka.reader_agent._arrow as arrow
from multikafka.core._background import BackgroundThreads
from multikafka.core.logs import logger_of
from multikafka.core.retry import Backoff, retry
from multikafka.core.transport import ConnectConfig, Coordinators
from multikafka.v1 import reader_pb2, reader_pb2_grpc

logger = logger_of(__name__)

EventHandler = Callable[[reader_pb2.ReconcileEvent], None]

#: Seconds of reports sent again after subscribing anew (a leader writes the
#: read marks it gets every 2 s), and at most how many.
RESEND_S = 30.0
RESEND_MAX = 256
StatsProvider = Callable[[], tuple[int, list[reader_pb2.SubReaderStats]]]


class CoordinatorLink:
    def __init__(
        self,
        config: ConnectConfig,
        agent_id: str,
        on_event: EventHandler,
        stats: StatsProvider,
        *,
        heartbeat_interval_s: float = 2.0,
        retry_s: float = 0.5,
    ) -> None:
        self.agent_id = agent_id
        self._on_event = on_event
        self._stats = stats
        self._heartbeat_s = heartbeat_interval_s
        self._backoff = Backoff.constant(retry_s)
        # Subscribe, the only response stream: read by the thread that waits
        # for it, not through a channel thread handing each event over.
        self._coordinators = Coordinators(config, _SINGLE_THREADED_STREAMS)
        self._threads = BackgroundThreads(f"multikafka-link-{config.addresses[0]}")
        self._beat = threading.Event()
        self._stream: Any = None
        #: False once the coordinator answered Acknowledge UNIMPLEMENTED.
        self._ack_calls = True
        self._ack_call: Any = None
        #: The replica the subscription follows (or last tried).
        self._following = ""
        self._registered = threading.Event()
        #: Reports of the last :data:`RESEND_S`, sent again to the replica a
        #: new subscription follows: read marks are written to etcd every few
        #: seconds, and those of a leader that died before were lost.
        self._recent: collections.deque[tuple[float, reader_pb2.ReportReadsRequest]] = (
            collections.deque(maxlen=RESEND_MAX)
        )
        self._subscribed_before = False

    def start(self) -> None:
        # When the coordinator ends the stream, subscribe again (resync).
        self._threads.run("subscribe", self._subscribe, restart_after_s=self._backoff.first_s)
        self._threads.every("heartbeat", self._heartbeat_s, self._heartbeat, wake=self._beat)

    def close(self) -> None:
        self._threads.stopping.set()
        for call in (self._stream, self._ack_call):
            if call is not None:
                call.cancel()
        self._threads.stop()
        self._coordinators.close()

    def _stub(self) -> tuple[str, reader_pb2_grpc.ReaderStub]:
        """The replica calls go to now, and a stub on it."""
        address, channel = self._coordinators.target()
        return address, reader_pb2_grpc.ReaderStub(channel)

    def _metadata(self) -> tuple[tuple[str, str], ...]:
        return self._coordinators.metadata

    def report(self, request: reader_pb2.ReportReadsRequest, timeout_s: float = 3.0) -> None:
        """Send ``request`` without waiting for the answer: a task's end (and
        so the micro-batch) never waits on the coordinator."""
        request.agent_id = self.agent_id
        self._recent.append((time.monotonic(), request))
        self._send(request, timeout_s)

    def _resend_recent(self) -> None:
        """Send the reports of the last :data:`RESEND_S` again (to the replica
        just subscribed to: a new leader may lack what its predecessor had
        not written yet; a report is a set of facts, taken twice alike)."""
        since = time.monotonic() - RESEND_S
        for at, request in list(self._recent):
            if at >= since:
                self._send(request)

    def _send(self, request: reader_pb2.ReportReadsRequest, timeout_s: float = 3.0) -> None:
        address, stub = self._stub()
        call = stub.ReportReads.future(request, metadata=self._metadata(), timeout=timeout_s)

        def done(call: grpc.Future[reader_pb2.ReportReadsResponse]) -> None:
            exc = call.exception()
            if exc is None:
                return
            if isinstance(exc, grpc.RpcError):
                self._coordinators.moved(exc, address)
            # Losing marks only makes failover translation more conservative.
            logger.warning(
                "could not report reads to the coordinator: %s",
                exc.code() if isinstance(exc, grpc.Call) else exc,
            )

        call.add_done_callback(done)

    def _register(self, stub: reader_pb2_grpc.ReaderStub) -> None:
        stub.Register(
            reader_pb2.RegisterRequest(
                agent_id=self.agent_id,
                host=socket.gethostname(),
                pid=os.getpid(),
                converter=_converter(),
            ),
            metadata=self._metadata(),
            timeout=5,
        )
        self._registered.set()

    def _subscribe(self) -> None:
        """Register and follow the event stream until it ends or the link
        closes; a broken stream is followed again (at the leader)."""
        stopping = self._threads.stopping
        try:
            retry(
                self._follow,
                on=(grpc.RpcError,),
                when=lambda _: not stopping.is_set(),
                backoff=self._backoff,
                sleep=stopping.wait,
                on_retry=self._broke,
            )
        except grpc.RpcError:
            return  # closing

    def _broke(self, exc: BaseException, delay_s: float) -> None:
        code = exc.code() if isinstance(exc, grpc.Call) else exc
        logger.debug("subscription to %s broke (%s); retrying", self._coordinators.address, code)
        self._coordinators.moved(exc, self._following)
        self._registered.clear()

    def _follow(self) -> None:
        self._following, stub = self._stub()
        self._register(stub)
        if self._subscribed_before:
            self._resend_recent()
        self._subscribed_before = True
        stream = self._stream = stub.Subscribe(
            reader_pb2.SubscribeRequest(agent_id=self.agent_id), metadata=self._metadata()
        )
        follower = _Follower(stream, self.agent_id, self._on_event, self._acked_by_heartbeat)
        if self._ack_calls:
            self._acknowledge(stub, follower)
        if not self._ack_calls:
            for _ in follower:  # heartbeats acknowledge (see _acked_by_heartbeat)
                pass
        if follower.error is not None and not self._threads.stopping.is_set():
            raise follower.error

    def _acknowledge(self, stub: reader_pb2_grpc.ReaderStub, follower: _Follower) -> None:
        """Follow the subscription on an Acknowledge call (gRPC's thread
        writing the call applies and acknowledges each event) until the
        subscription ends; the call's own failure ends the subscription too
        (the caller subscribes again), except UNIMPLEMENTED (an older
        coordinator): the caller then follows it acknowledging by heartbeat."""
        call = self._ack_call = stub.Acknowledge.future(follower, metadata=self._metadata())
        ended = threading.Event()
        call.add_done_callback(lambda _: ended.set())
        ended.wait()  # no timeout: gRPC's own wait polls ten times a second
        try:
            call.result()
        except grpc.FutureCancelledError:
            return  # closing
        except grpc.RpcError as exc:
            if self._threads.stopping.is_set():
                return
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                follower.stream.cancel()
                raise
            logger.info("the coordinator has no Acknowledge; acknowledging by heartbeat")
            self._ack_calls = False
            self._beat.set()  # what was applied before it said so

    def _acked_by_heartbeat(self) -> None:
        if not self._ack_calls:
            self._beat.set()

    def _heartbeat(self) -> None:
        if not self._registered.is_set():
            return
        applied, stats = self._stats()
        address, stub = self._stub()
        try:
            resp = stub.Heartbeat(
                reader_pb2.HeartbeatRequest(
                    agent_id=self.agent_id, applied_generation=applied, sub_readers=stats
                ),
                metadata=self._metadata(),
                timeout=5,
            )
        except grpc.RpcError as exc:
            logger.debug("heartbeat to %s failed", address)
            self._coordinators.moved(exc, address)
            return
        if not resp.known:
            # The coordinator restarted or expired us: register and subscribe
            # again (the subscribe loop does both).
            self._registered.clear()
            stream = self._stream
            if stream is not None:
                stream.cancel()


#: gRPC's (experimental) channel option for response streams read by the
#: calling thread itself: ``grpc.experimental.ChannelOptions.SingleThreadedUnaryStream``
#: (not in grpc's type stubs).
_SINGLE_THREADED_STREAMS = (("SingleThreadedUnaryStream", 1),)


class _Follower:
    """The Acknowledge call's requests: each is the acknowledgement of the
    next event of ``stream``, applied (``on_event``) by whoever asks for it.
    The subscription's end ends the requests (gRPC then closes the call);
    its failure is kept in :attr:`error` (an iterator's exception would
    only be logged by gRPC). Thread-safe: after an older coordinator
    refused the call, the subscribing thread reads on where gRPC's stopped."""

    def __init__(
        self,
        stream: Any,
        agent_id: str,
        on_event: EventHandler,
        applied: Callable[[], None],
    ) -> None:
        self.stream = stream
        self._agent_id = agent_id
        self._on_event = on_event
        self._applied = applied
        self._lock = threading.Lock()
        self.error: grpc.RpcError | None = None

    def __iter__(self) -> _Follower:
        return self

    def __next__(self) -> reader_pb2.AckRequest:
        with self._lock:
            if self.error is not None:
                raise StopIteration
            try:
                event = next(self.stream)
            except grpc.RpcError as exc:
                self.error = exc
                raise StopIteration from None
            self._on_event(event)
            self._applied()
            return reader_pb2.AckRequest(
                agent_id=self._agent_id, applied_generation=event.generation
            )


def _converter() -> str:
    """The converter this process uses (what operators see in ``admin
    readers``); an unknown ``MULTIKAFKA_CONVERTER`` says so."""
    try:
        return arrow.active_converter()
    except (ValueError, RuntimeError) as exc:
        return f"unusable: {exc}"[:200]
