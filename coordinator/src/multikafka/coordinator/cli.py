"""Run one coordinator replica: ``multikafka-coordinator`` (this
distribution's command, also ``python -m multikafka.coordinator``) and
``multikafka coordinator`` (the same command in the umbrella CLI)."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from pathlib import Path

import click

from multikafka.coordinator import Coordinator, CoordinatorConfig
from multikafka.coordinator.config import etcd_settings, tls_files
from multikafka.core import env
from multikafka.core.exceptions import MultikafkaError
from multikafka.core.logs import configure

_FILE = click.Path(exists=True, dir_okay=False)


@click.command("coordinator")
@click.option(
    "--etcd",
    help=f"etcd URL(s), comma-separated, e.g. https://etcd-0:2379,https://etcd-1:2379 [env {env.ETCD}]",
)
@click.option("--etcd-ca", type=_FILE, help=f"CA of etcd's certificates (TLS) [env {env.ETCD_CA}]")
@click.option("--etcd-cert", type=_FILE, help=f"client certificate for etcd [env {env.ETCD_CERT}]")
@click.option("--etcd-key", type=_FILE, help=f"its key [env {env.ETCD_KEY}]")
@click.option("--etcd-user", help=f"etcd user (auth enabled) [env {env.ETCD_USER}]")
@click.option(
    "--etcd-password-file",
    type=_FILE,
    help=f"file holding its password [env {env.ETCD_PASSWORD_FILE}]",
)
@click.option(
    "--prefix", "etcd_prefix", help=f"etcd key prefix (default /multikafka) [env {env.ETCD_PREFIX}]"
)
@click.option("--listen", help=f"gRPC host:port (default 127.0.0.1:7070) [env {env.LISTEN}]")
@click.option(
    "--advertise",
    help=f"host:port clients reach this replica at (default: from --listen) [env {env.ADVERTISE}]",
)
@click.option(
    "--metrics-listen",
    help=f"HTTP host:port for /metrics, /healthz, /readyz, /leader [env {env.METRICS_LISTEN}]",
)
@click.option(
    "--admin-token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help=f"file holding the token admin calls need [or env {env.ADMIN_TOKEN}, {env.ADMIN_TOKEN_FILE}]",
)
@click.option(
    "--reader-token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help=f"file holding the token planner and reader calls need [or env {env.READER_TOKEN}, {env.READER_TOKEN_FILE}]",
)
@click.option(
    "--access-policy",
    type=click.Path(dir_okay=False),
    help="YAML or JSON file of principals and their grants per stream glob, re-read when "
    f"it changes (docs/deploy.md) [env {env.ACCESS_POLICY}]",
)
@click.option("--tls-cert", type=_FILE, help=f"server certificate (TLS) [env {env.TLS_CERT}]")
@click.option("--tls-key", type=_FILE, help=f"its key [env {env.TLS_KEY}]")
@click.option(
    "--tls-client-ca",
    type=_FILE,
    help=f"require client certificates signed by this CA (mutual TLS) [env {env.TLS_CLIENT_CA}]",
)
@click.option(
    "--lease-ttl",
    type=click.FloatRange(min=1.0),
    help=f"seconds the leader's lease lives without renewal (default 5) [env {env.LEASE_TTL}]",
)
@click.option(
    "--discovery-interval", type=float, help="seconds between partition discoveries (default 5)"
)
@click.option(
    "--watermark-max-age",
    type=click.FloatRange(min=0.0),
    help="seconds a cluster's high watermarks may be old when a query plans with them; "
    "shared by every query (default 0.1; 0: ask the cluster on every call)",
)
@click.option(
    "--etcd-wait",
    type=float,
    default=30.0,
    show_default=True,
    help="seconds to wait for etcd at start",
)
def coordinator_command(
    etcd: str | None,
    etcd_ca: str | None,
    etcd_cert: str | None,
    etcd_key: str | None,
    etcd_user: str | None,
    etcd_password_file: str | None,
    etcd_prefix: str | None,
    listen: str | None,
    advertise: str | None,
    metrics_listen: str | None,
    admin_token_file: Path | None,
    reader_token_file: Path | None,
    access_policy: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    lease_ttl: float | None,
    discovery_interval: float | None,
    watermark_max_age: float | None,
    etcd_wait: float,
) -> None:
    """Run a coordinator replica: watch stream metadata in etcd, take part in
    the leader election, plan micro-batches and push reconcile events (while
    leading), serve the Admin/Planner/Reader gRPC services."""
    try:
        config = _config(
            etcd,
            etcd_ca,
            etcd_cert,
            etcd_key,
            etcd_user,
            etcd_password_file,
            etcd_prefix=etcd_prefix,
            listen=listen,
            advertise=advertise,
            metrics_listen=metrics_listen,
            admin_token=env.read_secret(str(admin_token_file), "--admin-token-file")
            if admin_token_file
            else None,
            reader_token=env.read_secret(str(reader_token_file), "--reader-token-file")
            if reader_token_file
            else None,
            access_policy=access_policy,
            tls=tls_files(tls_cert, tls_key, tls_client_ca),
            lease_ttl_s=lease_ttl,
            discovery_interval_s=discovery_interval,
            watermark_max_age_s=watermark_max_age,
        )
        asyncio.run(_serve(Coordinator(config), etcd_wait))
    except MultikafkaError as exc:
        click.echo(f"multikafka coordinator: {exc}", err=True)
        sys.exit(1)


def settle_heap() -> None:
    """Leave what start-up made (modules, services, clients) out of the
    garbage collector's full collections, which otherwise walk it about once
    a second under load (~60-90 us of CPU per planned trigger at 100
    queries). It is still freed by reference counting."""
    gc.freeze()


def _config(
    etcd: str | None,
    ca: str | None,
    cert: str | None,
    key: str | None,
    user: str | None,
    password_file: str | None,
    **overrides: object,
) -> CoordinatorConfig:
    """Flags over environment variables over defaults."""
    overrides["etcd"] = etcd_settings(
        urls=etcd, ca=ca, cert=cert, key=key, username=user, password_file=password_file
    )
    return CoordinatorConfig.from_env(**overrides)


async def _serve(coord: Coordinator, etcd_wait_s: float) -> None:
    await coord.start(etcd_wait_s=etcd_wait_s)
    settle_heap()
    click.echo(
        f"coordinator {coord.address} serving (etcd {coord.config.etcd}); "
        f"{'leader' if coord.is_leader else 'standby until elected'}",
        err=True,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await coord.stop()


def main() -> None:
    """``multikafka-coordinator`` / ``python -m multikafka.coordinator``: the
    command above on its own, logging at ``MULTIKAFKA_LOG_LEVEL`` (default INFO)."""
    configure()
    coordinator_command(prog_name="multikafka-coordinator")
