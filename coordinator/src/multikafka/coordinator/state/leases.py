"""The leader's lease renewals: a blocking etcd client for the two calls of
a renewal (keep the lease alive, read the leader key's create revision),
made for a thread of its own (:class:`LeaseRenewals`; the election's
keeper, :mod:`multikafka.coordinator.runtime.election`, runs it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import grpc
from aetcd import rpc

from multikafka.coordinator.config import EtcdConfig, EtcdEndpoint
from multikafka.coordinator.state.etcd import credentials
from multikafka.core.exceptions import UnavailableError

T = TypeVar("T")


class LeaseRenewals:
    """A blocking etcd client for the two calls of a lease renewal (keep the
    lease alive, read the leader key's create revision), made for a thread
    of its own: gRPC's synchronous calls wait without the GIL and without an
    event loop. An asyncio client on a second loop in the same process
    waited up to 0.7 s for a renewal when the coordinator's loop served
    1,000 queries (this one: at most 35 ms), and a few such waits in a row
    cost the leadership. The same members, TLS and user as :class:`Etcd`;
    a member that fails moves the next call to the next member."""

    def __init__(self, config: EtcdConfig) -> None:
        self.config = config
        self._credentials = credentials(config)
        self._index = 0
        self._channel: grpc.Channel | None = None
        self._metadata: tuple[tuple[str, str], ...] = ()

    @property
    def endpoint(self) -> EtcdEndpoint:
        return self.config.endpoints[self._index]

    def keep_alive(self, lease_id: int, timeout_s: float) -> int:
        """Keep the lease alive; its remaining TTL (0 or less: it expired)."""

        def call(channel: grpc.Channel) -> int:
            answers = rpc.LeaseStub(channel).LeaseKeepAlive(
                iter([rpc.LeaseKeepAliveRequest(ID=lease_id)]),
                timeout=timeout_s,
                metadata=self._metadata,
            )
            try:
                return int(next(answers).TTL)
            finally:
                answers.cancel()

        return self._call(call, timeout_s)

    def create_revision(self, key: str, timeout_s: float) -> int | None:
        """The revision that created ``key``, or None when it is absent."""

        def call(channel: grpc.Channel) -> int | None:
            res = rpc.KVStub(channel).Range(
                rpc.RangeRequest(key=key.encode()), timeout=timeout_s, metadata=self._metadata
            )
            return int(res.kvs[0].create_revision) if res.kvs else None

        return self._call(call, timeout_s)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _connect(self, timeout_s: float) -> grpc.Channel:
        if self._channel is not None:
            return self._channel
        target = f"{self.endpoint.host}:{self.endpoint.port}"
        if self._credentials is None:
            channel = grpc.insecure_channel(target)
        else:
            channel = grpc.secure_channel(target, self._credentials)
        self._channel, self._metadata = channel, ()
        if self.config.username and self.config.password:
            token = (
                rpc.AuthStub(channel)
                .Authenticate(
                    rpc.AuthenticateRequest(
                        name=self.config.username, password=self.config.password
                    ),
                    timeout=timeout_s,
                )
                .token
            )
            self._metadata = (("token", token),)
        return channel

    def _call(self, fn: Callable[[grpc.Channel], T], timeout_s: float) -> T:
        """``fn`` on the current member's channel; gRPC errors become
        :class:`UnavailableError`. An expired token is renewed, and a member
        that does not answer left for the next, on the next call."""
        try:
            return fn(self._connect(timeout_s))
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            details = (exc.details() if isinstance(exc, grpc.Call) else None) or ""
            where = self.endpoint
            self.close()  # connect afresh: a new token, or the next member
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                self._index = (self._index + 1) % len(self.config.endpoints)
            name = code.name if code is not None else type(exc).__name__
            raise UnavailableError(f"etcd at {where}: {name}: {details[:300]}") from None
