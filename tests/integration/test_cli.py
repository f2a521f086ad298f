"""The ``multikafka`` command line against a running coordinator, and the
coordinator's Prometheus endpoint."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from multikafka.core.admin_client import AdminClient
from multikafka.core.planner_client import PlannerClient
from multikafka.devstack import CoordinatorThread, free_port
from multikafka.devstack.feed import create_topics
from multikafka.reader_agent import ReaderAgent, ReadOptions
from multikafka.reader_agent import _arrow as arrow
from multikafka.reader_agent._plan import tasks_from_plan
from multikafka.v1 import planner_pb2
from tests.conftest import KafkaClusters
from tests.helpers import (
    eventually,
    produce_sequence,
    run_admin_cli,
    seeded_stream,
    stream_doc,
    uid,
)

INTERNALS = (
    "multikafka.reader_agent._arrow",
    "multikafka.reader_agent._plan",
)


pytestmark = pytest.mark.integration


def _admin(
    coordinator: CoordinatorThread, *args: str, token_file: Path | None = None
) -> tuple[int, str]:
    argv = ["--coordinator", coordinator.address]
    if token_file is not None:
        argv += ["--token-file", str(token_file)]
    result = run_admin_cli([*argv, *args])
    # JSON and tables go to stdout, errors to stderr.
    return result.exit_code, result.stdout if result.exit_code == 0 else result.stderr


def test_streams_put_get_list_history_delete(
    coordinator: CoordinatorThread, kafka: KafkaClusters, tmp_path: Path
) -> None:
    a, b = kafka.shared(2)
    name = uid("cli")
    doc = stream_doc(
        name, {"east": (a.bootstrap, ["orders"]), "west": (b.bootstrap, ["orders", "orders-eu"])}
    )
    doc["clusters"]["east"]["properties"]["sasl.password"] = "p4ss"
    path = tmp_path / "stream.json"
    path.write_text(json.dumps(doc))

    code, out = _admin(coordinator, "--json", "streams", "put", "--file", str(path))
    assert code == 0, out
    info = json.loads(out)
    assert info["name"] == name
    assert info["document"]["clusters"]["east"]["properties"]["sasl.password"] == "<redacted>"
    assert "p4ss" not in out

    code, out = _admin(coordinator, "--json", "streams", "get", name)
    assert code == 0
    assert {c["cluster"]: c["state"] for c in json.loads(out)["clusters"]} == {
        "east": "ACTIVE",
        "west": "ACTIVE",
    }

    code, out = _admin(coordinator, "streams", "get", name)  # human form
    assert code == 0
    assert name in out
    assert "ACTIVE" in out

    code, out = _admin(coordinator, "--json", "streams", "list")
    assert name in {s["name"] for s in json.loads(out)}

    code, out = _admin(coordinator, "--json", "streams", "history", name)
    assert code == 0
    assert json.loads(out)[0]["kind"] == "reconcile"

    code, out = _admin(coordinator, "streams", "delete", name)
    assert code == 0
    code, out = _admin(coordinator, "streams", "get", name)
    assert code == 1
    assert "does not exist" in out


def test_invalid_document_exits_non_zero_naming_the_field(
    coordinator: CoordinatorThread, kafka: KafkaClusters, tmp_path: Path
) -> None:
    (a,) = kafka.shared(1)
    doc = stream_doc(uid("bad"), {"east": (a.bootstrap, ["orders"])})
    del doc["clusters"]["east"]["bootstrap_servers"]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    code, out = _admin(coordinator, "streams", "put", "--file", str(path))
    assert code == 1
    assert "clusters.east.bootstrap_servers: required" in out


def test_failover_dry_run_shows_where_each_query_would_start_and_changes_nothing(
    coordinator: CoordinatorThread, kafka: KafkaClusters
) -> None:
    """A query (the standalone reader) read 300 records of each of a's two
    partitions; b holds the same records (same keys, values and times)
    after 100 of its own. The dry run answers, per partition, the mirror's
    copy of the record after the last one read, matched from the timestamp
    estimate on; the stream stays as it was."""
    from multikafka import Reader
    from multikafka.devstack.feed import SequenceProducer

    a, b = kafka.shared(2)
    topic = uid("dry")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 2})
    produce_sequence(b.bootstrap, topic, 2, "own", range(200))  # and a fence per partition
    for c in (a, b):
        # the same records on both; the last one per partition in a batch
        # of its own (tansu's high watermark is then right)
        for seqs, batched in ((range(600), True), (range(600, 602), False)):
            producer = SequenceProducer(c.bootstrap, batched=batched)
            producer.produce(topic, 2, "r", seqs, timestamp_ms=1_700_000_000_000)
            producer.flush()
            producer.close()
    name = uid("dry")
    doc = stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])})
    doc["clusters"]["b"]["state"] = "STANDBY"
    AdminClient(coordinator.address).put_stream(doc)
    with Reader(coordinator.address, name, starting_offsets="earliest", query_id="dry-q") as r:
        read = 0
        for batch in r.batches(idle_timeout_s=5):
            read += batch.num_rows
        r.commit()
        position = r.offsets["a"][topic]
    assert read == 602
    assert position == [301, 301]
    hw_before = {e.kind for e in AdminClient(coordinator.address).history(name)}

    def dry_run() -> dict[str, object]:
        code, out = _admin(
            coordinator, "--json", "failover", "--stream", name, "--from", "a", "--to", "b",
            "--margin", "1s", "--dry-run",
        )  # fmt: skip
        assert code == 0, out
        info: dict[str, object] = json.loads(out)
        return info

    info = eventually(lambda: (i := dry_run())["translations"] and i, timeout_s=30)
    by_split = {t["split"]: t for t in info["translations"]}  # type: ignore[attr-defined]
    assert set(by_split) == {f"b/{topic}/0", f"b/{topic}/1"}
    for p in (0, 1):
        t = by_split[f"b/{topic}/{p}"]
        # b: 100 own records and a fence, then the copies of a's 301
        assert (t["query_id"], t["source"], t["result"]) == (
            "dry-q",
            f"a/{topic}/{p}",
            "matched",
        ), t
        assert int(t["offset"]) == 101 + 301
        assert "matched the last 4 records read" in t["detail"]
    # nothing changed
    assert {c["cluster"]: c["state"] for c in info["clusters"]} == {"a": "ACTIVE", "b": "STANDBY"}  # type: ignore[index, union-attr]
    kinds = {e.kind for e in AdminClient(coordinator.address).history(name)}
    assert kinds == hw_before
    code, out = _admin(
        coordinator, "failover", "--stream", name, "--from", "a", "--to", "b", "--dry-run"
    )
    assert code == 0, out
    assert "dry run" in out


def test_cluster_operations_and_failover(
    coordinator: CoordinatorThread, kafka: KafkaClusters, tmp_path: Path
) -> None:
    a, b = kafka.shared(2)
    topic = uid("cliops")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 1})
    name = uid("cliops")
    doc = stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])})
    doc["clusters"]["b"]["state"] = "STANDBY"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    assert _admin(coordinator, "streams", "put", "--file", str(path))[0] == 0

    code, out = _admin(
        coordinator,
        "--json",
        "failover",
        "--stream",
        name,
        "--from",
        "a",
        "--to",
        "b",
        "--margin",
        "5s",
    )
    assert code == 0, out
    assert {c["cluster"]: c["state"] for c in json.loads(out)["clusters"]} == {
        "a": "FAILED",
        "b": "ACTIVE",
    }
    code, out = _admin(
        coordinator, "--json", "cluster", "drain", "--stream", name, "--cluster", "b"
    )
    assert code == 0, out
    code, out = _admin(
        coordinator, "failover", "--stream", name, "--from", "a", "--to", "b", "--margin", "soon"
    )
    assert code == 1
    assert "--margin" in out
    code, out = _admin(coordinator, "--json", "streams", "history", name)
    kinds = [e["kind"] for e in json.loads(out)]
    assert "failover" in kinds
    assert "drain" in kinds
    for args in (["readers", "list"], ["queries", "list"], ["assignments", "--stream", name]):
        code, out = _admin(coordinator, "--json", *args)
        assert code == 0, out
        assert isinstance(json.loads(out), list)


def test_cli_token(make_coordinator: object, tmp_path: Path) -> None:
    coord = make_coordinator(admin_token="cli-t0ken")  # type: ignore[operator]
    code, out = _admin(coord, "streams", "list")
    assert code == 1
    assert "authorization" in out
    code, out = _admin(coord, "streams", "watch", "orders", "--once")
    assert code == 1
    assert "authorization" in out
    good, wrong = tmp_path / "admin-token", tmp_path / "wrong-token"
    good.write_text("cli-t0ken\n")  # a trailing newline, as `echo` writes it
    wrong.write_text("not-it")
    code, _ = _admin(coord, "streams", "list", token_file=good)
    assert code == 0
    code, out = _admin(coord, "streams", "list", token_file=wrong)
    assert code == 1
    assert "not known to this coordinator" in out
    assert "not-it" not in out
    # a token on the command line is not accepted any more (it shows in `ps`)
    result = run_admin_cli(
        ["--coordinator", coord.address, "--token", "cli-t0ken", "streams", "list"]
    )
    assert result.exit_code == 2
    assert "No such option '--token'" in result.output


def test_metrics_endpoint_reports_what_happened(
    make_coordinator: object, kafka: KafkaClusters, agents: list[ReaderAgent]
) -> None:
    """Scraped values move with what the coordinator does: the generation of a
    stream, a failover by its labels, a registered agent, a reconcile latency."""
    port = free_port()
    coord = make_coordinator(metrics_listen=f"127.0.0.1:{port}")  # type: ignore[operator]
    a, b = kafka.shared(2)
    topic = uid("t")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 1})
    name = uid("metrics")

    def scrape() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        return {
            (s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body.decode())
            for s in family.samples
        }

    failovers = (
        "multikafka_failovers_total",
        frozenset(
            {("stream", name), ("from_cluster", "a"), ("to_cluster", "b"), ("mode", "admin")}
        ),
    )
    readers = ("multikafka_readers", frozenset())
    latencies = ("multikafka_reconcile_latency_seconds_count", frozenset())
    generation = ("multikafka_metadata_generation", frozenset({("stream", name)}))
    before = scrape()
    assert failovers not in before
    assert before[readers] == 0
    agent = ReaderAgent(agent_id=uid("agent"), heartbeat_interval_s=0.2)
    agents.append(agent)
    with AdminClient(coord.address) as admin:
        info = admin.put_stream(
            stream_doc(
                name,
                {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])},
                states={"b": "STANDBY"},
            )
        )
        assert scrape()[generation] == info.generation
        agent.connect(coord.address)
        eventually(lambda: scrape()[readers] == 1)
        # Each agent says how it converts Kafka messages into Arrow.
        used = arrow.active_converter()
        assert used in ("c-direct", "c-accessors", "python")
        (listed,) = eventually(admin.readers)
        assert listed.converter == used
        by_converter = scrape()
        assert by_converter[("multikafka_reader_converters", frozenset({("converter", used)}))] == 1
        others = {"c-direct", "c-accessors", "python", "unknown"} - {used}
        for other in others:
            key = ("multikafka_reader_converters", frozenset({("converter", other)}))
            assert by_converter[key] == 0
        done = admin.failover(name, "a", "b", margin_ms=1000)
    after = eventually(lambda: (s := scrape())[latencies] > before[latencies] and s)
    assert after[failovers] == 1
    assert after[generation] == done.generation > info.generation


def test_json_goes_before_or_after_the_command_with_the_same_output(
    coordinator: CoordinatorThread, kafka: KafkaClusters, tmp_path: Path
) -> None:
    a, b = kafka.shared(2)
    topic = uid("clijson")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 1})
    name = uid("clijson")
    doc = stream_doc(name, {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])})
    doc["clusters"]["b"]["state"] = "STANDBY"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    code, out = _admin(coordinator, "streams", "put", "--file", str(path), "--json")
    assert code == 0, out
    assert json.loads(out)["name"] == name

    def both(*args: str) -> object:
        before = _admin(coordinator, "--json", *args)
        after = _admin(coordinator, *args, "--json")
        assert before[0] == after[0] == 0, (before, after)
        assert json.loads(before[1]) == json.loads(after[1])
        return json.loads(after[1])

    assert both("streams", "get", name)["name"] == name  # type: ignore[index]
    assert name in {s["name"] for s in both("streams", "list")}  # type: ignore[attr-defined]
    assert both("streams", "history", name)[0]["kind"] == "reconcile"  # type: ignore[index]
    assert isinstance(both("readers", "list"), list)
    # an operation: the second placement acts on what the first did
    code, out = _admin(
        coordinator, "cluster", "drain", "--stream", name, "--cluster", "a", "--json"
    )
    assert code == 0, out
    assert {c["cluster"]: c["state"] for c in json.loads(out)["clusters"]}["a"] == "DRAINING"
    code, out = _admin(
        coordinator,
        "failover",
        "--stream",
        name,
        "--from",
        "a",
        "--to",
        "b",
        "--margin",
        "1s",
        "--json",
    )
    assert code == 0, out
    assert {c["cluster"]: c["state"] for c in json.loads(out)["clusters"]} == {
        "a": "FAILED",
        "b": "ACTIVE",
    }
    code, out = _admin(coordinator, "streams", "delete", name, "--json")
    assert (code, json.loads(out)) == (0, {"deleted": True})


def _watched_stream(
    coordinator: CoordinatorThread, admin: AdminClient, kafka: KafkaClusters, agent: ReaderAgent
) -> tuple[str, str, str]:
    """A stream (a ACTIVE with 10 records over 2 partitions, b STANDBY) that
    query ``q-…`` read once through ``agent`` and committed, then a drained.
    Returns (stream, topic, query id)."""
    a, b = kafka.shared(2)
    topic = uid("watch")
    for c in (a, b):
        create_topics(c.bootstrap, {topic: 2})
    produce_sequence(a.bootstrap, topic, 2, "a", range(10))
    name, query = uid("watch"), uid("q")
    admin.put_stream(
        stream_doc(
            name,
            {"a": (a.bootstrap, [topic]), "b": (b.bootstrap, [topic])},
            states={"b": "STANDBY"},
        )
    )
    agent.connect(coordinator.address)
    planner = PlannerClient(coordinator.address, timeout_s=10)
    try:
        start, _ = planner.resolve(name, planner_pb2.Position(kind=planner_pb2.Position.EARLIEST))
        end = planner.latest(name, query, start, max_records=0, cap=None, fail_on_data_loss=True)
        plan = planner.plan(name, query, start, end, min_partitions=1)
        for task in tasks_from_plan(
            plan,
            ReadOptions(stream=name, coordinator=coordinator.address),
            coordinator=coordinator.address,  # type: ignore[arg-type]
            query_id=query,
        ):
            for _ in agent.read(task):
                pass
        planner.commit(name, query, end, "")
    finally:
        planner.close()
    eventually(lambda: {c.cluster: c.records_read for c in admin.get_stream(name).clusters}["a"])
    admin.drain(name, "a")
    return name, topic, query


def test_streams_watch_once_shows_clusters_history_queries_and_agents(
    coordinator: CoordinatorThread,
    admin: AdminClient,
    kafka: KafkaClusters,
    agents: list[ReaderAgent],
) -> None:
    agent = ReaderAgent(agent_id=uid("agent"), heartbeat_interval_s=0.2)
    agents.append(agent)
    name, topic, query = _watched_stream(coordinator, admin, kafka, agent)
    info = {c.cluster: c for c in admin.get_stream(name).clusters}
    # 10 records and a fence per partition: the lag the latest call saw from the start
    assert info["a"].records_read >= 10
    assert info["a"].lag_records == 12
    assert not info["b"].HasField("lag_records")  # STANDBY: not read

    result = run_admin_cli(
        ["--coordinator", coordinator.address, "streams", "watch", name, "--once"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    lines = {line.split("│")[1].strip(): line for line in out.splitlines() if "│" in line}
    assert f"stream {name}" in out
    assert "DRAINING" in lines[f"a ({kafka.shared(1)[0].bootstrap})"]
    assert "yes" in lines[f"a ({kafka.shared(1)[0].bootstrap})"]
    row_a = [cell.strip() for cell in lines[f"a ({kafka.shared(1)[0].bootstrap})"].split("│")]
    # cluster, state, reachable, partitions, records read, records/s, lag, note
    assert row_a[1:9] == [
        f"a ({kafka.shared(1)[0].bootstrap})",
        "DRAINING",
        "yes",
        "2",
        f"{info['a'].records_read:,}",
        "-",  # one frame: no rate yet
        "12",
        "draining to end offsets of 2 splits",
    ]
    assert "STANDBY" in out
    assert "last reconcile: generation" in out
    assert "last failover/drain: drain of a" in out
    assert query in lines
    assert agent.agent_id in lines
    assert "a" in lines[agent.agent_id].split("│")[4]  # its open sub-reader of this stream

    result = run_admin_cli(
        ["--coordinator", coordinator.address, "streams", "watch", name, "--once", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    clusters = {c["cluster"]: c for c in data["stream"]["clusters"]}
    assert clusters["a"]["lag_records"] == 12
    assert clusters["a"]["records_read"] == info["a"].records_read
    assert data["last_change"]["kind"] == "drain"
    assert data["last_reconcile"]["kind"] == "reconcile"
    assert [q["query_id"] for q in data["queries"]] == [query]
    (reader,) = [r for r in data["readers"] if r["agent_id"] == agent.agent_id]
    assert set(reader["splits"]) == {f"a/{topic}/0", f"a/{topic}/1"}


def test_streams_watch_shows_no_secret(
    coordinator: CoordinatorThread, admin: AdminClient, kafka: KafkaClusters
) -> None:
    (a,) = kafka.shared(1)
    name = uid("watchsecret")
    doc = stream_doc(name, {"a": (a.bootstrap, [uid("t")])}, states={"a": "STANDBY"})
    doc["clusters"]["a"]["properties"]["sasl.password"] = "p4ss-w0rd"
    admin.put_stream(doc)
    for extra in ([], ["--json"]):
        result = run_admin_cli(
            ["--coordinator", coordinator.address, "streams", "watch", name, "--once", *extra]
        )
        assert result.exit_code == 0, result.output
        assert "p4ss-w0rd" not in result.output
        assert name in result.stdout


def test_streams_watch_refreshes_in_a_terminal_until_ctrl_c(
    coordinator: CoordinatorThread, admin: AdminClient, kafka: KafkaClusters
) -> None:
    """The real command in a pseudo-terminal (rich's live display): two
    refreshes, then SIGINT; it exits 0 without a traceback."""
    (a,) = kafka.shared(1)
    name, _ = seeded_stream(admin, a.bootstrap, "watchpty", records=3)
    primary, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MULTIKAFKA_")}
    env.update(TERM="xterm-256color", COLUMNS="160", LINES="60")
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "multikafka"),
            "admin",
            "--coordinator",
            coordinator.address,
            "streams",
            "watch",
            name,
            "--interval",
            "0.5",
        ],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env=env,
        close_fds=True,
    )
    os.close(secondary)
    seen = b""
    try:
        deadline = time.monotonic() + 60
        # the stream's name is in each frame's first line (between colour codes)
        while seen.count(name.encode()) < 2 and time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.5)
            if ready:
                seen += os.read(primary, 65536)
        assert seen.count(name.encode()) >= 2, seen.decode(errors="replace")
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        while select.select([primary], [], [], 0.2)[0]:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal closed with the process
                break
            if not chunk:
                break
            seen += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(primary)
    text = seen.decode(errors="replace")
    assert code == 0, text
    assert "Traceback" not in text
    assert "ACTIVE" in text
