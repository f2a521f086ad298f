"""Two teams on one coordinator (real etcd, tansu, an access policy file):
each team's callers reach only their streams, in every RPC, list and
reconcile event; the policy is re-read live (a rotated token, a revoked
grant); secret references stay references everywhere the coordinator
keeps or sends them; a fuzz of policies and credentials against the
running coordinator."""

from __future__ import annotations

import json
import logging
import random
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from multikafka.coordinator import TlsFiles
from multikafka.coordinator.access import AUDIT_LOGGER, Identity, Role
from multikafka.core.admin_client import AdminClient
from multikafka.core.exceptions import MultikafkaError
from multikafka.core.planner_client import PlannerClient
from multikafka.core.transport import ConnectConfig, bearer
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from multikafka.reader_agent import ReadOptions
from multikafka.reader_agent._plan import tasks_from_plan
from multikafka.v1 import planner_pb2, reader_pb2, reader_pb2_grpc
from tests.certs import Issued, issue, make_certs
from tests.conftest import KafkaClusters
from tests.helpers import eventually, run_admin_cli, stream_doc, uid
from tests.teams import (
    POLICY_INTERVAL_S,
    RECORDS,
    Teams,
    as_text,
    new_tokens,
    policy_text,
    start_teams,
)

INTERNALS = (
    "multikafka.coordinator.access",
    "multikafka.reader_agent._plan",
)


pytestmark = pytest.mark.integration

Position = planner_pb2.Position
EARLIEST = Position(kind=Position.EARLIEST)
LATEST = Position(kind=Position.LATEST)
DENIED = grpc.StatusCode.PERMISSION_DENIED
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED


@pytest.fixture(scope="module")
def teams(
    etcd_url: str, kafka: KafkaClusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Teams]:
    a, b = kafka.shared(2)
    world = start_teams(etcd_url, a, b, tmp_path_factory.mktemp("teams"))
    try:
        yield world
    finally:
        world.thread.stop()


def refused(call: Callable[[], object], code: grpc.StatusCode) -> str:
    with pytest.raises(MultikafkaError) as info:
        call()
    cause = info.value.__cause__
    assert isinstance(cause, grpc.Call), repr(info.value)
    assert cause.code() == code, f"{cause.code()}: {info.value}"
    return str(info.value)


def test_readers_reach_their_streams_only(teams: Teams) -> None:
    for principal, mine, theirs in (
        ("team-a-jobs", ("orders-eu", "orders-us"), ("payments", "no-such-stream")),
        ("team-b-jobs", ("payments",), ("orders-eu", "orders-us", "no-such-stream")),
    ):
        planner = teams.planner(principal)
        try:
            for stream in mine:
                offsets, _ = planner.resolve(stream, LATEST)
                assert sum(offsets.values()) == RECORDS + 2  # the records and two fences
            for stream in theirs:
                # LatestOffsets travels on the stream a query keeps open:
                # checked there too, at each request.
                latest = refused(
                    lambda: planner.latest(  # noqa: B023
                        stream,  # noqa: B023
                        "q",
                        {},
                        max_records=0,
                        cap=None,
                        fail_on_data_loss=True,
                    ),
                    DENIED,
                )
                assert f"stream '{stream}'" in latest
                message = refused(lambda: planner.resolve(stream, EARLIEST), DENIED)  # noqa: B023
                assert f"stream '{stream}'" in message
                assert "reader role" in message
                others = {"orders-eu", "orders-us", "payments"} - {stream}
                assert not any(o in message for o in others), message
                # a stream that does not exist is refused the same way
                assert "not found" not in message.lower()
        finally:
            planner.close()
    # A reader token on the Admin service: the operator role is missing.
    with teams.admin("team-a-jobs") as admin:
        assert "operator role" in refused(admin.list_streams, DENIED)


def test_operator_fails_over_its_stream_and_is_refused_the_others(
    teams: Teams, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER)
    metrics = teams.thread.coordinator.metrics  # type: ignore[union-attr]
    before = (
        metrics.registry.get_sample_value(
            "multikafka_denied_total", {"role": "operator", "service": "Admin"}
        )
        or 0
    )
    with teams.admin("team-a-ops") as ops:
        assert {s.name for s in ops.list_streams()} == {"orders-eu", "orders-us"}
        info = ops.failover("orders-eu", "a", "b", strategy="timestamp", reason="drill")
        states = {c.cluster: c.state for c in info.clusters}
        assert states["a"] != states["b"]
        for call in (
            lambda: ops.failover("payments", "a", "b"),
            lambda: ops.fail("payments", "a"),
            lambda: ops.drain("payments", "a"),
            lambda: ops.delete_stream("payments"),
            lambda: ops.get_stream("payments"),
            lambda: ops.history("payments"),
            lambda: ops.put_stream(stream_doc("payments", {"a": ("evil:9092", ["t"])})),
        ):
            message = refused(call, DENIED)
            assert "'payments'" in message
            assert "orders" not in message
        # Lists: only its streams.
        assert {q.stream for q in ops.queries()} <= {"orders-eu", "orders-us"}
        history = ops.history("orders-eu")
        mine = [e for e in history if e.kind == "request"]
        assert mine
        assert mine[-1].principal == "team-a-ops"
        assert "failover a -> b" in mine[-1].detail
        # Its grants, and only its own.
        grants = ops.grants()
        assert grants.caller == "team-a-ops"
        assert {(g.principal, g.role) for g in grants.grants} == {("team-a-ops", "operator")}
    with teams.admin("platform") as admin:
        assert admin.get_stream("payments").name == "payments"  # untouched
        everyone = {g.principal for g in admin.grants().grants}
        assert everyone == {"team-a-jobs", "team-b-jobs", "team-a-ops", "spark-b", "platform"}
        assert {s.name for s in admin.list_streams()} >= {"orders-eu", "orders-us", "payments"}
    after = metrics.registry.get_sample_value(
        "multikafka_denied_total", {"role": "operator", "service": "Admin"}
    )
    assert after - before == 7
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == AUDIT_LOGGER]
    changes = [x for x in lines if x["audit"] == "change" and x["stream"] == "orders-eu"]
    assert any(
        x["principal"] == "team-a-ops"
        and x["method"].endswith("/Failover")
        and x["outcome"] == "ok"
        and x["request"]["to_cluster"] == "b"
        for x in changes
    ), changes
    denied = [x for x in lines if x["audit"] == "denied" and x["stream"] == "payments"]
    assert len(denied) == 7
    assert all(x["principal"] == "team-a-ops" for x in denied)


def _events(
    teams: Teams, principal: str, agent_id: str
) -> tuple[grpc.Channel, Iterator[reader_pb2.ReconcileEvent]]:
    channel = grpc.insecure_channel(teams.address)
    stub = reader_pb2_grpc.ReaderStub(channel)
    meta = bearer(teams.tokens[principal])
    stub.Register(
        reader_pb2.RegisterRequest(agent_id=agent_id, host="h", pid=1), metadata=meta, timeout=5
    )
    return channel, stub.Subscribe(
        reader_pb2.SubscribeRequest(agent_id=agent_id), metadata=meta, timeout=30
    )


def test_an_agent_of_team_a_never_receives_team_b_clusters(teams: Teams) -> None:
    agent_id = uid("agent-a")
    channel, events = _events(teams, "team-a-jobs", agent_id)
    try:
        snapshot = next(events)
        assert snapshot.snapshot
        assert {d.stream for d in snapshot.clusters} == {"orders-eu", "orders-us"}
        # Team B's stream changes, then team A's: the agent sees its own
        # change, and of team B's only the generation going by.
        with teams.admin("platform") as admin:
            doc = json.loads(admin.get_stream("payments").document_json)
            doc["clusters"]["a"]["properties"]["fetch.wait.max.ms"] = "11"
            payments = admin.put_stream(doc)
            doc = json.loads(admin.get_stream("orders-us").document_json)
            doc["clusters"]["a"]["properties"]["fetch.wait.max.ms"] = "12"
            orders = admin.put_stream(doc)
        seen: list[reader_pb2.ReconcileEvent] = []
        for event in events:
            seen.append(event)
            if event.generation >= orders.generation:
                break
        streams = {d.stream for e in seen for d in e.clusters}
        assert "orders-us" in streams
        assert "payments" not in streams
        assert max(e.generation for e in seen) >= payments.generation
        # team A's operator sees team A's agent, not team B's; the platform both.
        b_id = uid("agent-b")
        b_channel, b_events = _events(teams, "team-b-jobs", b_id)
        try:
            assert {d.stream for d in next(b_events).clusters} == {"payments"}
            # Each says what it reads (its sub-readers), as agents heartbeat.
            for channel_, who, aid, stream in (
                (channel, "team-a-jobs", agent_id, "orders-us"),
                (b_channel, "team-b-jobs", b_id, "payments"),
            ):
                reader_pb2_grpc.ReaderStub(channel_).Heartbeat(
                    reader_pb2.HeartbeatRequest(
                        agent_id=aid,
                        sub_readers=[reader_pb2.SubReaderStats(stream=stream, cluster="a")],
                    ),
                    metadata=bearer(teams.tokens[who]),
                    timeout=5,
                )
            with teams.admin("team-a-ops") as ops:
                seen_by_ops = {r.agent_id for r in ops.readers()}
            with teams.admin("platform") as admin:
                seen_by_admin = {r.agent_id: r for r in admin.readers()}
        finally:
            b_channel.close()
        assert agent_id in seen_by_ops
        assert not any(a.startswith("agent-b") for a in seen_by_ops)
        assert agent_id in seen_by_admin
        assert any(a.startswith("agent-b") for a in seen_by_admin)
        # Another principal cannot take the agent over, nor speak for it.
        with pytest.raises(grpc.RpcError) as spoofed:
            reader_pb2_grpc.ReaderStub(channel).Heartbeat(
                reader_pb2.HeartbeatRequest(agent_id=agent_id),
                metadata=bearer(teams.tokens["team-b-jobs"]),
                timeout=5,
            )
        assert spoofed.value.code() == DENIED  # type: ignore[attr-defined]
        stub = reader_pb2_grpc.ReaderStub(channel)
        with pytest.raises(grpc.RpcError) as taken:
            stub.Register(
                reader_pb2.RegisterRequest(agent_id=agent_id, host="h", pid=2),
                metadata=bearer(teams.tokens["team-b-jobs"]),
                timeout=5,
            )
        assert taken.value.code() == DENIED  # type: ignore[attr-defined]
    finally:
        channel.close()


def test_a_rotated_token_stops_and_the_new_one_works_without_restart(teams: Teams) -> None:
    old = dict(teams.tokens)
    agent_id = uid("agent-rot")
    channel, events = _events(teams, "team-a-jobs", agent_id)
    planner = teams.planner("team-a-jobs")
    try:
        assert next(events).snapshot
        planner.resolve("orders-eu", EARLIEST)
        rotated = {**old, "team-a-jobs": f"rotated-{secrets.token_hex(16)}"}
        started = time.monotonic()
        teams.write_policy(rotated)
        # The open subscription ends: the policy no longer knows its token.
        ended = list(events)
        assert all(not e.snapshot for e in ended)
        message = eventually(
            lambda: refused(lambda: planner.resolve("orders-eu", EARLIEST), UNAUTHENTICATED),
            timeout_s=5,
            interval_s=0.02,
        )
        took = time.monotonic() - started
        assert "not known" in message
        new = teams.planner("team-a-jobs")
        try:
            assert new.resolve("orders-eu", EARLIEST)[0]
        finally:
            new.close()
        # The bound: one look at the file, and a call (POLICY_INTERVAL_S here, 1 s by default).
        assert took < POLICY_INTERVAL_S + 1.5, took
    finally:
        planner.close()
        channel.close()
        teams.write_policy(old)
        eventually(lambda: _served(teams, "team-a-jobs"), timeout_s=5)


def test_a_revoked_grant_stops_the_next_call_and_ends_subscriptions(teams: Teams) -> None:
    """The principal stays, its grant goes: its next call is refused and its
    agent's subscription ends; team B's agent, whose grants did not change,
    keeps its subscription through the reload."""
    a_channel, a_events = _events(teams, "team-a-jobs", uid("agent-rev"))
    b_channel, b_events = _events(teams, "team-b-jobs", uid("agent-keep"))
    planner = teams.planner("team-a-jobs")
    good = teams.policy.read_text()
    try:
        assert next(a_events).snapshot
        assert next(b_events).snapshot
        planner.resolve("orders-eu", EARLIEST)
        teams.policy.write_text(
            good.replace(
                '  - {principal: team-a-jobs, role: reader,   streams: ["orders-*"]}\n', ""
            )
        )
        assert all(not e.snapshot for e in a_events)  # the subscription ends
        message = eventually(
            lambda: refused(lambda: planner.resolve("orders-eu", EARLIEST), DENIED), timeout_s=5
        )
        assert "reader role" in message
        # team B's subscription goes on: a change of payments still reaches it.
        with teams.admin("platform") as admin:
            doc = json.loads(admin.get_stream("payments").document_json)
            doc["clusters"]["a"]["properties"]["fetch.wait.max.ms"] = "13"
            changed = admin.put_stream(doc)
        event = next(b_events)
        while event.generation < changed.generation:
            event = next(b_events)
        assert not event.snapshot
        assert {d.stream for d in event.clusters} == {"payments"}
    finally:
        planner.close()
        a_channel.close()
        b_channel.close()
        teams.policy.write_text(good)
        eventually(lambda: _served(teams, "team-a-jobs"), timeout_s=5)


def _served(teams: Teams, principal: str) -> bool:
    planner = teams.planner(principal)
    try:
        planner.resolve("orders-eu", EARLIEST)
        return True
    except MultikafkaError:
        return False
    finally:
        planner.close()


def test_a_bad_policy_file_is_refused_and_the_last_good_one_stays(
    teams: Teams, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    access = teams.thread.coordinator.access  # type: ignore[union-attr]
    good = teams.policy.read_text()
    version = access.version
    try:
        teams.policy.write_text(good.replace("role: admin", "role: root"))
        eventually(lambda: access.problem, timeout_s=5)
        assert "unknown role 'root'" in access.problem
        assert access.version == version
        with teams.admin("platform") as admin:
            assert admin.grants().problem == access.problem
            assert admin.status().role == "leader"  # still served, by the last good policy
        assert any("access policy refused" in r.getMessage() for r in caplog.records)
    finally:
        teams.policy.write_text(good)
        eventually(lambda: not access.problem, timeout_s=5)


def test_secret_references_stay_references_in_etcd_on_the_wire_and_in_logs(
    teams: Teams,
    kafka: KafkaClusters,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    agents: list[object],
) -> None:
    caplog.set_level(logging.DEBUG)
    from multikafka.reader_agent import ReaderAgent

    secret = f"s3cret-{secrets.token_hex(16)}"
    props = tmp_path / "east.properties"
    props.write_text(f"sasl.password={secret}\n")
    reference = f"${{file:{props}:sasl.password}}"
    (a, _) = kafka.shared(2)
    topic = teams.topics["orders-us"]
    name = "orders-secret"
    seen: list[str] = []
    with teams.admin("platform") as admin:
        doc = stream_doc(name, {"a": (a.bootstrap, [topic])})
        doc["clusters"]["a"]["properties"]["sasl.password"] = reference
        seen.append(str(admin.put_stream(doc)))
        got = admin.get_stream(name)
        assert (
            json.loads(got.document_json)["clusters"]["a"]["properties"]["sasl.password"]
            == reference
        )
        seen += [str(got), as_text(admin.list_streams(), admin.history(name))]
        # The coordinator's own clients resolve it: the cluster is reachable.
        eventually(lambda: all(c.reachable for c in admin.get_stream(name).clusters), timeout_s=15)
    planner = teams.planner("team-a-jobs")
    try:
        start, _ = planner.resolve(name, EARLIEST)
        end, _ = planner.resolve(name, LATEST)
        plan = planner.plan(
            name, "q-ref", start, end, min_partitions=1, max_records_per_partition=1000
        )
        seen.append(str(plan))
        assert plan.clusters["a"].properties["sasl.password"] == reference
    finally:
        planner.close()
    # The agent resolves it where it runs, and reads.
    agent = ReaderAgent(heartbeat_interval_s=0.5)
    agents.append(agent)
    tasks = tasks_from_plan(
        plan,
        ReadOptions(stream=name, coordinator=teams.address),
        coordinator=teams.connect("team-a-jobs"),
        query_id="q-ref",
    )
    keys = [
        k for task in tasks for batch in agent.read(task) for k in batch.column("key").to_pylist()
    ]
    assert len([k for k in keys if k.startswith(b"orders-us:")]) == RECORDS
    # A reference that cannot be resolved where the agent runs: a clear error.
    props.rename(tmp_path / "moved.properties")
    broken = tasks_from_plan(
        plan,
        ReadOptions(stream=name, coordinator=teams.address),
        coordinator=teams.connect("team-a-jobs"),
        query_id="q-ref",
    )
    agent.close()  # its consumer is made again, where the reference is read
    fresh = ReaderAgent(heartbeat_interval_s=0.5)
    agents.append(fresh)
    with pytest.raises(MultikafkaError) as unresolved:
        list(fresh.read(broken[0]))
    message = str(unresolved.value)
    assert "cluster 'a'" in message
    assert "'sasl.password'" in message
    assert str(props) in message
    seen.append(message)
    stored = teams.etcd_values()
    assert reference.encode() in stored
    assert secret.encode() not in stored
    text = "\n".join(seen)
    assert secret not in text
    logged = "\n".join(f"{r.getMessage()} {vars(r)!r}" for r in caplog.records)
    assert secret not in logged


def test_fuzzed_policies_and_credentials_against_the_running_coordinator(teams: Teams) -> None:
    """1,000 policy files (valid, or broken in many ways) loaded by the
    running coordinator, each followed by a call with a random credential:
    no crash, no access beyond the policy in force, no secret and no other
    stream named in any refusal."""
    rng = random.Random(3030)
    access = teams.thread.coordinator.access  # type: ignore[union-attr]
    good = teams.policy.read_text()
    streams = ["orders-eu", "orders-us", "payments"]
    globs = ["orders-*", "payments", "pay*", "*", "orders-eu", "nothing-*", "o?ders-us"]
    calls = loaded = 0
    try:
        for i in range(1000):
            tokens = new_tokens()
            grants = []
            for name in tokens:
                role = rng.choice(["reader", "operator", "admin", "none"])
                if role == "none":
                    continue
                line = f"  - {{principal: {name}, role: {role}"
                if role != "admin":
                    line += f", streams: {json.dumps(rng.sample(globs, rng.randint(1, 3)))}"
                grants.append(line + "}")
            text = (
                "principals:\n"
                + "".join(
                    f'  {n}: {{token_sha256: "{Identity.of(t).token_sha256}"}}\n'
                    for n, t in tokens.items()
                )
                + "grants:\n"
                + ("\n".join(grants) or "  []")
                + "\n"
            )
            if rng.random() < 0.2:  # broken: cut, a token in clear, a role that is not one
                text = rng.choice(
                    [
                        text[: rng.randint(0, len(text))],
                        text.replace(
                            Identity.of(tokens["platform"]).token_sha256, tokens["platform"]
                        ),
                        text.replace("reader", "raeder"),
                    ]
                )
            teams.policy.write_text(text)
            changed = access.load()
            loaded += changed
            policy = access.policy
            assert policy is not None
            who = rng.choice([*tokens, "junk"])
            token = tokens.get(who, secrets.token_hex(8))
            stream = rng.choice(streams)
            try:
                expected = policy.principals_of(Identity.of(token)).may(Role.READER, stream)
            except MultikafkaError:
                expected = False
            planner = teams.planner(token)
            try:
                try:
                    planner.resolve(stream, LATEST)
                    allowed = True
                except MultikafkaError as exc:
                    allowed = False
                    message = str(exc)
                    assert token not in message
                    assert not any(s in message for s in streams if s != stream), message
            finally:
                planner.close()
            calls += 1
            assert allowed == expected, (i, who, stream, text)
    finally:
        teams.policy.write_text(good)
        access.load()
    assert calls == 1000
    assert loaded > 700


def test_client_certificate_subjects_are_principals_under_mutual_tls(
    make_coordinator: Callable[..., CoordinatorThread],
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    """``spark-b`` is a certificate subject, not a token: its certificate
    alone reads payments; other verified certificates prove nobody (a few
    random subjects), and a token still works beside any certificate."""
    certs = make_certs(tmp_path / "certs")
    spark_b = issue(certs.client_ca, tmp_path / "certs", "spark-b", server=False)
    strangers = [
        issue(certs.client_ca, tmp_path / "certs", f"x{secrets.token_hex(3)}", server=False)
        for _ in range(3)
    ]
    tokens = new_tokens()
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        policy_text(tokens).replace("CN=spark-b,O=team-b", "CN=spark-b,O=multikafka tests")
    )
    thread = make_coordinator(
        tls=TlsFiles(
            str(certs.server.cert_path), str(certs.server.key_path), str(certs.client_ca.cert_path)
        ),
        access_policy=str(policy),
    )
    (a,) = kafka.shared(1)

    def planner(cert: Issued, token: str = "") -> PlannerClient:
        return PlannerClient(
            ConnectConfig.parse(
                thread.address,
                tls_ca=certs.ca.cert_pem,
                cert=cert.cert_pem,
                key=cert.key_pem,
                token=token,
            ),
            timeout_s=5,
            call_timeout_s=5,
        )

    with AdminClient(
        ConnectConfig.parse(
            thread.address,
            tls_ca=certs.ca.cert_pem,
            cert=certs.client.cert_pem,
            key=certs.client.key_pem,
            token=tokens["platform"],
        ),
        timeout_s=10,
    ) as admin:
        for stream in ("payments", "orders-eu"):
            topic = uid(stream)
            create_topics(a.bootstrap, {topic: 1})
            admin.put_stream(stream_doc(stream, {"a": (a.bootstrap, [topic])}))
    b = planner(spark_b)
    try:
        assert b.resolve("payments", EARLIEST)[0]
        assert "'orders-eu'" in refused(lambda: b.resolve("orders-eu", EARLIEST), DENIED)
    finally:
        b.close()
    for cert in (certs.client, *strangers):
        nobody = planner(cert)
        try:
            message = refused(lambda: nobody.resolve("payments", EARLIEST), UNAUTHENTICATED)  # noqa: B023
            assert "is not one" in message
            assert "spark-b" not in message
        finally:
            nobody.close()
    a_jobs = planner(strangers[0], tokens["team-a-jobs"])
    try:
        assert a_jobs.resolve("orders-eu", EARLIEST)[0]
        refused(lambda: a_jobs.resolve("payments", EARLIEST), DENIED)
    finally:
        a_jobs.close()


def test_the_admin_cli_shows_grants_and_who_changed_a_stream(teams: Teams, tmp_path: Path) -> None:
    token_file = str(teams.token_file("team-a-ops", tmp_path))
    base = ["--coordinator", teams.address, "--token-file", token_file]
    result = run_admin_cli([*base, "--json", "grants"])
    assert result.exit_code == 0, result.output
    grants = json.loads(result.stdout)
    assert grants["caller"] == "team-a-ops"
    assert [(g["principal"], g["role"], g["streams"]) for g in grants["grants"]] == [
        ("team-a-ops", "operator", ["orders-*"])
    ]
    result = run_admin_cli(
        [*base, "cluster", "activate", "--stream", "orders-us", "--cluster", "a"]
    )
    assert result.exit_code == 0, result.output
    result = run_admin_cli([*base, "--json", "streams", "history", "orders-us"])
    assert result.exit_code == 0, result.output
    entries = json.loads(result.stdout)
    assert entries[-1]["principal"] == "team-a-ops"
    assert entries[-1]["detail"] == "activate requested"
    refused_ = run_admin_cli([*base, "streams", "history", "payments"])
    assert refused_.exit_code == 1
    assert "'payments'" in refused_.output
