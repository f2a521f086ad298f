"""TLS and credentials on the coordinator's gRPC endpoints (real etcd, tansu,
in-process coordinators serving TLS with certificates made here), with the
token files alone (the access policy of two teams: tests/integration/test_access.py).

* The admin token is an admin (every service); the reader token, or a
  client certificate under mutual TLS, a reader of every stream (Planner
  and Reader services). No credential, or one the coordinator does not
  know, gives UNAUTHENTICATED; a role not held PERMISSION_DENIED.
* Cluster secrets (``sasl.password``) reach only an authenticated reader's
  PlanPartitions, and no admin answer, error or log record.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable
from functools import partial
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from multikafka.coordinator import CoordinatorConfig
from multikafka.core import env
from multikafka.core.admin_client import AdminClient
from multikafka.core.exceptions import MultikafkaError, ValidationError
from multikafka.core.planner_client import PlannerClient
from multikafka.core.transport import ConnectConfig, bearer
from multikafka.devstack import CoordinatorThread
from multikafka.reader_agent import ReaderAgent, ReadOptions
from multikafka.reader_agent._plan import tasks_from_plan
from multikafka.spark._partition import MultiKafkaPartition
from multikafka.v1 import planner_pb2, reader_pb2, reader_pb2_grpc
from tests.certs import Certs, make_certs
from tests.conftest import KafkaClusters
from tests.helpers import (
    eventually,
    run_admin_cli,
    run_coordinator,
    seed_stream,
    stream_doc,
    uid,
)
from tests.secure import Secure, new_token, start_secure

INTERNALS = (
    "multikafka.reader_agent._plan",
    "multikafka.spark._partition",
)


pytestmark = pytest.mark.integration

Position = planner_pb2.Position
EARLIEST = Position(kind=Position.EARLIEST)
LATEST = Position(kind=Position.LATEST)
UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
#: How long a client that cannot connect keeps trying (refusals are UNAVAILABLE).
SHORT_S = 1.0
#: A stream of these tests: a new topic of two partitions with 20 records
#: (unless ``records`` says otherwise); returns (stream, topic, put's answer).
seed = partial(seed_stream, prefix="auth", partitions=2, records=20)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def secure(
    make_coordinator: Callable[..., CoordinatorThread], certs: Certs, tmp_path: Path
) -> Secure:
    return start_secure(make_coordinator, certs, tmp_path)


def _refused(call: Callable[[], object], code: grpc.StatusCode) -> str:
    """Run ``call``; it must fail with ``code``. Returns the error message."""
    with pytest.raises(MultikafkaError) as info:
        call()
    cause = info.value.__cause__
    assert isinstance(cause, grpc.Call), f"not a gRPC failure: {info.value!r}"
    assert cause.code() == code, f"expected {code.name}, got {cause.code().name}: {info.value}"
    return str(info.value)


def _raw_refused(call: Callable[[], object], code: grpc.StatusCode) -> str:
    """Like :func:`_refused` for a bare stub call."""
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert isinstance(info.value, grpc.Call)
    assert info.value.code() == code, f"expected {code.name}, got {info.value.code().name}"
    return info.value.details() or ""


def _cli(*args: str, env_vars: dict[str, str | None] | None = None) -> tuple[int, str]:
    """``multikafka admin ...``: (exit code, stdout or, on failure, all output)."""
    result = run_admin_cli(args, env=env_vars)
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


def _logged(records: list[logging.LogRecord]) -> str:
    """Every record as text: message, exception and every attribute (extras)."""
    fmt = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return "\n".join(f"{fmt.format(r)} {vars(r)!r}" for r in records)


# -- Admin service -------------------------------------------------------------------


def test_admin_over_tls_needs_the_admin_token(secure: Secure, kafka: KafkaClusters) -> None:
    (a,) = kafka.shared(1)
    with secure.admin() as admin:
        assert admin.status().role == "leader"
        name, _, info = seed(admin, a.bootstrap, records=0)
        assert admin.get_stream(name).generation == info.generation

    with secure.admin(token="") as anonymous:
        message = _refused(anonymous.list_streams, UNAUTHENTICATED)
        assert "admin or operator token" in message
        assert "--token-file" in message
    for wrong, code, why in (
        (secure.reader_token, PERMISSION_DENIED, "needs the operator role"),
        (new_token("random"), UNAUTHENTICATED, "not known to this coordinator"),
    ):
        with secure.admin(token=wrong) as admin:
            message = _refused(admin.list_streams, code)
            assert why in message
            assert wrong not in message
            assert secure.admin_token not in message
        # Refused before any work: a write with a wrong token changes nothing.
        with secure.admin(token=wrong) as admin:
            _refused(lambda: admin.delete_stream(name), code)
    # The CA as a file, the way AdminClient takes it too.
    with AdminClient(
        secure.address, token=secure.admin_token, tls_ca=str(secure.certs.ca.cert_path)
    ) as admin:
        assert admin.get_stream(name).name == name


def test_admin_cli_over_tls_with_token_file_and_env(secure: Secure, tmp_path: Path) -> None:
    ca = str(secure.certs.ca.cert_path)
    base = ["--coordinator", secure.address, "--tls-ca", ca, "--json"]

    code, out = _cli(*base[:4], "--token-file", str(secure.admin_token_file), "--json", "status")
    assert code == 0, out
    assert json.loads(out)["role"] == "leader"

    # The token and the CA from the environment.
    code, out = _cli(
        "--coordinator",
        secure.address,
        "--json",
        "status",
        env_vars={env.ADMIN_TOKEN: secure.admin_token, env.TLS_CA: ca},
    )
    assert code == 0, out
    code, out = _cli(
        *base, "streams", "list", env_vars={env.ADMIN_TOKEN_FILE: str(secure.admin_token_file)}
    )
    assert code == 0, out
    assert json.loads(out) == []

    # --token (a secret on the command line) is gone.
    code, out = _cli(*base, "--token", secure.admin_token, "status")
    assert code == 2
    assert "No such option" in out
    assert "--token" in out

    # No token, a wrong one, the reader token.
    code, out = _cli(*base, "status")
    assert code == 1
    assert "needs 'authorization: Bearer <token>'" in out
    wrong = tmp_path / "wrong.token"
    wrong.write_text(new_token("random"))
    for token_file, token, why in (
        (wrong, wrong.read_text(), "not known to this coordinator"),
        (secure.reader_token_file, secure.reader_token, "needs the operator role"),
    ):
        code, out = _cli(*base[:4], "--token-file", str(token_file), "status")
        assert code == 1
        assert why in out
        assert token not in out
        assert secure.admin_token not in out

    # Both the variable and the file variable: refused, neither echoed.
    code, out = _cli(
        *base,
        "status",
        env_vars={
            env.ADMIN_TOKEN: secure.admin_token,
            env.ADMIN_TOKEN_FILE: str(secure.admin_token_file),
        },
    )
    assert code == 1
    assert "not both" in out
    assert secure.admin_token not in out


def test_plaintext_and_wrongly_verifying_clients_cannot_connect(secure: Secure) -> None:
    # A plaintext client against the TLS port: the handshake never happens.
    with secure.admin(ca=None, timeout_s=SHORT_S) as plain:
        _refused(plain.status, UNAVAILABLE)
    plain_planner = secure.planner(ca=None, timeout_s=SHORT_S)
    try:
        _refused(lambda: plain_planner.resolve("x", EARLIEST), UNAVAILABLE)
    finally:
        plain_planner.close()
    # A client that trusts another CA refuses the coordinator's certificate.
    with secure.admin(ca=secure.certs.stranger_ca.cert_pem, timeout_s=SHORT_S) as wrong_ca:
        message = _refused(wrong_ca.status, UNAVAILABLE)
    assert "CERTIFICATE_VERIFY_FAILED" in message or "handshake" in message.lower()
    # The health service is open (probes carry no token), over TLS.
    channel = grpc.secure_channel(
        secure.address, grpc.ssl_channel_credentials(secure.certs.ca.cert_pem)
    )
    try:
        resp = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5
        )
        assert resp.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        channel.close()


def test_clients_follow_the_leader_over_tls(
    make_coordinator: Callable[..., CoordinatorThread],
    certs: Certs,
    kafka: KafkaClusters,
    tmp_path: Path,
) -> None:
    """A client given only a standby's address is sent to the leader, and
    verifies the leader's certificate against the name it was given."""
    one = start_secure(
        make_coordinator, certs, tmp_path, etcd_prefix=f"/multikafka-test/{uid('ha')}"
    )
    two = start_secure(
        make_coordinator,
        certs,
        tmp_path / "two",
        admin_token=one.admin_token,
        reader_token=one.reader_token,
        etcd_prefix=one.thread.config.etcd_prefix,
    )
    leader, standby = (one, two) if one.thread.coordinator.is_leader else (two, one)  # type: ignore[union-attr]
    assert not standby.thread.coordinator.is_leader  # type: ignore[union-attr]
    (a,) = kafka.shared(1)
    for host in ("127.0.0.1", "localhost"):
        given = f"{host}:{standby.thread.coordinator.port}"  # type: ignore[union-attr]
        config = ConnectConfig.parse(given, tls_ca=certs.ca.cert_pem, token=one.admin_token)
        with AdminClient(config, timeout_s=10) as admin:
            name, topic, _ = seed(admin, a.bootstrap, records=0)  # a leader-only call
            assert admin.status().role == "leader"
        planner = PlannerClient(
            ConnectConfig.parse(given, tls_ca=certs.ca.cert_pem, token=one.reader_token),
            timeout_s=10,
        )
        try:
            assert planner.resolve(name, EARLIEST)[0] == {f"a/{topic}/0": 0, f"a/{topic}/1": 0}
        finally:
            planner.close()
    assert leader.thread.coordinator.is_leader  # type: ignore[union-attr]


# -- Planner and Reader services ---------------------------------------------------


def test_planner_and_reader_services_need_a_reader(secure: Secure, kafka: KafkaClusters) -> None:
    (a,) = kafka.shared(1)
    with secure.admin() as admin:
        name, topic, _ = seed(admin, a.bootstrap)

    for token, code in (("", UNAUTHENTICATED), (new_token("random"), UNAUTHENTICATED)):
        planner = secure.planner(token=token)
        try:
            # A unary call, and LatestOffsets (over the stream a query keeps open).
            for call in (
                lambda: planner.resolve(name, EARLIEST),  # noqa: B023
                lambda: planner.latest(  # noqa: B023
                    name, "q", {}, max_records=0, cap=None, fail_on_data_loss=True
                ),
            ):
                message = _refused(call, code)
                assert "reader token" in message
                assert "coordinatorTokenFile" in message
                if token:
                    assert "not known to this coordinator" in message
                assert token not in message or not token
                assert secure.reader_token not in message
        finally:
            planner.close()

    # The admin token is an admin: it may read too.
    planner = secure.planner(token=secure.admin_token)
    try:
        assert planner.resolve(name, EARLIEST)[0] == {f"a/{topic}/0": 0, f"a/{topic}/1": 0}
    finally:
        planner.close()
    planner = secure.planner()
    try:
        earliest, _ = planner.resolve(name, EARLIEST)
        latest, _ = planner.resolve(name, LATEST)
        assert earliest == {f"a/{topic}/0": 0, f"a/{topic}/1": 0}
        assert latest == {f"a/{topic}/0": 11, f"a/{topic}/1": 11}  # 10 records + a fence
        end = planner.latest(name, "q", earliest, max_records=0, cap=None, fail_on_data_loss=True)
        assert end == latest
    finally:
        planner.close()

    # The Reader service, unary and streaming, checked the same way.
    channel = grpc.secure_channel(
        secure.address, grpc.ssl_channel_credentials(secure.certs.ca.cert_pem)
    )
    try:
        stub = reader_pb2_grpc.ReaderStub(channel)
        register = reader_pb2.RegisterRequest(agent_id="intruder", host="h", pid=1)
        _raw_refused(lambda: stub.Register(register, timeout=5), UNAUTHENTICATED)
        _raw_refused(
            lambda: stub.Register(register, metadata=bearer(new_token("random")), timeout=5),
            UNAUTHENTICATED,
        )
        subscribe = reader_pb2.SubscribeRequest(agent_id="intruder")
        _raw_refused(lambda: list(stub.Subscribe(subscribe, timeout=5)), UNAUTHENTICATED)
        _raw_refused(
            lambda: list(
                stub.Subscribe(subscribe, metadata=bearer(new_token("random")), timeout=5)
            ),
            UNAUTHENTICATED,
        )
        report = reader_pb2.ReportReadsRequest(agent_id="intruder", stream=name, query_id="q")
        report.marks.add(split=f"a/{topic}/0", last_offset=5, last_timestamp_ms=1)
        _raw_refused(lambda: stub.ReportReads(report, timeout=5), UNAUTHENTICATED)
        ack = reader_pb2.AckRequest(agent_id="intruder", applied_generation=1)
        _raw_refused(lambda: stub.Acknowledge(iter([ack]), timeout=5), UNAUTHENTICATED)
        _raw_refused(
            lambda: stub.Acknowledge(iter([ack]), metadata=bearer("Bearer"), timeout=5),
            UNAUTHENTICATED,
        )
        stub.Register(register, metadata=bearer(secure.reader_token), timeout=5)
    finally:
        channel.close()
    duties = secure.thread.coordinator.duties  # type: ignore[union-attr]
    assert duties is not None
    assert duties.marks.at_or_before(name, f"a/{topic}/0", 2**62) is None, "refused report kept"


def test_cluster_secret_reaches_only_the_authenticated_reader(
    make_coordinator: Callable[..., CoordinatorThread],
    certs: Certs,
    kafka: KafkaClusters,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = f"s3cret-{secrets.token_hex(16)}"
    s = start_secure(make_coordinator, certs, tmp_path)
    (a,) = kafka.shared(1)
    seen: list[str] = []  # every answer and error a client got, as text

    with s.admin() as admin:
        name, topic, put = seed(
            admin, a.bootstrap, properties={"sasl.username": "reader", "sasl.password": secret}
        )
        seen.append(str(put))
        assert json.loads(put.document_json)["clusters"]["a"]["properties"]["sasl.password"] == (
            "<redacted>"
        )

        # The authenticated reader gets the secret, in PlanPartitions only.
        planner = s.planner()
        try:
            start, _ = planner.resolve(name, EARLIEST)
            end, _ = planner.resolve(name, LATEST)
            plan = planner.plan(
                name, "q-auth", start, end, min_partitions=1, max_records_per_partition=1000
            )
            assert [dict(c.properties) for c in plan.clusters.values()] == [
                {"fetch.wait.max.ms": "10", "sasl.username": "reader", "sasl.password": secret}
            ]
            planner.commit(name, "q-auth", end, "")
            seen.append(
                str(
                    planner.latest(
                        name, "q-auth", start, max_records=0, cap=None, fail_on_data_loss=True
                    )
                )
            )
        finally:
            planner.close()
        # Planned partitions (what Spark prints) do not show it either.
        parts = [
            MultiKafkaPartition(task)
            for task in tasks_from_plan(
                plan,
                ReadOptions(stream=name, coordinator=s.address),
                coordinator=s.connect(s.reader_token),
                query_id="q-auth",
            )
        ]
        assert parts
        assert all(p.task.clusters["a"].properties["sasl.password"] == secret for p in parts)
        seen += [repr(p) for p in parts] + [repr(p.task.clusters) for p in parts]
        seen += [repr(s.connect(s.reader_token)), str(s.connect(s.reader_token))]
        seen.append(repr(s.thread.config))

        # A document read back (redacted) and put again keeps the secret.
        again = admin.put_stream(admin.get_stream(name).document_json)
        seen.append(str(again))

        # Every admin answer.
        seen.append(str(admin.get_stream(name)))
        seen += [str(i) for i in admin.list_streams()]
        seen += [str(e) for e in admin.history(name)]
        seen.append(str(admin.status()))
        queries = admin.queries()
        assert "q-auth" in {q.query_id for q in queries}
        seen += [str(q) for q in queries]
        seen += [str(r) for r in admin.readers()]
        seen += [str(x) for x in admin.assignments(name)]

        # Errors: refused readers, and documents that carry the secret but are invalid.
        bad = stream_doc(name, {"a": (a.bootstrap, [topic])})
        bad["clusters"]["a"]["properties"]["sasl.password"] = secret
        missing = json.loads(json.dumps(bad))
        del missing["clusters"]["a"]["bootstrap_servers"]
        reserved = json.loads(json.dumps(bad))
        reserved["clusters"]["a"]["properties"]["enable.auto.commit"] = "true"
        text = json.dumps(bad)
        broken = text.replace(f'"{secret}"', f'"{secret}" "x"')
        for document in (missing, reserved, broken):
            with pytest.raises(ValidationError) as info:
                admin.put_stream(document)
            seen.append(str(info.value))
    for token in ("", new_token("random")):
        planner = s.planner(token=token)
        try:
            with pytest.raises(MultikafkaError) as refused:
                planner.plan(name, "q-x", start, end, min_partitions=1, max_records_per_partition=1)
            seen.append(str(refused.value))
        finally:
            planner.close()

    planner = s.planner()
    try:  # still the stored secret after the redacted document was put back
        plan = planner.plan(
            name, "q-2", start, end, min_partitions=1, max_records_per_partition=1000
        )
        assert plan.clusters["a"].properties["sasl.password"] == secret
    finally:
        planner.close()

    answers = "\n".join(seen)
    assert "<redacted>" in answers, "the answers hold the property, redacted"
    assert secret not in answers
    assert s.admin_token not in answers
    assert s.reader_token not in answers
    logged = _logged(caplog.records)
    assert "coordinator serving" in logged, "the coordinator's log was captured"
    assert secret not in logged
    assert s.admin_token not in logged
    assert s.reader_token not in logged


# -- mutual TLS ----------------------------------------------------------------------


def test_mutual_tls_client_certificate_authenticates_readers(
    make_coordinator: Callable[..., CoordinatorThread],
    certs: Certs,
    kafka: KafkaClusters,
    tmp_path: Path,
    agents: list[ReaderAgent],
) -> None:
    s = start_secure(make_coordinator, certs, tmp_path, client_ca=True)
    (a,) = kafka.shared(1)
    secret = f"s3cret-{secrets.token_hex(16)}"

    # No client certificate, or one the client CA did not sign: no handshake.
    for client in ("", "stranger"):
        for token in (s.reader_token, s.admin_token):
            with s.admin(token=token, client=client, timeout_s=SHORT_S) as refused:
                _refused(refused.status, UNAVAILABLE)
        planner = s.planner(client=client, timeout_s=SHORT_S)
        try:
            _refused(lambda: planner.resolve("x", EARLIEST), UNAVAILABLE)  # noqa: B023
        finally:
            planner.close()

    # Admin calls still need the admin token: the certificate proves a reader.
    with s.admin(token="", client="client") as admin:
        _refused(admin.list_streams, PERMISSION_DENIED)
    with s.admin(token=s.reader_token, client="client") as admin:
        _refused(admin.list_streams, PERMISSION_DENIED)
    with s.admin(client="client") as admin:
        name, topic, info = seed(admin, a.bootstrap, properties={"sasl.password": secret})

        # Planner calls with the certificate and no token are served, secrets included.
        planner = s.planner(token="", client="client")
        try:
            start, _ = planner.resolve(name, EARLIEST)
            end, _ = planner.resolve(name, LATEST)
            assert end == {f"a/{topic}/0": 11, f"a/{topic}/1": 11}
            plan = planner.plan(
                name, "q-mtls", start, end, min_partitions=1, max_records_per_partition=1000
            )
            assert plan.clusters["a"].properties["sasl.password"] == secret
        finally:
            planner.close()

        # A reader agent with the certificate and no token registers and subscribes.
        agent = ReaderAgent(heartbeat_interval_s=0.5)
        agents.append(agent)
        agent.connect(s.connect("", client="client"))
        eventually(lambda: agent.applied_generation >= info.generation, timeout_s=15)
        eventually(lambda: agent.agent_id in {r.agent_id for r in admin.readers()}, timeout_s=15)

    # The CLI with the client certificate, its key and the admin token.
    code, out = _cli(
        "--coordinator",
        s.address,
        "--tls-ca",
        str(certs.ca.cert_path),
        "--tls-cert",
        str(certs.client.cert_path),
        "--tls-key",
        str(certs.client.key_path),
        "--token-file",
        str(s.admin_token_file),
        "--json",
        "streams",
        "get",
        name,
    )
    assert code == 0, out
    assert json.loads(out)["name"] == name
    assert secret not in out


# -- the reader agent's link -----------------------------------------------------------


def test_reader_agent_link_over_tls_with_the_reader_token(
    secure: Secure,
    kafka: KafkaClusters,
    agents: list[ReaderAgent],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = f"s3cret-{secrets.token_hex(16)}"
    (a,) = kafka.shared(1)
    # An agent with a wrong token, started first: it never gets in.
    intruder = ReaderAgent(heartbeat_interval_s=0.5)
    agents.append(intruder)
    intruder.connect(secure.connect(new_token("intruder")))
    agent = ReaderAgent(heartbeat_interval_s=0.5)
    agents.append(agent)
    agent.connect(secure.connect(secure.reader_token))

    with secure.admin() as admin:
        name, topic, info = seed(admin, a.bootstrap, properties={"sasl.password": secret})
        eventually(lambda: agent.applied_generation >= info.generation, timeout_s=15)
        readers = eventually(
            lambda: {r.agent_id: r for r in admin.readers() if r.agent_id == agent.agent_id},
            timeout_s=15,
        )
        assert readers[agent.agent_id].subscribed
        # A change reaches it as a reconcile event.
        doc = json.loads(admin.get_stream(name).document_json)
        doc["clusters"]["a"]["properties"]["fetch.wait.max.ms"] = "20"
        changed = admin.put_stream(doc)
        assert changed.generation > info.generation
        eventually(lambda: agent.applied_generation >= changed.generation, timeout_s=15)
        eventually(
            lambda: any(
                r.agent_id == agent.agent_id and r.applied_generation >= changed.generation
                for r in admin.readers()
            ),
            timeout_s=15,
        )
        # What it reads is reported back over the same link (ReportReads).
        planner = secure.planner()
        try:
            start, _ = planner.resolve(name, EARLIEST)
            end, _ = planner.resolve(name, LATEST)
            plan = planner.plan(
                name, "q-link", start, end, min_partitions=1, max_records_per_partition=1000
            )
        finally:
            planner.close()
        tasks = tasks_from_plan(
            plan,
            ReadOptions(stream=name, coordinator=secure.address),
            coordinator=secure.connect(secure.reader_token),
            query_id="q-link",
        )
        keys = [
            k.decode()
            for task in tasks
            for batch in agent.read(task)
            for k in batch.column("key").to_pylist()
        ]
        assert sorted(k for k in keys if k.startswith("a:")) == sorted(f"a:{i}" for i in range(20))
        secure.wait_for_reports(name, [f"a/{topic}/{p}" for p in (0, 1)], timeout_s=15)
        # The intruder is not registered, and applied nothing.
        assert intruder.agent_id not in {r.agent_id for r in admin.readers()}
        assert intruder.applied_generation == 0
    # The agents' logs (the intruder's refusals included) hold no secret.
    eventually(lambda: "UNAUTHENTICATED" in _logged(caplog.records), timeout_s=15)
    logged = _logged(caplog.records)
    for leaked in (secret, secure.admin_token, secure.reader_token):
        assert leaked not in logged


# -- configuration -------------------------------------------------------------------


def test_half_given_tls_files_are_refused_not_served_in_plaintext(
    etcd_url: str, certs: Certs, tmp_path: Path
) -> None:
    """``multikafka coordinator --tls-cert C --tls-client-ca CA`` without
    ``--tls-key`` is refused, as etcd's --etcd-cert without --etcd-key is;
    before the fix, it served *plaintext* with no client-certificate check."""
    result = run_coordinator(
        "--etcd", etcd_url,
        "--prefix", f"/multikafka-test/{uid('half')}",
        "--tls-cert", str(certs.server.cert_path),
        "--tls-client-ca", str(certs.client_ca.cert_path),
        cwd=tmp_path,
        timeout_s=30,
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "No such option" not in output, output
    assert "key" in output.lower(), output


def test_half_given_tls_env_is_refused(monkeypatch: pytest.MonkeyPatch, certs: Certs) -> None:
    """The same through the environment: CoordinatorConfig.from_env with
    MULTIKAFKA_TLS_CERT and MULTIKAFKA_TLS_CLIENT_CA but no MULTIKAFKA_TLS_KEY
    is refused; before the fix, it gave a config with ``tls=None`` (plaintext)."""
    for name in (
        env.TLS_KEY,
        env.ADMIN_TOKEN,
        env.ADMIN_TOKEN_FILE,
        env.READER_TOKEN,
        env.READER_TOKEN_FILE,
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(env.TLS_CERT, str(certs.server.cert_path))
    monkeypatch.setenv(env.TLS_CLIENT_CA, str(certs.client_ca.cert_path))
    with pytest.raises(ValidationError):
        CoordinatorConfig.from_env()


def test_a_kept_secret_never_follows_new_connection_settings(
    secure: Secure, kafka: KafkaClusters
) -> None:
    """A document read back (redacted) and put again keeps its stored secret
    only while the cluster is reached the same way: with other brokers or
    other security settings, an admin (who never sees the secret) could
    send readers with the real password anywhere; that is refused."""
    (a,) = kafka.shared(1)
    secret = f"kept-{secrets.token_hex(8)}"
    with secure.admin() as admin:
        name, _, _ = seed(admin, a.bootstrap, records=0, properties={"sasl.password": secret})
        read_back = json.loads(admin.get_stream(name).document_json)
        assert read_back["clusters"]["a"]["properties"]["sasl.password"] == "<redacted>"
        for change, value in (
            ("bootstrap_servers", "evil.example:9092"),
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "PLAIN"),
        ):
            doc = json.loads(json.dumps(read_back))
            if change == "bootstrap_servers":
                doc["clusters"]["a"][change] = value
            else:
                doc["clusters"]["a"]["properties"][change] = value
            with pytest.raises(ValidationError) as refused:
                admin.put_stream(doc)
            assert "clusters.a.properties.sasl.password" in str(refused.value)
            assert "give the secret again" in str(refused.value)
            assert secret not in str(refused.value)
        # tuning only: the stored secret stays
        doc = json.loads(json.dumps(read_back))
        doc["clusters"]["a"]["properties"]["fetch.wait.max.ms"] = "25"
        admin.put_stream(doc)
        # with the secret given again, new settings are fine
        doc["clusters"]["a"]["properties"]["security.protocol"] = "SASL_SSL"
        doc["clusters"]["a"]["properties"]["sasl.password"] = secret
        admin.put_stream(doc)
    stored = secure.thread.coordinator.store.get(name)  # type: ignore[union-attr]
    props = stored.spec.clusters["a"].properties.as_librdkafka_dict()
    assert props["sasl.password"] == secret
    assert props["fetch.wait.max.ms"] == "25"
    assert props["security.protocol"] == "SASL_SSL"
