"""One name per concept in the shipped code: no two classes share a name
(two ``Decoded`` and two ``Replica`` once meant different things in
different places), and "decoder" means a payload format only: converting
Kafka messages into Arrow is *conversion* (``arrow.convert``, the
compiled converter), never decoding."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: Every distribution's source root.
ROOTS = ["core/src", "coordinator/src", "reader_agent/src", "spark_bridge/src", "src"]
#: The modules of payload decoding (keyFormat / valueFormat and mode).
PAYLOAD_DECODING = {"decoders.py", "payloads.py"}


def shipped() -> list[Path]:
    files = [p for root in ROOTS for p in (REPO / root).rglob("*.py")]
    return sorted(p for p in files if "_pb2" not in p.name)


def test_no_two_classes_share_a_name() -> None:
    homes: dict[str, list[str]] = defaultdict(list)
    for path in shipped():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                homes[node.name].append(str(path.relative_to(REPO)))
    shared = {name: files for name, files in homes.items() if len(files) > 1}
    assert len(homes) > 150
    assert shared == {}


def test_decoder_names_only_payload_decoding() -> None:
    """Identifiers with ``decoder`` in them live in the payload decoding
    modules (or name them: ``make_decoder``, ``PayloadDecoding``)."""
    word = re.compile(r"\b\w*[Dd]ecoder\w*\b")
    found = []
    for path in shipped():
        if path.name in PAYLOAD_DECODING:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
            elif isinstance(node, ast.Name):
                names.append(node.id)
            elif isinstance(node, ast.Attribute):
                names.append(node.attr)
            elif isinstance(node, ast.arg):
                names.append(node.arg)
            found += [(path.name, n) for n in names if word.fullmatch(n)]
    assert found == []
