"""``multikafka admin``: ``--json`` before or after every command, and the
frames of ``streams watch`` (records per second from successive snapshots,
what a frame shows), from hand-made Admin API answers."""

from __future__ import annotations

import json

import click
from rich.console import Console

from multikafka.cli.admin_cmd import admin_group
from multikafka.cli.watch import Meter, Snapshot, render, snapshot_json
from multikafka.v1 import admin_pb2

INTERNALS = (
    "multikafka.cli.admin_cmd",
    "multikafka.cli.watch",
)


NOW_MS = 1_700_000_000_000


def _leaves(group: click.Group, path: str = "admin") -> list[tuple[str, click.Command]]:
    out = []
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            out += _leaves(cmd, f"{path} {name}")
        else:
            out.append((f"{path} {name}", cmd))
    return out


def test_every_admin_command_takes_json_after_its_name() -> None:
    leaves = _leaves(admin_group)
    assert {"admin streams get", "admin streams watch", "admin cluster drain"} <= {
        p for p, _ in leaves
    }
    for path, cmd in leaves:
        assert "--json" in [o for p in cmd.params for o in getattr(p, "opts", [])], path
    assert "--json" in [o for p in admin_group.params for o in getattr(p, "opts", [])]


def _snapshot(at: float, read_a: int, committed: dict[str, int], *, lag: bool = True) -> Snapshot:
    a = admin_pb2.ClusterStatus(
        cluster="east",
        state="ACTIVE",
        reachable=True,
        partitions=3,
        records_read=read_a,
        records_planned=read_a,
    )
    if lag:
        a.lag_records = 1234
    b = admin_pb2.ClusterStatus(
        cluster="west",
        state="FAILED",
        reachable=False,
        error="cluster west: metadata: Local: Broker transport failure",
        partitions=3,
        unreachable_since_ms=NOW_MS - 95_000,
    )
    doc = {
        "name": "orders",
        "clusters": {
            "east": {"bootstrap_servers": "e:9092", "properties": {"sasl.password": "<redacted>"}},
            "west": {"bootstrap_servers": "w:9092"},
        },
    }
    info = admin_pb2.StreamInfo(
        name="orders", document_json=json.dumps(doc), version=7, generation=9, clusters=[a, b]
    )
    history = [
        admin_pb2.HistoryEntry(
            time_ms=NOW_MS - 60_000, generation=8, kind="reconcile", detail="west: added"
        ),
        admin_pb2.HistoryEntry(
            time_ms=NOW_MS - 30_000,
            generation=9,
            kind="failover",
            cluster="west",
            detail="west -> east, strategy timestamp",
        ),
        admin_pb2.HistoryEntry(time_ms=NOW_MS - 20_000, generation=9, kind="retired"),
    ]
    query = admin_pb2.QueryInfo(
        query_id="q-1", stream="orders", offsets=committed, updated_ms=NOW_MS - 2_000
    )
    reader = admin_pb2.ReaderInfo(
        agent_id="agent-1",
        host="h",
        pid=42,
        applied_generation=9,
        last_heartbeat_ms=NOW_MS - 1_000,
        sub_readers=["orders/east", "other/east"],
    )
    status = admin_pb2.StatusResponse(role="leader", address="c:7070", leader="c:7070")
    return Snapshot(
        "orders",
        at,
        NOW_MS,
        info,
        history,
        [query],
        [reader],
        {"agent-1": ["east/t/0", "east/t/1"]},
        status,
    )


def test_rates_come_from_successive_snapshots() -> None:
    meter = Meter(window_s=10.0)
    meter.add(_snapshot(100.0, 1_000, {"east/t/0": 10, "east/t/1": 10}))
    assert meter.read_rates() == {}
    assert meter.commit_rates() == {}
    meter.add(_snapshot(102.0, 3_000, {"east/t/0": 1010, "east/t/1": 10}))
    assert meter.read_rates() == {"east": 1000.0, "west": 0.0}
    assert meter.commit_rates() == {"q-1": 500.0}
    # a split that joins (a failover's translated start) is no progress
    meter.add(_snapshot(104.0, 5_000, {"east/t/0": 1010, "east/t/1": 1010, "west/t/0": 9999}))
    assert meter.read_rates() == {"east": 1000.0, "west": 0.0}
    assert meter.commit_rates() == {"q-1": 500.0}
    # the window moves on; a counter that went back (another leader) has no rate
    for at in (106.0, 108.0, 110.0, 112.0, 114.0):
        meter.add(_snapshot(at, 5_000, {"east/t/0": 1010}))
    assert meter.read_rates()["east"] == 0.0
    meter.add(_snapshot(116.0, 10, {"east/t/0": 1010}))
    assert "east" not in meter.read_rates()


def _text(snap: Snapshot, meter: Meter, **kw: object) -> str:
    console = Console(width=160, record=True, color_system=None)
    console.print(render(snap, meter, **kw))  # type: ignore[arg-type]
    return console.export_text()


def test_a_frame_shows_clusters_history_queries_and_agents() -> None:
    meter = Meter()
    meter.add(_snapshot(100.0, 1_000, {"east/t/0": 10}))
    meter.add(_snapshot(102.0, 3_000, {"east/t/0": 1010}))
    text = _text(_snapshot(102.0, 3_000, {"east/t/0": 1010}), meter, interval_s=2.0)
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}
    east = [cell.strip() for cell in rows["east (e:9092)"].split("│")][1:-1]
    assert east == ["east (e:9092)", "ACTIVE", "yes", "3", "3,000", "1,000", "1,234", ""]
    west = [cell.strip() for cell in rows["west (w:9092)"].split("│")][1:-1]
    assert west[1:4] == ["FAILED", "no, 1m 35s", "3"]
    assert west[6] == "-"
    assert "Broker transport failure" in west[7]
    assert "stream orders  generation 9 (document version 7)" in text
    assert "coordinator c:7070 (leader)" in text
    assert "every 2s (Ctrl-C stops)" in text
    assert "last reconcile: generation 8 at" in text
    assert "(1m 0s ago)" in text
    assert "last failover/drain: failover of west at" in text
    query = [cell.strip() for cell in rows["q-1"].split("│")][1:-1]
    assert query == ["q-1", "1", "1,010", "500", "2s ago"]
    agent = [cell.strip() for cell in rows["agent-1"].split("│")][1:-1]
    assert agent == ["agent-1", "h:42", "9", "east", "2", "1s ago"]
    assert "redacted" not in text  # no properties at all


def test_a_single_frame_a_failed_refresh_and_json() -> None:
    meter = Meter()
    snap = _snapshot(100.0, 1_000, {"east/t/0": 10}, lag=False)
    meter.add(snap)
    text = _text(snap, meter, error="coordinator unreachable")
    assert "Ctrl-C" not in text
    assert "refresh failed: coordinator unreachable" in text
    east = next(line for line in text.splitlines() if "east (e:9092)" in line)
    assert [c.strip() for c in east.split("│")][6:8] == ["-", "-"]  # no rate, no lag

    def as_dict(m: object) -> object:
        from google.protobuf.json_format import MessageToDict

        return MessageToDict(m, preserving_proto_field_name=True)  # type: ignore[arg-type]

    data = json.loads(snapshot_json(snap, meter, as_dict))
    assert data["records_per_s"] == {"east": None, "west": None}
    assert data["last_change"]["kind"] == "failover"
    assert data["last_reconcile"]["generation"] == "8"
    assert data["readers"][0]["splits"] == ["east/t/0", "east/t/1"]
    assert data["queries"][0]["query_id"] == "q-1"
