"""A whole local stack: etcd, N one-broker clusters, a coordinator."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from multikafka.coordinator import CoordinatorConfig, EtcdEndpoint
from multikafka.devstack.processes import (
    CoordinatorThread,
    EtcdServer,
    TansuBroker,
    stop_together,
    temp_work_dir,
)

#: Client settings of every stream on the dev stack's tansu brokers: tansu
#: answers a fetch only after the full fetch.wait.max.ms even when it has data
#: (docs/architecture.md, "The test broker's gaps"). Not a product default.
TANSU_PROPERTIES = {"fetch.wait.max.ms": "10"}


def stream_doc(
    name: str,
    clusters: Mapping[str, tuple[str, list[str]]],
    *,
    states: Mapping[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A stream document for the dev stack: ``clusters`` maps id ->
    (bootstrap, topics); ``states`` sets clusters' states (default ACTIVE)."""
    doc: dict[str, Any] = {
        "name": name,
        "clusters": {
            cid: {
                "bootstrap_servers": bs,
                "topics": list(topics),
                "properties": dict(TANSU_PROPERTIES),
            }
            for cid, (bs, topics) in clusters.items()
        },
    }
    for cid, state in (states or {}).items():
        doc["clusters"][cid]["state"] = state
    doc.update(extra)
    return doc


@dataclass
class LocalStack:
    work_dir: Path
    etcd: EtcdServer
    clusters: dict[str, TansuBroker] = field(default_factory=dict)
    coordinator: CoordinatorThread | None = None

    @property
    def coordinator_address(self) -> str:
        if self.coordinator is None:
            raise RuntimeError("the stack has no coordinator")
        return self.coordinator.address

    def add_cluster(self, name: str, *, port: int = 0) -> TansuBroker:
        broker = TansuBroker(self.work_dir, name, port=port).start()
        self.clusters[name] = broker
        return broker

    def start_coordinator(
        self, *, listen: str = "127.0.0.1:0", **config: object
    ) -> CoordinatorThread:
        cfg = CoordinatorConfig(etcd=EtcdEndpoint.parse(self.etcd.url), listen=listen, **config)  # type: ignore[arg-type]
        self.coordinator = CoordinatorThread(cfg).start()
        return self.coordinator

    def stop(self) -> None:
        if self.coordinator is not None:
            self.coordinator.stop()
        stop_together([broker.process for broker in self.clusters.values()])
        self.etcd.stop()


@contextlib.contextmanager
def local_stack(
    clusters: Sequence[str] = ("east", "west"),
    *,
    work_dir: Path | None = None,
    etcd_port: int = 0,
    coordinator_listen: str | None = "127.0.0.1:0",
    **coordinator_config: object,
) -> Iterator[LocalStack]:
    """Start etcd, one tansu broker per name in ``clusters`` and (unless
    ``coordinator_listen`` is None) a coordinator; stop them all on exit, and
    delete the work directory if this function made it."""
    wd = work_dir or temp_work_dir()
    stack = LocalStack(wd, EtcdServer(wd, port=etcd_port))
    try:
        stack.etcd.start()
        for name in clusters:
            stack.add_cluster(name)
        if coordinator_listen is not None:
            stack.start_coordinator(listen=coordinator_listen, **coordinator_config)
        yield stack
    finally:
        stack.stop()
        if work_dir is None:
            shutil.rmtree(wd, ignore_errors=True)
