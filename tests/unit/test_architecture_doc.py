"""docs/architecture.md stays true: every module or file its "where to find"
table names exists and holds the names the table puts beside it. Modules are
named as they import (``multikafka.coordinator.api.rpc``), other files by
their path in the repository (``proto/multikafka/v1/planner.proto``)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "architecture.md"


def where_to_find() -> list[tuple[str, list[str], list[str]]]:
    """(behaviour, files, names) per row of the table."""
    text = DOC.read_text()
    section = text.split("## Where to find", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or cells[0] in ("behaviour", "---"):
            continue
        files = re.findall(r"`([^`]+)`", cells[1])
        names = re.findall(r"`([^`]+)`", cells[2])
        rows.append((cells[0], files, names))
    return rows


ROWS = where_to_find()


def test_the_table_is_there() -> None:
    assert len(ROWS) >= 40
    assert all(files for _, files, _ in ROWS)


@pytest.mark.parametrize(("behaviour", "files", "names"), ROWS, ids=[r[0] for r in ROWS])
def test_every_named_file_exists_and_holds_its_names(
    behaviour: str, files: list[str], names: list[str]
) -> None:
    texts = []
    for f in files:
        path = _file_of(f)
        assert path is not None, f"{behaviour}: no module {f}"
        assert path.is_file(), f"{behaviour}: {f} does not exist"
        texts.append(path.read_text())
    for name in names:
        defined = re.compile(
            rf"(^|\s)(class|def|async def|service|message)\s+{re.escape(name)}\b"
            rf"|^{re.escape(name)}\s*[:=]|^\[tool\.{re.escape(name)}\]",
            re.M,
        )
        assert any(defined.search(t) for t in texts), f"{behaviour}: {name} not in {files}"


def _file_of(name: str) -> Path | None:
    """The file of a module named as it imports, or of a repository path."""
    if "/" in name or (REPO / name).is_file():
        return REPO / name
    spec = importlib.util.find_spec(name)
    return Path(spec.origin) if spec is not None and spec.origin else None


#: Each distribution's folder (its pyproject.toml and src/).
FOLDERS = (".", "core", "coordinator", "reader_agent", "spark_bridge")


def shipped_parts() -> list[str]:
    """Every package and module the distributions ship directly under
    ``multikafka`` (``multikafka.coordinator``, ``multikafka.demo``, ...)."""
    import tomllib

    parts = []
    for folder in FOLDERS:
        project = tomllib.loads((REPO / folder / "pyproject.toml").read_text())
        found = project["tool"]["setuptools"]["packages"]["find"]
        for include in found["include"]:
            name = include.rstrip("*").rstrip(".")
            if name != "multikafka" and name.count(".") == 1:
                parts.append(name)
        top = REPO / folder / found["where"][0] / "multikafka"
        parts.extend(f"multikafka.{m.stem}" for m in top.glob("*.py") if m.stem != "__init__")
    return sorted(parts)


def test_every_shipped_part_is_a_layer_of_the_contract_and_the_diagram() -> None:
    import tomllib

    parts = shipped_parts()
    assert {"multikafka.core", "multikafka.coordinator", "multikafka.spark"} <= set(parts)
    linter = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [
        c["layers"] for c in linter["contracts"] if c["type"] == "layers" and "containers" not in c
    ]
    layered = {m.strip() for layer in layers for m in layer.split("|")}
    diagram = DOC.read_text().split("## Distributions and layers", 1)[1].split("\n## ", 1)[0]
    for part in parts:
        assert importlib.util.find_spec(part) is not None, part
        assert part in layered, f"{part} is in no layer of the import contract"
        assert f"│ {part} " in diagram, f"{part} is not in the layer diagram"
