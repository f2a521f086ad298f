"""A Spark standalone cluster from the pip install of PySpark: a master and
workers started with ``spark-class`` on loopback, each executor in a JVM of
its own, for what only real executors show (a packed environment shipped
with ``spark-submit --archives``)."""

from __future__ import annotations

import importlib.util
import json
import urllib.error
import urllib.request
from pathlib import Path

from multikafka.core.exceptions import UnavailableError
from multikafka.core.retry import poll
from multikafka.devstack.processes import ManagedProcess, free_port


def spark_home() -> Path:
    """The installed PySpark's folder: a Spark home (``bin/spark-class``,
    ``bin/spark-submit``, ``jars/``, ``python/lib/pyspark.zip``)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("PySpark is not installed")
    return Path(spec.origin).parent


class SparkStandalone:
    """A master and ``workers`` workers of ``cores`` cores each, on
    127.0.0.1 and free ports; their work and logs under ``work_dir``.
    ``python``: the Python the workers know as ``PYSPARK_PYTHON`` (what an
    executor runs when a job names none)."""

    def __init__(
        self,
        work_dir: Path,
        *,
        workers: int = 1,
        cores: int = 2,
        memory: str = "2g",
        python: str = "",
    ) -> None:
        self.home = spark_home()
        self.work_dir = work_dir
        self.port = free_port()
        self.ui_port = free_port()
        conf_dir = work_dir / "conf"  # empty: no spark-env.sh or defaults of the machine's
        conf_dir.mkdir(parents=True, exist_ok=True)
        self._env = {
            "SPARK_HOME": str(self.home),
            "SPARK_CONF_DIR": str(conf_dir),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "512m",
        }
        spark_class = str(self.home / "bin" / "spark-class")
        master = [
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui_port),
        ]
        self._master = ManagedProcess(
            "spark-master",
            [spark_class, "org.apache.spark.deploy.master.Master", *master],
            work_dir,
            env=self._env,
        )
        worker_env = {**self._env, **({"PYSPARK_PYTHON": python} if python else {})}
        self.worker_dirs = [work_dir / f"worker-{i}" for i in range(workers)]
        worker = ["--host", "127.0.0.1", "--cores", str(cores), "--memory", memory]
        self._workers = []
        for i, folder in enumerate(self.worker_dirs):
            argv = [spark_class, "org.apache.spark.deploy.worker.Worker", self.url, *worker]
            argv += ["--webui-port", str(free_port()), "--work-dir", str(folder)]
            self._workers.append(
                ManagedProcess(f"spark-worker-{i}", argv, work_dir, env=worker_env)
            )

    @property
    def url(self) -> str:
        """The master's URL, for ``--master``."""
        return f"spark://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The environment ``spark-submit`` runs with against this cluster."""
        return dict(self._env)

    def spark_submit(self) -> str:
        return str(self.home / "bin" / "spark-submit")

    def alive_workers(self) -> int:
        """Workers registered with the master (its web UI's JSON)."""
        try:
            url = f"http://127.0.0.1:{self.ui_port}/json/"
            with urllib.request.urlopen(url, timeout=2) as answer:
                return int(json.load(answer)["aliveworkers"])
        except (OSError, ValueError, KeyError, urllib.error.URLError):
            return 0

    def start(self, timeout_s: float = 60.0) -> SparkStandalone:
        self._master.start()
        for worker in self._workers:
            worker.start()
        try:
            poll(
                lambda: self.alive_workers() == len(self._workers),
                timeout_s=timeout_s,
                what="Spark workers registered with the master",
                interval_s=0.25,
            )
        except TimeoutError:
            logs = "\n".join(p.tail() for p in (self._master, *self._workers))
            self.stop()
            raise UnavailableError(f"the Spark standalone cluster did not start:\n{logs}") from None
        return self

    def stop(self) -> None:
        """Workers (and the executors they run), then the master."""
        for process in (*self._workers, self._master):
            process.stop_all()
