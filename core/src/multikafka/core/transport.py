"""gRPC to the coordinator, in one place: every client (the admin client, the
planner client, the reader agents' link) connects through :class:`Coordinators`.

* Several addresses (``"a:7070,b:7070"``, or one Kubernetes Service
  address): a call that finds a replica gone, or a standby that names the
  leader, moves on by itself: to the leader it named, else to the next
  address, and is tried again until its deadline.
* TLS verified against a CA given as PEM bytes (so it can travel inside a
  Spark task), client certificates (mutual TLS), the bearer token on every
  call, keepalive, and gRPC's own retry policy for brief outages.
* A call made once per micro-batch goes over a stream kept open
  (:meth:`Coordinators.exchange`, :mod:`multikafka.core._exchange`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc

from multikafka.core import env
from multikafka.core._exchange import Exchange
from multikafka.core._grpc_codes import from_rpc_error, leader_of
from multikafka.core.exceptions import ValidationError, shown
from multikafka.core.retry import Backoff, retry

logger = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S")
R = TypeVar("R")

#: Calls that may be retried: the coordinator is away or is a standby.
RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})

#: gRPC's own retries of a call that met a brief outage (same replica).
_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [
                    {"service": "multikafka.v1.Admin"},
                    # Not LatestOffsetsStream: a stream kept open is not replayed.
                    {"service": "multikafka.v1.Planner", "method": "ResolveOffsets"},
                    {"service": "multikafka.v1.Planner", "method": "LatestOffsets"},
                    {"service": "multikafka.v1.Planner", "method": "PlanPartitions"},
                    {"service": "multikafka.v1.Planner", "method": "Commit"},
                    {"service": "multikafka.v1.Reader", "method": "Register"},
                    {"service": "multikafka.v1.Reader", "method": "Heartbeat"},
                    {"service": "multikafka.v1.Reader", "method": "ReportReads"},
                ],
                "retryPolicy": {
                    "maxAttempts": 3,
                    "initialBackoff": "0.1s",
                    "maxBackoff": "1s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)

#: Between attempts of one call (moving between replicas included).
CALL_BACKOFF = Backoff(first_s=0.1, max_s=1.0)

#: A ping every this often on every connection; a peer that does not answer
#: one within :data:`KEEPALIVE_TIMEOUT_MS` is dropped and the call moves on.
KEEPALIVE_TIME_MS = 3_000
KEEPALIVE_TIMEOUT_MS = 3_000

_OPTIONS = (
    # Keep idle connections alive through NATs and load balancers, and notice
    # a dead or frozen peer within seconds: a coordinator stopped (SIGSTOP, a
    # long GC pause) keeps its TCP connections open but answers no ping, and
    # a call waiting on it would otherwise wait its whole attempt timeout
    # while another replica already leads.
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # Any ping (gRPC's own bandwidth probes too) unanswered this long drops
    # the connection; the default, a minute, holds keepalive back meanwhile.
    ("grpc.http2.ping_timeout_ms", KEEPALIVE_TIMEOUT_MS),
    # A connection attempt is given up after this long (gRPC's default: 20 s).
    # A frozen replica's kernel still accepts TCP connections, and the
    # HTTP/2 handshake then hangs: without this, a call reconnecting to it
    # waits until the freeze ends, although another replica leads.
    ("grpc.min_reconnect_backoff_ms", KEEPALIVE_TIMEOUT_MS),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.enable_retries", 1),
    ("grpc.service_config", _SERVICE_CONFIG),
)


def read_pem(path: str) -> bytes | None:
    """The bytes of a PEM file (``None`` for an empty path); a clear error
    when it cannot be read."""
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValidationError(path[:200], f"cannot read this PEM file: {exc.strerror}") from None


def bearer(token: str) -> tuple[tuple[str, str], ...]:
    """Call metadata carrying ``token`` (none for an empty token)."""
    return (("authorization", f"Bearer {token}"),) if token else ()


@dataclass(frozen=True)
class ConnectConfig:
    """How a client reaches the coordinator."""

    #: ``host:port`` of each replica (or of one Service in front of them).
    addresses: tuple[str, ...]
    #: PEM of the CA that signed the coordinator's certificate: TLS when set.
    tls_ca: bytes | None = field(default=None, repr=False)
    #: PEM of a client certificate and its key (mutual TLS).
    cert: bytes | None = field(default=None, repr=False)
    key: bytes | None = field(default=None, repr=False)
    #: Bearer token sent with every call (admin or reader token).
    token: str = field(default="", repr=False)

    @classmethod
    def parse(cls, coordinator: str, **options: object) -> ConnectConfig:
        """``"host:port[,host:port...]"`` and the other fields."""
        addresses = tuple(a.strip() for a in coordinator.split(",") if a.strip())
        if not addresses:
            raise ValidationError("coordinator", "name at least one host:port")
        for a in addresses:
            host, _, port = a.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValidationError("coordinator", f"{shown(a)} is not host:port")
        if bool(options.get("cert")) != bool(options.get("key")):
            raise ValidationError("coordinator", "a client certificate needs its key, and back")
        return cls(addresses, **options)  # type: ignore[arg-type]

    @classmethod
    def from_files(
        cls, coordinator: str, *, token: str, ca: str = "", cert: str = "", key: str = ""
    ) -> ConnectConfig:
        """:meth:`parse` with the PEM files read now; the CA defaults to
        ``MULTIKAFKA_TLS_CA``."""
        return cls.parse(
            coordinator,
            tls_ca=read_pem(ca or env.get(env.TLS_CA)),
            cert=read_pem(cert),
            key=read_pem(key),
            token=token,
        )

    @property
    def tls(self) -> bool:
        return self.tls_ca is not None or self.cert is not None

    def __str__(self) -> str:
        return ",".join(self.addresses)


class Coordinators:
    """Channels to the coordinator's replicas; calls go to the leader (see
    the module docstring). Thread-safe."""

    def __init__(self, config: ConnectConfig, options: tuple[tuple[str, Any], ...] = ()) -> None:
        self.config = config
        #: Channel options beyond the common ones (a client's own).
        self._options = (*_OPTIONS, *options)
        self._lock = threading.Lock()
        self._address = config.addresses[0]
        self._next = 0
        self._channels: dict[str, grpc.Channel] = {}
        #: (channel, method) -> the stream kept open to it (:meth:`exchange`).
        self._exchanges: dict[tuple[grpc.Channel, str], Exchange] = {}
        #: Methods a replica answered UNIMPLEMENTED (an older coordinator).
        self._no_exchange: set[str] = set()
        self.metadata = bearer(config.token)

    @property
    def address(self) -> str:
        """The replica calls go to now."""
        return self._address

    def channel(self) -> grpc.Channel:
        return self.target()[1]

    def target(self) -> tuple[str, grpc.Channel]:
        """The replica calls go to now, and its channel (pass the address to
        :meth:`moved` when the call fails)."""
        with self._lock:
            address = self._address
            ch = self._channels.get(address)
            if ch is None:
                ch = self._channels[address] = self._open(address)
            return address, ch

    def _open(self, address: str) -> grpc.Channel:
        if not self.config.tls:
            return grpc.insecure_channel(address, options=self._options)
        creds = grpc.ssl_channel_credentials(
            root_certificates=self.config.tls_ca,
            private_key=self.config.key,
            certificate_chain=self.config.cert,
        )
        options = list(self._options)
        if address not in self.config.addresses:
            # A leader a standby named, by its own (advertised) address: check
            # its certificate against the name we were given.
            options.append(("grpc.ssl_target_name_override", self._given_host()))
        return grpc.secure_channel(address, creds, options=options)

    def _given_host(self) -> str:
        return self.config.addresses[0].rpartition(":")[0].strip("[]")

    def moved(self, error: BaseException, address: str) -> bool:
        """After a call to ``address`` failed: if the replica is away or a
        standby (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``), go to the leader a
        standby named, else to the next configured address. Other failures
        (a refusal, a cancelled call) stay; so do failures of an address
        calls have already left (several threads fail on one dead replica,
        and move once). True when it went to a leader a standby named (worth
        calling at once)."""
        if not isinstance(error, grpc.RpcError) or not isinstance(error, grpc.Call):
            return False
        if error.code() not in RETRYABLE:
            return False
        leader = leader_of(error)
        with self._lock:
            if address != self._address or leader == self._address:
                # (a replica naming itself leads and is starting: stay)
                return False
            to_leader = bool(leader)  # (naming this replica returned above)
            if to_leader:
                self._address = leader
            elif len(self.config.addresses) > 1 or self._address not in self.config.addresses:
                self._next = (self._next + 1) % len(self.config.addresses)
                self._address = self.config.addresses[self._next]
            else:
                return False
        logger.info("moving to coordinator %s", self._address)
        return to_leader

    def call(
        self,
        what: str,
        fn: Callable[[grpc.Channel, tuple[tuple[str, str], ...]], T],
        *,
        deadline_s: float,
        backoff: Backoff = CALL_BACKOFF,
    ) -> T:
        """``fn(channel, metadata)`` on the leader, moving and retrying on
        ``UNAVAILABLE``/``DEADLINE_EXCEEDED`` until ``deadline_s``; a failure
        is raised as a :class:`MultikafkaError` (chained to the gRPC error)."""

        # After a standby named the leader, the next attempt goes at once.
        to_leader = threading.Event()

        def attempt() -> T:
            address, channel = self.target()
            try:
                return fn(channel, self.metadata)
            except grpc.RpcError as exc:
                if self.moved(exc, address):
                    to_leader.set()
                raise

        def pause(delay_s: float) -> None:
            if to_leader.is_set():
                to_leader.clear()
            else:
                time.sleep(delay_s)

        try:
            return retry(
                attempt,
                on=(grpc.RpcError,),
                when=lambda exc: isinstance(exc, grpc.Call) and exc.code() in RETRYABLE,
                deadline_s=deadline_s,
                backoff=backoff,
                sleep=pause,
                on_retry=lambda exc, _: logger.debug("coordinator unavailable for %s", what),
            )
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, f"coordinator {self._address}: {what}") from exc

    def unary(
        self,
        what: str,
        stub: Callable[[grpc.Channel], S],
        method: Callable[[S], Callable[..., R]],
        request: object,
        *,
        timeout_s: float,
        deadline_s: float,
    ) -> R:
        """``method(stub)(request)`` through :meth:`call`, each attempt
        given ``timeout_s``."""

        def call(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]) -> R:
            return method(stub(channel))(request, metadata=metadata, timeout=timeout_s)

        return self.call(what, call, deadline_s=deadline_s)

    def exchange(
        self,
        what: str,
        method: str,
        request: Any,
        response_type: type[R],
        unary: Callable[[grpc.Channel], Callable[..., R]],
        *,
        timeout_s: float,
        deadline_s: float,
    ) -> R:
        """``request`` answered over the bidirectional ``method`` (a path,
        ``/package.Service/Method``, answering each request as the unary
        ``unary(channel)`` would), on a stream kept open for the next one;
        moving, retrying and failing as :meth:`call` does, each attempt given
        ``timeout_s``. A stream that fails is dropped (the next attempt opens
        a new one). While another thread uses the stream, or where the
        replica does not know ``method``, the unary call is made."""

        def attempt(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...]) -> R:
            for _ in range(2):
                kept = self._exchange_of(channel, method, response_type, metadata)
                if kept is None or not kept.busy.acquire(blocking=False):
                    break
                try:
                    if kept.ended:
                        # It ended while idle (a replica restarted, a proxy
                        # closed it): this request never went on it.
                        self._drop(channel, method, kept)
                        continue
                    answer: R = kept.ask(request, timeout_s)
                    return answer
                except grpc.RpcError as exc:
                    self._drop(channel, method, kept)
                    if not isinstance(exc, grpc.Call):
                        raise
                    if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                        raise
                    logger.info("coordinator has no %s: calling it once per request", method)
                    self._no_exchange.add(method)
                    break
                finally:
                    kept.busy.release()
            return unary(channel)(request, metadata=metadata, timeout=timeout_s)

        return self.call(what, attempt, deadline_s=deadline_s)

    def _exchange_of(
        self,
        channel: grpc.Channel,
        method: str,
        response_type: type[Any],
        metadata: tuple[tuple[str, str], ...],
    ) -> Exchange | None:
        if method in self._no_exchange:
            return None
        with self._lock:
            kept = self._exchanges.get((channel, method))
            if kept is None:
                if channel not in self._channels.values():
                    return None  # closed meanwhile
                kept = self._exchanges[(channel, method)] = Exchange(
                    channel, method, response_type, metadata
                )
            return kept

    def _drop(self, channel: grpc.Channel, method: str, kept: Exchange) -> None:
        with self._lock:
            if self._exchanges.get((channel, method)) is kept:
                del self._exchanges[(channel, method)]
        kept.close()

    def close(self) -> None:
        with self._lock:
            channels, self._channels = list(self._channels.values()), {}
            exchanges, self._exchanges = list(self._exchanges.values()), {}
        for kept in exchanges:
            kept.close()
        for ch in channels:
            ch.close()
