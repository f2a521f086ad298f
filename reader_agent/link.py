"""The agent's connection to the coordinator's Reader service.

Two daemon threads: one holds the Subscribe stream (re-registering and
re-subscribing whenever it breaks), one sends heartbeats, and sends one at
once after every applied event (the acknowledgement that ends a reconcile).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import grpc

from multikafka.v1 import reader_pb2, reader_pb2_grpc

logger = logging.getLogger(__name__)

EventHandler = Callable[[reader_pb2.ReconcileEvent], None]
StatsProvider = Callable[[], tuple[int, list[reader_pb2.SubReaderStats]]]


def channel(address: str, *, tls_ca: bytes | None = None) -> grpc.Channel:
    options = [("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_permit_without_calls", 1)]
    if tls_ca is not None:
        return grpc.secure_channel(address, grpc.ssl_channel_credentials(tls_ca), options=options)
    return grpc.insecure_channel(address, options=options)


class CoordinatorLink:
    def __init__(
        self,
        address: str,
        agent_id: str,
        on_event: EventHandler,
        stats: StatsProvider,
        *,
        heartbeat_interval_s: float = 2.0,
        retry_s: float = 0.5,
    ) -> None:
        self.address = address
        self.agent_id = agent_id
        self._on_event = on_event
        self._stats = stats
        self._heartbeat_s = heartbeat_interval_s
        self._retry_s = retry_s
        self._channel = channel(address)
        self._stub = reader_pb2_grpc.ReaderStub(self._channel)
        self._stop = threading.Event()
        self._beat = threading.Event()
        self._stream: Any = None
        self._registered = threading.Event()
        self._threads = [
            threading.Thread(
                target=self._subscribe_loop, name=f"multikafka-subscribe-{address}", daemon=True
            ),
            threading.Thread(
                target=self._heartbeat_loop, name=f"multikafka-heartbeat-{address}", daemon=True
            ),
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def close(self) -> None:
        self._stop.set()
        self._beat.set()
        stream = self._stream
        if stream is not None:
            stream.cancel()
        for t in self._threads:
            t.join(5)
        self._channel.close()

    def acknowledge(self) -> None:
        """Send a heartbeat now (after applying an event)."""
        self._beat.set()

    def report(self, request: reader_pb2.ReportReadsRequest, timeout_s: float = 3.0) -> None:
        request.agent_id = self.agent_id
        try:
            self._stub.ReportReads(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            # Losing marks only makes failover translation more conservative.
            logger.warning(
                "could not report reads to the coordinator: %s",
                exc.code() if isinstance(exc, grpc.Call) else exc,
            )

    def _register(self) -> None:
        self._stub.Register(
            reader_pb2.RegisterRequest(
                agent_id=self.agent_id, host=socket.gethostname(), pid=os.getpid()
            ),
            timeout=5,
        )
        self._registered.set()

    def _subscribe_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._register()
                self._stream = self._stub.Subscribe(
                    reader_pb2.SubscribeRequest(agent_id=self.agent_id)
                )
                for event in self._stream:
                    self._on_event(event)
                    self.acknowledge()
            except grpc.RpcError as exc:
                if self._stop.is_set():
                    return
                code = exc.code() if isinstance(exc, grpc.Call) else None
                logger.debug("subscription to %s broke (%s); retrying", self.address, code)
            self._stop.wait(self._retry_s)

    def _heartbeat_loop(self) -> None:
        while not self._stop.is_set():
            self._beat.wait(self._heartbeat_s)
            self._beat.clear()
            if self._stop.is_set() or not self._registered.is_set():
                continue
            applied, stats = self._stats()
            try:
                resp = self._stub.Heartbeat(
                    reader_pb2.HeartbeatRequest(
                        agent_id=self.agent_id, applied_generation=applied, sub_readers=stats
                    ),
                    timeout=5,
                )
                if not resp.known:
                    # The coordinator restarted or expired us: register and
                    # subscribe again (the subscribe loop does both).
                    self._registered.clear()
                    stream = self._stream
                    if stream is not None:
                        stream.cancel()
            except grpc.RpcError:
                logger.debug("heartbeat to %s failed", self.address)
