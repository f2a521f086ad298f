"""The multikafka coordinator (enumerator): watches stream metadata in etcd,
discovers partitions, plans micro-batches, pushes reconcile events to reader
agents and serves the Admin, Planner and Reader gRPC services."""

from coordinator.config import CoordinatorConfig, EtcdEndpoint, TlsFiles
from coordinator.server import Coordinator

__all__ = ["Coordinator", "CoordinatorConfig", "EtcdEndpoint", "TlsFiles"]
