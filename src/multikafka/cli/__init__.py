"""The ``multikafka`` command line."""

from __future__ import annotations

import signal

import click

from multikafka.cli.admin_cmd import admin_group
from multikafka.cli.dev_cmd import demo_command, dev_group
from multikafka.coordinator.cli import coordinator_command
from multikafka.core.logs import configure


@click.group()
@click.option("--log-level", default=None, help="DEBUG, INFO (default), WARNING")
def main(log_level: str | None) -> None:
    """multikafka: read one logical Kafka stream from many clusters with Spark."""
    configure(log_level)
    # SIGTERM (e.g. from `timeout` or a supervisor) exits like Ctrl-C does, so
    # the processes a command started are stopped by its cleanup code.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


main.add_command(coordinator_command)
main.add_command(admin_group)
main.add_command(dev_group)
main.add_command(demo_command)

__all__ = ["main"]
