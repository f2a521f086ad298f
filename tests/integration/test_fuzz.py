"""Bad input, to the byte: the size limits, and a hypothesis-driven fuzz of
malformed documents and requests against a real coordinator (real gRPC, real
etcd, a real Kafka-protocol cluster).

The focused tests check the limits: documents of 1 MiB and more, names of
100,000 characters, identifiers over 255 characters, 100 KB properties.
The tests after them pin the bugs the fuzz found (each docstring says
what the coordinator did before the fix).

The fuzz (``test_fuzz_malformed``, one case per area, each with a
coordinator of its own) sends only inputs that are malformed or name
something that does not exist. For every call: never OK, never INTERNAL or
UNKNOWN, a refusal is INVALID_ARGUMENT or NOT_FOUND with a message of at
most 1,100 characters that also fits gRPC's metadata limit in bytes; and
nothing stored under the coordinator's etcd prefix changes (history
included; only the keys the coordinator keeps alive itself, ``replicas/``
and ``leader``, are left out). Calls are pipelined (futures, a bounded
number in flight) and each outcome is checked when it completes. A
violation is recorded rather than raised, so every case runs (a call left
unanswered costs its deadline once, not once per shrinking step) and the run
is reproducible (``derandomize=True``); a failure lists each kind of
violation once, with its count and its smallest inputs.

A property key that is not text once validated and then killed the
process that built the cluster's client (SIGSEGV in confluent_kafka);
``test_lone_surrogate_in_a_property_key_is_refused_and_the_coordinator_lives``
checks it against a coordinator process of its own, so that a relapse
does not end the test run.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.message import Message
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from multikafka.coordinator.runtime.services import MAX_REQUEST_BYTES
from multikafka.core import _offsets as ov
from multikafka.core.admin_client import AdminClient
from multikafka.devstack import CoordinatorProcess, CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    planner_pb2,
    planner_pb2_grpc,
    reader_pb2,
    reader_pb2_grpc,
)
from tests.conftest import KafkaClusters
from tests.helpers import eventually, produce_sequence, stream_doc, uid

INTERNALS = (
    "multikafka.coordinator.runtime.services",
    "multikafka.core._offsets",
)


pytestmark = pytest.mark.integration

MIB = 1024 * 1024
#: Longest error message a client may see (the contract: bounded, never an
#: echo of unbounded input).
MAX_DETAILS = 1100
#: gRPC clients refuse received metadata over 8 KiB at random (always over
#: 16 KiB); the status and content type take the rest.
MAX_WIRE_DETAILS = 8 * 1024 - 256
CALL_TIMEOUT_S = 5.0
IN_FLIGHT = 128
REFUSALS = {"INVALID_ARGUMENT", "NOT_FOUND"}
INT64_MAX = 2**63 - 1

#: Cases per fuzz area (10,200 in all).
QUOTAS = {"documents": 4000, "admin": 2400, "planner": 2600, "reader": 1200}

# The rules of docs/metadata.md and the protos, written out here (not
# imported) so a validator that is too lenient is caught.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
PARTITION = re.compile(r"0|[1-9][0-9]*")
DURATION = re.compile(r"\d+(ms|s|m|h)?")
STATES = {"ACTIVE", "STANDBY", "DRAINING", "FAILED"}
RESERVED_PROPERTIES = ["bootstrap.servers", "enable.auto.commit", "enable.auto.offset.store"]
STREAM_FIELDS = {"name", "clusters", "auto_failover"}
CLUSTER_FIELDS = {"bootstrap_servers", "topics", "properties", "state", "starting"}
FAILOVER_FIELDS = {
    "standby",
    "unreachable_after_ms",
    "unreachable_after",
    "strategy",
    "margin_ms",
    "margin",
}
NO_SPLITS = "<no splits>"
REDACTED = "<redacted>"
#: Stands for a deeply nested value; replaced in the document's text.
DEEP = "\x00deep\x00"
DEEP_JSON = json.dumps(DEEP)

ADMIN_METHODS = {
    "PutStream",
    "GetStream",
    "DeleteStream",
    "StreamHistory",
    "DrainCluster",
    "FailCluster",
    "ActivateCluster",
    "Failover",
    "ListAssignments",
}
PLANNER_METHODS = {"ResolveOffsets", "LatestOffsets", "PlanPartitions", "Commit"}
READER_METHODS = {"Register", "Subscribe", "ReportReads"}


# -- the world a fuzz area runs against --------------------------------------------


@dataclass(frozen=True)
class World:
    """One valid stream: ``cluster`` ACTIVE and ``standby`` STANDBY, both on
    ``topic`` (one partition) of the shared Kafka cluster."""

    stream: str
    cluster: str
    standby: str
    topic: str
    bootstrap: str

    @property
    def split(self) -> str:
        return f"{self.cluster}/{self.topic}/0"

    @property
    def doc(self) -> dict[str, Any]:
        return stream_doc(
            self.stream,
            {
                self.cluster: (self.bootstrap, [self.topic]),
                self.standby: (self.bootstrap, [self.topic]),
            },
            states={self.standby: "STANDBY"},
        )


def make_world(address: str, kafka: KafkaClusters, *, records: int = 0) -> World:
    (cluster,) = kafka.shared(1)
    topic = uid("fuzz")
    create_topics(cluster.bootstrap, {topic: 1})
    if records:
        produce_sequence(cluster.bootstrap, topic, 1, "a", range(records))
    world = World(uid("fuzz"), "east", "west", topic, cluster.bootstrap)
    with AdminClient(address) as admin:
        admin.put_stream(world.doc)
        eventually(
            lambda: any(
                c.cluster == world.cluster and c.reachable and c.partitions == 1
                for c in admin.get_stream(world.stream).clusters
            )
        )
        # The reconciler records the change once discovery has synced it, which
        # can come after discovery's own round found the cluster: wait for it,
        # or it lands in the fuzz's "after" as a change the fuzz made.
        eventually(lambda: any(e.kind == "reconcile" for e in admin.history(world.stream)))
    return world


def stored(thread: CoordinatorThread) -> dict[str, tuple[int, bytes]]:
    """Every key under the coordinator's prefix (history and read marks
    flushed first) -> (mod revision, value), except the ones it keeps alive."""
    coord = thread.coordinator
    assert coord is not None
    assert coord.duties is not None
    thread.call(coord.duties.history.flush())
    thread.call(coord.duties.marks.flush())
    prefix = coord.config.etcd_prefix.rstrip("/")
    kvs, _ = thread.call(coord.etcd.get_prefix(prefix + "/"))  # type: ignore[misc]
    out = {}
    for kv in kvs:
        key = kv.key[len(prefix) :]
        if not key.startswith(("/replicas/", "/leader")):
            out[key] = (kv.mod_revision, kv.value)
    return out


def store_changes(
    before: dict[str, tuple[int, bytes]], after: dict[str, tuple[int, bytes]]
) -> list[str]:
    changes = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old == new:
            continue
        if new is None:
            changes.append(f"stored change: {key} deleted")
        else:
            how = "added" if old is None else f"changed (revision {old[0]} -> {new[0]})"
            changes.append(f"stored change: {key} {how}: {_brief_bytes(new[1])[:400]}")
    if len(changes) > 12:
        changes[12:] = [f"stored change: ... and {len(changes) - 12} more keys"]
    return changes


# -- calling and judging --------------------------------------------------------------


def problem_of(code: grpc.StatusCode, details: str) -> str | None:
    """What is wrong with this outcome of a malformed request (None: nothing)."""
    if code == grpc.StatusCode.OK:
        return "accepted (OK) though malformed"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"no answer within {CALL_TIMEOUT_S:.0f} s (DEADLINE_EXCEEDED)"
    if "metadata size exceeds" in details:
        return f"{code.name}: the refusal's message broke gRPC's metadata size limit"
    if code.name not in REFUSALS:
        return code.name
    if len(details) > MAX_DETAILS:
        return f"{code.name} with a message over {MAX_DETAILS:,} characters"
    if wire_size(details) > MAX_WIRE_DETAILS:
        # Under the limit in characters, over it in bytes: the client drops
        # such an answer at random (RESOURCE_EXHAUSTED 'received metadata
        # size exceeds soft limit'), so judge it by its size, every time.
        return f"{code.name} with a message over gRPC's 8 KiB metadata soft limit on the wire"
    return None


def wire_size(details: str) -> int:
    """Bytes of grpc-message on the wire: UTF-8, percent-encoded outside
    printable ASCII."""
    return sum(1 if 0x20 <= b <= 0x7E and b != 0x25 else 3 for b in details.encode())


@dataclass
class Violation:
    """One kind of violation: how often, and its smallest distinct inputs."""

    count: int = 0
    examples: list[tuple[int, bytes, Message, str]] = field(default_factory=list)

    def add(self, request: Message, details: str) -> None:
        self.count += 1
        raw = request.SerializeToString()
        if any(raw == seen for _, seen, _, _ in self.examples):
            return
        self.examples.append((len(raw), raw, request, details))
        self.examples.sort(key=lambda e: e[0])
        del self.examples[3:]


class Fuzzer:
    """Sends requests (pipelined) and judges each outcome when it arrives."""

    def __init__(self, address: str) -> None:
        self._channel = grpc.insecure_channel(address)
        admin = admin_pb2_grpc.AdminStub(self._channel)
        planner = planner_pb2_grpc.PlannerStub(self._channel)
        reader = reader_pb2_grpc.ReaderStub(self._channel)
        self._calls: dict[str, Any] = {
            **{m: getattr(admin, m) for m in ADMIN_METHODS},
            **{m: getattr(planner, m) for m in PLANNER_METHODS},
            **{m: getattr(reader, m) for m in READER_METHODS},
        }
        self.outcomes: Counter[str] = Counter()
        self._violations: dict[tuple[str, str], Violation] = {}
        self._lock = threading.Condition()
        self._slots = threading.BoundedSemaphore(IN_FLIGHT)
        self._pending = 0

    @property
    def cases(self) -> int:
        return sum(self.outcomes.values())

    def send(self, method: str, request: Message) -> None:
        if method == "Subscribe":  # server streaming: read its first answer
            self._subscribe(request)
            return
        self._slots.acquire()
        with self._lock:
            self._pending += 1
        try:
            future = self._calls[method].future(request, timeout=CALL_TIMEOUT_S)
        except BaseException:
            self._finished()
            raise
        future.add_done_callback(functools.partial(self._done, method, request))

    def _subscribe(self, request: Message) -> None:
        call = self._calls["Subscribe"](request, timeout=CALL_TIMEOUT_S)
        try:
            next(call)
            code, details = grpc.StatusCode.OK, ""
        except StopIteration:
            code, details = call.code(), call.details() or ""
        except grpc.RpcError as exc:
            code, details = exc.code(), exc.details() or ""
        finally:
            call.cancel()
        self._record("Subscribe", request, code, details)

    def _done(self, method: str, request: Message, future: Any) -> None:
        try:
            self._record(method, request, future.code(), future.details() or "")
        finally:
            self._finished()

    def _finished(self) -> None:
        self._slots.release()
        with self._lock:
            self._pending -= 1
            self._lock.notify_all()

    def _record(self, method: str, request: Message, code: grpc.StatusCode, details: str) -> None:
        problem = problem_of(code, details)
        with self._lock:
            self.outcomes[code.name] += 1
            if problem is None:
                return
            self._violations.setdefault((method, problem), Violation()).add(request, details)

    def wait(self, timeout_s: float = 60.0) -> None:
        with self._lock:
            assert self._lock.wait_for(lambda: self._pending == 0, timeout_s), (
                f"{self._pending} calls still unanswered"
            )

    def close(self) -> None:
        self._channel.close()

    def report(self) -> list[str]:
        return [
            f"{method}: {problem}: {v.count} case(s); the smallest:"
            + "".join(
                f"\n    {describe(request)}; details: {details[:200]!r}"
                for _, _, request, details in v.examples
            )
            for (method, problem), v in sorted(
                self._violations.items(), key=lambda item: -item[1].count
            )
        ]


def _brief(value: object, depth: int = 0) -> str:
    if depth > 6:
        return "..."
    if isinstance(value, str):
        return repr(value) if len(value) <= 60 else f"{value[:30]!r}...({len(value):,} chars)"
    if isinstance(value, dict):
        items = [
            f"{_brief(k, depth + 1)}: {_brief(v, depth + 1)}" for k, v in list(value.items())[:8]
        ]
        return "{" + ", ".join(items) + (", ..." if len(value) > 8 else "") + "}"
    if isinstance(value, list):
        items = [_brief(v, depth + 1) for v in value[:8]]
        return "[" + ", ".join(items) + (", ..." if len(value) > 8 else "") + "]"
    return repr(value)


def _brief_bytes(raw: bytes) -> str:
    try:
        return _brief(json.loads(raw))
    except (ValueError, RecursionError):
        return _brief(raw.decode("utf-8", "replace"))


def describe(request: Message) -> str:
    fields = json_format.MessageToDict(request, preserving_proto_field_name=True)
    text = fields.get("document_json")
    if isinstance(text, str):
        with contextlib.suppress(ValueError, RecursionError):
            fields["document_json"] = json.loads(text)
    brief = f"{type(request).__name__}{_brief(fields)}"
    return brief if len(brief) <= 600 else brief[:600] + "..."


def fuzz(area: str, fuzzer: Fuzzer, requests: st.SearchStrategy[tuple[str, Message]]) -> None:
    @settings(
        max_examples=QUOTAS[area],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate),
    )
    @given(requests)
    def run(case: tuple[str, Message]) -> None:
        fuzzer.send(*case)

    run()
    fuzzer.wait()


# -- strategies: text, names, ids ----------------------------------------------------------


def repeated(chars: list[str], sizes: list[int]) -> st.SearchStrategy[str]:
    return st.builds(lambda c, n: c * n, st.sampled_from(chars), st.sampled_from(sizes))


#: Unbounded input: what an error message must never echo whole.
HUGE = repeated(["x", "é", "\U0001f600", "/", "\n", "%"], [5_000, 100_000])
#: Over the 255-character limit of ids (query, agent, consumer group, host).
LONG_ID = st.one_of(
    repeated(["q", "é", "\U0001f600", " "], [256, 300, 1_000, 100_000]),
    st.text(min_size=256, max_size=300),
)
#: A lone surrogate: text that is not Unicode text. It can only arrive
#: escaped inside JSON (proto strings are UTF-8 on the wire).
SURROGATE_TEXT = st.builds(
    lambda a, s, b: a + s + b,
    st.text(max_size=5),
    st.sampled_from(["\ud800", "\udc80", "\udfff", "\ud83d"]),
    st.text(max_size=5),
)
VALID_NAME_CHARS = st.from_regex(r"[A-Za-z0-9._-]{0,12}", fullmatch=True)
INVALID_NAMES = st.one_of(
    st.just(""),
    repeated(["a", "9", "é", "\U0001f600"], [129, 256, 1_000]),
    HUGE,
    st.builds(lambda lead, rest: lead + rest, st.sampled_from([".", "_", "-"]), VALID_NAME_CHARS),
    st.builds(
        lambda a, bad, b: a + bad + b,
        st.from_regex(r"[A-Za-z0-9]{1,8}", fullmatch=True),
        st.characters(codec="utf-8").filter(lambda c: not re.fullmatch(r"[A-Za-z0-9._-]", c)),
        VALID_NAME_CHARS,
    ),
    st.text(max_size=40).filter(lambda s: not NAME.fullmatch(s)),
)


def unknown_names(*taken: str) -> st.SearchStrategy[str]:
    """Valid names that name nothing."""
    return st.one_of(
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}", fullmatch=True),
        st.just("n" * 128),
    ).filter(lambda s: s not in taken)


def bad_or_unknown(*taken: str) -> st.SearchStrategy[str]:
    return st.one_of(INVALID_NAMES, unknown_names(*taken))


# -- strategies: splits and offset maps ------------------------------------------------------

NAME_ISH = st.from_regex(r"[A-Za-z0-9._-]{1,12}", fullmatch=True)
BAD_PARTITION = st.one_of(
    st.sampled_from(
        ["", "-1", "01", "00", "1.0", " 1", "1 ", "+1", "0x1", "1e3", "\u0661", "\uff11"]
    ),
    st.integers(2**31, 10**30).map(str),
    st.text(max_size=8).filter(lambda s: "/" not in s and not PARTITION.fullmatch(s)),
)
MALFORMED_SPLIT = st.one_of(
    st.text(max_size=30).filter(lambda s: s.count("/") != 2 and s != NO_SPLITS),
    st.builds("/{}/{}".format, NAME_ISH, st.integers(0, 9)),
    st.builds("{}//{}".format, NAME_ISH, st.integers(0, 9)),
    st.builds("{}/{}/{}".format, NAME_ISH, NAME_ISH, BAD_PARTITION),
    st.builds("{}/{}/{}/{}".format, NAME_ISH, NAME_ISH, st.integers(0, 9), st.integers(0, 9)),
    HUGE.filter(lambda s: s.count("/") != 2),
)


def malformed_offsets(world: World, low: int = 0) -> st.SearchStrategy[dict[str, int]]:
    """A map of split -> offset with at least one entry that is malformed:
    a split id that is not cluster/topic/partition, or an offset below ``low``."""
    bad_entry = st.one_of(
        st.tuples(MALFORMED_SPLIT, st.integers(-(2**63), INT64_MAX)),
        st.tuples(st.just(world.split), st.integers(-(2**63), low - 1)),
    )
    return st.builds(
        lambda base, entry: {**base, entry[0]: entry[1]},
        st.sampled_from([{}, {world.split: 0}, {world.split: 7}]),
        bad_entry,
    )


def valid_offsets(world: World, low: int = 0, high: int = 20) -> st.SearchStrategy[dict[str, int]]:
    """Offsets the split has (its 20 records): no data loss to report."""
    return st.one_of(st.just({}), st.builds(lambda o: {world.split: o}, st.integers(low, high)))


def _split_parts(split: str) -> tuple[str, str, int]:
    """A split id's (cluster, topic, partition) for the wire's columns, a
    malformed id kept malformed: not three parts -> the whole text as the
    cluster and no topic; a partition that is not one -> -1."""
    parts = split.split("/")
    if len(parts) != 3:
        return split, "", 0
    cluster, topic, p = parts
    ok = PARTITION.fullmatch(p) is not None and int(p) < 2**31
    return cluster, topic, int(p) if ok else -1


def as_columns(offsets: dict[str, int]) -> planner_pb2.OffsetColumns:
    """``offsets`` as OffsetColumns, one group per split (see :func:`_split_parts`)."""
    msg = planner_pb2.OffsetColumns()
    for split, offset in offsets.items():
        cluster, topic, partition = _split_parts(split)
        msg.clusters.append(cluster)
        msg.topics.append(topic)
        msg.counts.append(1)
        msg.partitions.append(partition)
        msg.offsets.append(offset)
    return msg


def as_offsets(columns: planner_pb2.OffsetColumns) -> dict[str, int]:
    """An answer's offsets by split id."""
    return dict(ov.from_columns(columns))


def as_range_columns(rows: list[tuple[str, int, int]]) -> common_pb2.RangeColumns:
    """``(split, from, until)`` rows as RangeColumns, one group per row."""
    msg = common_pb2.RangeColumns()
    for i, (split, frm, until) in enumerate(rows):
        cluster, topic, partition = _split_parts(split)
        msg.clusters.append(cluster)
        msg.topics.append(topic)
        msg.groups.append(i)
        msg.partitions.append(partition)
        msg.from_offsets.append(frm)
        msg.until_offsets.append(until)
    return msg


# -- strategies: stream documents ----------------------------------------------------------------

JSON_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=12),
)
JSON = st.recursive(
    JSON_LEAF,
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3)
    ),
    max_leaves=8,
)
NOT_STRING = JSON.filter(lambda v: not isinstance(v, str))
NOT_OBJECT = JSON.filter(lambda v: not isinstance(v, dict))
NOT_LIST = JSON.filter(lambda v: not isinstance(v, list))
#: Not an object and not null (null means "absent" where a field is optional).
NOT_OBJECT_NOR_NULL = JSON.filter(lambda v: not isinstance(v, dict) and v is not None)


def unknown_key(fields: set[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.text(max_size=20), HUGE, SURROGATE_TEXT).filter(lambda k: k not in fields)


BAD_BOOTSTRAP = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            ",",
            " , ",
            "host",
            "host:",
            ":9092",
            "host:0",
            "host:00000",
            "host:65536",
            "host:99999",
            "host:123456",
            "host:-1",
            "host:+1",
            "host:port",
            "host:9092:1",
            "ho st:9092",
            "host: 1",
            "[::1]",
            "[::1",
            "[zz]:9092",
            "host:9092,other",
            "kafka://",
        ]
    ),
    HUGE,
    st.text(max_size=20).filter(lambda s: ":" not in s),
    st.builds(
        "{}:{}".format,
        st.from_regex(r"[a-z0-9.-]{1,15}", fullmatch=True),
        st.one_of(st.just(0), st.integers(65536, 10**7)),
    ),
)
BAD_TOPIC = st.one_of(
    st.sampled_from(["", ".", "..", "a" * 250, "a b", "a/b", "\u00e4", "\U0001f600", "a\n"]),
    HUGE,
    SURROGATE_TEXT,
    st.text(max_size=20).filter(lambda s: not TOPIC.fullmatch(s) or s in (".", "..")),
    NOT_STRING,
)
BAD_STATE = st.one_of(
    NOT_STRING,
    HUGE,
    SURROGATE_TEXT,
    st.text(max_size=12).filter(lambda s: s.upper() not in STATES),
)
BAD_STARTING = st.one_of(
    st.text(max_size=12).filter(lambda s: s.lower() not in ("earliest", "latest")),
    HUGE,
    st.integers(),
    st.booleans(),
    st.floats(),
    st.lists(JSON_LEAF, max_size=2),
    st.just({}),
    st.builds(
        lambda ts: {"timestamp": ts},
        st.one_of(
            st.integers(max_value=-1),
            st.floats(),
            st.text(max_size=5),
            st.booleans(),
            st.none(),
            st.lists(JSON_LEAF, max_size=2),
        ),
    ),
    st.builds(
        lambda ts, k, v: {"timestamp": ts, k: v},
        st.integers(0, 2**40),
        st.text(max_size=8).filter(lambda k: k != "timestamp"),
        JSON,
    ),
    st.builds(lambda k, v: {k: v}, st.text(max_size=8).filter(lambda k: k != "timestamp"), JSON),
)
BAD_DURATION = st.one_of(
    st.integers(max_value=-1),
    st.booleans(),
    st.floats(),
    st.none(),
    st.lists(JSON_LEAF, max_size=2),
    st.dictionaries(st.text(max_size=4), JSON_LEAF, max_size=2),
    st.text(max_size=10).filter(lambda s: not DURATION.fullmatch(s.strip())),
    HUGE,
)
ZERO_DURATION = st.sampled_from([0, "0", "0ms", "0s", "00m", "0h"])
BAD_DOC_STRATEGY = st.one_of(
    st.text(max_size=15).filter(lambda s: s not in ("timestamp", "identity")),
    HUGE,
    NOT_STRING.filter(lambda v: v is not None),
)
#: Numbers no int64 holds (milliseconds since the epoch, durations).
BEYOND_INT64 = st.integers(2**63, 10**30)


def _a_cluster(draw: st.DrawFn, doc: dict[str, Any]) -> dict[str, Any] | None:
    clusters = doc.get("clusters")
    if isinstance(clusters, dict):
        ids = [k for k, v in clusters.items() if isinstance(v, dict)]
        if ids:
            return clusters[draw(st.sampled_from(ids))]  # type: ignore[no-any-return]
    return None


def _in_cluster(
    draw: st.DrawFn, doc: dict[str, Any], w: World, change: Callable[[dict[str, Any]], None]
) -> None:
    cluster = _a_cluster(draw, doc)
    if cluster is None:  # an earlier defect took the clusters away: still malformed
        d_unknown_field(draw, doc, w)
    else:
        change(cluster)


def d_unknown_field(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    doc[draw(unknown_key(STREAM_FIELDS))] = draw(JSON)


def d_name(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    how = draw(st.sampled_from(["invalid", "type", "missing", "null"]))
    if how == "missing":
        doc.pop("name", None)
    elif how == "null":
        doc["name"] = None
    else:
        doc["name"] = draw(INVALID_NAMES if how == "invalid" else NOT_STRING)


def d_clusters(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    how = draw(st.sampled_from(["empty", "type", "missing"]))
    if how == "missing":
        doc.pop("clusters", None)
    else:
        doc["clusters"] = {} if how == "empty" else draw(NOT_OBJECT)


def d_cluster_id(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    clusters = doc.get("clusters")
    if not isinstance(clusters, dict) or not clusters:
        d_unknown_field(draw, doc, w)
        return
    old = draw(st.sampled_from(list(clusters)))
    clusters[draw(INVALID_NAMES | SURROGATE_TEXT)] = clusters.pop(old)


def d_cluster_value(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    clusters = doc.get("clusters")
    if not isinstance(clusters, dict) or not clusters:
        d_unknown_field(draw, doc, w)
        return
    clusters[draw(st.sampled_from(list(clusters)))] = draw(NOT_OBJECT)


def d_cluster_field(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    key, value = draw(unknown_key(CLUSTER_FIELDS)), draw(JSON)
    _in_cluster(draw, doc, w, lambda c: c.__setitem__(key, value))


def d_bootstrap(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    value = draw(st.one_of(BAD_BOOTSTRAP, NOT_STRING, st.just(DEEP)))

    def change(c: dict[str, Any]) -> None:
        if value is None:
            c.pop("bootstrap_servers", None)
        else:
            c["bootstrap_servers"] = value

    _in_cluster(draw, doc, w, change)


def d_topics(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    how = draw(st.sampled_from(["type", "empty", "missing", "bad", "twice"]))
    bad = draw(BAD_TOPIC) if how == "bad" else None
    value = draw(NOT_LIST) if how == "type" else None
    at = draw(st.integers(0, 1))

    def change(c: dict[str, Any]) -> None:
        topics = c.get("topics") if isinstance(c.get("topics"), list) else [w.topic]
        if how == "missing":
            c.pop("topics", None)
        elif how == "type":
            c["topics"] = value
        elif how == "empty":
            c["topics"] = []
        elif how == "bad":
            c["topics"] = [*topics[:at], bad, *topics[at:]]
        else:
            c["topics"] = [*topics, *topics[:1]] if topics else [w.topic, w.topic]

    _in_cluster(draw, doc, w, change)


def d_properties(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    how = draw(st.sampled_from(["type", "reserved", "value", "redacted", "surrogate-key"]))
    if how == "type":
        value = draw(NOT_OBJECT)
        _in_cluster(draw, doc, w, lambda c: c.__setitem__("properties", value))
        return
    if how == "reserved":
        key = draw(st.sampled_from(RESERVED_PROPERTIES))
        val = draw(st.one_of(JSON_LEAF, HUGE))
    elif how == "value":
        key = draw(st.one_of(st.text(max_size=20), HUGE))
        val = draw(
            st.one_of(
                st.none(),
                st.lists(JSON_LEAF, max_size=2),
                st.dictionaries(st.text(max_size=4), JSON_LEAF, max_size=2),
                st.just(DEEP),
            )
        )
    elif how == "redacted":  # the marker for a secret that is stored nowhere
        key = draw(
            st.sampled_from(["sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret"])
        )
        val = REDACTED
    else:
        # A key that is not text at all: with a scalar value this once
        # passed validation and crashed the process building the cluster's
        # client (SIGSEGV in confluent_kafka); see
        # test_lone_surrogate_in_a_property_key_is_refused_and_the_coordinator_lives.
        key = draw(SURROGATE_TEXT)
        val = draw(st.one_of(JSON_LEAF, st.lists(JSON_LEAF, max_size=2)))

    def change(c: dict[str, Any]) -> None:
        props = c.get("properties")
        if not isinstance(props, dict):
            props = c["properties"] = {}
        props[key] = val

    _in_cluster(draw, doc, w, change)


def d_state(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    value = draw(BAD_STATE)
    _in_cluster(draw, doc, w, lambda c: c.__setitem__("state", value))


def d_starting(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    value = draw(BAD_STARTING)
    _in_cluster(draw, doc, w, lambda c: c.__setitem__("starting", value))


def d_auto_failover(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    af: Any = {"standby": w.standby, "unreachable_after": "60s"}
    how = draw(
        st.sampled_from(
            [
                "type",
                "unknown",
                "standby",
                "standby-unknown",
                "window",
                "window-zero",
                "strategy",
                "margin",
            ]
        )
    )
    if how == "type":
        af = draw(NOT_OBJECT_NOR_NULL)
    elif how == "unknown":
        af[draw(unknown_key(FAILOVER_FIELDS))] = draw(JSON)
    elif how == "standby":
        standby = draw(st.one_of(st.none(), INVALID_NAMES, NOT_STRING))
        if standby is None and draw(st.booleans()):
            del af["standby"]
        else:
            af["standby"] = standby
    elif how == "standby-unknown":
        af["standby"] = draw(unknown_names(w.cluster, w.standby))
    elif how in ("window", "window-zero"):
        del af["unreachable_after"]
        if how == "window-zero" or draw(st.booleans()):
            key = draw(st.sampled_from(["unreachable_after", "unreachable_after_ms"]))
            af[key] = draw(ZERO_DURATION if how == "window-zero" else BAD_DURATION)
    elif how == "strategy":
        af["strategy"] = draw(BAD_DOC_STRATEGY)
    else:
        af[draw(st.sampled_from(["margin", "margin_ms"]))] = draw(BAD_DURATION)
    doc["auto_failover"] = af


def d_beyond_int64(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    big = draw(BEYOND_INT64)
    how = draw(st.sampled_from(["starting", "window", "window-text", "margin"]))
    if how == "starting":
        _in_cluster(draw, doc, w, lambda c: c.__setitem__("starting", {"timestamp": big}))
    elif how == "window":
        doc["auto_failover"] = {"standby": w.standby, "unreachable_after_ms": big}
    elif how == "window-text":
        doc["auto_failover"] = {"standby": w.standby, "unreachable_after": f"{big}ms"}
    else:
        doc["auto_failover"] = {"standby": w.standby, "unreachable_after": "1s", "margin_ms": big}


def d_deep(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    """A deeply nested value where no nesting is allowed (see ``render``)."""
    where = draw(st.sampled_from(["field", "name", "topics", "property"]))
    if where == "field":
        doc[draw(st.text(max_size=8).filter(lambda k: k not in STREAM_FIELDS))] = DEEP
    elif where == "name":
        doc["name"] = DEEP
    elif where == "topics":
        _in_cluster(draw, doc, w, lambda c: c.__setitem__("topics", [DEEP]))
    else:
        _in_cluster(draw, doc, w, lambda c: c.__setitem__("properties", {"a": DEEP}))


def d_surrogate(draw: st.DrawFn, doc: dict[str, Any], w: World) -> None:
    """Text that is not text: a lone surrogate, escaped in JSON."""
    text = draw(SURROGATE_TEXT)
    where = draw(
        st.sampled_from(
            ["field", "name", "cluster-id", "cluster-field", "topic", "state", "property-value"]
        )
    )
    if where == "field":
        doc[text] = draw(JSON)
    elif where == "name":
        doc["name"] = text
    elif where == "cluster-id":
        clusters = doc.get("clusters")
        if isinstance(clusters, dict) and clusters:
            clusters[text] = clusters.pop(draw(st.sampled_from(list(clusters))))
        else:
            doc[text] = 1
    elif where == "cluster-field":
        value = draw(JSON)
        _in_cluster(draw, doc, w, lambda c: c.__setitem__(text, value))
    elif where == "topic":
        _in_cluster(draw, doc, w, lambda c: c.__setitem__("topics", [w.topic, text]))
    elif where == "state":
        _in_cluster(draw, doc, w, lambda c: c.__setitem__("state", text))
    else:

        def change(c: dict[str, Any]) -> None:
            props = c.get("properties")
            if not isinstance(props, dict):
                props = c["properties"] = {}
            props["client.id"] = text

        _in_cluster(draw, doc, w, change)


DOC_DEFECTS = [
    d_unknown_field,
    d_name,
    d_clusters,
    d_cluster_id,
    d_cluster_value,
    d_cluster_field,
    d_bootstrap,
    d_topics,
    d_properties,
    d_state,
    d_starting,
    d_auto_failover,
    d_beyond_int64,
    d_deep,
    d_surrogate,
]


def render(draw: st.DrawFn, doc: object) -> str:
    """JSON text of ``doc`` (escaped or not), with :data:`DEEP` replaced by a
    value nested 2 to 3,000 levels deep."""
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    try:
        text.encode()
    except UnicodeEncodeError:  # lone surrogates: only as JSON escapes
        text = json.dumps(doc)
    if DEEP_JSON in text:
        depth = draw(st.integers(2, 3000))
        deep = (
            "[" * depth + "]" * depth
            if draw(st.booleans())
            else '{"a":' * depth + "0" + "}" * depth
        )
        text = text.replace(DEEP_JSON, deep)
    return text


def _not_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return True
    return False


@st.composite
def mutated_documents(draw: st.DrawFn, w: World) -> str:
    doc = w.doc
    doc["name"] = draw(st.sampled_from([w.stream, f"{w.stream}-new"]))
    for defect in draw(st.lists(st.sampled_from(DOC_DEFECTS), min_size=1, max_size=3)):
        defect(draw, doc, w)
    return render(draw, doc)


@st.composite
def oversized_documents(draw: st.DrawFn, w: World) -> str:
    """A valid document made 1 MiB or larger (a few bytes over at most)."""
    over = draw(st.integers(0, 64))
    doc = w.doc
    if draw(st.booleans()):  # ASCII padding outside the value
        text = json.dumps(doc)
        return text + " " * (MIB + over - len(text.encode()))
    # Two-byte characters: fewer characters than bytes.
    doc["clusters"][w.cluster]["properties"]["client.id"] = ""
    base = len(json.dumps(doc, ensure_ascii=False).encode())
    need = MIB + over - base
    doc["clusters"][w.cluster]["properties"]["client.id"] = "\u00e9" * (need // 2) + "e" * (
        need % 2
    )
    return json.dumps(doc, ensure_ascii=False)


def not_json(w: World) -> st.SearchStrategy[str]:
    valid = json.dumps(w.doc)
    return st.one_of(
        st.sampled_from(
            [
                "",
                "nul",
                "{",
                "{'name': 'x'}",
                "[1,]",
                '{"a":1,}',
                "\ufeff{}",
                '{"name": "x"',
                "\x00",
            ]
        ),
        st.builds(lambda k: valid[:k], st.integers(0, len(valid) - 1)),
        st.builds(lambda s: valid + s, st.text(min_size=1, max_size=5)).filter(_not_json),
        st.text(max_size=50).filter(_not_json),
        st.binary(max_size=50).map(lambda b: b.decode("latin-1")).filter(_not_json),
        st.builds(lambda n: "[" * n, st.integers(1, 100_000)),
    )


def documents(w: World) -> st.SearchStrategy[tuple[str, Message]]:
    random_objects = st.dictionaries(st.text(max_size=12), JSON, min_size=1, max_size=5).filter(
        lambda d: any(k not in STREAM_FIELDS for k in d)
    )
    texts = st.one_of(
        *[mutated_documents(w)] * 24,
        not_json(w),
        not_json(w),
        JSON.filter(lambda v: not isinstance(v, dict)).map(json.dumps),
        JSON.filter(lambda v: not isinstance(v, dict)).map(json.dumps),
        random_objects.map(json.dumps),
        random_objects.map(json.dumps),
        oversized_documents(w),
    )
    versions = st.one_of(st.just(0), st.integers(-(2**63), INT64_MAX))
    return st.builds(
        lambda text, version: (
            "PutStream",
            admin_pb2.PutStreamRequest(document_json=text, expected_version=version),
        ),
        texts,
        versions,
    )


# -- strategies: admin, planner and reader requests ------------------------------------------


@st.composite
def admin_requests(draw: st.DrawFn, w: World) -> tuple[str, Message]:
    bad_stream = bad_or_unknown(w.stream)
    bad_cluster = bad_or_unknown(w.cluster, w.standby)
    method = draw(
        st.sampled_from(
            [
                "GetStream",
                "DeleteStream",
                "StreamHistory",
                "ListAssignments",
                "DrainCluster",
                "FailCluster",
                "ActivateCluster",
                "Failover",
                "Failover",
            ]
        )
    )
    if method in ("GetStream", "DeleteStream"):
        request_type = (
            admin_pb2.GetStreamRequest if method == "GetStream" else admin_pb2.DeleteStreamRequest
        )
        return method, request_type(name=draw(bad_stream))
    if method == "StreamHistory":
        return method, admin_pb2.StreamHistoryRequest(
            name=draw(bad_stream), limit=draw(st.integers(-(2**31), 2**31 - 1))
        )
    if method == "ListAssignments":
        return method, admin_pb2.ListAssignmentsRequest(stream=draw(bad_stream))
    if method != "Failover":
        # The stream, the cluster or both name nothing (or are not names).
        stream, cluster = draw(
            st.one_of(
                st.tuples(bad_stream, st.sampled_from([w.cluster, w.standby]) | bad_cluster),
                st.tuples(st.just(w.stream), bad_cluster),
            )
        )
        return method, admin_pb2.ClusterRequest(stream=stream, cluster=cluster)
    defects = draw(
        st.lists(
            st.sampled_from(["stream", "from", "to", "same", "strategy", "margin"]),
            min_size=1,
            max_size=3,
            unique=True,
        )
    )
    request = admin_pb2.FailoverRequest(
        stream=draw(bad_stream) if "stream" in defects else w.stream,
        from_cluster=draw(bad_cluster) if "from" in defects else w.cluster,
        to_cluster=draw(bad_cluster) if "to" in defects else w.standby,
        strategy=draw(
            st.one_of(st.text(max_size=15), HUGE).filter(
                lambda s: s not in ("", "timestamp", "identity")
            )
            if "strategy" in defects
            else st.sampled_from(["", "timestamp", "identity"])
        ),
        reason=draw(st.text(max_size=20)),
    )
    if "same" in defects:
        request.to_cluster = request.from_cluster
    if "margin" in defects:
        request.margin_ms = draw(st.integers(-(2**63), -1))
    elif draw(st.booleans()):
        request.margin_ms = draw(st.integers(0, INT64_MAX))
    return method, request


POSITION = planner_pb2.Position


@st.composite
def planner_requests(draw: st.DrawFn, w: World) -> tuple[str, Message]:
    method = draw(st.sampled_from(sorted(PLANNER_METHODS)))
    choices = {
        "ResolveOffsets": ["stream", "kind", "offsets", "unknown-split", "fallback", "timestamp"],
        "LatestOffsets": ["stream", "query_id", "start", "max_records", "cap"],
        "PlanPartitions": [
            "stream",
            "query_id",
            "start",
            "end",
            "min_partitions",
            "max_records_per_partition",
        ],
        "Commit": ["stream", "query_id", "group_id", "end"],
    }[method]
    defects = draw(st.lists(st.sampled_from(choices), min_size=1, max_size=2, unique=True))
    stream = draw(bad_or_unknown(w.stream)) if "stream" in defects else w.stream
    query_id = (
        draw(LONG_ID) if "query_id" in defects else draw(st.sampled_from(["q-fuzz", "spark-1"]))
    )

    def offsets(field: str) -> dict[str, int]:
        return draw(malformed_offsets(w) if field in defects else valid_offsets(w))

    if method == "ResolveOffsets":
        position = POSITION(kind=draw(st.sampled_from([0, POSITION.EARLIEST, POSITION.LATEST])))
        if "kind" in defects:
            position.kind = draw(st.integers(-(2**31), -1) | st.integers(5, 2**31 - 1))
        elif {"offsets", "unknown-split", "fallback"} & set(defects):
            position.kind = POSITION.SPECIFIC
            named = draw(
                malformed_offsets(w, low=-2) if "offsets" in defects else valid_offsets(w, low=-2)
            )
            if "unknown-split" in defects:
                split = draw(
                    st.one_of(
                        st.builds(f"{{}}/{w.topic}/0".format, unknown_names(w.cluster, w.standby)),
                        st.builds(
                            f"{w.cluster}/{{}}/0".format, NAME_ISH.filter(lambda t: t != w.topic)
                        ),
                    )
                )
                named[split] = draw(st.integers(-2, 10**6))
            position.offsets.CopyFrom(as_columns(named))
            position.fallback = draw(
                st.sampled_from([POSITION.SPECIFIC])
                | st.integers(-(2**31), -1)
                | st.integers(5, 2**31 - 1)
                if "fallback" in defects
                else st.sampled_from([0, POSITION.EARLIEST, POSITION.LATEST])
            )
        elif "timestamp" in defects:
            position.kind = POSITION.TIMESTAMP
            position.timestamp_ms = draw(st.integers(-(2**63), -1))
        return method, planner_pb2.ResolveOffsetsRequest(stream=stream, position=position)
    if method == "LatestOffsets":
        return method, planner_pb2.LatestOffsetsRequest(
            stream=stream,
            query_id=query_id,
            start=as_columns(offsets("start")),
            max_records=draw(
                st.integers(-(2**63), -1) if "max_records" in defects else st.integers(0, 10**6)
            ),
            cap=as_columns(draw(malformed_offsets(w) if "cap" in defects else st.just({}))),
            fail_on_data_loss=draw(st.booleans()),
        )
    if method == "PlanPartitions":
        return method, planner_pb2.PlanPartitionsRequest(
            stream=stream,
            query_id=query_id,
            start=as_columns(offsets("start")),
            end=as_columns(offsets("end")),
            min_partitions=draw(
                st.integers(-(2**31), -1) if "min_partitions" in defects else st.integers(0, 64)
            ),
            max_records_per_partition=draw(
                st.integers(-(2**63), -1)
                if "max_records_per_partition" in defects
                else st.integers(0, 10**6)
            ),
        )
    return method, planner_pb2.CommitRequest(
        stream=stream,
        query_id=query_id,
        end=as_columns(offsets("end")),
        group_id=draw(LONG_ID)
        if "group_id" in defects
        else draw(st.sampled_from(["", "lag-tool"])),
    )


@st.composite
def reader_requests(draw: st.DrawFn, w: World) -> tuple[str, Message]:
    method = draw(st.sampled_from(["Register", "Subscribe", "ReportReads", "ReportReads"]))
    if method == "Register":
        how = draw(st.sampled_from(["empty", "long", "host"]))
        return method, reader_pb2.RegisterRequest(
            agent_id={"empty": "", "long": draw(LONG_ID), "host": "agent-fuzz"}[how],
            host=draw(LONG_ID) if how == "host" else draw(st.text(max_size=20)),
            pid=draw(st.integers(-(2**31), 2**31 - 1)),
        )
    if method == "Subscribe":  # nobody registered: every agent is unknown
        agent = draw(st.one_of(st.just(""), LONG_ID, st.text(max_size=40)))
        return method, reader_pb2.SubscribeRequest(agent_id=agent)
    defects = draw(
        st.lists(
            st.sampled_from(
                [
                    "marks-split",
                    "abandoned-split",
                    "stream",
                    "query_id",
                    "agent_id",
                    "mark-offset",
                    "mark-next",
                    "mark-fingerprints",
                    "passed-span",
                    "range",
                    "abandoned-shape",
                ]
            ),
            min_size=1,
            max_size=2,
            unique=True,
        )
    )
    offsets = st.integers(0, 10**6)
    marks = [
        reader_pb2.ReadMark(split=w.split, last_offset=o, last_timestamp_ms=t)
        for o, t in draw(st.lists(st.tuples(offsets, st.integers(0, 2**41)), max_size=3))
    ]
    # how far reads went, with fingerprints (valid: the defects below spoil them)
    marks += [
        reader_pb2.ReadMark(
            split=w.split,
            last_offset=o,
            last_timestamp_ms=t,
            next_offset=o + 1 + n,
            from_offset=max(o - 3, 0),
            fingerprint_times=[t],
            fingerprint_digests=[draw(st.integers(0, 2**64 - 1))],
        )
        for o, t, n in draw(
            st.lists(st.tuples(offsets, st.integers(0, 2**41), st.integers(0, 5)), max_size=2)
        )
    ]
    passed = []
    if "mark-next" in defects:  # not past its last record, or its start after it
        o = draw(st.integers(1, 10**6))
        bad = reader_pb2.ReadMark(split=w.split, last_offset=o, next_offset=o)
        if draw(st.booleans()):
            bad.next_offset = draw(st.integers(1, o))
        else:
            bad.next_offset = o + 1
            bad.from_offset = draw(st.sampled_from([o + 1, -1, -(2**63)]))
        marks.insert(draw(st.integers(0, len(marks))), bad)
    if "mark-fingerprints" in defects:  # times and digests apart, or too many
        n = draw(st.integers(0, 20))
        bad = reader_pb2.ReadMark(
            split=w.split,
            last_offset=5,
            next_offset=6,
            fingerprint_times=[1] * n,
            fingerprint_digests=[2] * (n + 1 if n <= 16 else n),
        )
        marks.insert(draw(st.integers(0, len(marks))), bad)
    if "passed-span" in defects:
        frm = draw(st.integers(-(2**63), 10**6))
        until = draw(st.integers(-(2**63), frm)) if frm >= 0 else frm + 1
        passed.append(reader_pb2.ReadSpan(split=w.split, from_offset=frm, next_offset=until))
    abandoned = [
        (w.split, a, a + n) for a, n in draw(st.lists(st.tuples(offsets, offsets), max_size=2))
    ]
    if "marks-split" in defects:
        marks.insert(
            draw(st.integers(0, len(marks))),
            reader_pb2.ReadMark(split=draw(MALFORMED_SPLIT), last_offset=draw(offsets)),
        )
    if "abandoned-split" in defects:
        abandoned.insert(
            draw(st.integers(0, len(abandoned))),
            (draw(MALFORMED_SPLIT), 0, 1),
        )
    if "mark-offset" in defects:
        marks.insert(
            draw(st.integers(0, len(marks))),
            reader_pb2.ReadMark(split=w.split, last_offset=draw(st.integers(-(2**63), -1))),
        )
    if "range" in defects:  # ends before it starts, or starts below 0
        frm = draw(st.integers(-(2**63) + 1, INT64_MAX))
        if frm >= 0 or draw(st.booleans()):
            until = draw(st.integers(-(2**63), frm - 1))
        else:
            until = draw(st.integers(frm, INT64_MAX))
        abandoned.insert(
            draw(st.integers(0, len(abandoned))),
            (w.split, frm, until),
        )
    columns = as_range_columns(abandoned)
    if "abandoned-shape" in defects:  # a group that is not there, or columns of other lengths
        if draw(st.booleans()):
            columns.groups.append(draw(st.integers(len(columns.clusters), 2**32 - 1)))
            columns.partitions.append(0)
            columns.from_offsets.append(0)
            columns.until_offsets.append(1)
        else:
            draw(
                st.sampled_from([columns.partitions, columns.until_offsets, columns.groups])
            ).append(0)
    return method, reader_pb2.ReportReadsRequest(
        agent_id=draw(LONG_ID) if "agent_id" in defects else "agent-fuzz",
        stream=draw(bad_or_unknown(w.stream)) if "stream" in defects else w.stream,
        query_id=draw(LONG_ID) if "query_id" in defects else "q-fuzz",
        marks=marks,
        abandoned=columns,
        passed=passed,
    )


STRATEGIES: dict[str, Callable[[World], st.SearchStrategy[tuple[str, Message]]]] = {
    "documents": documents,
    "admin": admin_requests,
    "planner": planner_requests,
    "reader": reader_requests,
}


# -- the fuzz ----------------------------------------------------------------------------------


@pytest.mark.parametrize("area", list(QUOTAS))
def test_fuzz_malformed(
    area: str,
    make_coordinator: Callable[..., CoordinatorThread],
    kafka: KafkaClusters,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Thousands of refusals (and the tracebacks of the crashes found) would
    # bury the report; every outcome is judged from the answers.
    caplog.set_level(logging.CRITICAL + 1)
    thread = make_coordinator()
    world = make_world(thread.address, kafka, records=20 if area == "planner" else 0)
    requests = STRATEGIES[area](world)
    before = stored(thread)
    fuzzer = Fuzzer(thread.address)
    started = time.monotonic()
    try:
        fuzz(area, fuzzer, requests)
    finally:
        fuzzer.wait()
        fuzzer.close()
    took = time.monotonic() - started
    after = stored(thread)
    print(
        f"\nfuzz {area}: {fuzzer.cases:,} cases in {took:.1f} s: {dict(fuzzer.outcomes.most_common())}"
    )
    problems = fuzzer.report() + store_changes(before, after)
    assert fuzzer.cases >= QUOTAS[area]
    assert not problems, f"{len(problems)} kinds of violation:\n" + "\n".join(problems)


def test_the_fuzz_sends_at_least_10000_cases() -> None:
    """Each area's test checks it sent its quota; together they are the
    10,000 the contract asks for."""
    assert sum(QUOTAS.values()) >= 10_000


# -- focused: the limits ---------------------------------------------------------------------------


def _code(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


@pytest.fixture(scope="module")
def channel(coordinator: CoordinatorThread) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(coordinator.address) as ch:
        yield ch


@pytest.fixture(scope="module")
def world(coordinator: CoordinatorThread, kafka: KafkaClusters) -> World:
    """A valid stream (20 records) on the session's coordinator."""
    return make_world(coordinator.address, kafka, records=20)


def _bounded_refusal(
    code: grpc.StatusCode, details: str, expected: str = "INVALID_ARGUMENT"
) -> None:
    assert "metadata size exceeds" not in details, details[:300]
    assert code.name == expected, (code, details[:300])
    assert len(details) <= MAX_DETAILS, f"{len(details):,} characters: {details[:200]!r}..."
    assert wire_size(details) <= MAX_WIRE_DETAILS, f"{wire_size(details):,} bytes on the wire"


def _padded(world: World, size: int, fill: str) -> str:
    """A valid document of exactly ``size`` bytes of UTF-8: spaces after it
    (``fill`` " "), or a property value of ``fill`` characters."""
    doc = world.doc
    doc["name"] = f"{world.stream}-big"
    if fill == " ":
        text = json.dumps(doc)
        return text + " " * (size - len(text.encode()))
    props = doc["clusters"][world.cluster]["properties"]
    props["client.id"] = ""
    need = size - len(json.dumps(doc, ensure_ascii=False).encode())
    width = len(fill.encode())
    props["client.id"] = fill * (need // width) + "e" * (need % width)
    text = json.dumps(doc, ensure_ascii=False)
    assert len(text.encode()) == size
    return text


@pytest.mark.parametrize(
    ("size", "fill"),
    [(MIB, " "), (MIB, "\u00e9"), (MIB + 1, " "), (4 * MIB, " ")],
    ids=["1MiB-ascii", "1MiB-in-2-byte-chars", "1MiB+1", "4MiB"],
)
def test_document_of_1_mib_or_more_is_refused_naming_the_limit(
    channel: grpc.Channel, world: World, size: int, fill: str
) -> None:
    text = _padded(world, size, fill)
    if fill != " ":
        assert len(text) < MIB  # the limit counts bytes, not characters
    stub = admin_pb2_grpc.AdminStub(channel)
    code, details = _code(
        lambda: stub.PutStream(admin_pb2.PutStreamRequest(document_json=text), timeout=30)
    )
    _bounded_refusal(code, details)
    assert "1 MiB" in details


def _put_and_delete(channel: grpc.Channel, text: str) -> tuple[grpc.StatusCode, str]:
    stub = admin_pb2_grpc.AdminStub(channel)
    code, details = _code(
        lambda: stub.PutStream(admin_pb2.PutStreamRequest(document_json=text), timeout=30)
    )
    if code == grpc.StatusCode.OK:
        name = json.loads(text)["name"]
        stub.DeleteStream(admin_pb2.DeleteStreamRequest(name=name), timeout=30)
    return code, details


def test_document_one_byte_under_1_mib_is_accepted(channel: grpc.Channel, world: World) -> None:
    code, details = _put_and_delete(channel, _padded(world, MIB - 1, "x"))
    assert code == grpc.StatusCode.OK, details


def test_document_under_1_mib_of_non_ascii_text_is_accepted(
    channel: grpc.Channel, world: World
) -> None:
    """The limit counts the bytes sent; the document was stored as json.dumps'
    ASCII, where "\\u00e9" takes 6 bytes, 3 times its UTF-8. A document of
    1 MiB - 1 byte became 3 MiB, which etcd refused; the client saw
    UNAVAILABLE (retry) for a put that could never succeed."""
    code, details = _put_and_delete(channel, _padded(world, MIB - 1, "\u00e9"))
    assert code == grpc.StatusCode.OK, (code, details[:300])


def _huge_name_calls(world: World, name: str) -> dict[str, Callable[[grpc.Channel], object]]:
    doc = world.doc
    doc["name"] = name
    text = json.dumps(doc, ensure_ascii=False)
    return {
        "GetStream": lambda ch: admin_pb2_grpc.AdminStub(ch).GetStream(
            admin_pb2.GetStreamRequest(name=name), timeout=30
        ),
        "DeleteStream": lambda ch: admin_pb2_grpc.AdminStub(ch).DeleteStream(
            admin_pb2.DeleteStreamRequest(name=name), timeout=30
        ),
        "PutStream": lambda ch: admin_pb2_grpc.AdminStub(ch).PutStream(
            admin_pb2.PutStreamRequest(document_json=text), timeout=30
        ),
        "LatestOffsets": lambda ch: planner_pb2_grpc.PlannerStub(ch).LatestOffsets(
            planner_pb2.LatestOffsetsRequest(stream=name, query_id="q"), timeout=30
        ),
        "DrainCluster": lambda ch: admin_pb2_grpc.AdminStub(ch).DrainCluster(
            admin_pb2.ClusterRequest(stream=world.stream, cluster=name), timeout=30
        ),
    }


@pytest.mark.parametrize("char", ["x", "\u00e9", "\U0001f600"])
@pytest.mark.parametrize(
    "method", ["GetStream", "DeleteStream", "PutStream", "LatestOffsets", "DrainCluster"]
)
def test_name_of_100000_characters_is_refused_with_a_bounded_message(
    channel: grpc.Channel, world: World, method: str, char: str
) -> None:
    call = _huge_name_calls(world, char * 100_000)[method]
    code, details = _code(lambda: call(channel))
    _bounded_refusal(code, details)
    assert "128" in details


def test_query_id_of_300_characters_is_refused_naming_255(
    channel: grpc.Channel, world: World
) -> None:
    stub = planner_pb2_grpc.PlannerStub(channel)
    request = planner_pb2.CommitRequest(
        stream=world.stream, query_id="q" * 300, end=as_columns({world.split: 0})
    )
    code, details = _code(lambda: stub.Commit(request, timeout=30))
    _bounded_refusal(code, details)
    assert "255" in details


@pytest.mark.parametrize(
    ("key", "value", "accepted"),
    [
        ("k" * 100_000, "v", True),
        ("client.id", "v" * 100_000, True),
        ("sasl.password", "s" * 100_000, True),
        ("k" * 100_000 + ".password", "secret", True),
        ("bootstrap.servers", "b" * 100_000, False),
        ("k" * 100_000, ["not", "a", "scalar"], False),
    ],
    ids=["key", "value", "secret-value", "secret-key", "reserved-key", "key-bad-value"],
)
def test_100kb_property_is_refused_or_returned_redacted(
    channel: grpc.Channel, world: World, key: str, value: object, accepted: bool
) -> None:
    doc = world.doc
    doc["name"] = uid("props")
    doc["clusters"][world.cluster]["properties"][key] = value
    stub = admin_pb2_grpc.AdminStub(channel)
    put = admin_pb2.PutStreamRequest(document_json=json.dumps(doc))
    code, details = _code(lambda: stub.PutStream(put, timeout=30))
    if not accepted:
        _bounded_refusal(code, details)
        assert "properties" in details
        return
    assert code == grpc.StatusCode.OK, details[:300]
    try:
        got = json.loads(stub.GetStream(admin_pb2.GetStreamRequest(name=doc["name"])).document_json)
        props = got["clusters"][world.cluster]["properties"]
        secret = "password" in key
        assert props[key] == ("<redacted>" if secret else value)
    finally:
        stub.DeleteStream(admin_pb2.DeleteStreamRequest(name=doc["name"]), timeout=30)


# -- what the fuzz found: each docstring says what happened before the fix -----------------------


def _keys(thread: CoordinatorThread, under: str) -> dict[str, bytes]:
    """The stored keys (relative to the prefix) that start with ``under``."""
    return {k[1:]: v for k, (_, v) in stored(thread).items() if k[1:].startswith(under)}


@pytest.mark.parametrize(
    "doc",
    [
        {"name": "x", "\udc80": 1},
        {"name": "x", "clusters": {"\ud800": {}}},
        {"name": "x", "clusters": {"a": {"\udfff": 1}}},
        {
            "name": "x",
            "clusters": {
                "a": {"bootstrap_servers": "h:1", "topics": ["t"], "properties": {"\udc80": []}}
            },
        },
    ],
    ids=["stream-field", "cluster-id", "cluster-field", "property-key"],
)
def test_lone_surrogate_in_a_document_key_is_refused_not_left_unanswered(
    channel: grpc.Channel, doc: dict[str, Any]
) -> None:
    """The key landed in the error's field path unescaped; gRPC could not
    encode the message as UTF-8, context.abort failed, and no status was
    sent: the client waited until its deadline (forever without one)."""
    stub = admin_pb2_grpc.AdminStub(channel)
    put = admin_pb2.PutStreamRequest(document_json=json.dumps(doc))
    code, details = _code(lambda: stub.PutStream(put, timeout=2))
    _bounded_refusal(code, details)


@pytest.mark.parametrize(
    "text",
    ["[" * 100_000, '{"name": "x", "extra": ' + "[" * 2000 + "]" * 2000 + "}"],
    ids=["unclosed", "nested-2000"],
)
def test_deeply_nested_document_is_invalid_argument_not_internal(
    channel: grpc.Channel, text: str
) -> None:
    """json.loads raises RecursionError at about 1,000 levels; only
    ValueError was turned into a refusal (INTERNAL)."""
    stub = admin_pb2_grpc.AdminStub(channel)
    put = admin_pb2.PutStreamRequest(document_json=text)
    code, details = _code(lambda: stub.PutStream(put, timeout=30))
    _bounded_refusal(code, details)


@pytest.mark.parametrize("method", ["ResolveOffsets", "Failover"])
def test_non_ascii_echo_stays_within_grpc_metadata_limit(
    channel: grpc.Channel, world: World, method: str
) -> None:
    """Messages were cut to 1,000 characters, not bytes: 1,000 emoji are
    4,000 bytes, 12,000 once percent-encoded in grpc-message, over gRPC's
    8 KiB soft limit on received metadata, so the client saw
    RESOURCE_EXHAUSTED 'received metadata size exceeds soft limit' (at
    random: the soft limit drops a growing share of calls between 8 and
    16 KiB)."""
    emoji = "\U0001f600" * 3000
    if method == "ResolveOffsets":
        position = POSITION(
            kind=POSITION.SPECIFIC, offsets=as_columns({f"{emoji}/{world.topic}/0": 1})
        )
        request: Message = planner_pb2.ResolveOffsetsRequest(stream=world.stream, position=position)
        call = planner_pb2_grpc.PlannerStub(channel).ResolveOffsets
    else:
        request = admin_pb2.FailoverRequest(
            stream=world.stream,
            from_cluster=world.cluster,
            to_cluster=world.standby,
            strategy=emoji,
        )
        call = admin_pb2_grpc.AdminStub(channel).Failover
    outcomes = Counter()
    for _ in range(20):
        code, details = _code(lambda: call(request, timeout=30))
        outcomes[problem_of(code, details) or code.name] += 1
    assert outcomes == {"INVALID_ARGUMENT": 20}


def test_report_reads_for_a_stream_that_does_not_exist_is_refused(
    coordinator: CoordinatorThread, channel: grpc.Channel, world: World
) -> None:
    """ReportReads validated the stream's name but never looked it up: read
    marks of a stream that does not exist were kept and persisted."""
    ghost = uid("ghost")
    request = reader_pb2.ReportReadsRequest(
        agent_id="agent",
        stream=ghost,
        query_id="q",
        marks=[reader_pb2.ReadMark(split=world.split, last_offset=5)],
    )
    code, details = _code(
        lambda: reader_pb2_grpc.ReaderStub(channel).ReportReads(request, timeout=30)
    )
    stored_marks = _keys(coordinator, f"marks/{ghost}")
    assert (code.name, stored_marks) == ("NOT_FOUND", {}), details


@pytest.mark.parametrize("where", ["marks", "abandoned"])
def test_report_reads_refused_for_a_malformed_split_stores_nothing(
    coordinator: CoordinatorThread, channel: grpc.Channel, world: World, where: str
) -> None:
    """Splits were checked one at a time while they were applied: the valid
    entries before the malformed one were kept (read marks; abandoned
    ranges in the query's progress and the stream's history) although the
    call was refused."""
    query = uid("q")
    good, bad = world.split, "not-a-split"
    if where == "marks":
        request = reader_pb2.ReportReadsRequest(
            agent_id="agent",
            stream=world.stream,
            query_id=query,
            marks=[reader_pb2.ReadMark(split=good, last_offset=5), reader_pb2.ReadMark(split=bad)],
        )
    else:
        request = reader_pb2.ReportReadsRequest(
            agent_id="agent",
            stream=world.stream,
            query_id=query,
            abandoned=as_range_columns([(good, 0, 5), (bad, 0, 5)]),
        )
    code, details = _code(
        lambda: reader_pb2_grpc.ReaderStub(channel).ReportReads(request, timeout=30)
    )
    _bounded_refusal(code, details)
    if where == "marks":
        assert _keys(coordinator, f"marks/{world.stream}") == {}
        return
    history = admin_pb2_grpc.AdminStub(channel).StreamHistory(
        admin_pb2.StreamHistoryRequest(name=world.stream), timeout=30
    )
    abandoned = [e.detail for e in history.entries if e.kind == "abandoned"]
    assert (_keys(coordinator, f"queries/{query}"), abandoned) == ({}, [])


def test_latest_offsets_with_negative_max_records_is_refused(
    channel: grpc.Channel, world: World
) -> None:
    """max_records < 0 was taken as a budget: the backlog's shares came out
    negative and the end offset went below the start."""
    request = planner_pb2.LatestOffsetsRequest(
        stream=world.stream, query_id="q", start=as_columns({world.split: 0}), max_records=-7
    )
    stub = planner_pb2_grpc.PlannerStub(channel)
    plain = planner_pb2.LatestOffsetsRequest(
        stream=world.stream, query_id="q", start=as_columns({world.split: 0})
    )
    # There is a backlog to share out (20 records and a fence).
    eventually(lambda: as_offsets(stub.LatestOffsets(plain, timeout=30).end)[world.split] > 0)
    code, details = _code(lambda: stub.LatestOffsets(request, timeout=30))
    _bounded_refusal(code, details)


@pytest.mark.parametrize("method", ["LatestOffsets", "ResolveOffsets"])
def test_an_unknown_isolation_level_is_refused(
    channel: grpc.Channel, world: World, method: str
) -> None:
    stub = planner_pb2_grpc.PlannerStub(channel)
    if method == "LatestOffsets":
        request: Any = planner_pb2.LatestOffsetsRequest(
            stream=world.stream,
            query_id="q",
            start=as_columns({world.split: 0}),
            isolation_level="read_sometimes",
        )
    else:
        request = planner_pb2.ResolveOffsetsRequest(
            stream=world.stream, isolation_level="READ_COMMITTED"
        )
    code, details = _code(lambda: getattr(stub, method)(request, timeout=30))
    _bounded_refusal(code, details)
    assert "isolation_level" in details
    assert "read_committed or read_uncommitted" in details


@pytest.mark.parametrize(
    "cap", [{"not-a-split": 5}, {"east/t/0": -3}], ids=["bad-split", "negative"]
)
def test_latest_offsets_with_malformed_cap_is_refused(
    channel: grpc.Channel, world: World, cap: dict[str, int]
) -> None:
    """start was parsed and checked; cap was used as given."""
    cap = {k.replace("east/t/", f"{world.cluster}/{world.topic}/"): v for k, v in cap.items()}
    request = planner_pb2.LatestOffsetsRequest(
        stream=world.stream, query_id="q", start=as_columns({world.split: 0}), cap=as_columns(cap)
    )
    code, details = _code(
        lambda: planner_pb2_grpc.PlannerStub(channel).LatestOffsets(request, timeout=30)
    )
    _bounded_refusal(code, details)


def test_resolve_offsets_negative_timestamp_is_refused_and_harms_nothing(
    channel: grpc.Channel, world: World
) -> None:
    """A TIMESTAMP position with timestamp_ms < 0 went to Kafka as is; the
    broker's error marked the (healthy) cluster unreachable, so for the
    backoff the stream's splits were left out of every resolved position
    and no batch planned a range on it."""
    planner = planner_pb2_grpc.PlannerStub(channel)
    admin = admin_pb2_grpc.AdminStub(channel)
    earliest = planner_pb2.ResolveOffsetsRequest(
        stream=world.stream, position=POSITION(kind=POSITION.EARLIEST)
    )
    eventually(
        lambda: world.split in as_offsets(planner.ResolveOffsets(earliest, timeout=30).offsets)
    )
    bad = planner_pb2.ResolveOffsetsRequest(
        stream=world.stream, position=POSITION(kind=POSITION.TIMESTAMP, timestamp_ms=-100)
    )
    code, details = _code(lambda: planner.ResolveOffsets(bad, timeout=30))
    status = {
        c.cluster: (c.reachable, c.error)
        for c in admin.GetStream(admin_pb2.GetStreamRequest(name=world.stream)).clusters
    }
    after = as_offsets(planner.ResolveOffsets(earliest, timeout=30).offsets)
    assert (code.name, status[world.cluster][0], after) == (
        "INVALID_ARGUMENT",
        True,
        {world.split: 0},
    ), f"details {details!r}; cluster status {status[world.cluster]}"


def test_commit_with_empty_query_id_is_refused(
    coordinator: CoordinatorThread, channel: grpc.Channel, world: World
) -> None:
    """validate_id allowed "": the progress was stored at '<prefix>/queries/'."""
    request = planner_pb2.CommitRequest(
        stream=world.stream, query_id="", end=as_columns({world.split: 0})
    )
    code, details = _code(lambda: planner_pb2_grpc.PlannerStub(channel).Commit(request, timeout=30))
    kept = {k: v for k, v in _keys(coordinator, "queries/").items() if k == "queries/"}
    assert (code.name, kept) == ("INVALID_ARGUMENT", {}), details


def test_put_stream_with_negative_expected_version_is_invalid_argument(
    channel: grpc.Channel, world: World
) -> None:
    """expected_version < 0 went to etcd as a revision to compare with: the
    refusal was ABORTED 'changed concurrently', which tells a client to retry."""
    doc = world.doc
    doc["name"] = uid("version")
    put = admin_pb2.PutStreamRequest(document_json=json.dumps(doc), expected_version=-1)
    code, details = _code(lambda: admin_pb2_grpc.AdminStub(channel).PutStream(put, timeout=30))
    _bounded_refusal(code, details)


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("/multikafka.v1.Admin/GetStream", b"\x0a\x02\xc3\x28"),
        ("/multikafka.v1.Admin/PutStream", b"\x0a\x03\xff\xfe{"),
        ("/multikafka.v1.Admin/PutStream", b"\xff\xff\xff"),
    ],
    ids=["name-not-utf8", "document-not-utf8", "not-protobuf"],
)
def test_request_bytes_that_do_not_parse_are_invalid_argument(
    channel: grpc.Channel, path: str, raw: bytes
) -> None:
    """A request whose string field is not UTF-8 (or that is not protobuf at
    all) fails in grpcio's deserializer, before the service: it was UNKNOWN
    "Unexpected <class 'google.protobuf.message.DecodeError'>..."."""
    call = channel.unary_unary(path, request_serializer=bytes, response_deserializer=bytes)
    code, details = _code(lambda: call(raw, timeout=30))
    _bounded_refusal(code, details)


@pytest.mark.parametrize(
    "sizes",
    [{"min_partitions": -5}, {"max_records_per_partition": -1}],
    ids=["min_partitions", "max_records_per_partition"],
)
def test_plan_partitions_negative_sizes_are_refused(
    channel: grpc.Channel, world: World, sizes: dict[str, int]
) -> None:
    request = planner_pb2.PlanPartitionsRequest(
        stream=world.stream,
        query_id="q",
        start=as_columns({world.split: 0}),
        end=as_columns({world.split: 10}),
        **sizes,
    )
    code, details = _code(
        lambda: planner_pb2_grpc.PlannerStub(channel).PlanPartitions(request, timeout=30)
    )
    _bounded_refusal(code, details)


def test_stream_history_negative_limit_is_refused(channel: grpc.Channel, world: World) -> None:
    request = admin_pb2.StreamHistoryRequest(name=world.stream, limit=-1)
    code, details = _code(
        lambda: admin_pb2_grpc.AdminStub(channel).StreamHistory(request, timeout=30)
    )
    _bounded_refusal(code, details)


@pytest.mark.parametrize(
    "defect",
    [
        {"starting": {"timestamp": 10**30}},
        {"auto_failover": {"standby": "west", "unreachable_after_ms": 10**30}},
        {"auto_failover": {"standby": "west", "unreachable_after": "1s", "margin_ms": 10**30}},
    ],
    ids=["starting-timestamp", "unreachable_after_ms", "margin_ms"],
)
def test_document_numbers_beyond_int64_are_refused(
    channel: grpc.Channel, world: World, defect: dict[str, Any]
) -> None:
    """Times and durations are int64 milliseconds everywhere else (the
    protos, Kafka); the document took any JSON integer and stored it."""
    doc = world.doc
    doc["name"] = uid("int64")
    if "starting" in defect:
        doc["clusters"][world.cluster].update(defect)
    else:
        doc.update(defect)
    stub = admin_pb2_grpc.AdminStub(channel)
    put = admin_pb2.PutStreamRequest(document_json=json.dumps(doc))
    code, details = _code(lambda: stub.PutStream(put, timeout=30))
    if code == grpc.StatusCode.OK:
        stub.DeleteStream(admin_pb2.DeleteStreamRequest(name=doc["name"]), timeout=30)
    _bounded_refusal(code, details)


def test_request_over_8_mib_is_refused_by_grpc_before_the_service(
    channel: grpc.Channel, world: World
) -> None:
    """The server reads at most 8 MiB of a request (MAX_REQUEST_BYTES): a
    larger one is RESOURCE_EXHAUSTED from gRPC itself, naming both sizes,
    and the coordinator never holds it in memory."""
    text = _padded(world, 9 * MIB, " ")
    put = admin_pb2.PutStreamRequest(document_json=text)
    code, details = _code(lambda: admin_pb2_grpc.AdminStub(channel).PutStream(put, timeout=30))
    _bounded_refusal(code, details, "RESOURCE_EXHAUSTED")
    assert f"vs. {MAX_REQUEST_BYTES}" in details


def test_lone_surrogate_in_a_property_key_is_refused_and_the_coordinator_lives(
    etcd_url: str, kafka: KafkaClusters, tmp_path: Path
) -> None:
    """A property key that is not text (a lone surrogate, escaped in JSON)
    passed validation; building the cluster's metadata client then
    segfaulted inside confluent_kafka (multikafka_core/providers/kafka.py,
    KafkaMetadataClient). The document was stored first, so a restarted
    coordinator loaded it and crashed again. Run in a process of its own:
    in this one a relapse would end the test run."""
    (cluster,) = kafka.shared(1)
    prefix = f"/multikafka-test/{uid('crash')}"
    proc = CoordinatorProcess(
        tmp_path, "surrogate-key", etcd=etcd_url, prefix=prefix, lease_ttl_s=2.0
    ).start()
    try:
        eventually(proc.is_leader)
        name = uid("crash")
        doc = stream_doc(name, {"east": (cluster.bootstrap, ["orders"])})
        doc["clusters"]["east"]["properties"]["\udc80"] = "x"
        put = admin_pb2.PutStreamRequest(document_json=json.dumps(doc))
        with grpc.insecure_channel(proc.address) as ch:
            stub = admin_pb2_grpc.AdminStub(ch)
            code, details = _code(lambda: stub.PutStream(put, timeout=30))
            _bounded_refusal(code, details)
            assert "\\udc80" in details  # escaped, naming the key
            # Nothing was stored, so no client is ever built from it.
            get = admin_pb2.GetStreamRequest(name=name)
            assert _code(lambda: stub.GetStream(get, timeout=30))[0].name == "NOT_FOUND"
        assert proc.process.alive()
    finally:
        proc.stop()


def _fresh_doc(world: World, prefix: str) -> dict[str, Any]:
    doc = world.doc
    doc["name"] = uid(prefix)
    return doc


@pytest.mark.parametrize("stored", [False, True], ids=["new-stream", "stored-stream"])
def test_redacted_marker_without_a_stored_secret_is_refused(
    channel: grpc.Channel, world: World, stored: bool
) -> None:
    """'<redacted>' means "keep the stored value"; for a key the stored
    cluster did not have, merged_over (multikafka_core/_secrets.py) kept
    the marker itself, and '<redacted>' was stored as the password."""
    stub = admin_pb2_grpc.AdminStub(channel)
    doc = _fresh_doc(world, "redacted")
    if stored:
        stub.PutStream(admin_pb2.PutStreamRequest(document_json=json.dumps(doc)), timeout=30)
    try:
        doc["clusters"][world.cluster]["properties"]["sasl.password"] = REDACTED
        put = admin_pb2.PutStreamRequest(document_json=json.dumps(doc))
        code, details = _code(lambda: stub.PutStream(put, timeout=30))
        _bounded_refusal(code, details)
        assert "no stored value to keep" in details
    finally:
        with contextlib.suppress(grpc.RpcError):
            stub.DeleteStream(admin_pb2.DeleteStreamRequest(name=doc["name"]), timeout=30)


def test_lone_surrogate_in_a_property_value_is_refused(channel: grpc.Channel, world: World) -> None:
    """A value that is not text was stored; building the cluster's client
    then failed (SystemError in confluent_kafka), so the cluster stayed
    unreachable."""
    doc = _fresh_doc(world, "surrogate-value")
    doc["clusters"][world.cluster]["properties"]["client.id"] = "\udc80"
    code, details = _put_and_delete(channel, json.dumps(doc))
    _bounded_refusal(code, details)
