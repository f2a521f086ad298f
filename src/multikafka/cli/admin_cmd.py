"""``multikafka admin``: manage streams and clusters through the Admin API."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from rich.console import Console
from rich.table import Table

from multikafka.cli.watch import watch
from multikafka.core import env
from multikafka.core.admin_client import AdminClient
from multikafka.core.exceptions import MultikafkaError
from multikafka.core.model import DEFAULT_REMOVED_CLUSTER_RETENTION_MS, FailoverStrategy
from multikafka.core.transport import ConnectConfig
from multikafka.core.validation import parse_duration_ms
from multikafka.v1 import admin_pb2, common_pb2


def console() -> Console:
    """Where tables go, made per use: it takes this invocation's terminal
    width (or COLUMNS), not that of whatever first imported this module."""
    return Console()


class Ctx:
    def __init__(self, client: AdminClient, as_json: bool) -> None:
        self.client = client
        self.as_json = as_json

    def emit(self, value: Message | list[Message], render: Any) -> None:
        if self.as_json:
            data = [_dict(v) for v in value] if isinstance(value, list) else _dict(value)
            click.echo(json.dumps(data, indent=2, sort_keys=True))
        else:
            render(value)


def _dict(m: Message) -> dict[str, Any]:
    d = _numbers(
        m,
        MessageToDict(
            m, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
        ),
    )
    if "document_json" in d:
        d["document"] = json.loads(d.pop("document_json"))
    return d


_INT64 = {FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64}


def _numbers(m: Message, d: dict[str, Any]) -> dict[str, Any]:
    """64-bit integers as JSON numbers (protobuf's JSON form writes them as strings)."""
    for f in m.DESCRIPTOR.fields:
        if f.name not in d:
            continue
        value = getattr(m, f.name)
        if f.message_type is not None and f.message_type.GetOptions().map_entry:
            vf = f.message_type.fields_by_name["value"]
            if vf.type in _INT64:
                d[f.name] = {k: int(v) for k, v in d[f.name].items()}
        elif f.type in _INT64:
            d[f.name] = (
                [int(v) for v in d[f.name]] if isinstance(d[f.name], list) else int(d[f.name])
            )
        elif f.message_type is not None:
            if isinstance(d[f.name], list):
                d[f.name] = [_numbers(v, x) for v, x in zip(value, d[f.name], strict=True)]
            else:
                d[f.name] = _numbers(value, d[f.name])
    return d


pass_ctx = click.make_pass_decorator(Ctx)

#: ``--json`` goes before the command (``admin --json streams list``) or after
#: it (``admin streams list --json``); the same output either way.
JSON_HELP = "print JSON (also accepted after the command)"
COMMAND_JSON_HELP = "print JSON (the same as `admin --json ...`)"


def _json_flag(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and (obj := ctx.find_object(Ctx)) is not None:
        obj.as_json = True


class AdminCommand(click.Command):
    """An admin command: takes ``--json`` after its name too, where users
    type it (``admin streams get orders --json``), the same as before it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(
            click.Option(
                ["--json", "as_json"],
                is_flag=True,
                expose_value=False,
                callback=_json_flag,
                help=COMMAND_JSON_HELP,
            )
        )


class AdminGroup(click.Group):
    """The admin group and its subgroups: every command in them is an
    :class:`AdminCommand`."""

    command_class = AdminCommand
    group_class = type  # subgroups are AdminGroups too


@click.group("admin", cls=AdminGroup)
@click.option(
    "--coordinator",
    default=None,
    help=f"coordinator host:port, or several comma-separated (calls go to the leader) [env {env.COORDINATOR}, default 127.0.0.1:7070]",
)
@click.option(
    "--token-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help=f"file holding the admin token [or env {env.ADMIN_TOKEN}, {env.ADMIN_TOKEN_FILE}]",
)
@click.option(
    "--tls-ca", default=None, help=f"CA of the coordinator's TLS certificate [env {env.TLS_CA}]"
)
@click.option("--tls-cert", default=None, help="client certificate (mutual TLS)")
@click.option("--tls-key", default=None, help="its key")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def admin_group(
    ctx: click.Context,
    coordinator: str | None,
    token_file: str | None,
    tls_ca: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    as_json: bool,
) -> None:
    """Manage streams and clusters on a running coordinator."""

    def connect() -> ConnectConfig:
        return ConnectConfig.from_files(
            coordinator or env.get(env.COORDINATOR, "127.0.0.1:7070"),
            ca=tls_ca or "",
            cert=tls_cert or "",
            key=tls_key or "",
            token=env.secret(
                env.ADMIN_TOKEN, env.ADMIN_TOKEN_FILE, file=token_file or "", what="--token-file"
            ),
        )

    client = AdminClient(run(connect))
    ctx.call_on_close(client.close)
    ctx.obj = Ctx(client, as_json)


def run(fn: Any) -> Any:
    """Turn multikafka errors into a one-line message and exit status 1."""
    try:
        return fn()
    except MultikafkaError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


def _render_stream(info: admin_pb2.StreamInfo) -> None:
    doc = json.loads(info.document_json)
    retention = doc.get("removed_cluster_retention_ms", DEFAULT_REMOVED_CLUSTER_RETENTION_MS)
    table = Table(
        title=f"stream {info.name} (version {info.version}, generation {info.generation}; "
        f"removed clusters remembered {_duration(retention)})"
    )
    for col in ("cluster", "state", "reachable", "partitions", "note"):
        table.add_column(col)
    for c in info.clusters:
        notes = [
            c.error
            if not c.reachable
            else (f"draining to {len(c.drain_offsets)} end offsets" if c.drain_offsets else "")
        ]
        starting = doc["clusters"].get(c.cluster, {}).get("starting")
        if starting is not None:
            notes.append(_starting_note(starting))
        stopping = doc["clusters"].get(c.cluster, {}).get("stopping")
        if stopping is not None:
            notes.append(_stopping_note(stopping))
        note = "; ".join(n for n in notes if n)
        bootstrap = doc["clusters"].get(c.cluster, {}).get("bootstrap_servers", "")
        table.add_row(
            f"{c.cluster} ({bootstrap})",
            common_pb2.ClusterState.Name(c.state),
            "yes" if c.reachable else "no",
            str(c.partitions),
            note,
        )
    console().print(table)


def _starting_note(starting: str | dict[str, Any]) -> str:
    """``new queries start at latest`` or ``... at time 1767225600000 ms``."""
    if isinstance(starting, dict):
        return f"new queries start at time {starting.get('timestamp')} ms"
    return f"new queries start at {starting}"


def _stopping_note(stopping: dict[str, Any]) -> str:
    """``stops at time 1767225600000 ms`` or ``stops at orders/0@1200, orders/1@980``."""
    if "timestamp" in stopping:
        return f"stops at time {stopping['timestamp']} ms"
    offsets = sorted(stopping.get("offsets", {}).items())
    shown = ", ".join(f"{tp}@{o}" for tp, o in offsets[:5])
    return f"stops at {shown}" + (f" (+{len(offsets) - 5} more)" if len(offsets) > 5 else "")


def _duration(ms: int) -> str:
    """``604800000`` -> ``7d``; the largest unit that divides it exactly."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _render_streams(infos: list[admin_pb2.StreamInfo]) -> None:
    table = Table(title="streams")
    for col in ("name", "version", "generation", "clusters"):
        table.add_column(col)
    for i in infos:
        table.add_row(
            i.name,
            str(i.version),
            str(i.generation),
            ", ".join(f"{c.cluster}:{common_pb2.ClusterState.Name(c.state)}" for c in i.clusters),
        )
    console().print(table)


@admin_group.group("streams")
def streams() -> None:
    """Stream documents."""


@streams.command("put")
@click.option(
    "--file", "path", required=True, type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--expected-version", type=int, default=0, help="only write if the stored version is this"
)
@pass_ctx
def streams_put(ctx: Ctx, path: Path, expected_version: int) -> None:
    """Create or replace a stream from a JSON document."""
    info = run(lambda: ctx.client.put_stream(path.read_text(), expected_version))
    ctx.emit(info, _render_stream)


@streams.command("get")
@click.argument("name")
@pass_ctx
def streams_get(ctx: Ctx, name: str) -> None:
    """Show a stream (secrets redacted) and its clusters' status."""
    ctx.emit(run(lambda: ctx.client.get_stream(name)), _render_stream)


@streams.command("list")
@pass_ctx
def streams_list(ctx: Ctx) -> None:
    """List streams."""
    ctx.emit(run(ctx.client.list_streams), _render_streams)


@streams.command("delete")
@click.argument("name")
@pass_ctx
def streams_delete(ctx: Ctx, name: str) -> None:
    """Delete a stream."""
    deleted = run(lambda: ctx.client.delete_stream(name))
    click.echo(json.dumps({"deleted": deleted}) if ctx.as_json else f"deleted {name}")


@streams.command("history")
@click.argument("name")
@click.option("--limit", type=int, default=50)
@pass_ctx
def streams_history(ctx: Ctx, name: str, limit: int) -> None:
    """What changed in a stream and why (reconciles, drains, failovers, abandoned ranges)."""

    def render(entries: list[admin_pb2.HistoryEntry]) -> None:
        table = Table(title=f"history of {name}")
        for col in ("time", "generation", "kind", "cluster", "detail", "by"):
            table.add_column(col)
        for e in entries:
            when = time.strftime("%H:%M:%S", time.localtime(e.time_ms / 1000))
            table.add_row(when, str(e.generation), e.kind, e.cluster, e.detail, e.principal)
        console().print(table)

    ctx.emit(run(lambda: ctx.client.history(name, limit)), render)


@streams.command("watch")
@click.argument("name")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=2.0,
    show_default=True,
    help="seconds between refreshes",
)
@click.option("--once", is_flag=True, help="show one frame and exit (for scripts and tests)")
@pass_ctx
def streams_watch(ctx: Ctx, name: str, interval: float, once: bool) -> None:
    """A live view of one stream until Ctrl-C: per cluster its state,
    reachability, partitions, records read per second and lag; the last
    reconcile and failover or drain; the queries and reader agents reading it.
    With --json: one JSON object per refresh."""
    run(
        lambda: watch(
            ctx.client,
            name,
            interval_s=interval,
            once=once,
            console=console(),
            as_dict=_dict if ctx.as_json else None,
        )
    )


@admin_group.group("cluster")
def cluster() -> None:
    """Cluster states: drain (planned migration), fail, activate."""


def _cluster_cmd(name: str, doc: str, op: str) -> None:
    @cluster.command(name, help=doc)
    @click.option("--stream", required=True)
    @click.option("--cluster", "cluster_id", required=True)
    @pass_ctx
    def cmd(ctx: Ctx, stream: str, cluster_id: str) -> None:
        ctx.emit(run(lambda: getattr(ctx.client, op)(stream, cluster_id)), _render_stream)


_cluster_cmd(
    "drain", "Read the cluster up to its current end offsets, then retire its splits.", "drain"
)
_cluster_cmd(
    "fail", "Mark the cluster FAILED: it is not read; planned ranges are abandoned.", "fail"
)
_cluster_cmd("activate", "Mark the cluster ACTIVE.", "activate")


@admin_group.command("failover")
@click.option("--stream", required=True)
@click.option("--from", "from_cluster", required=True, help="the failed cluster")
@click.option("--to", "to_cluster", required=True, help="the cluster that takes over")
@click.option(
    "--strategy",
    type=click.Choice([s.value for s in FailoverStrategy]),
    default="timestamp",
    help="timestamp (record time - margin), identity (same offsets), mm2 (MirrorMaker 2's offset syncs)",
)
@click.option(
    "--margin",
    default="30s",
    help="timestamp safety margin (mm2: where no sync is usable), e.g. 30s, 500ms",
)
@click.option("--reason", default="")
@click.option(
    "--dry-run",
    is_flag=True,
    help="change nothing: show where each query's splits of the new cluster would start",
)
@pass_ctx
def failover(
    ctx: Ctx,
    stream: str,
    from_cluster: str,
    to_cluster: str,
    strategy: str,
    margin: str,
    reason: str,
    dry_run: bool,
) -> None:
    """Fail over from one cluster to another: each query's splits of the new
    cluster start right after the mirror's copy of the last record it read
    (found from the strategy's estimate on), or at the estimate where no
    copy is found."""
    margin_ms = run(lambda: parse_duration_ms(margin, "--margin"))
    info = run(
        lambda: ctx.client.failover(
            stream,
            from_cluster,
            to_cluster,
            strategy=strategy,
            margin_ms=margin_ms,
            reason=reason,
            dry_run=dry_run,
        )
    )
    ctx.emit(info, _render_translations if dry_run else _render_stream)


def _render_translations(info: admin_pb2.StreamInfo) -> None:
    """A failover's dry run: per query and new split, how its start is chosen."""
    table = Table(title=f"failover of {info.name}, dry run: where each query's new splits start")
    for col in ("query", "split", "from", "estimate", "start", "not read again", "how"):
        table.add_column(col)
    for t in info.translations:
        table.add_row(
            t.query_id,
            t.split,
            t.source or "-",
            "-" if t.estimate < 0 else f"{t.estimate:,}",
            f"{t.offset:,}",
            f"{t.skipped:,}",
            t.result or "earliest",
        )
    console().print(table)
    if not info.translations:
        console().print("no query holds the failed cluster's splits: nothing to translate")


@admin_group.group("readers")
def readers() -> None:
    """Registered reader agents."""


@readers.command("list")
@pass_ctx
def readers_list(ctx: Ctx) -> None:
    """Registered agents, the generation each applied, how each converts
    Kafka messages into Arrow, their sub-readers."""

    def render(items: list[admin_pb2.ReaderInfo]) -> None:
        table = Table(title="reader agents")
        for col in ("agent", "host:pid", "generation", "subscribed", "converter", "sub-readers"):
            table.add_column(col)
        for r in items:
            table.add_row(
                r.agent_id,
                f"{r.host}:{r.pid}",
                str(r.applied_generation),
                "yes" if r.subscribed else "no",
                r.converter or "?",
                ", ".join(r.sub_readers),
            )
        console().print(table)

    ctx.emit(run(ctx.client.readers), render)


@admin_group.command("assignments")
@click.option("--stream", required=True)
@pass_ctx
def assignments(ctx: Ctx, stream: str) -> None:
    """Which splits each agent read most recently."""

    def render(items: list[admin_pb2.Assignment]) -> None:
        table = Table(title=f"assignments of {stream}")
        table.add_column("agent")
        table.add_column("splits")
        for a in items:
            table.add_row(a.agent_id, ", ".join(a.splits))
        console().print(table)

    ctx.emit(run(lambda: ctx.client.assignments(stream)), render)


@admin_group.group("queries")
def queries() -> None:
    """Queries reading through the coordinator."""


@queries.command("list")
@pass_ctx
def queries_list(ctx: Ctx) -> None:
    """Each query's last committed offsets."""

    def render(items: list[admin_pb2.QueryInfo]) -> None:
        table = Table(title="queries")
        for col in ("query", "stream", "splits", "records committed", "updated"):
            table.add_column(col)
        for q in items:
            when = time.strftime("%H:%M:%S", time.localtime(q.updated_ms / 1000))
            table.add_row(
                q.query_id, q.stream, str(len(q.offsets)), str(sum(q.offsets.values())), when
            )
        console().print(table)

    ctx.emit(run(ctx.client.queries), render)


@admin_group.command("grants")
@pass_ctx
def grants(ctx: Ctx) -> None:
    """Who the caller is and its grants (an admin: every principal's), from
    the access policy in force."""

    def render(g: admin_pb2.ListGrantsResponse) -> None:
        console().print(f"you are [bold]{g.caller or 'anonymous (no access control)'}[/bold]")
        if g.problem:
            console().print(f"[red]the policy file in place is refused[/red]: {g.problem}")
        table = Table(title=f"grants ({g.source or 'token files'})")
        for col in ("principal", "role", "streams", "references"):
            table.add_column(col)
        for grant in g.grants:
            table.add_row(
                grant.principal,
                grant.role,
                ", ".join(grant.streams) or "(every stream)",
                ", ".join(grant.references),
            )
        console().print(table)

    ctx.emit(run(ctx.client.grants), render)


@admin_group.command("status")
@pass_ctx
def status(ctx: Ctx) -> None:
    """The role of the coordinator reached, the leader, etcd, and the replicas."""

    def render(s: admin_pb2.StatusResponse) -> None:
        console().print(
            f"[bold]{s.address}[/bold] is the [bold]{s.role}[/bold]"
            + (f"; the leader is {s.leader}" if s.role != "leader" and s.leader else "")
            + ("; no leader elected" if not s.leader else "")
        )
        etcd = f"{', '.join(s.etcd.endpoints)} (talking to {s.etcd.connected}"
        etcd += (
            f", etcd {s.etcd.version})" if s.etcd.reachable else f": unreachable: {s.etcd.error})"
        )
        console().print(f"etcd: {etcd}; metadata generation {s.generation}")
        table = Table(title="coordinator replicas")
        for col in ("address", "role", "id", "up since"):
            table.add_column(col)
        for r in s.replicas:
            since = time.strftime("%H:%M:%S", time.localtime(r.since_ms / 1000))
            table.add_row(r.address, r.role, r.id, since)
        console().print(table)

    ctx.emit(run(ctx.client.status), render)
