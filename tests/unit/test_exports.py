"""The public names of each package: changing them is an API change, made on purpose."""

from __future__ import annotations

import importlib
import importlib.metadata

import pytest

INTERNALS = (
    "multikafka.reader_agent._agent",
    "multikafka.reader_agent._arrow",
    "multikafka.reader_agent._options",
    "multikafka.spark._options",
)


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
    "multikafka.coordinator": [
        "Coordinator",
        "CoordinatorConfig",
        "EtcdConfig",
        "EtcdEndpoint",
        "TlsFiles",
    ],
    # sorted as ruff sorts __all__ (constants, classes, functions)
    "multikafka.reader_agent": [
        "SCHEMA",
        "SCHEMA_WITH_HEADERS",
        "SPARK_DDL",
        "SPARK_DDL_WITH_HEADERS",
        "ReadOptions",
        "ReadTask",
        "ReaderAgent",
        "get_agent",
        "record_batch",
    ],
    "multikafka.spark": ["MultiKafkaDataSource", "ReadOptions", "parse_options", "register"],
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
        ("multikafka", "ValidationError", "multikafka.core.exceptions"),
        ("multikafka", "StreamSpec", "multikafka.core.model"),
        ("multikafka", "parse_stream", "multikafka.core.validation"),
        ("multikafka.reader_agent", "ReaderAgent", "multikafka.reader_agent._agent"),
        ("multikafka.reader_agent", "record_batch", "multikafka.reader_agent._arrow"),
        ("multikafka.spark", "ReadOptions", "multikafka.reader_agent._options"),
        ("multikafka.spark", "parse_options", "multikafka.spark._options"),
    ],
)
def test_public_names_are_the_implementations(package: str, name: str, home: str) -> None:
    assert getattr(importlib.import_module(package), name) is getattr(
        importlib.import_module(home), name
    )


#: Every distribution of the project, released together at one version.
DISTRIBUTIONS = (
    "multikafka",
    "multikafka-core",
    "multikafka-coordinator",
    "multikafka-reader",
    "multikafka-spark",
)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_version_matches_every_distribution(distribution: str) -> None:
    import multikafka

    assert multikafka.__version__ == importlib.metadata.version(distribution)


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_distributions_require_each_other_at_that_version(distribution: str) -> None:
    """The parts are released together: each requires the others it needs at
    exactly its own version (a newer core under an older coordinator is not
    a combination anyone tested)."""
    import multikafka

    requires = importlib.metadata.requires(distribution) or []
    ours = [r for r in requires if r.startswith("multikafka") and "extra ==" not in r]
    assert ours or distribution == "multikafka-core"
    for requirement in ours:
        assert requirement.endswith(f"=={multikafka.__version__}"), requirement
