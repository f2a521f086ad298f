"""The public names of each package: changing them is an API change, made on purpose."""

from __future__ import annotations

import importlib
import importlib.metadata

import pytest

PUBLIC = {
    "multikafka": [
        "AuthenticationError",
        "AutoFailover",
        "ClusterSpec",
        "ClusterState",
        "ConflictError",
        "Connection",
        "DataLossError",
        "FailoverStrategy",
        "MultikafkaError",
        "NotFoundError",
        "PreconditionError",
        "Reader",
        "SplitId",
        "StartKind",
        "StartingPosition",
        "StreamSpec",
        "UnavailableError",
        "ValidationError",
        "__version__",
        "parse_stream",
        "parse_stream_json",
    ],
    "coordinator": ["Coordinator", "CoordinatorConfig", "EtcdConfig", "EtcdEndpoint", "TlsFiles"],
    # sorted as ruff sorts __all__ (constants, classes, functions)
    "reader_agent": [
        "SCHEMA",
        "SCHEMA_WITH_HEADERS",
        "SPARK_DDL",
        "SPARK_DDL_WITH_HEADERS",
        "RangeSpec",
        "ReadTask",
        "ReaderAgent",
        "get_agent",
        "record_batch",
    ],
    "spark_bridge": ["MultiKafkaDataSource", "SourceOptions", "register"],
}


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_all_is_locked(package: str) -> None:
    module = importlib.import_module(package)
    assert module.__all__ == PUBLIC[package]


@pytest.mark.parametrize("package", sorted(PUBLIC))
def test_every_public_name_is_importable(package: str) -> None:
    module = importlib.import_module(package)
    assert len(set(module.__all__)) == len(module.__all__)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    assert set(PUBLIC[package]) <= set(namespace)


@pytest.mark.parametrize(
    ("package", "name", "home"),
    [
        ("multikafka", "ValidationError", "multikafka_core.exceptions"),
        ("multikafka", "StreamSpec", "multikafka_core.model"),
        ("multikafka", "parse_stream", "multikafka_core.validation"),
        ("reader_agent", "ReaderAgent", "reader_agent.agent"),
        ("reader_agent", "record_batch", "multikafka_core.arrow"),
        ("spark_bridge", "SourceOptions", "spark_bridge.options"),
    ],
)
def test_public_names_are_the_implementations(package: str, name: str, home: str) -> None:
    assert getattr(importlib.import_module(package), name) is getattr(
        importlib.import_module(home), name
    )


def test_version_matches_the_distribution() -> None:
    import multikafka

    assert multikafka.__version__ == importlib.metadata.version("multikafka")
