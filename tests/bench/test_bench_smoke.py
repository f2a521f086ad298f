"""Every benchmark of ``make bench`` still runs: each at its smoke sizes
(``--smoke``, what ``make bench-smoke`` runs), in a process of its own, its
JSON and plot into the test's folder (never ``benchmarks/out`` or
``docs/``). Marked ``bench``: ``make test`` leaves these out (``pytest -m
bench`` runs them; CI runs ``make bench-smoke``). The benchmarks are taken
from the Makefile's ``BENCHMARKS``, the one list of them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.bench, pytest.mark.timeout(900)]


def benchmarks() -> list[str]:
    """The names in the Makefile's ``BENCHMARKS := ...`` (continued lines too)."""
    text = (REPO / "Makefile").read_text()
    found = re.search(r"^BENCHMARKS := ((?:.*\\\n)*.*)$", text, re.MULTILINE)
    if found is None:
        raise LookupError("no BENCHMARKS := in the Makefile")
    return found.group(1).replace("\\\n", " ").split()


def test_the_list_is_every_benchmark_module() -> None:
    modules = {p.stem for p in (REPO / "benchmarks").glob("*.py") if not p.stem.startswith("_")}
    assert set(benchmarks()) == modules


@pytest.mark.parametrize("name", benchmarks())
def test_the_benchmark_runs_at_smoke_sizes(name: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--smoke", "--out", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    assert list(tmp_path.glob("*.json")), "no JSON written"
    assert list((tmp_path / "img").glob("*.png")), "no plot written"
