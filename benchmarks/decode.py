"""Payload decoding cost: JSON values decoded column-wise against the raw read.

    python -m benchmarks.decode [--records 200000] [--batch 20000] [--repeat 5] [--out docs]

Builds ``--records`` Kafka messages in memory (``confluent_kafka.Message``,
no broker: this measures the Python worker's CPU, not fetching) whose values
are JSON objects of about 100 bytes with 5 fields (``id long, name string,
price double, tags array<string>, ts timestamp``), cut in batches of
``--batch`` (the agent's consume batch), then times, alternating, ``--repeat``
rounds each (after one untimed warm-up round), what the agent does per batch:

* ``raw``: messages to Arrow columns and the ``RecordBatch`` Spark gets
  (``arrow.convert`` + ``arrow.record_batch``), today's read;
* ``string``: the same, then ``valueFormat=string``;
* ``json``: the same, then ``valueFormat=json`` with the schema above;
* ``json_1pct_bad``: ``json`` with 1 % of the values malformed (a wrong
  type) in PERMISSIVE mode: the cost of isolating bad records;
* ``json_loads_loop`` (a reference, not a product path): the raw read, then
  ``json.loads`` per record and ``pa.array`` of the dicts, what a per-record
  decoder would cost.

Records per second of wall time and CPU seconds per million records of this
process (``time.process_time``), median [min-max] over the rounds; ratios per
round against that round's ``raw``. Results go to
``benchmarks/out/decode.json`` and ``<out>/img/decode.png``.
"""

from __future__ import annotations

import datetime as dt
import gc
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from confluent_kafka import Message

from benchmarks._common import (
    Arguments,
    bars_with_range,
    figure,
    finish,
    machine,
    median_range,
    progress_bar,
    summary,
    table,
)
from multikafka.reader_agent import _arrow as arrow
from multikafka.reader_agent._payloads import PayloadDecoding

SCHEMA = "id long, name string, price double, tags array<string>, ts timestamp"
JSON = PayloadDecoding.parse(value_format="json", value_schema=SCHEMA)
STRING = PayloadDecoding.parse(value_format="string")
VARIANTS = ("raw", "string", "json", "json_1pct_bad", "json_loads_loop")


def value(i: int, rng: random.Random) -> bytes:
    return json.dumps(
        {
            "id": i,
            "name": f"customer-{rng.randrange(10**6):06d}",
            "price": round(rng.uniform(1, 1000), 2),
            "tags": [rng.choice(["new", "vip", "eu", "us"])],
            "ts": "2024-05-01T12:34:56.789Z",
        },
        separators=(",", ":"),
    ).encode()


def messages(n: int, *, bad_every: int = 0) -> list[Message]:
    rng = random.Random(42)
    out = []
    for i in range(n):
        v = (
            b'{"id":"not a number","name":"x"}'
            if bad_every and i % bad_every == 0
            else value(i, rng)
        )
        out.append(
            Message(
                topic="orders",
                partition=i % 4,
                offset=i // 4,
                key=b"k%d" % i,
                value=v,
                timestamp=(1, 1_700_000_000_000 + i),
            )
        )
    return out


def _raw(batch: list[Message]) -> pa.RecordBatch:
    return arrow.record_batch(
        arrow.convert(batch, include_headers=False), "east", include_headers=False
    )


def _loads_loop(batch: list[Message]) -> pa.RecordBatch:
    raw = _raw(batch)
    rows = [None if v is None else json.loads(v) for v in raw.column("value").to_pylist()]
    for row in rows:
        if row is not None and "ts" in row:
            row["ts"] = dt.datetime.fromisoformat(row["ts"])
    decoded = pa.array(rows, JSON.decoders()[1].type)
    return raw.set_column(1, "value", decoded)


def steps(variant: str) -> Callable[[list[Message]], pa.RecordBatch]:
    if variant == "raw":
        return _raw
    if variant == "string":
        return lambda b: STRING.apply(_raw(b), stream="bench")
    if variant in ("json", "json_1pct_bad"):
        return lambda b: JSON.apply(_raw(b), stream="bench")
    return _loads_loop


def run_round(batches: list[list[Message]], variant: str) -> dict[str, float]:
    step = steps(variant)
    n = sum(len(b) for b in batches)
    gc.collect()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    rows = 0
    for batch in batches:
        rows += step(batch).num_rows
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    if rows != n:
        raise AssertionError(f"{variant}: {rows} rows out of {n}")
    return {"records_per_s": n / wall, "cpu_s_per_million": cpu / n * 1e6}


def measure(records: int, batch: int, repeat: int) -> dict[str, Any]:
    good = messages(records)
    bad = messages(records, bad_every=100)
    cut = lambda msgs: [msgs[i : i + batch] for i in range(0, len(msgs), batch)]  # noqa: E731
    data = {v: cut(bad if v == "json_1pct_bad" else good) for v in VARIANTS}
    rounds: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    with progress_bar() as progress:
        task = progress.add_task("decode", total=(repeat + 1) * len(VARIANTS), note="warm-up")
        for r in range(repeat + 1):
            for variant in VARIANTS:
                got = run_round(data[variant], variant)
                if r:  # round 0 warms up
                    rounds[variant].append(got)
                progress.update(task, advance=1, note=f"round {r} {variant}")
    result: dict[str, Any] = {"variants": {}}
    for variant in VARIANTS:
        rates = [x["records_per_s"] for x in rounds[variant]]
        cpus = [x["cpu_s_per_million"] for x in rounds[variant]]
        result["variants"][variant] = {
            "records_per_s": summary(rates),
            "cpu_s_per_million": summary(cpus),
            "cpu_ratio_to_raw": summary(
                [x / y["cpu_s_per_million"] for x, y in zip(cpus, rounds["raw"], strict=True)]
            ),
            "rounds": rounds[variant],
        }
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    variants = list(result["variants"])
    with figure(path, 1, 2, figsize=(12, 4.5)) as (fig, axes):
        for ax, key, label in (
            (axes[0], "records_per_s", "records/s (wall)"),
            (axes[1], "cpu_s_per_million", "CPU s per million records"),
        ):
            bars_with_range(
                ax,
                variants,
                [result["variants"][v][key] for v in variants],
                label=label,
                colors=["#888", "#6a9", "#36c", "#c63", "#aaa"],
                log=key == "records_per_s",
            )
            ax.tick_params(axis="x", rotation=20)
        p = result["params"]
        fig.suptitle(
            f"Decoding ~{p['value_bytes']} B JSON values (5 fields), {p['records']:,} records in batches "
            f"of {p['batch']:,}; median and min-max of {p['repeat']} rounds"
        )


def main(argv: list[str] | None = None) -> int:
    parser = Arguments(__doc__, smoke={"records": 20_000, "batch": 5_000, "repeat": 3}, repeat=5)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=20_000)
    args = parser.parse_args(argv)
    if args.repeat < 3:
        parser.error("--repeat must be at least 3")
    result: dict[str, Any] = {
        "machine": machine(),
        "params": {
            "records": args.records,
            "batch": args.batch,
            "repeat": args.repeat,
            "schema": SCHEMA,
            "value_bytes": round(sum(len(value(i, random.Random(42))) for i in range(1000)) / 1000),
            "decoder": arrow.active_converter(),
        },
    }
    result.update(measure(args.records, args.batch, args.repeat))
    finish("decode", result, args, plot)
    table(
        "Payload decoding (median \\[min-max])",
        ("variant", "records/s", "CPU s / M records", "CPU x raw"),
        (
            (
                variant,
                median_range(v["records_per_s"], "{:,.0f}"),
                median_range(v["cpu_s_per_million"], "{:.2f}"),
                median_range(v["cpu_ratio_to_raw"], "{:.2f}"),
            )
            for variant, v in result["variants"].items()
        ),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
