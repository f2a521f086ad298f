"""What each deployable installs and how long its entry point takes to import,
against a baseline commit (by default the last one before the parts became
distributions of their own), both built and measured in the same run.

    python -m benchmarks.footprint [--baseline 9b3458a] [--repeat 15] [--out docs]

Builds this checkout's wheels (``make dist``) and the baseline's one wheel
(``pip wheel`` of a ``git worktree`` of it), installs each deployable into a
fresh virtual environment (dependencies from the package index, as a user
gets them) and measures:

* **installed size**: the environment's ``site-packages`` minus an empty
  environment's (pip and setuptools), in MB; and whether pyarrow, PySpark and
  aetcd are in it. The coordinator's image is ``python:3.11-slim`` plus that
  much (its ``pip install`` is the only layer that grows; the base image's own
  size is not measured here, no Docker engine runs here);
* **import time**: ``python -X importtime -c 'import <entry point>'``, the
  cumulative time of the entry point, ``--repeat`` times, median [min-max]:
  the coordinator (``multikafka.coordinator``, was ``coordinator``) and the
  Spark source (``multikafka.spark``, was ``spark_bridge``), each in its own
  deployable's environment.

Deployables: ``coordinator`` (now ``multikafka-coordinator``; before, the
project without extras, what the image installed), ``spark`` (now
``multikafka-spark``; before, ``multikafka[spark]``) and ``everything`` (now
``multikafka``; before, ``multikafka[spark]``).

Results go to ``benchmarks/out/footprint.json`` and ``<out>/img/footprint.png``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import venv
from pathlib import Path
from typing import Any

from rich.table import Table

from benchmarks._common import (
    ROOT,
    Arguments,
    bars_with_range,
    console,
    figure,
    finish,
    machine,
    median_range,
    progress_bar,
    summary,
)

#: The last commit with one distribution and five top-level packages.
BASELINE = "9b3458a"
#: deployable -> (requirement now, requirement at the baseline).
DEPLOYABLES = {
    "coordinator": ("multikafka-coordinator", "multikafka"),
    "spark": ("multikafka-spark", "multikafka[spark]"),
    "everything": ("multikafka", "multikafka[spark]"),
}
#: What is imported to time each entry point: (deployable, module now, module before).
ENTRY_POINTS = {
    "coordinator": ("coordinator", "multikafka.coordinator", "coordinator"),
    "Spark source": ("spark", "multikafka.spark", "spark_bridge"),
}
HEAVY = ("pyarrow", "pyspark", "aetcd")


def _run(cmd: list[str], **kw: Any) -> str:
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)
    return str(out.stdout)


def _site_packages(env: Path) -> Path:
    (found,) = (env / "lib").glob("python3*/site-packages")
    return found


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


class Env:
    """A fresh virtual environment with one requirement installed."""

    def __init__(self, root: Path, requirement: str, wheels: Path) -> None:
        venv.create(root, with_pip=True)
        self.python = str(root / "bin" / "python")
        _run(
            [self.python, "-m", "pip", "install", "-q", "--find-links", str(wheels), requirement],
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
        self.root = root
        self.site = _site_packages(root)
        listed = _run([self.python, "-m", "pip", "list", "--format=freeze"])
        self.distributions = sorted(line.split("==")[0].lower() for line in listed.split())

    def import_ms(self, module: str) -> float:
        """Cumulative import time of ``module`` in a new interpreter, in ms."""
        # From the environment's folder: the checkout's own folders
        # (coordinator/, ...) must not shadow what is installed.
        err = subprocess.run(
            [self.python, "-X", "importtime", "-c", f"import {module}"],
            check=True,
            capture_output=True,
            text=True,
            cwd=self.root,
        ).stderr
        cumulative = [
            int(parts[1])
            for line in err.splitlines()
            if len(parts := line.split("|")) == 3
            if parts[2].strip() == module
        ]
        return cumulative[-1] / 1000


def build(tmp: Path, baseline: str) -> tuple[Path, Path]:
    """This checkout's wheels and the baseline's."""
    new = tmp / "wheels-now"
    _run(["make", "-s", "-C", str(ROOT), "dist", f"DIST={new}", f"PYTHON={sys.executable}"])
    tree = tmp / "baseline"
    _run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(tree), baseline])
    try:
        old = tmp / "wheels-before"
        _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(old), str(tree)])
    finally:
        _run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)])
    return new, old


def measure(baseline: str, repeat: int, deployables: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "machine": machine(),
        "baseline": baseline,
        "head": _run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]).strip(),
        "repeat": repeat,
        "deployables": {},
        "imports": {},
    }
    with tempfile.TemporaryDirectory() as tmp_name, progress_bar() as progress:
        tmp = Path(tmp_name)
        task = progress.add_task("footprint", total=2 + 2 * len(deployables), note="wheels")
        wheels = build(tmp, baseline)
        progress.advance(task)
        empty = tmp / "empty"
        venv.create(empty, with_pip=True)
        base_mb = _size_mb(_site_packages(empty))
        progress.advance(task)
        envs: dict[tuple[str, str], Env] = {}
        for name in deployables:
            requirements = DEPLOYABLES[name]
            for when, requirement, found in zip(
                ("now", "before"), requirements, wheels, strict=True
            ):
                progress.update(task, note=f"{when}: pip install {requirement}")
                env = Env(tmp / f"{name}-{when}", requirement, found)
                envs[(name, when)] = env
                result["deployables"].setdefault(name, {})[when] = {
                    "requirement": requirement,
                    "installed_mb": round(_size_mb(env.site) - base_mb, 1),
                    "distributions": len(env.distributions),
                    "heavy": [h for h in HEAVY if h in env.distributions],
                }
                progress.advance(task)
        timing = progress.add_task("imports", total=repeat, note="")
        entry_points = {w: e for w, e in ENTRY_POINTS.items() if e[0] in deployables}
        samples: dict[str, dict[str, list[float]]] = {
            what: {"now": [], "before": []} for what in entry_points
        }
        for _ in range(repeat):  # alternating, so both see the same machine
            for what, (name, now, before) in entry_points.items():
                samples[what]["now"].append(envs[(name, "now")].import_ms(now))
                samples[what]["before"].append(envs[(name, "before")].import_ms(before))
            progress.advance(timing)
        for what, (_, now, before) in entry_points.items():
            result["imports"][what] = {
                "now": {"module": now, "ms": summary(samples[what]["now"])},
                "before": {"module": before, "ms": summary(samples[what]["before"])},
                "ratio": statistics.median(
                    a / b
                    for a, b in zip(samples[what]["now"], samples[what]["before"], strict=True)
                ),
            }
    return result


def plot(result: dict[str, Any], png: Path) -> None:
    with figure(png, 1, 2, figsize=(11, 4.2)) as (fig, (sizes, times)):
        names = list(result["deployables"])
        width = 0.38
        for i, when in enumerate(("before", "now")):
            values = [result["deployables"][n][when]["installed_mb"] for n in names]
            xs = [x + (i - 0.5) * width for x in range(len(names))]
            sizes.bar(
                xs,
                values,
                width,
                label=f"{when} ({result['baseline'] if when == 'before' else result['head']})",
            )
            for x, v in zip(xs, values, strict=True):
                sizes.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
        sizes.set_xticks(range(len(names)), names)
        sizes.set_ylabel("installed MB (site-packages beyond pip)")
        sizes.set_title("installed size per deployable")
        sizes.legend()
        sizes.grid(axis="y", alpha=0.3)
        labels, stats = [], []
        for what, r in result["imports"].items():
            for when in ("before", "now"):
                labels.append(f"{what}\n{when}")
                stats.append(r[when]["ms"])
        bars_with_range(
            times,
            labels,
            stats,
            label="import time, ms (median, min-max)",
            colors=["tab:blue", "tab:orange"] * len(result["imports"]),
        )
        times.set_title("cold import of the entry point")
        fig.suptitle(f"Deployables before ({result['baseline']}) and now ({result['head']})")


def main(argv: list[str] | None = None) -> int:
    parser = Arguments(__doc__, smoke={"repeat": 1, "deployables": "coordinator"}, repeat=15)
    parser.add_argument("--baseline", default=BASELINE, help="git ref measured as 'before'")
    parser.add_argument(
        "--deployables", default=",".join(DEPLOYABLES), help="which, comma-separated"
    )
    args = parser.parse_args(argv)
    if unknown := set(args.deployables.split(",")) - set(DEPLOYABLES):
        parser.error(f"--deployables: unknown {', '.join(sorted(unknown))}")
    result = measure(args.baseline, args.repeat, args.deployables.split(","))
    finish("footprint", result, args, plot)
    table = Table(title="installed size, MB (beyond an empty venv)")
    for col in ("deployable", "before", "now", "now / before", "heavy before", "heavy now"):
        table.add_column(col)
    for name, r in result["deployables"].items():
        b, n = r["before"], r["now"]
        table.add_row(
            name,
            f"{b['installed_mb']:.0f} ({b['requirement']})",
            f"{n['installed_mb']:.0f} ({n['requirement']})",
            f"{n['installed_mb'] / b['installed_mb']:.2f}",
            ", ".join(b["heavy"]) or "-",
            ", ".join(n["heavy"]) or "-",
        )
    console.print(table)
    times = Table(title=f"import time, ms, median \\[min-max] of {args.repeat}")
    for col in ("entry point", "before", "now", "now / before"):
        times.add_column(col)
    for what, r in result["imports"].items():
        times.add_row(
            what,
            f"{r['before']['module']}: {median_range(r['before']['ms'], '{:.0f}')}",
            f"{r['now']['module']}: {median_range(r['now']['ms'], '{:.0f}')}",
            f"{r['ratio']:.2f}",
        )
    console.print(times)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
