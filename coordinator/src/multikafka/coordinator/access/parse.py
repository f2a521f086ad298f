"""Reading an access policy file (YAML, or JSON, which YAML reads too).

Every refusal names the line and what to fix: an unknown key or role, a
principal named twice or not defined, a token written in clear where its
SHA-256 belongs, an empty list of grants. A stream glob that matches no
stream is fine (the stream may come later). Scalars are taken as written
(``yes`` stays the text ``yes``), and the file is walked as YAML nodes,
so a key written twice is refused too, not silently overwritten.
"""

from __future__ import annotations

import hashlib
import re

import yaml

from multikafka.coordinator.access.policy import (
    ANY_CERTIFICATE,
    Grant,
    Policy,
    Principal,
    Role,
    normal_subject,
)
from multikafka.core.exceptions import ValidationError, shown

__all__ = ["MAX_POLICY_BYTES", "PolicyError", "parse_policy"]

#: Largest policy file read (thousands of principals fit in far less).
MAX_POLICY_BYTES = 4 * 1024 * 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,127}")
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: Stream globs: a stream name's characters and fnmatch's.
_STREAM_GLOB = re.compile(r"[A-Za-z0-9._*?\[\]!-]{1,249}")
_ROLES = {r.label: r for r in Role}


class PolicyError(ValidationError):
    """A policy file that cannot be used; ``line`` is 1-based (0: the file)."""

    def __init__(self, source: str, line: int, problem: str) -> None:
        self.line = line
        where = f"{source}:{line}" if line else source
        super().__init__(where, problem)


def parse_policy(text: str | bytes, source: str = "access policy") -> Policy:
    """The :class:`Policy` ``text`` states; :class:`PolicyError` otherwise."""
    data = text.encode() if isinstance(text, str) else text
    if len(data) > MAX_POLICY_BYTES:
        raise PolicyError(source, 0, f"is larger than {MAX_POLICY_BYTES:,} bytes")
    try:
        root = yaml.compose(data.decode("utf-8"), Loader=yaml.SafeLoader)
    except UnicodeDecodeError:
        raise PolicyError(source, 0, "is not UTF-8 text") from None
    except yaml.MarkedYAMLError as exc:
        where = exc.problem_mark
        raise PolicyError(
            source, where.line + 1 if where else 0, f"is not YAML or JSON: {exc.problem}"
        ) from None
    except yaml.YAMLError as exc:
        raise PolicyError(source, 0, f"is not YAML or JSON: {exc}") from None
    return _PolicyParser(source).policy(root, hashlib.sha256(data).hexdigest())


class _PolicyParser:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: yaml.Node | None, problem: str) -> PolicyError:
        line = node.start_mark.line + 1 if node is not None and node.start_mark else 0
        return PolicyError(self.source, line, problem)

    def mapping(
        self, node: yaml.Node | None, what: str, allowed: set[str] | None = None
    ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """key -> (key node, value node); duplicates and unknown keys refused."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping (key: value)")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key, value in node.value:
            name = self.scalar(key, f"a key of {what}")
            if name in out:
                raise self.fail(key, f"{what} names {shown(name)} twice")
            if allowed is not None and name not in allowed:
                raise self.fail(
                    key, f"unknown key {shown(name)} in {what}; use {', '.join(sorted(allowed))}"
                )
            out[name] = (key, value)
        return out

    def scalar(self, node: yaml.Node | None, what: str) -> str:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, f"{what} must be text")
        return str(node.value)

    def strings(self, node: yaml.Node, what: str) -> list[tuple[yaml.Node, str]]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, f"{what} must be a list")
        return [(item, self.scalar(item, f"an item of {what}")) for item in node.value]

    def policy(self, root: yaml.Node | None, digest: str) -> Policy:
        if root is None:
            raise PolicyError(self.source, 0, "is empty: it needs principals and grants")
        top = self.mapping(root, "the policy", {"principals", "grants"})
        for key in ("principals", "grants"):
            if key not in top:
                raise self.fail(root, f"the policy has no {key!r}")
        principals = self.principals(top["principals"][1])
        grants = self.grants(top["grants"][1], principals)
        return Policy(principals, tuple(grants), self.source, digest)

    def principals(self, node: yaml.Node) -> dict[str, Principal]:
        entries = self.mapping(node, "principals")
        principals: dict[str, Principal] = {}
        tokens: dict[str, str] = {}
        subjects: dict[str, str] = {}
        for name, (key, value) in entries.items():
            if not _NAME.fullmatch(name):
                raise self.fail(
                    key,
                    f"principal name {shown(name)}: use 1-128 letters, digits, '.', '_', '@', '-'",
                )
            fields = self.mapping(value, f"principal {name}", {"token_sha256", "cert_subject"})
            if not fields:
                raise self.fail(value, f"principal {name} needs token_sha256, cert_subject or both")
            token = subject = ""
            if "token_sha256" in fields:
                tnode = fields["token_sha256"][1]
                token = self.scalar(tnode, f"{name}.token_sha256").strip()
                if not _SHA256.fullmatch(token):
                    raise self.fail(tnode, _token_problem(name, token))
                if token in tokens:
                    raise self.fail(
                        tnode, f"principals {tokens[token]} and {name} have the same token_sha256"
                    )
                tokens[token] = name
            if "cert_subject" in fields:
                snode = fields["cert_subject"][1]
                raw = self.scalar(snode, f"{name}.cert_subject").strip()
                if not raw or ("=" not in raw and raw != ANY_CERTIFICATE):
                    raise self.fail(
                        snode,
                        f"principal {name}: cert_subject is a certificate's subject, like "
                        "'CN=spark-b,O=team-b'",
                    )
                subject = normal_subject(raw) if raw != ANY_CERTIFICATE else raw
                if subject in subjects and not token:
                    raise self.fail(
                        snode,
                        f"principals {subjects[subject]} and {name} have the same cert_subject",
                    )
                subjects.setdefault(subject, name)
            principals[name] = Principal(name, token, subject)
        return principals

    def grants(self, node: yaml.Node, principals: dict[str, Principal]) -> list[Grant]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, "grants must be a list of {principal, role, streams}")
        if not node.value:
            raise self.fail(
                node, "grants is empty: a policy that grants nothing refuses every call"
            )
        grants = []
        for i, item in enumerate(node.value):
            what = f"grants[{i}]"
            fields = self.mapping(item, what, {"principal", "role", "streams", "references"})
            for key in ("principal", "role"):
                if key not in fields:
                    raise self.fail(item, f"{what} has no {key!r}")
            pnode = fields["principal"][1]
            principal = self.scalar(pnode, f"{what}.principal")
            if principal not in principals:
                raise self.fail(
                    pnode, f"{what}: principal {shown(principal)} is not defined under principals"
                )
            rnode = fields["role"][1]
            role = _ROLES.get(self.scalar(rnode, f"{what}.role"))
            if role is None:
                raise self.fail(
                    rnode,
                    f"{what}: unknown role {shown(rnode.value)}; use reader, operator or admin",
                )
            streams: list[str] = []
            if "streams" in fields:
                for snode, glob in self.strings(fields["streams"][1], f"{what}.streams"):
                    if not _STREAM_GLOB.fullmatch(glob):
                        raise self.fail(
                            snode,
                            f"{what}: {shown(glob)} is not a stream name or glob "
                            "(letters, digits, '.', '_', '-', and * ? [ ])",
                        )
                    streams.append(glob)
            if role is Role.ADMIN and streams:
                raise self.fail(
                    fields["streams"][0],
                    f"{what}: admin covers every stream; grant operator for some streams",
                )
            if role is not Role.ADMIN and not streams:
                raise self.fail(item, f"{what}: a {role.label} grant names its streams (globs)")
            references = []
            if "references" in fields:
                if role is not Role.OPERATOR:
                    raise self.fail(
                        fields["references"][0],
                        f"{what}: references are granted to operators (admins may use any)",
                    )
                for rnode2, ref in self.strings(fields["references"][1], f"{what}.references"):
                    if not ref.startswith(("/", "env:")):
                        raise self.fail(
                            rnode2,
                            f"{what}: {shown(ref)}: a reference glob is an absolute path "
                            "(/etc/kafka-secrets/team-a/*) or env:NAME*",
                        )
                    references.append(ref)
            grants.append(
                Grant(
                    principal,
                    role,
                    tuple(streams),
                    tuple(references),
                    item.start_mark.line + 1 if item.start_mark else 0,
                )
            )
        return grants


def _token_problem(name: str, value: str) -> str:
    if not value:
        return f"principal {name}: token_sha256 is empty"
    if re.fullmatch(r"[0-9A-Fa-f]{64}", value):
        return f"principal {name}: write token_sha256 in lower case hex"
    # Never echo it: it may be the token itself.
    return (
        f"principal {name}: token_sha256 must be the token's SHA-256 (64 hex digits), "
        f'not the token in clear: printf %s "$TOKEN" | sha256sum ({len(value)} characters given)'
    )
