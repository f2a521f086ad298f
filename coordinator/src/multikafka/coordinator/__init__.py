"""The multikafka coordinator (enumerator): watches stream metadata in etcd,
discovers partitions, plans micro-batches, pushes reconcile events to reader
agents and serves the Admin, Planner and Reader gRPC services. Several
replicas run on one etcd; one leads (an etcd lease, with fenced writes)."""

from multikafka.coordinator.config import CoordinatorConfig, EtcdConfig, EtcdEndpoint, TlsFiles
from multikafka.coordinator.runtime.server import Coordinator

__all__ = ["Coordinator", "CoordinatorConfig", "EtcdConfig", "EtcdEndpoint", "TlsFiles"]
