"""The ``multikafka`` command line against a running coordinator, and the
coordinator's Prometheus endpoint."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from multikafka.devstack import CoordinatorThread, free_port
from multikafka.devstack.feed import create_topics
from multikafka_core.admin_client import AdminClient
from reader_agent import ReaderAgent
from tests.conftest import KafkaClusters
from tests.helpers import eventually, run_admin_cli, stream_doc, uid

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
    good, wrong = tmp_path / "admin-token", tmp_path / "wrong-token"
    good.write_text("cli-t0ken\n")  # a trailing newline, as `echo` writes it
    wrong.write_text("not-it")
    code, _ = _admin(coord, "streams", "list", token_file=good)
    assert code == 0
    code, out = _admin(coord, "streams", "list", token_file=wrong)
    assert code == 1
    assert "not the admin token" in out
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
        done = admin.failover(name, "a", "b", margin_ms=1000)
    after = eventually(lambda: (s := scrape())[latencies] > before[latencies] and s)
    assert after[failovers] == 1
    assert after[generation] == done.generation > info.generation
