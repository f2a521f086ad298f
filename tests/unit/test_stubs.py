"""The generated gRPC stubs live where their messages say they live.

Spark pickles the source's options (protobuf messages) to its workers; pickle
finds a message class by its ``__module__``, which protoc derives from the
proto path, so proto/generate.py rewrites it to the stubs' real package."""

from __future__ import annotations

import importlib
import pickle

import pytest

from multikafka.v1 import planner_pb2

MODULES = ["admin_pb2", "common_pb2", "planner_pb2", "reader_pb2"]


@pytest.mark.parametrize("name", MODULES)
def test_every_message_class_names_its_real_module(name: str) -> None:
    module = importlib.import_module(f"multikafka.v1.{name}")
    classes = [getattr(module, m) for m in module.DESCRIPTOR.message_types_by_name]
    assert classes
    for cls in classes:
        assert cls.__module__ == module.__name__, cls


def test_a_message_survives_pickling() -> None:
    position = planner_pb2.Position(
        kind=planner_pb2.Position.SPECIFIC, offsets={"a/t/0": 42}, fallback=2
    )
    assert pickle.loads(pickle.dumps(position)) == position


def test_wire_names_keep_the_protocol_package() -> None:
    service = planner_pb2.DESCRIPTOR.services_by_name["Planner"]
    assert service.full_name == "multikafka.v1.Planner"
    assert planner_pb2.DESCRIPTOR.name == "multikafka/v1/planner.proto"
