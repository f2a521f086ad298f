"""A coordinator service of several replicas with one leader: each replica
``multikafka coordinator`` in a process of its own
(:class:`~multikafka.devstack.processes.CoordinatorProcess`: it can be
killed, frozen or stopped like a real one), all on one etcd prefix. The
high-availability tests, the leader-takeover benchmark and the chaos world
start theirs here."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from multikafka.core.retry import poll
from multikafka.devstack.processes import CoordinatorProcess


class ReplicaSet:
    """Replicas named ``<name>-0``, ``<name>-1``, ... on ``etcd`` under
    ``prefix``, each with lease ``lease_ttl_s`` and the extra command-line
    ``args``, started by :meth:`add`."""

    def __init__(
        self,
        work_dir: Path,
        *,
        etcd: str,
        prefix: str,
        lease_ttl_s: float = 5.0,
        args: Sequence[str] = (),
        name: str = "coordinator",
    ) -> None:
        self.work_dir = work_dir
        self.etcd = etcd
        self.prefix = prefix
        self.lease_ttl_s = lease_ttl_s
        self.args = list(args)
        self.name = name
        self.replicas: list[CoordinatorProcess] = []

    def add(self, n: int = 1, *, lease_ttl_s: float | None = None) -> list[CoordinatorProcess]:
        """Start ``n`` more replicas (each ready to serve); returns them."""
        added = []
        for _ in range(n):
            replica = CoordinatorProcess(
                self.work_dir,
                f"{self.name}-{len(self.replicas)}",
                etcd=self.etcd,
                prefix=self.prefix,
                lease_ttl_s=self.lease_ttl_s if lease_ttl_s is None else lease_ttl_s,
                args=self.args,
            )
            self.replicas.append(replica)
            added.append(replica.start())
        return added

    @property
    def addresses(self) -> str:
        """Every replica's address, comma-separated (what clients take)."""
        return ",".join(r.address for r in self.replicas)

    def leading(self) -> list[CoordinatorProcess]:
        """The replicas that say they lead, among those running and not frozen."""
        return [
            r
            for r in self.replicas
            if r.process.alive() and not r.process.frozen() and r.is_leader()
        ]

    def leader(self, timeout_s: float = 30.0, interval_s: float = 0.1) -> CoordinatorProcess:
        """The one replica that leads, once exactly one does."""

        def one() -> CoordinatorProcess | None:
            leading = self.leading()
            return leading[0] if len(leading) == 1 else None

        return poll(
            one, timeout_s=timeout_s, what="exactly one coordinator leading", interval_s=interval_s
        )

    def stop(self) -> None:
        for r in self.replicas:
            r.stop()

    def __iter__(self) -> Iterator[CoordinatorProcess]:
        return iter(self.replicas)

    def __len__(self) -> int:
        return len(self.replicas)
