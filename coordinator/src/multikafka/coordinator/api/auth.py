"""Who is calling, and may it call this method at all.

:class:`AuthInterceptor` is the one place that looks at credentials: it
reads the call's bearer token (hashed at once) and its verified client
certificate's subject, asks the :class:`~multikafka.coordinator.access.AccessControl`
which principals they prove, and checks the method's rule (:data:`RULES`:
the role a method needs somewhere, and whether it changes something). The
service then decides per stream where it parses the request's stream
(``caller().require(role, stream)``) and filters what it lists.

* no credential, or one the policy does not know: ``UNAUTHENTICATED``;
* a role not held on any stream (a reader on the Admin service), or not
  on the stream asked for: ``PERMISSION_DENIED``, naming the method or the
  stream and the role missing, never another stream or a secret;
* no valid policy ever loaded: ``UNAVAILABLE`` (fail closed);
* health checking and reflection: anyone.

Every refusal is counted (``multikafka_denied_total{role,service}``) and
audited; every call that changes something is audited with its outcome.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc

from multikafka.coordinator.access import AccessControl, Caller, Identity, Role, audit
from multikafka.coordinator.access.caller import OPEN, done, serving
from multikafka.coordinator.api.rpc import handler_like
from multikafka.core._grpc_codes import clip, to_grpc_code
from multikafka.core.exceptions import (
    AuthenticationError,
    PermissionDeniedError,
    UnavailableError,
    shown,
)

PREFIX = "/multikafka.v1."
ADMIN = "/multikafka.v1.Admin/"
PLANNER = "/multikafka.v1.Planner/"
READER = "/multikafka.v1.Reader/"

Summary = Callable[[Any], tuple[str, dict[str, Any]]]


@dataclass(frozen=True)
class Rule:
    """What a method needs: ``role`` on at least one stream (the stream
    asked for is checked by the service), and whether it changes something
    (then every call is audited, with ``summary``: (stream, request fields))."""

    role: Role
    changes: bool = False
    summary: Summary | None = None


def _stream_of(field: str, *more: str) -> Summary:
    def summary(request: Any) -> tuple[str, dict[str, Any]]:
        return str(getattr(request, field, "")), {f: str(getattr(request, f, "")) for f in more}

    return summary


def _put_summary(request: Any) -> tuple[str, dict[str, Any]]:
    try:
        doc = json.loads(request.document_json)
        name = str(doc.get("name", "")) if isinstance(doc, dict) else ""
        clusters = sorted(doc.get("clusters", {})) if isinstance(doc, dict) else []
        states = {
            c: str(v.get("state", "ACTIVE"))
            for c, v in (doc.get("clusters", {}) or {}).items()
            if isinstance(v, dict)
        }
    except (ValueError, AttributeError, TypeError):
        return "", {"document": "does not parse"}
    # Names and states only: a document's properties may hold secrets.
    return shown(name, 250)[1:-1] if name else "", {
        "clusters": clusters[:50],
        "states": dict(list(states.items())[:50]),
        "expected_version": int(request.expected_version),
    }


_CLUSTER = _stream_of("stream", "cluster")

#: The rule of every method; a method not named here needs ``admin``.
RULES: dict[str, Rule] = {
    f"{ADMIN}PutStream": Rule(Role.OPERATOR, True, _put_summary),
    f"{ADMIN}DeleteStream": Rule(Role.OPERATOR, True, _stream_of("name")),
    f"{ADMIN}DrainCluster": Rule(Role.OPERATOR, True, _CLUSTER),
    f"{ADMIN}FailCluster": Rule(Role.OPERATOR, True, _CLUSTER),
    f"{ADMIN}ActivateCluster": Rule(Role.OPERATOR, True, _CLUSTER),
    f"{ADMIN}Failover": Rule(
        Role.OPERATOR,
        True,
        _stream_of("stream", "from_cluster", "to_cluster", "strategy", "reason", "dry_run"),
    ),
    f"{ADMIN}GetStream": Rule(Role.OPERATOR),
    f"{ADMIN}ListStreams": Rule(Role.OPERATOR),
    f"{ADMIN}StreamHistory": Rule(Role.OPERATOR),
    f"{ADMIN}ListReaders": Rule(Role.OPERATOR),
    f"{ADMIN}ListAssignments": Rule(Role.OPERATOR),
    f"{ADMIN}ListQueries": Rule(Role.OPERATOR),
    f"{ADMIN}Status": Rule(Role.OPERATOR),
    # Any principal may see its own grants (admins: everyone's).
    f"{ADMIN}ListGrants": Rule(Role.READER),
    **{
        f"{PLANNER}{m}": Rule(Role.READER)
        for m in (
            "ResolveOffsets",
            "LatestOffsets",
            "LatestOffsetsStream",
            "PlanPartitions",
            "Commit",
        )
    },
    **{
        f"{READER}{m}": Rule(Role.READER)
        for m in ("Register", "Subscribe", "Heartbeat", "Acknowledge", "ReportReads")
    },
}
_UNLISTED = Rule(Role.ADMIN)

_HOW = {
    ADMIN: "an admin or operator token: multikafka admin --token-file PATH, or MULTIKAFKA_ADMIN_TOKEN",
    PLANNER: (
        "a reader token: Spark option coordinatorTokenFile, Reader(token_file=...), or "
        "MULTIKAFKA_READER_TOKEN; or a client certificate"
    ),
}
_HOW[READER] = _HOW[PLANNER]


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Identifies the caller of every ``multikafka.v1`` call and checks the
    method's :class:`Rule` (see the module docstring). The wrapped handler
    of a method is made once, on its first call."""

    def __init__(self, access: AccessControl, *, mtls: bool) -> None:
        self._access = access
        #: Whether calls carry verified client certificates (mutual TLS).
        self._mtls = mtls
        self._wrapped: dict[str, tuple[Any, grpc.RpcMethodHandler[Any, Any]]] = {}

    async def intercept_service(  # type: ignore[override]  # types-grpcio: generic method
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any]]
        ],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any]:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(PREFIX):
            return handler
        known = self._wrapped.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self._wrap(handler, method, RULES.get(method, _UNLISTED))
        self._wrapped[method] = (handler, wrapped)
        return wrapped

    def identify(self, context: grpc.aio.ServicerContext[Any, Any]) -> Identity:
        """What the call proves; :class:`AuthenticationError` for a
        malformed authorization header."""
        token = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                text = value if isinstance(value, str) else value.decode("latin-1")
                if not text.startswith("Bearer ") or not text[7:].strip():
                    raise AuthenticationError("the authorization header must be 'Bearer <token>'")
                token = text[7:].strip()
                break
        subject, has_cert = "", False
        if self._mtls:
            auth = context.auth_context()
            names = list(auth.get("x509_subject") or ())
            has_cert = bool(auth.get("x509_pem_cert"))
            subject = names[0].decode("utf-8", "replace") if names else ""
        return Identity.of(token, subject, has_certificate=has_cert)

    def _caller(
        self, context: grpc.aio.ServicerContext[Any, Any], method: str, rule: Rule
    ) -> Caller:
        """The checked caller, or :class:`AuthenticationError` /
        :class:`UnavailableError` (refusal counted and audited)."""
        if self._access.open_to_all(method):
            return OPEN  # a service no credential guards (no policy file)
        try:
            caller = Caller(self._access, self.identify(context), method)
            rights = caller.rights
        except AuthenticationError as exc:
            Caller(self._access, Identity(), method).refused(rule.role, "", str(exc))
            service = next((s for s in _HOW if method.startswith(s)), "")
            hint = f" ({_HOW[service]})" if service else ""
            raise AuthenticationError(f"{exc}{hint}") from None
        if not rights.holds(rule.role):
            caller.refused(rule.role, "", "role not held")
            raise PermissionDeniedError(
                f"{rights.name} may not call {method.rsplit('/', 1)[-1]}: it needs the "
                f"{rule.role.label} role on some stream, which the access policy does not grant"
            )
        return caller

    def _wrap(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str, rule: Rule
    ) -> grpc.RpcMethodHandler[Any, Any]:
        behavior: Any = handler.unary_unary or handler.stream_unary
        behavior_stream: Any = handler.stream_stream or handler.unary_stream

        async def refuse(context: grpc.aio.ServicerContext[Any, Any], exc: Exception) -> None:
            await context.abort(to_grpc_code(exc), clip(str(exc)))

        async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            try:
                caller = self._caller(context, method, rule)
            except (AuthenticationError, UnavailableError) as exc:
                await refuse(context, exc)
                raise AssertionError("unreachable: context.abort raises") from None
            token = serving(caller)
            try:
                if not rule.changes:
                    return await behavior(request, context)
                return await _audited(behavior, request, context, caller, rule)
            finally:
                done(token)

        async def stream(
            request: Any, context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            try:
                caller = self._caller(context, method, rule)
            except (AuthenticationError, UnavailableError) as exc:
                await refuse(context, exc)
                return
            # The call's own task: the caller stays set for its whole life.
            serving(caller)
            async for item in behavior_stream(request, context):
                yield item

        return handler_like(handler, unary, stream)


async def _audited(
    behavior: Any,
    request: Any,
    context: grpc.aio.ServicerContext[Any, Any],
    caller: Caller,
    rule: Rule,
) -> Any:
    """Run a call that changes something, and audit it with its outcome."""
    stream, fields = rule.summary(request) if rule.summary is not None else ("", {})
    outcome = "ok"
    try:
        return await behavior(request, context)
    except BaseException as exc:
        code = context.code() if hasattr(context, "code") else None
        outcome = f"failed: {getattr(code, 'name', '') or type(exc).__name__}"
        details = context.details() if hasattr(context, "details") else ""
        if details:
            outcome += f": {details if isinstance(details, str) else details.decode()}"[:300]
        raise
    finally:
        audit(
            "change",
            principal=caller.name or "(anonymous)",
            method=caller.method,
            stream=stream,
            request=fields,
            outcome=outcome,
            level=logging.INFO if outcome == "ok" else logging.WARNING,
        )
