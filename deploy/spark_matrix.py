"""The Spark e2e tests on each supported PySpark, in venvs of their own.

    python deploy/spark_matrix.py [--versions 4.0.5 4.1.4 4.2.1 4.3.0] [-- pytest args]

For each version: ``.venv-spark/<version>`` (made once; remade when a
project file changes) holds the project's parts, editable, with
``pyspark[connect]==<version>``; then its pytest runs the tests marked
``spark`` (streaming exactly once across a restart, live failover, batch
reads, TLS and reader tokens, Spark Connect) and the unit tests of the
stream reader's admission control. A table of results at the end; the exit
status is non-zero when any version fails.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
#: The latest patch of each supported minor release, oldest first.
VERSIONS = ("4.0.5", "4.1.4", "4.2.1", "4.3.0")
PARTS = ("core", "coordinator", "reader_agent", "spark_bridge")
#: What the venv is made from: a change remakes it.
PROJECT_FILES = ("pyproject.toml", *(f"{p}/pyproject.toml" for p in PARTS), "reader_agent/setup.py")
#: The Spark tests, but the chaos soak: it tests the whole system (3.5 min),
#: which ``make test`` does on the newest PySpark.
TESTS = ("-m", "spark and not soak", "tests/e2e", "tests/unit/test_admission.py")

console = Console(stderr=True)


@dataclass
class Result:
    version: str
    status: str
    seconds: float
    summary: str


def venv_for(version: str) -> Path:
    """``.venv-spark/<version>``, made or remade as needed."""
    venv = ROOT / ".venv-spark" / version
    digest = hashlib.sha256(version.encode())
    for name in PROJECT_FILES:
        digest.update((ROOT / name).read_bytes())
    stamp = venv / ".installed-stamp"
    if stamp.exists() and stamp.read_text() == digest.hexdigest():
        return venv
    with console.status(f"PySpark {version}: making {venv.relative_to(ROOT)}"):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--upgrade", "pip"], check=True)
        editable = [arg for p in PARTS for arg in ("-e", str(ROOT / p))]
        subprocess.run(
            [*pip, *editable, "-e", f"{ROOT}[dev]", f"pyspark[connect]=={version}"],
            check=True,
            cwd=ROOT,
        )
    stamp.write_text(digest.hexdigest())
    return venv


def run_tests(version: str, extra: list[str]) -> Result:
    venv = venv_for(version)
    console.rule(f"PySpark {version}")
    t0 = time.monotonic()
    last = "no output"
    with subprocess.Popen(
        [str(venv / "bin" / "pytest"), "-p", "no:cacheprovider", *TESTS, *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:  # pytest's own progress, as it goes
            sys.stdout.write(line)
            if line.strip():
                last = line.strip().strip("= ")
    elapsed = time.monotonic() - t0
    return Result(version, "passed" if proc.returncode == 0 else "FAILED", elapsed, last)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", nargs="+", default=list(VERSIONS), metavar="VERSION")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    results = [run_tests(v, args.pytest_args) for v in args.versions]
    table = Table(title="Spark e2e tests per PySpark version")
    for column in ("PySpark", "result", "time", "pytest"):
        table.add_column(column)
    for r in results:
        style = "green" if r.status == "passed" else "red"
        table.add_row(r.version, f"[{style}]{r.status}[/]", f"{r.seconds:.0f} s", r.summary)
    console.print(table)
    return 0 if all(r.status == "passed" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
