"""``multikafka dev up`` and ``multikafka demo``."""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading

import click
from rich.console import Console
from rich.table import Table

from multikafka.core.kafka_log import LOGGER_NAME
from multikafka.demo import run_demo
from multikafka.devstack.mirror import STRATEGIES
from multikafka.devstack.stack import local_stack

console = Console()


@click.group("dev")
def dev_group() -> None:
    """Local development stack."""


@dev_group.command("up")
@click.option("--clusters", default="east,west", help="names of the local clusters to start")
@click.option("--listen", default="127.0.0.1:7070", help="coordinator gRPC host:port")
@click.option("--etcd-port", type=int, default=2379)
@click.option("--metrics-listen", default="127.0.0.1:9464", help="coordinator Prometheus host:port")
def dev_up(clusters: str, listen: str, etcd_port: int, metrics_listen: str) -> None:
    """Start etcd, one tansu broker per cluster and a coordinator; run until Ctrl-C."""
    names = tuple(n.strip() for n in clusters.split(",") if n.strip())
    with local_stack(
        names, etcd_port=etcd_port, coordinator_listen=listen, metrics_listen=metrics_listen
    ) as stack:
        table = Table(title="multikafka dev stack (Ctrl-C stops it)", show_header=False)
        table.add_row("etcd", stack.etcd.url)
        for name, broker in stack.clusters.items():
            table.add_row(f"cluster {name}", broker.bootstrap)
        table.add_row("coordinator", stack.coordinator_address)
        table.add_row("metrics", f"http://{metrics_listen}/metrics")
        console.print(table)
        example = {
            "name": "orders",
            "clusters": {
                n: {"bootstrap_servers": b.bootstrap, "topics": ["orders"]}
                for n, b in stack.clusters.items()
            },
        }
        console.print("example stream document:\n" + json.dumps(example, indent=2))
        stop = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        stop.wait()


@click.command("demo")
@click.option("--records", type=int, default=150_000, help="records to produce")
@click.option(
    "--failover/--no-failover", default=True, help="include the live failover and migration"
)
@click.option(
    "--strategy",
    type=click.Choice(STRATEGIES),
    default="timestamp",
    show_default=True,
    help="the mirror and the failover's translation: same topic and record times (timestamp), "
    "same offsets (identity), or MirrorMaker 2's replica with shifted offsets and offset syncs (mm2)",
)
def demo_command(records: int, failover: bool, strategy: str) -> None:
    """Run the main job end to end on the embedded default stack."""
    # The demo prints the coordinator's history at the end; keep its INFO
    # lines from interleaving with the progress bars (--log-level overrides).
    parent = click.get_current_context().parent
    if parent is None or parent.params.get("log_level") is None:
        logging.getLogger().setLevel(logging.WARNING)
        # The demo kills a cluster on purpose: librdkafka's "cannot connect"
        # lines about it (a WARNING at most, until the coordinator knows it
        # FAILED) are no news here; its errors still show.
        logging.getLogger(LOGGER_NAME).setLevel(logging.ERROR)

    result = run_demo(records, failover=failover, strategy=strategy)
    sys.exit(0 if result.ok else 1)
