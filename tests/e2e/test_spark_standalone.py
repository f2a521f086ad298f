"""Executors that don't have multikafka (the usual case on a shared cluster): a Spark standalone
cluster from the pip install of PySpark (a master and a worker started with
``spark-class``, each executor in a JVM of its own) whose workers' Python has
nothing installed. The job (``submitted_job.py``) goes through
``spark-submit`` in client mode with the project shipped as the packed
environment ``make spark-env`` builds, the recipe of docs/spark.md, from a
folder where the same archive is unpacked as ``env``:

    PYSPARK_PYTHON=./env/bin/python \
    spark-submit --master spark://... --archives multikafka-spark-env.tar.gz#env job.py

It reads exactly once across a live failover (an offset-preserving mirror),
over TLS with a reader token from a file, and the reading happens in the
executors' Python workers, run by the archive's Python unpacked in the
executor's folder."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import venv
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from multikafka.devstack import CoordinatorThread, ManagedProcess
from multikafka.devstack.spark_cluster import SparkStandalone
from tests.certs import make_certs
from tests.conftest import REPO, KafkaClusters
from tests.e2e.live_failover import E2E, assert_identity_exact, failover_run
from tests.helpers import eventually
from tests.secure import Secure, start_secure

#: Setup included: the session's wheels and archive (~40 s), the cluster (~10 s).
pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(600)]

JOB = Path(__file__).with_name("submitted_job.py")
PACK = REPO / "deploy" / "pack_spark_env.py"
#: The Python that runs an executor's Python workers: the archive's, unpacked
#: as ``env`` in the executor's folder.
EXECUTOR_PYTHON = "./env/bin/python"


@pytest.fixture(scope="session")
def spark_env(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make spark-env``'s archive, packed from the session's wheels."""
    out = tmp_path_factory.mktemp("spark-env") / "multikafka-spark-env.tar.gz"
    subprocess.run(
        [sys.executable, str(PACK), "--wheels", str(dist), "--out", str(out)],
        check=True,
        timeout=600,
    )
    return out


def _has_multikafka(python: str, cwd: Path) -> bool:
    probe = [python, "-c", "import multikafka"]
    return subprocess.run(probe, capture_output=True, cwd=cwd, check=False).returncode == 0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    """A master and one worker (2 cores), whose workers' Python is a fresh
    virtual environment with nothing installed."""
    work = tmp_path_factory.mktemp("spark-standalone")
    bare = work / "bare-python"
    venv.create(bare, with_pip=False)
    python = str(bare / "bin" / "python")
    assert not _has_multikafka(python, bare)
    cluster = SparkStandalone(work, workers=1, cores=2, python=python).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def driver_dir(spark_env: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the job is submitted from: the archive unpacked there as
    ``env``, so ``./env/bin/python`` runs the driver's Python processes too
    (the data source's discovery and planning)."""
    where = tmp_path_factory.mktemp("driver")
    with tarfile.open(spark_env) as archive:
        archive.extractall(where / "env", filter="tar")  # bin/python links to the base Python
    assert _has_multikafka(str(where / EXECUTOR_PYTHON), where)
    return where


class SubmittedJob:
    """The job as :class:`E2E` sees a query: active while its driver runs,
    stopped by the file ``stop`` in its output folder."""

    def __init__(self, process: ManagedProcess, out: Path) -> None:
        self.process = process
        self.out = out

    @property
    def runId(self) -> str:
        return (self.out / "run-id").read_text()

    @property
    def isActive(self) -> bool:
        return self.process.alive()

    def exception(self) -> str | None:
        return None if self.process.alive() else self.process.tail(60)

    def finish(self, timeout_s: float = 60.0) -> int:
        """Stop the query and wait for the driver to exit; its exit status."""
        (self.out / "stop").touch()
        return self.process.wait(timeout_s)


class Submitted(E2E):
    """:class:`E2E` whose query is ``submitted_job.py``, run by
    ``spark-submit`` against the standalone cluster with the archive."""

    launch: Callable[[str], SubmittedJob]

    def start(self, stream: str) -> Any:
        self.query = self.launch(stream)
        return self.query


def _submit(
    cluster: SparkStandalone, archive: Path, driver_dir: Path, secure: Secure, out: Path
) -> Callable[[str], SubmittedJob]:
    def launch(stream: str) -> SubmittedJob:
        out.mkdir(parents=True, exist_ok=True)
        argv = [cluster.spark_submit(), "--master", cluster.url, "--deploy-mode", "client"]
        argv += ["--archives", f"{archive}#env"]
        for conf in ("spark.ui.enabled=false", "spark.cores.max=2", "spark.executor.memory=1g"):
            argv += ["--conf", conf]
        argv += [str(JOB), "--coordinator", secure.address, "--stream", stream]
        # Files, not secrets: the token and the CA travel to executors inside tasks.
        argv += ["--tls-ca", str(secure.certs.ca.cert_path)]
        argv += ["--token-file", str(secure.reader_token_file), "--out", str(out)]
        # The data source runs with the Python its discovery ran with (the
        # driver's PYSPARK_DRIVER_PYTHON, unset here, else PYSPARK_PYTHON), on
        # the driver and in the executors alike: one relative path for both.
        env = {**cluster.env(), "PYSPARK_PYTHON": EXECUTOR_PYTHON}
        process = ManagedProcess("spark-submit", argv, out, env=env, cwd=driver_dir)
        process.start()
        eventually(lambda: (out / "run-id").exists() or not process.alive(), timeout_s=120)
        assert process.alive(), process.tail(60)
        return SubmittedJob(process, out)

    return launch


def _read_in_executors(readers: list[Any], cluster: SparkStandalone) -> list[Path]:
    """The folders of the processes that read (the agents' pids, as they
    registered): each is an executor's folder of the worker, and runs the
    Python of the archive unpacked there, with its pyarrow loaded."""
    (worker_dir,) = cluster.worker_dirs
    folders = []
    for reader in readers:
        proc = Path(f"/proc/{reader.pid}")
        cwd = (proc / "cwd").resolve()
        assert cwd.is_relative_to(worker_dir), (reader.pid, cwd)
        argv0 = (proc / "cmdline").read_bytes().split(b"\0")[0].decode()
        assert argv0 == EXECUTOR_PYTHON, argv0
        assert f"{cwd}/env/lib/" in (proc / "maps").read_text()
        folders.append(cwd)
    return folders


def test_a_submitted_job_reads_exactly_once_across_a_failover_on_executors_without_multikafka(
    standalone: SparkStandalone,
    spark_env: Path,
    driver_dir: Path,
    spark: Any,
    make_coordinator: Callable[..., CoordinatorThread],
    kafka: KafkaClusters,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (the session's local Spark set it for its own workers)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    secure = start_secure(make_coordinator, make_certs(tmp_path / "certs"), tmp_path / "secrets")
    out = tmp_path / "job"
    with secure.admin() as admin:
        e2e = Submitted(spark, secure.thread, admin, kafka, out)
        e2e.launch = _submit(standalone, spark_env, driver_dir, secure, out)
        try:
            run = failover_run(e2e, strategy="identity", margin_ms=0)
            assert_identity_exact(e2e, run)
            readers = eventually(admin.readers, timeout_s=30)
            folders = _read_in_executors(readers, standalone)
            assert e2e.query.finish() == 0, e2e.query.process.tail(60)
        finally:
            if e2e.query is not None:  # the driver, and its Python, pass or fail
                e2e.query.process.stop_all()
    assert all((f / "env").is_dir() for f in folders)
