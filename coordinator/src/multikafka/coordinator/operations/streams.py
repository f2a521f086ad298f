"""What operators do to streams, on the leader: put and delete stream
documents, drain, fail, activate and fail over clusters (the cluster
lifecycle), and ask which agents hold which splits. Each answers with what
the term knows of the stream afterwards (:class:`StreamReport`).

Secrets in stream properties are never returned (they are redacted), and a
document put back with redacted values keeps the stored ones, but only for a
cluster reached the same way (:func:`keep_stored_secrets`).
"""

from __future__ import annotations

from dataclasses import replace

from multikafka.coordinator.agents.registry import AgentRegistry
from multikafka.coordinator.clusters.lifecycle import ClusterLifecycle
from multikafka.coordinator.operations.reports import LeaderReports, StreamReport
from multikafka.coordinator.state.history import History
from multikafka.coordinator.state.metadata import MetadataStore
from multikafka.coordinator.state.queries import QueryStore
from multikafka.coordinator.translation import FailoverTranslator, ReadMarks, Translation
from multikafka.core._secrets import REDACTED, is_secret
from multikafka.core.exceptions import ValidationError
from multikafka.core.model import ClusterSpec, FailoverStrategy, StreamSpec

__all__ = ["StreamOperations", "keep_stored_secrets"]


class StreamOperations:
    """The Admin service's writes, for one term of leadership."""

    def __init__(
        self,
        store: MetadataStore,
        lifecycle: ClusterLifecycle,
        history: History,
        marks: ReadMarks,
        registry: AgentRegistry,
        reports: LeaderReports,
        translator: FailoverTranslator,
        queries: QueryStore,
    ) -> None:
        self._store = store
        self._lifecycle = lifecycle
        self._history = history
        self._marks = marks
        self._registry = registry
        self._reports = reports
        self._translator = translator
        self._queries = queries

    async def put_stream(self, spec: StreamSpec, expected_version: int = 0) -> StreamReport:
        """Store ``spec`` (if the stored version is still ``expected_version``;
        0: any) and answer once this replica applied it."""
        stored = self._store.find(spec.name)
        spec = keep_stored_secrets(spec, stored.spec if stored is not None else None)
        revision = await self._store.put_stream(spec, expected_version)
        await self._store.wait_applied(revision)
        return self._reports.stream(spec.name)

    async def delete_stream(self, name: str) -> bool:
        """Delete the stream, its history and its read marks."""
        self._store.get(name)
        deleted = await self._store.delete_stream(name)
        self._history.forget(name)
        self._marks.forget(name)
        return deleted

    async def drain(self, stream: str, cluster: str) -> StreamReport:
        return self._reports.describe(await self._lifecycle.drain(stream, cluster))

    async def fail(self, stream: str, cluster: str) -> StreamReport:
        return self._reports.describe(await self._lifecycle.fail(stream, cluster))

    async def activate(self, stream: str, cluster: str) -> StreamReport:
        return self._reports.describe(await self._lifecycle.activate(stream, cluster))

    async def failover(
        self,
        stream: str,
        from_cluster: str,
        to_cluster: str,
        *,
        strategy: FailoverStrategy,
        margin_ms: int,
        reason: str,
    ) -> StreamReport:
        view = await self._lifecycle.failover(
            stream, from_cluster, to_cluster, strategy=strategy, margin_ms=margin_ms, reason=reason
        )
        return self._reports.describe(view)

    async def preview_failover(
        self,
        stream: str,
        from_cluster: str,
        to_cluster: str,
        *,
        strategy: FailoverStrategy,
        margin_ms: int,
    ) -> tuple[StreamReport, list[tuple[str, Translation]]]:
        """A failover's dry run: checked as the failover would be, nothing
        changed; for each query holding ``from_cluster``'s splits, where
        ``to_cluster``'s would start from its last committed position."""
        view, record = self._lifecycle.failover_record(
            stream, from_cluster, to_cluster, strategy=strategy, margin_ms=margin_ms
        )
        out: list[tuple[str, Translation]] = []
        for q in self._queries.of_stream(stream):
            if record is None or from_cluster not in q.offsets.splits.clusters():
                continue
            notes = await self._translator.preview(
                view, record, q.offsets, q.abandoned, group_id=q.group_id
            )
            out.extend((q.query_id, t) for t in notes)
        return self._reports.describe(view), out

    def note(self, stream: str, what: str, principal: str, *, cluster: str = "") -> None:
        """Record in the stream's history that ``principal`` asked for ``what``."""
        self._history.record(stream, "request", cluster=cluster, detail=what, principal=principal)

    def assignments(self, stream: str) -> list[tuple[str, list[str]]]:
        """(agent id, splits of ``stream`` it reported reading lately), for
        every agent that holds some."""
        self._store.get(stream)
        return [(a.agent_id, held) for a in self._registry.agents() if (held := a.held(stream))]


#: librdkafka settings that decide where a client connects and how it proves
#: who it is (a stored secret is only reused while these stay the same).
_CONNECTION_PREFIXES = ("security.", "sasl.", "ssl.", "ssl_", "plugin.", "client.dns.")


def _where_and_how(cluster: ClusterSpec) -> tuple[str, dict[str, str]]:
    settings = {
        k: v
        for k, v in cluster.properties.items()
        if k.startswith(_CONNECTION_PREFIXES) and not is_secret(k)
    }
    return cluster.bootstrap_servers, settings


def keep_stored_secrets(spec: StreamSpec, stored: StreamSpec | None) -> StreamSpec:
    """A document read back (secrets redacted) and put again keeps the stored
    secrets: only for a cluster reached the same way. A redacted secret with
    new brokers or new security settings is refused, or an admin (who never
    sees secrets) could send readers, with the real password, to brokers of
    their choosing. The marker itself is never stored."""
    clusters = {}
    for cid, c in spec.clusters.items():
        redacted = [k for k, v in c.properties.items() if v == REDACTED]
        if not redacted:
            clusters[cid] = c
            continue
        before = stored.clusters.get(cid) if stored is not None else None
        missing = [k for k in redacted if before is None or k not in before.properties]
        if before is None or missing:
            key = missing[0]
            raise ValidationError(
                f"clusters.{cid}.properties.{key}",
                f"is {REDACTED}, but there is no stored value to keep "
                f"(cluster {cid!r} has none for it): give the value",
            )
        if _where_and_how(before) != _where_and_how(c):
            raise ValidationError(
                f"clusters.{cid}.properties.{redacted[0]}",
                f"is {REDACTED}, but where or how the cluster is reached changed "
                "(bootstrap_servers, security.*, sasl.*, ssl.*): give the secret again "
                "with the new connection settings",
            )
        clusters[cid] = replace(c, properties=c.properties.merged_over(before.properties))
    return replace(spec, clusters=clusters)
