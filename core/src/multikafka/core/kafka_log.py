"""librdkafka's own log lines, through Python logging.

Given no ``logger``, librdkafka prints its log lines to stderr from its own
threads (``%3|1713881891.083|FAIL|rdkafka#producer-1| [thrd:...]: ...``),
where no log configuration reaches them. Given one, confluent-kafka queues
them on the client's main queue (``log.queue``) and calls the logger when
the client is served: a consumer's ``consume()``/``poll()``, a producer's
``poll()``/``flush()``, an AdminClient's ``poll()``. Nothing else serves an
AdminClient's queue: its owner polls it (``KafkaMetadataClient`` does with
every partition discovery), or the lines pile up unseen.

:class:`ClientLog` is the ``logger`` of every client we create, one per
client. It logs to ``multikafka.rdkafka.<component>`` (``coordinator``,
``reader``, ``devstack``) with the stream(s) and cluster the client serves
in ``extra``, at the level :func:`record_level` chooses, and holds back
repeats (:class:`RateLimiter`): a dead broker makes librdkafka log a failed
connection attempt about twenty times a second.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

#: Parent of the per-component loggers (``multikafka.rdkafka.coordinator``, ...).
LOGGER_NAME = "multikafka.rdkafka"
#: The same kind of line from one client about one broker is logged at most
#: once per this many seconds.
REPEAT_INTERVAL_S = 60.0

#: librdkafka's syslog(3) levels as Python levels. confluent-kafka maps them
#: with this same table before it calls the logger (so LOG_NOTICE and
#: LOG_INFO both arrive as INFO).
SYSLOG_LEVELS: Mapping[int, int] = {
    0: logging.CRITICAL,  # LOG_EMERG
    1: logging.CRITICAL,  # LOG_ALERT
    2: logging.CRITICAL,  # LOG_CRIT
    3: logging.ERROR,  # LOG_ERR
    4: logging.WARNING,  # LOG_WARNING
    5: logging.INFO,  # LOG_NOTICE
    6: logging.INFO,  # LOG_INFO
    7: logging.DEBUG,  # LOG_DEBUG
}

#: Lines saying a broker cannot be reached (librdkafka retries by itself).
#: Failed TLS handshakes and authentication are not among them: they stay
#: errors, since retrying does not fix a configuration.
_UNREACHABLE = re.compile(
    r"connect to .* failed|connection refused|disconnected|timed out|failed to resolve"
    r"|receive failed|send failed|connection reset|no route to host|network is unreachable"
    r"|host is unreachable|transport failure|brokers are down",
    re.IGNORECASE,
)
#: A stream's properties serve its readers (consumers) and the coordinator's
#: AdminClient (a producer handle): each ignores the other's settings.
_OTHER_CLIENTS_PROPERTY = re.compile(
    r"is a (consumer|producer) property and will be ignored by this (producer|consumer) instance"
)
#: librdkafka lines start with the thread that logged them: ``[thrd:<broker>]: ``.
_THREAD = re.compile(r"^\[thrd:([^\]]*)\]:\s*")
_DIGITS = re.compile(r"\d+")


def python_level(level: int) -> int:
    """A librdkafka syslog level (0-7) as a Python level; a Python level
    (what confluent-kafka passes) stays as it is."""
    return SYSLOG_LEVELS.get(level, level)


def is_unreachable(line: str) -> bool:
    """Whether a librdkafka line reports a broker it cannot reach."""
    return _UNREACHABLE.search(line) is not None


def record_level(
    level: int, line: str, *, unreachable_level: int = logging.WARNING, expected_down: bool = False
) -> int:
    """The Python level to log a librdkafka line at: its own level
    (:func:`python_level`), except that a broker that cannot be reached is
    at most ``unreachable_level`` (librdkafka retries, so it is no error of
    ours), and DEBUG when the cluster is known to be down (FAILED). A
    property meant for the other kind of client (a consumer setting given
    to the coordinator's AdminClient) is DEBUG too."""
    level = python_level(level)
    if _OTHER_CLIENTS_PROPERTY.search(line):
        return min(level, logging.DEBUG)
    if level <= logging.DEBUG or not is_unreachable(line):
        return level
    return logging.DEBUG if expected_down else min(level, unreachable_level)


class RateLimiter:
    """Lets one event per key through every ``interval_s`` (``0``: all of
    them) and counts the ones it holds back. Thread-safe; it remembers at
    most ``max_keys`` keys (the oldest are forgotten first)."""

    def __init__(
        self,
        interval_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 256,
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._max_keys = max_keys
        #: key -> [time let through, events held back since]
        self._seen: dict[Hashable, list[float]] = {}
        self._lock = threading.Lock()

    def admit(self, key: Hashable) -> int | None:
        """None to hold this event back; else let it through, with the
        number of events of ``key`` held back since the last one let through."""
        now = self._clock()
        with self._lock:
            entry = self._seen.pop(key, None)
            if entry is not None and now - entry[0] < self.interval_s:
                entry[1] += 1
                self._seen[key] = entry
                return None
            self._seen[key] = [now, 0]
            while len(self._seen) > self._max_keys:
                del self._seen[next(iter(self._seen))]
            return 0 if entry is None else int(entry[1])


class ClientLog:
    """The ``logger`` of one confluent-kafka client (``Consumer(config,
    logger=ClientLog(...))``): librdkafka's lines go to
    ``multikafka.rdkafka.<component>``, each with ``extra`` ``cluster``,
    ``stream`` (when known; comma-separated when the client serves several),
    ``facility`` and ``suppressed``; at the level of :func:`record_level`;
    the same kind of line from one broker at most once per ``interval_s``,
    the next one let through saying ``(suppressed K similar)``.

    ``unreachable_level``: the level of "cannot reach a broker" lines. The
    coordinator's clients use WARNING (the operator's view of a cluster);
    readers use INFO (every executor would repeat what the coordinator says,
    and the reader logs a stalled read itself)."""

    def __init__(
        self,
        component: str,
        cluster: str,
        *,
        stream: str = "",
        unreachable_level: int = logging.WARNING,
        interval_s: float = REPEAT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logging.getLogger(f"{LOGGER_NAME}.{component}")
        self.unreachable_level = unreachable_level
        #: The cluster is known to be down (FAILED): its connection failures are expected.
        self.expected_down = False
        self._context: dict[str, str] = {"cluster": cluster}
        if stream:
            self._context["stream"] = stream
        self._limiter = RateLimiter(interval_s, clock=clock)

    def set_users(self, users: Iterable[tuple[str, str]], *, expected_down: bool = False) -> None:
        """Name the (stream, cluster) pairs the client serves (a coordinator's
        client may serve one physical cluster for several streams)."""
        pairs = sorted(set(users))
        if pairs:
            self._context = {
                "cluster": ",".join(sorted({c for _, c in pairs})),
                "stream": ",".join(sorted({s for s, _ in pairs})),
            }
        self.expected_down = expected_down

    def log(self, level: int, msg: str, *args: object, **kwargs: object) -> None:
        """What confluent-kafka calls: ``log(level, "%s [%s] %s", facility,
        client name, line)``. Never raises (an exception here would be
        raised by the ``poll()`` that served the line)."""
        try:
            if len(args) == 3:
                facility, client, line = (str(a) for a in args)
            else:
                facility, client, line = "", "", (msg % args if args else msg)
            level = record_level(
                level,
                line,
                unreachable_level=self.unreachable_level,
                expected_down=self.expected_down,
            )
            if not self.logger.isEnabledFor(level):
                return
            thread = _THREAD.match(line)
            broker = thread.group(1) if thread else ""
            kind = "unreachable" if is_unreachable(line) else _DIGITS.sub("#", line)
            held = self._limiter.admit((client, facility, broker, kind))
            if held is None:
                return
            self.logger.log(
                level,
                "%s%s",
                f"{facility} [{client}] {line}" if facility else line,
                f" (suppressed {held} similar)" if held else "",
                extra={**self._context, "facility": facility, "suppressed": held},
            )
        except Exception:  # pragma: no cover - defensive: see the docstring
            logging.getLogger(__name__).debug("librdkafka log line dropped", exc_info=True)


def repeat_interval_s(config: Mapping[str, object]) -> float:
    """No rate limit for a client configured with librdkafka ``debug``
    contexts: whoever asked for them wants every line."""
    return 0.0 if config.get("debug") else REPEAT_INTERVAL_S


@runtime_checkable
class ServesStreams(Protocol):
    """A client that can name, in its own log lines (librdkafka's), the
    (stream, cluster) pairs it serves, and be told that its cluster is known
    to be down (FAILED: its connection failures are expected, logged at
    DEBUG). Optional: owners call it on clients that have it."""

    def set_log_context(
        self, users: Sequence[tuple[str, str]], *, expected_down: bool = False
    ) -> None: ...
