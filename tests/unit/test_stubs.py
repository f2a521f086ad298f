"""The generated gRPC stubs live where their messages say they live, and the
protocol's shape: one form for offsets and for ranges, an enum for states.

Spark pickles the source's options (protobuf messages) to its workers; pickle
finds a message class by its ``__module__``, which protoc derives from the
proto path: ``multikafka.v1``, the stubs' real package."""

from __future__ import annotations

import importlib
import pickle
from pathlib import Path
from typing import Any

import pytest

from multikafka.v1 import planner_pb2

ROOT = Path(__file__).resolve().parents[2]
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
        kind=planner_pb2.Position.SPECIFIC,
        offsets=planner_pb2.OffsetColumns(
            clusters=["a"], topics=["t"], counts=[1], partitions=[0], offsets=[42]
        ),
        fallback=2,
    )
    assert pickle.loads(pickle.dumps(position)) == position


def test_wire_names_keep_the_protocol_package() -> None:
    service = planner_pb2.DESCRIPTOR.services_by_name["Planner"]
    assert service.full_name == "multikafka.v1.Planner"
    assert planner_pb2.DESCRIPTOR.name == "multikafka/v1/planner.proto"


def _map_fields(message: Any) -> list[str]:
    return [
        f"{message.full_name}.{f.name}"
        for f in message.fields
        if f.message_type is not None and f.message_type.GetOptions().map_entry
    ]


def test_the_planner_carries_offsets_in_one_form() -> None:
    """Offset vectors travel as OffsetColumns only: no map of split ids in
    any Planner message (the maps of earlier versions are gone, their tags
    reserved so that they are never reused with another meaning)."""
    messages = list(planner_pb2.DESCRIPTOR.message_types_by_name.values())
    assert [m for message in messages for m in _map_fields(message)] == []
    columns = [
        f"{m.name}.{f.name}"
        for m in messages
        for f in m.fields
        if f.message_type is not None and f.message_type.name == "OffsetColumns"
    ]
    assert columns == [
        "Position.offsets",
        "Position.split_timestamps",
        "ResolveOffsetsResponse.offsets",
        "LatestOffsetsRequest.start",
        "LatestOffsetsRequest.cap",
        "LatestOffsetsRequest.committed",
        "LatestOffsetsResponse.end",
        "LatestOffsetsResponse.available",
        "PlanPartitionsRequest.start",
        "PlanPartitionsRequest.end",
        "CommitRequest.end",
    ]
    reserved = (ROOT / "proto" / "multikafka" / "v1" / "planner.proto").read_text()
    for where in (
        "reserved 2, 5;",
        "reserved 3;",
        "reserved 1;",
        "reserved 3, 5;",
        "reserved 3, 4;",
    ):
        assert where in reserved, where


def test_a_range_has_one_message_and_a_cluster_state_one_enum() -> None:
    """Ranges travel as RangeColumns (plans and abandoned reports alike);
    cluster states as the ClusterState enum, whose names are the stream
    document's."""
    from multikafka.core.model import ClusterState
    from multikafka.v1 import admin_pb2, common_pb2, reader_pb2

    assert "SplitRange" not in common_pb2.DESCRIPTOR.message_types_by_name
    assert "TaskPlan" not in planner_pb2.DESCRIPTOR.message_types_by_name
    assert "AbandonedRange" not in reader_pb2.DESCRIPTOR.message_types_by_name
    tasks = planner_pb2.PlanPartitionsResponse.DESCRIPTOR.fields_by_name["tasks"]
    abandoned = reader_pb2.ReportReadsRequest.DESCRIPTOR.fields_by_name["abandoned"]
    assert tasks.message_type.name == abandoned.message_type.name == "RangeColumns"
    for message in (reader_pb2.ClusterDesired, admin_pb2.ClusterStatus):
        state = message.DESCRIPTOR.fields_by_name["state"]
        assert state.enum_type is not None
        assert state.enum_type.full_name == "multikafka.v1.ClusterState"
    for s in ClusterState:
        assert ClusterState(common_pb2.ClusterState.Name(s.to_proto())) is s
        assert common_pb2.ClusterState.Name(s.to_proto()) == s.value
    with pytest.raises(ValueError):
        ClusterState(common_pb2.ClusterState.Name(common_pb2.REMOVED))
