"""Each deployable installs only what it runs (an executor or a coordinator
image gets no library it never imports): ``make dist``'s
wheels installed into fresh virtual environments, one per distribution.

* ``multikafka-coordinator``: the service, with no pyarrow, PySpark or pandas,
  and nothing compiled (its wheels are pure Python; no compiler is reachable
  during the install); ``python -m multikafka.coordinator --help`` runs;
* ``multikafka-spark``: the Spark source and the reader agent, with no etcd
  client (aetcd) and no service libraries;
* ``multikafka``: everything, with the ``multikafka`` command;
* ``multikafka-reader``: a manylinux wheel with the compiled converter, which
  loads and reads confluent-kafka's ``Message`` directly; and an sdist that
  installs without a compiler and then converts in Python, saying so once.

Every wheel installs files under ``multikafka/`` only (one top-level import
name), and no two wheels install the same file.

The dependencies come from the package index, as a user's would; pip's cache
makes a second run cheap.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from tests.deploy.conftest import Env, Topic, convert_consumed

#: Distributions the project releases, and their folders.
FOLDERS = {
    "multikafka_core": "core",
    "multikafka_coordinator": "coordinator",
    "multikafka_reader": "reader_agent",
    "multikafka_spark": "spark_bridge",
    "multikafka": ".",
}

pytestmark = pytest.mark.timeout(900)


#: The compiled converter, as a wheel holds it.
EXTENSION = re.compile(r"multikafka/reader_agent/_convert\.cpython-\d+-x86_64-linux-gnu\.so")


def _wheels(dist: Path) -> dict[str, Path]:
    found = {w.name.split("-")[0]: w for w in dist.glob("*.whl")}
    assert set(found) == set(FOLDERS), sorted(found)
    return found


def test_every_wheel_installs_under_multikafka_only(dist: Path) -> None:
    """One top-level import name (``multikafka``; the Spark source's wheel
    also ``pyspark_multikafka``, the module PySpark's data-source discovery
    looks for), no file in two wheels, and only the reader's wheel holds
    compiled code."""
    seen: dict[str, str] = {}
    for name, wheel in _wheels(dist).items():
        with zipfile.ZipFile(wheel) as z:
            files = [f for f in z.namelist() if ".dist-info/" not in f]
        tops = {f.split("/")[0] for f in files}
        discovery = {"pyspark_multikafka"} if name == "multikafka_spark" else set()
        assert tops == {"multikafka"} | discovery, (name, tops)
        for f in files:
            assert f not in seen, f"{f} is in {name} and {seen.get(f)}"
            seen[f] = name
        pure = wheel.name.endswith("-py3-none-any.whl")
        assert pure == (name != "multikafka_reader"), wheel.name
    assert "multikafka/__init__.py" in seen
    assert seen["multikafka/__init__.py"] == "multikafka_core"


def test_the_coordinator_installs_without_the_read_path(dist: Path, fresh: Env) -> None:
    # No C compiler reachable: the service must install without one.
    fresh.install(dist, "multikafka-coordinator", CC="/bin/false", CXX="/bin/false")
    installed = fresh.distributions()
    assert {"multikafka-coordinator", "multikafka-core", "aetcd"} <= installed
    for absent in ("pyarrow", "pyspark", "pandas", "multikafka-reader", "multikafka-spark"):
        assert absent not in installed, absent
    helped = fresh.run(fresh.python, "-m", "multikafka.coordinator", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--etcd" in helped.stdout
    assert fresh.run(str(fresh.bin / "multikafka-coordinator"), "--help").returncode == 0
    # The service imports no read path, and the public names say where
    # the standalone reader comes from.
    probe = fresh.python_c(
        "import sys, multikafka, multikafka.coordinator.runtime.server\n"
        "assert 'pyarrow' not in sys.modules and 'confluent_kafka' in sys.modules\n"
        "from multikafka import StreamSpec\n"
        "try:\n"
        "    from multikafka import Reader\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    assert probe.returncode == 0, probe.stderr
    assert "pip install multikafka-reader" in probe.stdout


def test_the_spark_source_installs_without_etcd(dist: Path, fresh: Env) -> None:
    fresh.install(dist, "multikafka-spark")
    installed = fresh.distributions()
    assert {"multikafka-spark", "multikafka-reader", "multikafka-core", "pyspark"} <= installed
    for absent in ("aetcd", "multikafka-coordinator", "prometheus-client", "click"):
        assert absent not in installed, absent
    probe = fresh.python_c(
        "import multikafka.spark, multikafka.reader_agent\n"
        "from multikafka import Reader\n"
        "print(multikafka.spark.MultiKafkaDataSource.name())"
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "multikafka"
    # A new Spark session finds the format by itself: no import, no register.
    spark = fresh.run(
        fresh.python,
        "-c",
        NO_CODE_QUERY,
        PYSPARK_PYTHON=fresh.python,
        PYSPARK_DRIVER_PYTHON=fresh.python,
        SPARK_LOCAL_IP="127.0.0.1",
    )
    assert spark.returncode == 0, spark.stderr[-3000:]
    assert spark.stdout.splitlines()[-1] == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,cluster:string>"
    )


#: A job that never imports multikafka: PySpark discovers ``pyspark_multikafka``.
NO_CODE_QUERY = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
df = (spark.readStream.format("multikafka")
      .option("coordinator", "127.0.0.1:7070").option("stream", "orders").load())
print(df.schema.simpleString())
spark.stop()
"""


def test_the_umbrella_installs_everything_with_the_cli(dist: Path, fresh: Env) -> None:
    fresh.install(dist, "multikafka")
    installed = fresh.distributions()
    names = {n.replace("_", "-") for n in FOLDERS}
    assert names <= installed
    helped = fresh.run(str(fresh.bin / "multikafka"), "--help")
    assert helped.returncode == 0, helped.stderr
    for command in ("coordinator", "admin", "dev", "demo"):
        assert command in helped.stdout


def test_the_reader_wheel_is_manylinux_and_holds_the_converter(dist: Path) -> None:
    """``auditwheel repair`` tagged it: it needs nothing but glibc (nothing
    grafted into ``multikafka_reader.libs/``)."""
    wheel = _wheels(dist)["multikafka_reader"]
    assert re.search(r"-cp3\d+-cp3\d+-\S*manylinux_2_\d+_x86_64\S*\.whl$", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        tags = z.read(f"{_dist_info(names)}/WHEEL").decode().splitlines()
    assert any(EXTENSION.fullmatch(n) for n in names), names
    assert not [n for n in names if n.startswith("multikafka_reader.libs/")]
    assert any(re.fullmatch(r"Tag: cp3\d+-cp3\d+-manylinux_2_\d+_x86_64", t) for t in tags), tags


def _dist_info(names: list[str]) -> str:
    (info,) = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    return info


def test_the_reader_wheel_converts_with_its_compiled_converter(
    newest_reader: Env, consumed_topic: Topic
) -> None:
    """Installed into a fresh environment, the converter loads from there and
    reads confluent-kafka's struct: no warning about it."""
    where = newest_reader.python_c(
        "from multikafka.reader_agent import _convert; print(_convert.__file__)"
    )
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(newest_reader.root)), where.stdout
    out, log = convert_consumed(newest_reader, consumed_topic)
    assert out["auto"] == "c-direct", (out, log)
    assert "compiled converter" not in log


def test_the_reader_sdist_installs_without_a_compiler_and_converts_in_python(
    dist: Path, fresh: Env, consumed_topic: Topic
) -> None:
    (sdist,) = dist.glob("multikafka_reader-*.tar.gz")
    fresh.install(dist, str(sdist), CC="/bin/false", CXX="/bin/false")
    found = fresh.python_c(
        "import importlib.util; print(importlib.util.find_spec('multikafka.reader_agent._convert'))"
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "None"  # the build skipped the extension
    out, log = convert_consumed(fresh, consumed_topic)
    assert out["auto"] == "python", out
    assert out["equal"] == ["auto"], out  # the auto converter is the Python one
    assert out["compiled"] == []
    assert "the C converter is not built" in out["refused"]["c"]
    said = [line for line in log.splitlines() if "compiled converter:" in line]
    assert len(said) == 1, log  # once, however often it converts
    assert said[0].startswith("WARNING "), said
    assert "the C converter is not built" in said[0], said
