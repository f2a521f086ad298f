"""What the benchmarks share, which is presentation only: their command
line (:class:`Arguments`, with ``--out``, ``--repeat`` and ``--smoke``), the
machine facts, summaries of repeated measurements, tables, plots and the
JSON output. What they run on (the stack, chaos, processes, ``/proc``) is
the dev stack's (:mod:`multikafka.devstack`), shared with the tests.

Every benchmark reports ratios against a baseline measured in the same run
and repeats each measurement, because the machines we run on are small and
shared (timings are noisy); :func:`summary` gives median, min and max.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from multikafka.devstack import procfs

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "benchmarks" / "out"


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    return {
        "nproc": os.cpu_count(),
        "cpu_model": procfs.cpu_model() or platform.processor(),
        "ram_gib": round(procfs.memory_gib(), 1),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "loadavg_at_start": list(os.getloadavg()),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max (and the count) of repeated measurements."""
    if not values:
        return {"n": 0, "median": float("nan"), "min": float("nan"), "max": float("nan")}
    return {
        "n": len(values),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
    }


def median_range(s: Mapping[str, float], fmt: str = "{:.1f}") -> str:
    """``median [min-max]`` of a :func:`summary`, for a rich table (the
    bracket escaped, so rich does not read it as markup)."""
    return f"{fmt.format(s['median'])} \\[{fmt.format(s['min'])}-{fmt.format(s['max'])}]"


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) by linear interpolation."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def write_json(name: str, data: dict[str, Any], folder: Path = OUT_DIR) -> Path:
    """Write ``<folder>/<name>`` (``benchmarks/out`` by default) and return its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    return path


def img_path(out: Path, name: str) -> Path:
    """``<out>/img/<name>`` (``out`` is the docs directory), created as needed."""
    target = out / "img"
    target.mkdir(parents=True, exist_ok=True)
    return target / name


def resolve_out(out: str) -> Path:
    """``--out`` relative to the repository root unless absolute."""
    path = Path(out)
    return path if path.is_absolute() else ROOT / path


def quiet_logs() -> None:
    """Keep the product's info logs out of the progress display."""
    import logging

    logging.basicConfig(level=logging.WARNING)
    for name in ("multikafka", "py4j"):
        logging.getLogger(name).setLevel(logging.WARNING)


#: Wide enough for the result tables when the output is a file.
console = Console(width=None if sys.stdout.isatty() else 120)


def progress_bar(*, transient: bool = False) -> Progress:
    """The progress display every benchmark uses (tasks carry a ``note`` field)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=console,
        transient=transient,
    )


class Arguments(argparse.ArgumentParser):
    """A benchmark's command line: its description the first paragraph of
    ``doc``; ``--out`` (the docs directory: the plot goes to ``<out>/img``),
    ``--repeat`` (when ``repeat`` is given: its default) and ``--smoke``: a
    quick run at the sizes ``smoke`` gives (attribute -> value), to check
    that the benchmark runs (``make bench-smoke``), its JSON written beside
    its plot under ``--out`` and not into ``benchmarks/out``."""

    def __init__(self, doc: str, *, smoke: Mapping[str, Any], repeat: int | None = None) -> None:
        super().__init__(description=doc.split("\n\n")[0])
        self.smoke = dict(smoke)
        if repeat is not None:
            self.add_argument("--repeat", type=int, default=repeat, help="measured rounds")
        self.add_argument("--out", default="docs", help="docs directory (the PNG goes to img/)")
        sizes = ", ".join(f"{k} {v}" for k, v in self.smoke.items()) or "as given"
        self.add_argument(
            "--smoke", action="store_true", help=f"a quick run to check it runs: {sizes}"
        )

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: None = None
    ) -> argparse.Namespace:
        parsed = super().parse_args(args, namespace)
        if parsed.smoke:
            for key, value in self.smoke.items():
                setattr(parsed, key, value)
        return parsed


def json_folder(args: argparse.Namespace) -> Path:
    """Where a benchmark's JSON goes: ``benchmarks/out``; with ``--smoke``, ``--out``."""
    return resolve_out(args.out) if args.smoke else OUT_DIR


def finish(
    name: str,
    result: dict[str, Any],
    args: argparse.Namespace,
    plot: Callable[[dict[str, Any], Path], None],
    *,
    png_name: str = "",
) -> tuple[Path, Path]:
    """Stamp the end load, write ``benchmarks/out/<name>.json`` (with
    ``--smoke``: ``<out>/<name>.json``) and the plot ``<out>/img/<name>.png``
    (or ``png_name``), say so; returns both paths."""
    if "machine" not in result:
        result["machine"] = machine()
    result["machine"]["loadavg_at_end"] = list(os.getloadavg())
    json_path = write_json(f"{name}.json", result, json_folder(args))
    png = img_path(resolve_out(args.out), png_name or f"{name}.png")
    plot(result, png)
    console.print(f"wrote {json_path} and {png}")
    return json_path, png


@contextmanager
def figure(
    path: Path, nrows: int = 1, ncols: int = 1, **subplots: Any
) -> Iterator[tuple[Any, Any]]:
    """``(fig, axes)`` of matplotlib's ``subplots`` (no display needed),
    laid out and saved to ``path`` on leaving, then closed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(nrows, ncols, **subplots)
    try:
        yield fig, axes
        fig.tight_layout()
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """Print a table (cells already formatted, e.g. by :func:`median_range`)."""
    from rich.table import Table

    t = Table(title=title)
    for column in columns:
        t.add_column(column)
    for row in rows:
        t.add_row(*row)
    console.print(t)


def bars_with_range(
    ax: Any,
    names: Sequence[str],
    summaries: Sequence[Mapping[str, float]],
    *,
    label: str,
    colors: Sequence[str],
    log: bool = False,
) -> None:
    """One bar per name at its median, with its [min, max] as the error bar
    (what :func:`summary` gives), on matplotlib axes ``ax``."""
    med = [s["median"] for s in summaries]
    err = [
        [m - s["min"] for m, s in zip(med, summaries, strict=True)],
        [s["max"] - m for m, s in zip(med, summaries, strict=True)],
    ]
    ax.bar(list(names), med, yerr=err, capsize=4, color=list(colors)[: len(names)])
    ax.set_ylabel(label)
    if log:
        ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)
