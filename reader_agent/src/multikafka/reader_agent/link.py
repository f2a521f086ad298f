"""The agent's connection to the coordinator's Reader service.

Three background threads: one holds the Subscribe stream (registering and
subscribing again whenever it breaks, at the leader: a standby's answer names
it), one holds an Acknowledge call on which it sends the generation of every
event it applied (the acknowledgement that ends a reconcile), and one sends
heartbeats. A coordinator without Acknowledge (older) gets a heartbeat at
once after every applied event instead.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from multikafka.core.background import BackgroundThreads
from multikafka.core.retry import Backoff, retry
from multikafka.core.transport import ConnectConfig, Coordinators
from multikafka.reader_agent import arrow
from multikafka.v1 import reader_pb2, reader_pb2_grpc

logger = logging.getLogger(__name__)

EventHandler = Callable[[reader_pb2.ReconcileEvent], None]
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
        self._coordinators = Coordinators(config)
        self._threads = BackgroundThreads(f"multikafka-link-{config.addresses[0]}")
        self._beat = threading.Event()
        self._stream: Any = None
        #: Newest generation applied, and whether it still needs acknowledging.
        self._applied = 0
        self._ack = threading.Event()
        #: False once the coordinator answered Acknowledge UNIMPLEMENTED.
        self._ack_calls = True
        self._ack_call: Any = None
        #: The replica the subscription follows (or last tried).
        self._following = ""
        self._registered = threading.Event()

    def start(self) -> None:
        # When the coordinator ends the stream, subscribe again (resync).
        self._threads.run("subscribe", self._subscribe, restart_after_s=self._backoff.first_s)
        self._threads.run("acknowledge", self._acknowledging, restart_after_s=self._backoff.first_s)
        self._threads.every("heartbeat", self._heartbeat_s, self._heartbeat, wake=self._beat)

    def close(self) -> None:
        self._threads.stopping.set()
        self._ack.set()  # ends the acknowledgements' request iterator
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

    def acknowledge(self, generation: int) -> None:
        """Tell the coordinator ``generation`` is applied, now."""
        self._applied = max(self._applied, generation)
        (self._ack if self._ack_calls else self._beat).set()

    def _acknowledging(self) -> None:
        """Hold an Acknowledge call to the replica the subscription follows
        (the next one after it breaks: ``run`` starts this again)."""
        stopping = self._threads.stopping
        if not self._ack_calls:
            stopping.wait()  # heartbeats acknowledge
            return
        if not self._registered.wait(self._backoff.first_s):
            return
        address, stub = self._stub()
        self._ack.set()  # what was applied before this call, in case it went nowhere
        self._ack_call = stub.Acknowledge.future(self._acks(), metadata=self._metadata())
        try:
            self._ack_call.result()
        except grpc.FutureCancelledError:
            return  # closing
        except grpc.RpcError as exc:
            if stopping.is_set():
                return
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                logger.info("the coordinator has no Acknowledge; acknowledging by heartbeat")
                self._ack_calls = False
                self._beat.set()
                return
            logger.debug("acknowledgements to %s broke (%s)", address, exc.code())
            self._coordinators.moved(exc, address)

    def _acks(self) -> Iterator[reader_pb2.AckRequest]:
        # No timeout: an idle agent does not wake (close sets the event).
        stopping = self._threads.stopping
        while self._ack.wait() and not stopping.is_set():
            self._ack.clear()
            yield reader_pb2.AckRequest(agent_id=self.agent_id, applied_generation=self._applied)

    def report(self, request: reader_pb2.ReportReadsRequest, timeout_s: float = 3.0) -> None:
        """Send ``request`` without waiting for the answer: a task's end (and
        so the micro-batch) never waits on the coordinator."""
        request.agent_id = self.agent_id
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
        self._stream = stub.Subscribe(
            reader_pb2.SubscribeRequest(agent_id=self.agent_id), metadata=self._metadata()
        )
        for event in self._stream:
            self._on_event(event)
            self.acknowledge(event.generation)

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


def _converter() -> str:
    """The converter this process uses (what operators see in ``admin
    readers``); an unknown ``MULTIKAFKA_CONVERTER`` says so."""
    try:
        return arrow.active_converter()
    except (ValueError, RuntimeError) as exc:
        return f"unusable: {exc}"[:200]
