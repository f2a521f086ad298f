"""Shared fixtures.

Unit tests use none of the process fixtures. Integration and e2e tests get
real etcd and real Kafka-protocol brokers (tansu) started here on free
loopback ports, or external ones from the environment:

* ``MULTIKAFKA_TEST_ETCD=http://host:2379``
* ``MULTIKAFKA_TEST_KAFKA_CLUSTERS="host1:9092;host2:9092"`` (one bootstrap
  list per cluster). Tests that must pause, kill or restart a broker start
  their own and are skipped against external clusters.
"""

from __future__ import annotations

import os

# Tests host a coordinator (gRPC threads) and launch Spark's JVM in one
# process; gRPC's fork handlers must stay out of that fork. Set before any
# import of grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")

import fcntl
import itertools
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from multikafka.devstack import CoordinatorThread, EtcdServer, TansuBroker, free_port
from multikafka.devstack.processes import stop_together

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from multikafka.coordinator import CoordinatorConfig
    from multikafka.core.admin_client import AdminClient
    from multikafka.reader_agent import ReaderAgent


REPO = Path(__file__).resolve().parents[1]

#: Point the integration tests at external services instead of starting etcd
#: and tansu brokers (test-suite settings: they are not product settings, so
#: they live here and not in ``multikafka.core.env``).
TEST_ETCD = "MULTIKAFKA_TEST_ETCD"
#: Bootstrap addresses, one list per cluster, clusters separated by ``;``.
TEST_KAFKA_CLUSTERS = "MULTIKAFKA_TEST_KAFKA_CLUSTERS"


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stack")


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make dist`` into a folder of this test run's: the wheels of every
    distribution, built once for the tests that install them (once for all
    of ``make test``'s workers: the first to need them builds, under a lock,
    as the build writes into the checkout)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by this run's workers
    out = root / "dist"
    with open(root / "dist.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / ".built").exists():
            subprocess.run(
                ["make", "-s", "-C", str(REPO), "dist", f"DIST={out}", f"PYTHON={sys.executable}"],
                check=True,
                timeout=600,
            )
            (out / ".built").touch()
    return out


@pytest.fixture(scope="session")
def etcd_url(session_dir: Path) -> Iterator[str]:
    external = os.environ.get(TEST_ETCD, "")
    if external:
        yield external
        return
    server = EtcdServer(session_dir, fsync=False).start()  # tests only: see EtcdServer
    try:
        yield server.url
    finally:
        server.stop()


@dataclass
class Cluster:
    name: str
    bootstrap: str
    broker: TansuBroker | None = None

    def require_process(self) -> TansuBroker:
        if self.broker is None:
            pytest.skip("needs a broker this test can pause or kill (external clusters given)")
        return self.broker


class KafkaClusters:
    """Session clusters shared by tests, and private ones a test may break."""

    def __init__(self, work_dir: Path) -> None:
        self._work_dir = work_dir
        external = os.environ.get(TEST_KAFKA_CLUSTERS, "")
        self._external = [c.strip() for c in external.split(";") if c.strip()] if external else []
        self._shared: list[Cluster] = []
        self._private: list[TansuBroker] = []
        self._seq = itertools.count()

    def shared(self, n: int) -> list[Cluster]:
        """``n`` clusters kept for the whole session (tests use unique topics)."""
        while len(self._shared) < n:
            i = len(self._shared)
            if self._external:
                if i >= len(self._external):
                    pytest.skip(
                        f"needs {n} clusters; {TEST_KAFKA_CLUSTERS} names {len(self._external)}"
                    )
                self._shared.append(Cluster(f"ext{i}", self._external[i]))
            else:
                broker = TansuBroker(self._work_dir, f"shared{i}").start()
                self._shared.append(Cluster(f"shared{i}", broker.bootstrap, broker))
        return self._shared[:n]

    def private(self, name: str = "") -> Cluster:
        """A broker of this test's own, stopped at the end of the session."""
        if self._external:
            pytest.skip("needs a broker this test can pause or kill (external clusters given)")
        broker = TansuBroker(self._work_dir, name or f"private{next(self._seq)}").start()
        self._private.append(broker)
        return Cluster(broker.name, broker.bootstrap, broker)

    def replace(self, cluster: Cluster) -> Cluster:
        """A new, empty broker on the port of ``cluster``'s (stopped) one:
        the cluster coming back after losing its data."""
        old = cluster.require_process()
        old.stop()
        broker = TansuBroker(
            self._work_dir, f"{old.name}-again{next(self._seq)}", port=old.port
        ).start()
        self._private.append(broker)
        return Cluster(cluster.name, broker.bootstrap, broker)

    def stop(self) -> None:
        brokers = self._private + [c.broker for c in self._shared if c.broker is not None]
        stop_together([broker.process for broker in brokers])


@pytest.fixture(scope="session")
def kafka(session_dir: Path) -> Iterator[KafkaClusters]:
    clusters = KafkaClusters(session_dir)
    try:
        yield clusters
    finally:
        clusters.stop()


#: Short timeouts so failures and recoveries show within a test.
FAST_COORDINATOR: dict[str, Any] = {
    "discovery_interval_s": 0.5,
    "cluster_timeout_s": 1.0,
    "unreachable_backoff_s": 0.5,
    "reader_ttl_s": 6.0,
    "heartbeat_interval_s": 0.5,
}


def coordinator_config(etcd: str, **overrides: Any) -> CoordinatorConfig:
    from multikafka.coordinator import CoordinatorConfig, EtcdEndpoint

    values = {**FAST_COORDINATOR, **overrides}
    values.setdefault("etcd_prefix", f"/multikafka-test/{uuid.uuid4().hex[:8]}")
    return CoordinatorConfig(etcd=EtcdEndpoint.parse(etcd), listen="127.0.0.1:0", **values)


@pytest.fixture(scope="session")
def coordinator(etcd_url: str) -> Iterator[CoordinatorThread]:
    """One coordinator for the session (tests use unique stream names)."""
    thread = CoordinatorThread(coordinator_config(etcd_url)).start()
    try:
        yield thread
    finally:
        thread.stop()


@pytest.fixture
def make_coordinator(etcd_url: str) -> Iterator[Callable[..., CoordinatorThread]]:
    """Start coordinators of this test's own (own etcd prefix unless given)."""
    started: list[CoordinatorThread] = []

    def make(etcd: str | None = None, **overrides: Any) -> CoordinatorThread:
        thread = CoordinatorThread(coordinator_config(etcd or etcd_url, **overrides)).start()
        started.append(thread)
        return thread

    yield make
    for thread in started:
        thread.stop()


@pytest.fixture
def admin(coordinator: CoordinatorThread) -> Iterator[AdminClient]:
    from multikafka.core.admin_client import AdminClient

    with AdminClient(coordinator.address) as client:
        yield client


@pytest.fixture
def agents() -> Iterator[list[ReaderAgent]]:
    """Reader agents a test makes (it appends them); closed afterwards."""
    made: list[ReaderAgent] = []
    yield made
    for agent in made:
        agent.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The one Spark of the test session (local[2]): this classic session,
    and a Spark Connect server on the same Spark (:func:`connect_spark`)."""
    from multikafka.devstack.spark import local_spark

    session = local_spark("multikafka-tests", connect_port=free_port())
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def connect_spark(spark: SparkSession) -> Iterator[SparkSession]:
    """A Spark Connect session (``pyspark[connect]``, gRPC to the Spark
    Connect server of :func:`spark`): what a job sees on a managed runtime
    or through ``builder.remote(...)``. Nothing is registered in it: it finds
    the ``multikafka`` format through PySpark's discovery. (It sits beside
    the classic session, which ``builder.remote("local[N]")`` refuses: that
    would start a second Spark in this process.)"""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    port = spark.conf.get("spark.connect.grpc.binding.port")
    session = ConnectSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
    try:
        yield session  # type: ignore[misc]
    finally:
        session.stop()


@pytest.fixture(params=["classic", "connect"])
def any_spark(request: pytest.FixtureRequest, spark: SparkSession) -> Iterator[SparkSession]:
    """The test runs once in the classic session and once over Spark Connect;
    no streaming query of it outlives it, pass or fail."""
    session: SparkSession = (
        spark if request.param == "classic" else request.getfixturevalue("connect_spark")
    )
    try:
        yield session
    finally:
        for query in session.streams.active:
            query.stop()


#: The fixtures of the session's Spark (one SparkSession per test run).
SPARK_FIXTURES = {"spark", "connect_spark", "any_spark"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``make test`` runs two pytest-xdist workers (``--dist loadgroup``):
    every test of Spark's goes to the same one, so the run still starts one
    SparkSession (and one Spark Connect server), and the other worker takes
    the rest meanwhile."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if item.get_closest_marker("spark") or fixtures & SPARK_FIXTURES:
            item.add_marker(pytest.mark.xdist_group("spark"))
