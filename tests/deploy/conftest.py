"""What the distribution tests share: fresh virtual environments to install
``make dist``'s files into (the session's ``dist`` fixture, in
``tests/conftest.py``: the packed Spark environment's test uses it too).

The dependencies come from the package index, as a user's would; pip's cache
makes a second run cheap. Environments every test may read from (the reader's
wheel with confluent-kafka's newest and oldest supported release) are made
once per session.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from multikafka.devstack.stack import TANSU_PROPERTIES
from tests.conftest import KafkaClusters
from tests.helpers import produce_mixed, uid

REPO = Path(__file__).resolve().parents[2]
READER_PROJECT = REPO / "reader_agent" / "pyproject.toml"


class Env:
    """A fresh virtual environment."""

    def __init__(self, root: Path) -> None:
        # No pip of its own (ensurepip takes 3.5 s an environment): the test
        # session's pip installs into it (:meth:`pip`).
        venv.create(root, with_pip=False)
        self.root = root
        self.bin = root / "bin"
        self.python = str(self.bin / "python")

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        # From the environment's folder: the checkout's folders must not
        # shadow what is installed.
        return subprocess.run(
            list(args),
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **env},
            check=False,
            cwd=self.root,
        )

    def pip(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """pip (the test session's) on this environment."""
        return self.run(sys.executable, "-m", "pip", "--python", self.python, *args, **env)

    def install(self, dist: Path, *names: str, **env: str) -> None:
        got = self.pip("install", "--find-links", str(dist), *names, **env)
        assert got.returncode == 0, got.stderr[-3000:]

    def distributions(self) -> set[str]:
        got = self.pip("list", "--format=freeze")
        assert got.returncode == 0, got.stderr
        return {line.split("==")[0].lower().replace("_", "-") for line in got.stdout.split()}

    def python_c(self, code: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return self.run(self.python, "-c", code, *args, **env)


def confluent_kafka_range() -> tuple[str, str]:
    """The lower bound and the excluded upper bound of confluent-kafka that
    ``multikafka-reader`` requires (``confluent-kafka>=A,<B``)."""
    m = re.search(r'"confluent-kafka>=([\d.]+),<([\d.]+)"', READER_PROJECT.read_text())
    assert m is not None, f"{READER_PROJECT} pins no confluent-kafka>=A,<B"
    return m.group(1), m.group(2)


@pytest.fixture
def fresh(tmp_path: Path) -> Env:
    return Env(tmp_path / "venv")


@pytest.fixture(scope="session")
def newest_reader(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Env:
    """The reader's wheel with what pip picks: the newest confluent-kafka
    that ``multikafka-reader`` accepts."""
    env = Env(tmp_path_factory.mktemp("newest") / "venv")
    env.install(dist, "multikafka-reader")
    return env


@pytest.fixture(scope="session")
def oldest_reader(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Env:
    """The reader's wheel with the oldest confluent-kafka it accepts."""
    lowest, _ = confluent_kafka_range()
    env = Env(tmp_path_factory.mktemp("oldest") / "venv")
    env.install(dist, "multikafka-reader", f"confluent-kafka=={lowest}")
    return env


# --- real messages, converted inside an environment ---------------------------


class Topic(NamedTuple):
    bootstrap: str
    name: str
    records: int


@pytest.fixture(scope="session")
def consumed_topic(kafka: KafkaClusters) -> Topic:
    """200 records on the session's broker: two partitions, null keys and
    values, headers on some."""
    (a,) = kafka.shared(1)
    topic = uid("converters")
    produce_mixed(a.bootstrap, topic, 200)
    return Topic(a.bootstrap, topic, 200)


#: Run inside an environment: consume a topic, convert the messages with
#: every converter, and say how (JSON on stdout; the log on stderr).
CONVERT_CONSUMED = """
import json, logging, sys, time
from importlib.metadata import version
from confluent_kafka import Consumer, TopicPartition
from multikafka.reader_agent import _arrow as arrow

logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
bootstrap, topic, n, properties = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
consumer = Consumer({**properties, "bootstrap.servers": bootstrap, "group.id": "converters"})
consumer.assign([TopicPartition(topic, p, 0) for p in range(2)])
msgs, deadline = [], time.monotonic() + 60
while len(msgs) < n and time.monotonic() < deadline:
    msgs += [m for m in consumer.consume(n - len(msgs), timeout=1) if m.error() is None]
consumer.close()
out = {"confluent_kafka": version("confluent-kafka"), "consumed": len(msgs),
       "auto": arrow.active_converter("auto"), "rows": {}, "equal": [], "compiled": [], "refused": {}}
python = arrow.record_batch(arrow.convert(msgs, include_headers=True, converter="python"), "a", include_headers=True)
for name in ("auto", "c", "c-accessors"):
    try:
        cols = arrow.convert(msgs, include_headers=True, converter=name)
    except RuntimeError as exc:
        out["refused"][name] = str(exc)
        continue
    if type(cols) is not arrow.Columns:  # the compiled converter's columns
        out["compiled"].append(name)
    if arrow.record_batch(cols, "a", include_headers=True).equals(python):
        out["equal"].append(name)
out["rows"] = python.num_rows
print(json.dumps(out))
"""


def convert_consumed(env: Env, topic: Topic, **environ: str) -> tuple[dict[str, Any], str]:
    """What :data:`CONVERT_CONSUMED` says in ``env``, and its log."""
    got = env.python_c(
        CONVERT_CONSUMED,
        topic.bootstrap,
        topic.name,
        str(topic.records),
        json.dumps(TANSU_PROPERTIES),
        **environ,
    )
    assert got.returncode == 0, got.stderr[-3000:]
    out: dict[str, Any] = json.loads(got.stdout.splitlines()[-1])
    assert out["consumed"] == out["rows"] == topic.records, out
    return out, got.stderr
