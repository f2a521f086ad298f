"""Shared helpers of the benchmark scripts: machine facts, summaries, output.

Every benchmark reports ratios against a baseline measured in the same run
and repeats each measurement, because the machines we run on are small and
shared (timings are noisy); :func:`summary` gives median, min and max.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
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


def write_json(name: str, data: dict[str, Any]) -> Path:
    """Write ``benchmarks/out/<name>`` and return its path."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    path = OUT_DIR / name
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


def plain_consumer(bootstrap: str, client_id: str) -> Any:
    """A confluent-kafka consumer with the readers' settings (and the dev
    stack's stream properties) on ``bootstrap``, for assigning partitions:
    the plain-consumer baselines."""
    from confluent_kafka import Consumer

    from multikafka.core.kafka_config import READER_DEFAULTS
    from multikafka.devstack.stack import TANSU_PROPERTIES

    return Consumer(
        {
            **READER_DEFAULTS,
            **TANSU_PROPERTIES,
            "bootstrap.servers": bootstrap,
            "group.id": "bench-plain",
            "client.id": client_id,
        }
    )


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


def finish(
    name: str, result: dict[str, Any], out: str, plot: Callable[[dict[str, Any], Path], None]
) -> tuple[Path, Path]:
    """Stamp the end load, write ``benchmarks/out/<name>.json`` and the plot
    ``<out>/img/<name>.png``; returns both paths."""
    result["machine"]["loadavg_at_end"] = list(os.getloadavg())
    json_path = write_json(f"{name}.json", result)
    png = img_path(resolve_out(out), f"{name}.png")
    plot(result, png)
    return json_path, png


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
