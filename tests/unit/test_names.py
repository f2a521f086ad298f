"""One name per concept in the shipped code: no two classes share a name
(two ``Decoded`` and two ``Replica`` once meant different things in
different places), and "decoder" means a payload format only: converting
Kafka messages into Arrow is *conversion* (``arrow.convert``, the
compiled converter), never decoding."""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Every distribution's source root.
ROOTS = ["core/src", "coordinator/src", "reader_agent/src", "spark_bridge/src", "src"]
#: The modules of payload decoding (keyFormat / valueFormat and mode).
PAYLOAD_DECODING = {"decoders.py", "_payloads.py"}


def shipped() -> list[Path]:
    files = [p for root in ROOTS for p in (REPO / root).rglob("*.py")]
    return sorted(p for p in files if "_pb2" not in p.name)


@functools.cache
def _trees() -> dict[Path, ast.Module]:
    """Every shipped module, parsed once for all the tests here."""
    return {path: ast.parse(path.read_text()) for path in shipped()}


@functools.cache
def _class_homes() -> dict[str, list[str]]:
    """Class name -> the shipped files defining a class of that name."""
    homes: dict[str, list[str]] = defaultdict(list)
    for path, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                homes[node.name].append(str(path.relative_to(REPO)))
    return dict(homes)


def test_no_two_classes_share_a_name() -> None:
    homes = _class_homes()
    shared = {name: files for name, files in homes.items() if len(files) > 1}
    assert len(homes) > 150
    assert shared == {}


def test_decoder_names_only_payload_decoding() -> None:
    """Identifiers with ``decoder`` in them live in the payload decoding
    modules (or name them: ``make_decoder``, ``PayloadDecoding``)."""
    word = re.compile(r"\b\w*[Dd]ecoder\w*\b")
    found = [
        (path.name, name)
        for path in shipped()
        if path.name not in PAYLOAD_DECODING
        for name in _identifiers(path)
        if word.fullmatch(name)
    ]
    assert found == []


def _identifiers(path: Path) -> list[str]:
    """Names defined or used in a module (functions, classes, variables,
    attributes, arguments)."""
    names = []
    for node in ast.walk(_trees()[path]):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Name):
            names.append(node.id)
        elif isinstance(node, ast.Attribute):
            names.append(node.attr)
        elif isinstance(node, ast.arg):
            names.append(node.arg)
    return names


#: The modules that handle read marks (how far a query read a split, with the
#: fingerprints of the records there: what an exact failover starts from).
READ_MARK_HOMES = {
    "coordinator/src/multikafka/coordinator/agents/link.py",
    "coordinator/src/multikafka/coordinator/api/reader.py",
    "coordinator/src/multikafka/coordinator/operations/streams.py",
    "coordinator/src/multikafka/coordinator/runtime/leader.py",
    "coordinator/src/multikafka/coordinator/translation/failover.py",
    "coordinator/src/multikafka/coordinator/translation/marks.py",
    "reader_agent/src/multikafka/reader_agent/_agent.py",
}
#: PyYAML's names for positions in a file, and words that are not "mark".
NOT_A_MARK = re.compile(r"(?i)watermark|marker|problem_mark|start_mark|MarkedYAMLError")


def test_mark_means_a_read_mark() -> None:
    """ "Mark" once meant a watermark snapshot in planning, a read position in
    translation and a startup time in the agent. Now it is the read mark only:
    a cluster's watermark snapshot is ``ClusterEnds``, a process's startup
    times are stamps (``startup.stamp``)."""
    homes = set()
    for path in shipped():
        for name in _identifiers(path):
            if "mark" in NOT_A_MARK.sub("", name).lower():
                homes.add(str(path.relative_to(REPO)))
    assert homes == READ_MARK_HOMES


def test_reader_names_one_thing_each() -> None:
    """A class named ``…Reader`` is the standalone ``multikafka.Reader``, the
    agent's reader of one cluster (``SubReader``), the proto's Reader service
    (its wire name stays: agents and coordinators of different releases talk
    to each other) or one of Spark's reader interfaces. The consumer reading
    exact offset ranges is a ``RangeConsumer``; parsers are parsers."""
    readers = {name for name in _class_homes() if "Reader" in name}
    assert readers == {
        "Reader",
        "ReaderAgent",
        "ReaderService",
        "SubReader",
        "SubReaderStats",
        "MultiKafkaStreamReader",
        "MultiKafkaBatchReader",
    }


def test_planner_names_the_service() -> None:
    """ "Planner" is the gRPC service (``PlannerService``, its client
    ``PlannerClient``); the arithmetic of a micro-batch's end is the end
    vector (``planning.end_vector``), and no module is named planner but the
    service's."""
    modules = sorted(str(p.relative_to(REPO)) for p in shipped() if "planner" in p.stem)
    assert modules == [
        "coordinator/src/multikafka/coordinator/api/planner.py",
        "core/src/multikafka/core/planner_client.py",
    ]
    classes = {name for name in _class_homes() if "Planner" in name}
    assert classes == {"PlannerService", "PlannerClient"}


def test_status_names_one_thing_each() -> None:
    """A stream's status (what the coordinator decided, in etcd) and a
    replica's status (``admin status``) live in modules that say which."""
    stems = sorted(p.stem for p in shipped() if "status" in p.stem)
    assert stems == ["replica_status", "stream_status"]
