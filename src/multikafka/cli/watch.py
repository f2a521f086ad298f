"""``multikafka admin streams watch NAME``: a live view of one stream.

Every refresh reads the Admin API (the same calls, token and redaction as
the other admin commands; no document properties are shown): the stream's
clusters (state, reachability, partitions, records read, lag), its history
(the last reconcile, the last failover or drain), the queries reading it and
the reader agents holding it. Records per second come from the counters of
successive refreshes (:class:`Meter`), so the first frame has none.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import click
from google.protobuf.message import Message
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from multikafka.core.admin_client import AdminClient
from multikafka.core.exceptions import MultikafkaError
from multikafka.v1 import admin_pb2, common_pb2

#: History kinds that change which clusters are read.
CHANGES = frozenset({"failover", "auto-failover", "drain", "drain-complete", "fail", "activate"})
_STATE_STYLE = {"ACTIVE": "green", "STANDBY": "cyan", "DRAINING": "yellow", "FAILED": "red"}


@dataclass(frozen=True)
class Snapshot:
    """What one refresh read about stream ``name``."""

    name: str
    #: ``time.monotonic()`` and wall time (ms) of the refresh.
    at: float
    time_ms: int
    info: admin_pb2.StreamInfo
    history: list[admin_pb2.HistoryEntry]
    #: The queries of this stream.
    queries: list[admin_pb2.QueryInfo]
    #: Agents with a sub-reader of this stream or holding some of its splits.
    readers: list[admin_pb2.ReaderInfo]
    #: agent -> split ids it holds (None: not known, see ``notes``).
    assignments: dict[str, list[str]] | None
    status: admin_pb2.StatusResponse | None
    #: What could not be read this time.
    notes: list[str] = field(default_factory=list)

    def last(self, kinds: Iterable[str]) -> admin_pb2.HistoryEntry | None:
        wanted = frozenset(kinds)
        return next((e for e in reversed(self.history) if e.kind in wanted), None)


def take(client: AdminClient, name: str, clock: Callable[[], float] = time.monotonic) -> Snapshot:
    """Read one snapshot. The stream itself must be readable (its errors
    raise); the rest is shown as unknown when its call fails."""
    info = client.get_stream(name)
    notes: list[str] = []

    def optional(what: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except MultikafkaError as exc:
            notes.append(f"{what}: {exc}")
            return None

    history = optional("history", lambda: client.history(name)) or []
    queries = [q for q in optional("queries", client.queries) or [] if q.stream == name]
    held = optional("assignments", lambda: client.assignments(name))
    assignments = None if held is None else {a.agent_id: list(a.splits) for a in held}
    mine = f"{name}/"
    readers = [
        r
        for r in optional("readers", client.readers) or []
        if any(s.startswith(mine) for s in r.sub_readers) or r.agent_id in (assignments or {})
    ]
    status = optional("coordinator status", client.status)
    return Snapshot(
        name,
        clock(),
        int(time.time() * 1000),
        info,
        list(history),
        queries,
        readers,
        assignments,
        status,
        notes,
    )


class Meter:
    """Records per second over the snapshots of the last ``window_s``
    seconds (agents report what they read with their heartbeats, every few
    seconds: a longer window than one refresh evens that out)."""

    def __init__(self, window_s: float = 10.0) -> None:
        self.window_s = window_s
        self._snaps: deque[Snapshot] = deque()

    def add(self, snap: Snapshot) -> None:
        self._snaps.append(snap)
        # keep the newest one older than the window: the rate spans it
        while len(self._snaps) > 2 and snap.at - self._snaps[1].at >= self.window_s:
            self._snaps.popleft()

    def read_rates(self) -> dict[str, float]:
        """Records per second read from each cluster (by reader agents)."""
        if len(self._snaps) < 2:
            return {}
        first, last = self._snaps[0], self._snaps[-1]
        span = last.at - first.at
        before = {c.cluster: c.records_read for c in first.info.clusters}
        out: dict[str, float] = {}
        for c in last.info.clusters:
            start = before.get(c.cluster)
            # a counter that went back: another coordinator answers now
            if span > 0 and start is not None and c.records_read >= start:
                out[c.cluster] = (c.records_read - start) / span
        return out

    def commit_rates(self) -> dict[str, float]:
        """Records per second each query committed (offsets that moved
        forward, split by split: splits that join or leave do not count)."""
        if len(self._snaps) < 2:
            return {}
        moved: dict[str, int] = {}
        snaps = list(self._snaps)
        for older, newer in pairwise(snaps):
            was = {q.query_id: q.offsets for q in older.queries}
            for q in newer.queries:
                prev = was.get(q.query_id)
                if prev is None:
                    continue
                moved[q.query_id] = moved.get(q.query_id, 0) + sum(
                    max(off - prev[s], 0) for s, off in q.offsets.items() if s in prev
                )
        span = snaps[-1].at - snaps[0].at
        return {q: n / span for q, n in moved.items()} if span > 0 else {}


def _clock(ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ms / 1000))


def _ago(ms: int, now_ms: int) -> str:
    s = max(int((now_ms - ms) / 1000), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60}s"
    return f"{s // 3600}h {s % 3600 // 60}m"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _bootstraps(info: admin_pb2.StreamInfo) -> dict[str, str]:
    """cluster -> bootstrap servers, from the (redacted) document."""
    try:
        clusters = json.loads(info.document_json).get("clusters", {})
        return {c: str(v.get("bootstrap_servers", "")) for c, v in clusters.items()}
    except (ValueError, AttributeError):
        return {}


def render(
    snap: Snapshot,
    meter: Meter,
    *,
    interval_s: float | None = None,
    error: str = "",
) -> RenderableType:
    """One frame: ``interval_s`` None for a single frame (``--once``);
    ``error``: why the last refresh failed (the frame shows the last good one)."""
    info, now = snap.info, snap.time_ms
    head = Text.assemble(
        ("stream ", "bold"),
        (info.name, "bold"),
        f"  generation {info.generation} (document version {info.version})",
    )
    if snap.status is not None:
        s = snap.status
        role = s.role + ("" if s.role == "leader" else f"; leader {s.leader or 'none'}")
        head.append(f"  coordinator {s.address} ({role})")
    head.append(f"  at {_clock(now)}")
    if interval_s is not None:
        head.append(f", every {interval_s:g}s (Ctrl-C stops)", style="dim")
    parts: list[RenderableType] = [head]
    if error:
        parts.append(Text(f"refresh failed: {error}; showing {_clock(now)}", style="red"))

    reads = meter.read_rates()
    bootstraps = _bootstraps(info)
    table = Table(title="clusters", title_justify="left", expand=False)
    for col in ("cluster", "state", "reachable", "partitions", "records read"):
        table.add_column(col, justify="right" if col in ("partitions", "records read") else "left")
    for col in ("records/s", "lag"):
        table.add_column(col, justify="right")
    table.add_column("note")
    for c in info.clusters:
        if c.reachable:
            reachable = Text("yes", style="green")
        elif c.unreachable_since_ms:
            reachable = Text(f"no, {_ago(c.unreachable_since_ms, now)}", style="red")
        else:
            reachable = Text("no", style="red")
        note = c.error if not c.reachable else ""
        if c.drain_offsets:
            note = f"draining to end offsets of {len(c.drain_offsets)} splits" + (
                f"; {note}" if note else ""
            )
        name = c.cluster + (f" ({bootstraps[c.cluster]})" if bootstraps.get(c.cluster) else "")
        table.add_row(
            name,
            Text(state := common_pb2.ClusterState.Name(c.state), style=_STATE_STYLE.get(state, "")),
            reachable,
            f"{c.partitions:,}",
            f"{c.records_read:,}",
            _rate(reads.get(c.cluster)),
            f"{c.lag_records:,}" if c.HasField("lag_records") else "-",
            note,
        )
    parts.append(table)

    for label, kinds in (("last reconcile", {"reconcile"}), ("last failover/drain", CHANGES)):
        e = snap.last(kinds)
        if e is None:
            parts.append(Text(f"{label}: none in the history", style="dim"))
            continue
        what = f"generation {e.generation}" if e.kind == "reconcile" else e.kind
        where = f" of {e.cluster}" if e.cluster else ""
        parts.append(
            Text.assemble(
                (f"{label}: ", "bold"),
                f"{what}{where} at {_clock(e.time_ms)} ({_ago(e.time_ms, now)} ago)",
                (f": {e.detail}" if e.detail else "", "dim"),
            )
        )

    commits = meter.commit_rates()
    if snap.queries:
        qt = Table(title="queries reading it", title_justify="left")
        for col in ("query", "splits", "records committed", "records/s", "last commit"):
            qt.add_column(col, justify="left" if col in ("query", "last commit") else "right")
        for q in snap.queries:
            qt.add_row(
                q.query_id,
                f"{len(q.offsets):,}",
                f"{sum(q.offsets.values()):,}",
                _rate(commits.get(q.query_id)),
                f"{_ago(q.updated_ms, now)} ago" if q.updated_ms else "-",
            )
        parts.append(qt)
    else:
        parts.append(Text("queries reading it: none", style="dim"))

    if snap.readers:
        rt = Table(title="reader agents", title_justify="left")
        for col in ("agent", "host:pid", "generation", "clusters open", "splits held", "heartbeat"):
            rt.add_column(col, justify="right" if col in ("generation", "splits held") else "left")
        mine = f"{snap.name}/"
        for r in snap.readers:
            held = None if snap.assignments is None else snap.assignments.get(r.agent_id, [])
            rt.add_row(
                r.agent_id,
                f"{r.host}:{r.pid}",
                str(r.applied_generation),
                ", ".join(s[len(mine) :] for s in r.sub_readers if s.startswith(mine)),
                "?" if held is None else f"{len(held):,}",
                f"{_ago(r.last_heartbeat_ms, now)} ago" if r.last_heartbeat_ms else "-",
            )
        parts.append(rt)
    else:
        parts.append(Text("reader agents: none reads it", style="dim"))
    parts.extend(Text(f"unknown: {n}", style="yellow") for n in snap.notes)
    return Group(*parts)


def snapshot_json(snap: Snapshot, meter: Meter, as_dict: Callable[[Message], Any]) -> str:
    """One snapshot as one line of JSON (``as_dict``: a message's JSON form)."""
    reads, commits = meter.read_rates(), meter.commit_rates()
    last_reconcile, last_change = snap.last({"reconcile"}), snap.last(CHANGES)
    data = {
        "time_ms": snap.time_ms,
        "stream": as_dict(snap.info),
        "records_per_s": {c.cluster: reads.get(c.cluster) for c in snap.info.clusters},
        "last_reconcile": as_dict(last_reconcile) if last_reconcile is not None else None,
        "last_change": as_dict(last_change) if last_change is not None else None,
        "queries": [{**as_dict(q), "records_per_s": commits.get(q.query_id)} for q in snap.queries],
        "readers": [
            {
                **as_dict(r),
                "splits": None
                if snap.assignments is None
                else snap.assignments.get(r.agent_id, []),
            }
            for r in snap.readers
        ],
        "coordinator": as_dict(snap.status) if snap.status is not None else None,
        "unknown": snap.notes,
    }
    return json.dumps(data, sort_keys=True)


def watch(
    client: AdminClient,
    name: str,
    *,
    interval_s: float,
    once: bool,
    console: Console,
    as_dict: Callable[[Message], Any] | None = None,
) -> None:
    """Show stream ``name`` until Ctrl-C (or one frame with ``once``); with
    ``as_dict``, as JSON lines instead. The first read's errors raise; later
    ones are shown and the next refresh tries again."""
    meter = Meter(max(10.0, 3 * interval_s))
    snap = take(client, name)
    meter.add(snap)

    def refresh() -> str:
        nonlocal snap
        try:
            snap = take(client, name)
        except MultikafkaError as exc:
            return str(exc)
        meter.add(snap)
        return ""

    try:
        if as_dict is not None:
            click.echo(snapshot_json(snap, meter, as_dict))
            while not once:
                time.sleep(interval_s)
                error = refresh()
                click.echo(
                    json.dumps({"error": error}) if error else snapshot_json(snap, meter, as_dict)
                )
            return
        if once:
            console.print(render(snap, meter))
            return
        with Live(
            render(snap, meter, interval_s=interval_s), console=console, auto_refresh=False
        ) as live:
            while True:
                time.sleep(interval_s)
                error = refresh()
                live.update(render(snap, meter, interval_s=interval_s, error=error), refresh=True)
    except KeyboardInterrupt:
        return
