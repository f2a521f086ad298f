"""``multikafka coordinator``: run the coordinator."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import click

from coordinator import Coordinator, CoordinatorConfig, EtcdEndpoint, TlsFiles
from multikafka_core import env


@click.command("coordinator")
@click.option("--etcd", help=f"etcd URL, e.g. http://127.0.0.1:2379 [env {env.ETCD}]")
@click.option("--listen", help=f"gRPC host:port (default 127.0.0.1:7070) [env {env.LISTEN}]")
@click.option(
    "--prefix", "etcd_prefix", help=f"etcd key prefix (default /multikafka) [env {env.ETCD_PREFIX}]"
)
@click.option("--metrics-listen", help=f"Prometheus host:port [env {env.METRICS_LISTEN}]")
@click.option(
    "--admin-token-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help=f"file holding the bearer token admin calls need [or env {env.ADMIN_TOKEN}]",
)
@click.option(
    "--tls-cert", type=click.Path(exists=True, dir_okay=False), help=f"[env {env.TLS_CERT}]"
)
@click.option(
    "--tls-key", type=click.Path(exists=True, dir_okay=False), help=f"[env {env.TLS_KEY}]"
)
@click.option(
    "--tls-client-ca",
    type=click.Path(exists=True, dir_okay=False),
    help="require client certs (mTLS)",
)
@click.option(
    "--discovery-interval", type=float, help="seconds between partition discoveries (default 5)"
)
def coordinator_command(
    etcd: str | None,
    listen: str | None,
    etcd_prefix: str | None,
    metrics_listen: str | None,
    admin_token_file: Path | None,
    tls_cert: str | None,
    tls_key: str | None,
    tls_client_ca: str | None,
    discovery_interval: float | None,
) -> None:
    """Run the coordinator: watch stream metadata in etcd, plan micro-batches,
    push reconcile events, serve the Admin/Planner/Reader gRPC services."""
    tls = TlsFiles(tls_cert, tls_key, tls_client_ca or "") if tls_cert and tls_key else None
    config = CoordinatorConfig.from_env(
        etcd=EtcdEndpoint.parse(etcd) if etcd else None,
        listen=listen,
        etcd_prefix=etcd_prefix,
        metrics_listen=metrics_listen,
        admin_token=admin_token_file.read_text().strip() if admin_token_file else None,
        tls=tls,
        discovery_interval_s=discovery_interval,
    )
    asyncio.run(_serve(Coordinator(config)))


async def _serve(coord: Coordinator) -> None:
    await coord.start()
    click.echo(f"coordinator listening on {coord.address} (etcd {coord.config.etcd})", err=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await coord.stop()
