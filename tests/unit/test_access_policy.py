"""The access policy: its file refused with the line and reason, its
decisions (principal, role, stream glob), a fuzz of policy files and of
credentials against an oracle, and the file re-read when it changes."""

from __future__ import annotations

import json
import random
import re
import string
from pathlib import Path

import pytest

from multikafka.coordinator.access import AccessControl, Identity, PolicyError, Role, parse_policy
from multikafka.coordinator.access.policy import (
    ADMIN_TOKEN_PRINCIPAL,
    READER_TOKEN_PRINCIPAL,
    token_sha256,
)
from multikafka.coordinator.metrics import Metrics
from multikafka.core.exceptions import AuthenticationError, PermissionDeniedError, UnavailableError
from tests.teams import PRINCIPALS, policy_text

INTERNALS = (
    "multikafka.coordinator.access",
    "multikafka.coordinator.access.caller",
    "multikafka.coordinator.access.policy",
    "multikafka.coordinator.metrics",
)


TOKENS = {name: f"{name}-secret-token" for name in PRINCIPALS}
TWO_TEAMS = policy_text(TOKENS)


def test_two_teams_each_get_their_streams_and_roles() -> None:
    policy = parse_policy(TWO_TEAMS, "teams.yaml")
    a = policy.principals_of(Identity.of(TOKENS["team-a-jobs"]))
    assert a.may(Role.READER, "orders-eu")
    assert a.may(Role.READER, "orders-us")
    assert not a.may(Role.READER, "payments")
    assert not a.may(Role.OPERATOR, "orders-eu")
    ops = policy.principals_of(Identity.of(TOKENS["team-a-ops"]))
    assert ops.may(Role.OPERATOR, "orders-eu")
    assert ops.may(Role.READER, "orders-eu")
    assert not ops.may(Role.READER, "payments")
    b_cert = policy.principals_of(Identity.of("", "CN=spark-b, O=team-b"))
    assert b_cert.may(Role.READER, "payments")
    assert not b_cert.may(Role.READER, "orders-eu")
    admin = policy.principals_of(Identity.of(TOKENS["platform"]))
    assert admin.admin
    assert admin.may(Role.ADMIN, "anything-at-all")
    with pytest.raises(PermissionDeniedError) as denied:
        a.require(Role.READER, "payments")
    message = str(denied.value)
    assert "payments" in message
    assert "reader" in message
    assert "team-a-jobs" in message
    assert "orders" not in message  # never another stream, nor a glob of one


def test_unknown_or_missing_credentials_reveal_no_principal() -> None:
    policy = parse_policy(TWO_TEAMS)
    for identity in (Identity.of("not-a-token"), Identity(), Identity.of("", "CN=x,O=y")):
        with pytest.raises(AuthenticationError) as info:
            policy.principals_of(identity)
        assert not isinstance(info.value, PermissionDeniedError)
        for name in TOKENS:
            assert name not in str(info.value)


def test_token_files_become_an_admin_and_a_reader_of_every_stream() -> None:
    policy = AccessControl(admin_token="adm", reader_token="rdr").policy
    assert policy is not None
    assert policy.principals_of(Identity.of("adm")).admin
    reader = policy.principals_of(Identity.of("rdr"))
    assert reader.may(Role.READER, "any-stream")
    assert not reader.holds(Role.OPERATOR)
    assert {g.principal for g in policy.grants} == {ADMIN_TOKEN_PRINCIPAL, READER_TOKEN_PRINCIPAL}


def _line(problem: str) -> int:
    return int(re.search(r":(\d+): ", problem).group(1))  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        (
            "principals: {a: {token_sha256: %s}}\ngrants:\n  - {principal: a, role: boss, streams: [x]}\n",
            3,
            "unknown role 'boss'",
        ),
        (
            "principals:\n  a: {token_sha256: %s}\n  a: {cert_subject: 'CN=x'}\ngrants: [{principal: a, role: admin}]\n",
            3,
            "names 'a' twice",
        ),
        (
            "principals:\n  a: {token_sha256: hunter2-in-clear}\ngrants: [{principal: a, role: admin}]\n",
            2,
            "not the token in clear",
        ),
        ("principals: {a: {token_sha256: %s}}\ngrants: []\n", 2, "grants is empty"),
        (
            "principals: {a: {token_sha256: %s}}\ngrants:\n  - {principal: b, role: reader, streams: [x]}\n",
            3,
            "'b' is not defined",
        ),
        (
            "principals: {a: {token_sha256: %s}}\ngrants:\n  - {principal: a, role: reader}\n",
            3,
            "names its streams",
        ),
        (
            "principals: {a: {token_sha256: %s}}\ngrants:\n  - {principal: a, role: admin, streams: [x]}\n",
            3,
            "admin covers every stream",
        ),
        (
            "principals: {a: {token_sha256: %s}}\ngrants:\n  - {principal: a, role: reader, streams: ['a b']}\n",
            3,
            "not a stream name or glob",
        ),
        (
            "principals: {a: {token_sha256: %s}}\ngrants: [{principal: a, role: admin}]\nextra: 1\n",
            3,
            "unknown key 'extra'",
        ),
        ("principals: {a: {token_sha256: %s}\n", 2, "is not YAML or JSON"),
        (
            "principals:\n  a: {}\ngrants: [{principal: a, role: admin}]\n",
            2,
            "needs token_sha256, cert_subject or both",
        ),
        (
            "principals:\n  a: {token_sha256: %s}\n  b: {token_sha256: %s}\ngrants: [{principal: a, role: admin}]\n",
            3,
            "have the same token_sha256",
        ),
    ],
)
def test_a_malformed_policy_is_refused_with_its_line_and_reason(
    text: str, line: int, why: str
) -> None:
    text = text.replace("%s", token_sha256("t"))
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.yaml")
    message = str(info.value)
    assert why in message
    assert info.value.line == line, message
    assert _line(message) == line
    assert "hunter2" not in message


def test_a_glob_that_matches_nothing_is_fine_and_json_is_read_too() -> None:
    doc = {
        "principals": {"a": {"token_sha256": token_sha256("t")}},
        "grants": [{"principal": "a", "role": "reader", "streams": ["no-such-*"]}],
    }
    policy = parse_policy(json.dumps(doc, indent=2))
    assert not policy.principals_of(Identity.of("t")).may(Role.READER, "orders")


# -- fuzz ----------------------------------------------------------------------------

STREAMS = ["orders-eu", "orders-us", "payments", "pay", "x", "a.b", "team_c-1"]
GLOBS = ["orders-*", "payments", "pay*", "*", "x", "a.?", "team_[bc]-*", "nothing-*"]


def _oracle(grants: list[dict[str, object]], names: set[str], role: Role, stream: str) -> bool:
    from fnmatch import fnmatchcase

    for g in grants:
        if g["principal"] not in names:
            continue
        held = Role[str(g["role"]).upper()]
        if held is Role.ADMIN:
            return True
        if held >= role and any(fnmatchcase(stream, p) for p in g.get("streams", [])):  # type: ignore[attr-defined]
            return True
    return False


def _random_policy(rng: random.Random) -> tuple[str, dict[str, str], list[dict[str, object]], bool]:
    """A policy file (valid or broken in one of many ways), its tokens, its
    grants, and whether it is valid."""
    names = [f"p{i}" for i in range(rng.randint(1, 6))]
    tokens = {n: "".join(rng.choices(string.ascii_letters, k=12)) for n in names}
    principals: dict[str, dict[str, str]] = {
        n: {"token_sha256": token_sha256(tokens[n])} for n in names
    }
    grants: list[dict[str, object]] = []
    for _ in range(rng.randint(1, 6)):
        role = rng.choice(["reader", "operator", "admin"])
        g: dict[str, object] = {"principal": rng.choice(names), "role": role}
        if role != "admin":
            g["streams"] = rng.sample(GLOBS, rng.randint(1, 3))
        grants.append(g)
    valid = True
    fault = rng.random()
    if fault < 0.1:
        grants[0]["role"] = rng.choice(["root", "Reader ", "", "writer"])
        valid = False
    elif fault < 0.2:
        principals[names[0]]["token_sha256"] = tokens[names[0]]  # in clear
        valid = False
    elif fault < 0.3:
        grants[0]["principal"] = "ghost"
        valid = False
    elif fault < 0.35:
        grants.clear()
        valid = False
    doc = {"principals": principals, "grants": grants}
    text = json.dumps(doc) if rng.random() < 0.5 else _as_yaml(doc)
    if fault > 0.95:  # cut short: not YAML
        text = text[: rng.randint(0, len(text) - 1)]
        valid = None  # type: ignore[assignment]  # may still parse (a prefix)
    return text, tokens, grants, valid


def _as_yaml(doc: dict[str, object]) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False)


def test_fuzzed_policies_never_grant_beyond_the_file_nor_crash() -> None:
    rng = random.Random(30)
    parsed = refused = 0
    for _ in range(1500):  # over 1,000 files, valid and not
        text, tokens, grants, valid = _random_policy(rng)
        try:
            policy = parse_policy(text, "fuzz.yaml")
        except PolicyError as exc:
            refused += 1
            problem = str(exc)
        else:
            problem = ""
        if problem:
            assert valid is not True, f"a valid policy was refused: {problem}"
            for token in tokens.values():
                assert token not in problem
            continue
        assert valid is not False, f"a broken policy was taken:\n{text}"
        parsed += 1
        if valid is None:  # a file cut short that still parses: what it says
            grants = [
                {"principal": g.principal, "role": g.role.label, "streams": list(g.streams)}
                for g in policy.grants
            ]
        for name, token in tokens.items():
            for subject in ("", "CN=" + name):
                try:
                    r = policy.principals_of(Identity.of(token, subject))
                except AuthenticationError:
                    continue
                for stream in STREAMS:
                    for role in Role:
                        assert r.may(role, stream) == _oracle(grants, {name}, role, stream)
        for junk in ("", "x", rng.choice(list(tokens.values())) + "x"):
            with pytest.raises(AuthenticationError):
                policy.principals_of(Identity.of(junk))
    assert parsed > 800
    assert refused > 300


# -- the live file -------------------------------------------------------------------


def test_the_file_is_reread_when_it_changes_and_a_bad_one_keeps_the_last_good(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "policy.yaml"
    metrics = Metrics()
    access = AccessControl(str(path), metrics=metrics)
    with pytest.raises(UnavailableError) as closed:  # never had one: fail closed
        access.rights(Identity.of(TOKENS["platform"]))
    assert "every call is refused" in str(closed.value)
    path.write_text(TWO_TEAMS)
    assert access.load()
    assert access.rights(Identity.of(TOKENS["team-a-jobs"])).may(Role.READER, "orders-eu")
    # A new token for team A: the old one stops, the new one works.
    rotated = TWO_TEAMS.replace(token_sha256(TOKENS["team-a-jobs"]), token_sha256("rotated"))
    path.write_text(rotated)
    assert access.load()
    with pytest.raises(AuthenticationError):
        access.rights(Identity.of(TOKENS["team-a-jobs"]))
    assert access.rights(Identity.of("rotated")).may(Role.READER, "orders-eu")
    # A broken file: refused, said once, counted; the last good one stays.
    path.write_text(rotated.replace("role: admin", "role: superuser"))
    assert not access.load()
    assert not access.load()
    assert "superuser" in access.problem
    assert ":12:" in access.problem
    assert access.rights(Identity.of("rotated")).may(Role.READER, "orders-eu")
    value = metrics.registry.get_sample_value
    assert value("multikafka_access_policy_reloads_total", {"outcome": "refused"}) == 1
    assert value("multikafka_access_policy_reloads_total", {"outcome": "loaded"}) == 2
    assert value("multikafka_access_policy_valid") == 0
    refusals = [r for r in caplog.records if "access policy refused" in r.getMessage()]
    assert len(refusals) == 1
    path.write_text(TWO_TEAMS)
    assert access.load()
    assert value("multikafka_access_policy_valid") == 1


def test_a_handler_reached_without_the_interceptor_proves_nobody(tmp_path: Path) -> None:
    """Fail closed: where access is checked, a service asked outside a call
    the interceptor identified grants nothing (and everything where nothing
    is checked)."""
    from multikafka.coordinator.access import caller

    path = tmp_path / "policy.yaml"
    path.write_text(TWO_TEAMS)
    access = AccessControl(str(path))
    access.load()
    nobody = caller(access)
    assert not nobody.may(Role.READER, "orders-eu")
    with pytest.raises(AuthenticationError):
        nobody.require(Role.READER, "orders-eu")
    assert caller(AccessControl()).may(Role.ADMIN, "anything")
    assert caller().may(Role.ADMIN, "anything")
