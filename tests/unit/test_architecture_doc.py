"""docs/architecture.md stays true: every file its "where to find" table
names exists and holds the names the table puts beside it."""

from __future__ import annotations

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
        path = REPO / f
        assert path.is_file(), f"{behaviour}: {f} does not exist"
        texts.append(path.read_text())
    for name in names:
        defined = re.compile(
            rf"(^|\s)(class|def|async def|service|message)\s+{re.escape(name)}\b"
            rf"|^{re.escape(name)}\s*[:=]|^\[tool\.{re.escape(name)}\]",
            re.M,
        )
        assert any(defined.search(t) for t in texts), f"{behaviour}: {name} not in {files}"


def test_every_shipped_package_is_a_layer_of_the_diagram() -> None:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    shipped = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    layered = {p.split(".")[0] for p in project["tool"]["importlinter"]["root_packages"]}
    assert shipped == layered
    layers = DOC.read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    for package in sorted(shipped):
        assert (REPO / package / "__init__.py").is_file(), package
        assert f"│ {package}" in layers, package
