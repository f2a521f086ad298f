"""``multikafka.spark.register`` with fake sessions: the parallelism it
passes, classic and Spark Connect, and Spark 4.0, which keeps a source it
discovered rather than take another under the same name."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from multikafka.spark._source import MultiKafkaDataSource, parallelism_of, register

INTERNALS = ("multikafka.spark._source",)


class Registry:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.registered: list[type] = []

    def register(self, source: type) -> None:
        if self.error is not None:
            raise self.error
        self.registered.append(source)


class FakeSession:
    """A classic session (``cores``: its SparkContext's defaultParallelism)
    or, without ``cores``, a Spark Connect one (no SparkContext)."""

    def __init__(
        self, *, cores: int | None = None, conf: dict[str, str] | None = None, registry: Registry
    ) -> None:
        self._cores = cores
        self._conf = conf or {}
        self.conf = SimpleNamespace(get=lambda key, default=None: self._conf.get(key, default))
        self.dataSource = registry

    @property
    def sparkContext(self) -> Any:
        if self._cores is None:
            raise AttributeError("JVM_ATTRIBUTE_NOT_SUPPORTED")
        return SimpleNamespace(defaultParallelism=self._cores)


@pytest.mark.parametrize(
    ("cores", "conf", "expected"),
    [
        (6, {}, 6),
        (None, {"spark.default.parallelism": "5"}, 5),
        (None, {"spark.master": "local[3]"}, 3),
        (None, {"spark.master": "local[4, 2]"}, 4),
        (None, {"spark.executor.instances": "3", "spark.executor.cores": "4"}, 12),
        (None, {"spark.master": "local[*]"}, 0),
        (None, {}, 0),
    ],
)
def test_parallelism_of(cores: int | None, conf: dict[str, str], expected: int) -> None:
    assert parallelism_of(FakeSession(cores=cores, conf=conf, registry=Registry())) == expected  # type: ignore[arg-type]


def test_register_passes_the_parallelism_on_the_class_it_registers() -> None:
    registry = Registry()
    source = register(FakeSession(cores=8, registry=registry))  # type: ignore[arg-type]
    assert registry.registered == [source]
    assert source.default_parallelism == 8
    assert issubclass(source, MultiKafkaDataSource)
    assert source.name() == "multikafka"
    assert MultiKafkaDataSource.default_parallelism == 0  # the discovered one is untouched


def test_spark_4_0_keeps_the_source_it_discovered_and_register_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    exists = RuntimeError("[DATA_SOURCE_ALREADY_EXISTS] Data source 'multikafka' already exists.")
    with caplog.at_level(logging.WARNING):
        source = register(FakeSession(cores=8, registry=Registry(exists)))  # type: ignore[arg-type]
    assert source is MultiKafkaDataSource
    (said,) = [r.getMessage() for r in caplog.records]
    assert "parallelism (8)" in said
    assert "minPartitions" in said


def test_other_registration_errors_are_raised() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        register(FakeSession(cores=2, registry=Registry(RuntimeError("boom"))))  # type: ignore[arg-type]
