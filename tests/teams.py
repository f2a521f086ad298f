"""Two teams on one coordinator, as a platform team would set them up:
team A reads ``orders-*`` (its jobs) and operates it (its operators), team
B reads ``payments``, the platform is an admin. The policy file is the
issue's, with tokens made here (stored only as SHA-256)."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multikafka.coordinator.access import token_sha256
from multikafka.core.admin_client import AdminClient
from multikafka.core.planner_client import PlannerClient
from multikafka.core.transport import ConnectConfig
from multikafka.devstack import CoordinatorThread
from multikafka.devstack.feed import create_topics
from tests.conftest import Cluster, coordinator_config
from tests.helpers import produce_sequence, stream_doc, uid

INTERNALS = ("multikafka.coordinator.access",)


#: Records in each stream's topic (per partition: half), plus a fence each.
RECORDS = 20
#: How often the test coordinator looks at its policy file (seconds).
POLICY_INTERVAL_S = 0.2
PRINCIPALS = ("team-a-jobs", "team-b-jobs", "team-a-ops", "platform")


def policy_text(tokens: dict[str, str], *, extra: str = "") -> str:
    """The issue's policy for ``tokens`` (principal -> token)."""
    h = {name: token_sha256(token) for name, token in tokens.items()}
    return f"""\
principals:
  team-a-jobs:  {{token_sha256: "{h["team-a-jobs"]}"}}
  team-b-jobs:  {{token_sha256: "{h["team-b-jobs"]}"}}
  team-a-ops:   {{token_sha256: "{h["team-a-ops"]}"}}
  spark-b:      {{cert_subject: "CN=spark-b,O=team-b"}}
  platform:     {{token_sha256: "{h["platform"]}"}}
grants:
  - {{principal: team-a-jobs, role: reader,   streams: ["orders-*"]}}
  - {{principal: spark-b,     role: reader,   streams: ["payments"]}}
  - {{principal: team-b-jobs, role: reader,   streams: ["payments"]}}
  - {{principal: team-a-ops,  role: operator, streams: ["orders-*"]}}
  - {{principal: platform,    role: admin}}
{extra}"""


@dataclass
class Teams:
    thread: CoordinatorThread
    policy: Path
    tokens: dict[str, str]
    #: stream -> its topic (orders-eu on clusters a and b, b a STANDBY mirror).
    topics: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return self.thread.address

    def connect(self, principal_or_token: str) -> ConnectConfig:
        token = self.tokens.get(principal_or_token, principal_or_token)
        return ConnectConfig.parse(self.address, token=token)

    def admin(self, principal: str = "platform") -> AdminClient:
        return AdminClient(self.connect(principal), timeout_s=10)

    def planner(self, principal: str) -> PlannerClient:
        return PlannerClient(self.connect(principal), timeout_s=5, call_timeout_s=5)

    def token_file(self, principal: str, directory: Path) -> Path:
        path = directory / f"{principal}.token"
        path.write_text(self.tokens[principal] + "\n")
        return path

    def write_policy(self, tokens: dict[str, str] | None = None, extra: str = "") -> None:
        """Rewrite the policy file (atomically, as a Secret volume swaps it)."""
        if tokens is not None:
            self.tokens = tokens
        tmp = self.policy.with_suffix(".new")
        tmp.write_text(policy_text(self.tokens, extra=extra))
        tmp.replace(self.policy)

    def etcd_values(self) -> bytes:
        """Every value under the coordinator's etcd prefix, joined."""
        coordinator = self.thread.coordinator
        assert coordinator is not None
        kvs, _ = self.thread.call(coordinator.etcd.get_prefix(coordinator.prefix + "/"))  # type: ignore[misc]
        return b"\n".join(kv.key.encode() + b"=" + kv.value for kv in kvs)


def new_tokens() -> dict[str, str]:
    return {name: f"{name}-{secrets.token_hex(16)}" for name in PRINCIPALS}


def start_teams(etcd_url: str, a: Cluster, b: Cluster, directory: Path, **overrides: Any) -> Teams:
    """The coordinator (policy file in ``directory``) with streams
    ``orders-eu`` (clusters a, b), ``orders-us`` and ``payments`` (a)."""
    tokens = new_tokens()
    policy = directory / "policy.yaml"
    policy.write_text(policy_text(tokens))
    thread = CoordinatorThread(
        coordinator_config(
            etcd_url,
            access_policy=str(policy),
            access_policy_interval_s=POLICY_INTERVAL_S,
            **overrides,
        )
    ).start()
    teams = Teams(thread, policy, tokens)
    with teams.admin() as admin:
        for stream in ("orders-eu", "orders-us", "payments"):
            topic = uid(stream)
            clusters = {"a": (a.bootstrap, [topic])}
            if stream == "orders-eu":
                clusters["b"] = (b.bootstrap, [topic])
                create_topics(b.bootstrap, {topic: 2})
            create_topics(a.bootstrap, {topic: 2})
            produce_sequence(a.bootstrap, topic, 2, stream, range(RECORDS))
            states = {"b": "STANDBY"} if stream == "orders-eu" else None
            admin.put_stream(stream_doc(stream, clusters, states=states))
            teams.topics[stream] = topic
    return teams


def as_text(*answers: object) -> str:
    """Answers as text (protobuf messages, lists of them, strings)."""
    out = []
    for answer in answers:
        if isinstance(answer, list):
            out += [str(a) for a in answer]
        elif isinstance(answer, dict):
            out.append(json.dumps(answer, default=str))
        else:
            out.append(str(answer))
    return "\n".join(out)
