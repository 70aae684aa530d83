"""Throughput of event-time windows, Sparkpoint against plain PySpark, side by
side in one run (issue 39's target: at least 1.0 x plain; not part of the
test suite).

    .venv/bin/python bench/windows.py [--events 4000000] [--rounds 3] [--set SP_X=V ...]

The input: ``--events`` trades as the producer writes them, their event
times ``--per-second`` a second from 2026-01-01 (each up to 2 s out of
order), in an event log of 4 partitions and as JSON files (bench/throughput.py's
``prepare``). The computation is pipelines/trades_windows.py's two windows,
both emitting final windows to Parquet files (the example's updating window
goes to an upsert; files take final windows only): one-minute OHLC bars
with VWAP per symbol, and a five-minute volume every minute, under a 10 s
watermark. The variants, round by round, each on a fresh JVM:

- ``spark``: plain PySpark (bench/spark_baseline.py ``--computation
  windows``), Spark's JSON file source, ``checkpointLocation`` on disk,
  batches of about ``--batch`` events;
- ``spark-logsource``: the same through Sparkpoint's event log source;
- ``sparkpoint``: a controller and one worker running that pipeline at the
  worker's shipped defaults, checkpoints every 1 s.

Events/s as bench/throughput.py counts them. Prints a table and writes
bench/results/windows-<date>.md and .json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import overrides_text, publish_json, publish_table, unused_name  # noqa: E402
from bench.throughput import (  # noqa: E402
    REPORT_INTERVAL_MS,
    median,
    parse_rounds,
    parse_settings,
    prepare,
    run_spark,
    run_sparkpoint,
)
from sparkpoint.devstack import REPO  # noqa: E402
from worker.settings import WorkerSettings  # noqa: E402

VARIANTS = ("spark", "spark-logsource", "sparkpoint")

PIPELINE = '''
    import sys
    sys.path.insert(0, {pipelines!r})

    from trading import BAR_AGGREGATIONS, TRADE_SCHEMA, add_vwap

    from worker import api as sp

    trades = sp.read.from_log("trades", schema=TRADE_SCHEMA, name="trades", watermark="time",
                              lateness="10 seconds")
    sp.run(
        trades | sp.window("time", "1 minute", BAR_AGGREGATIONS, by="sym", name="bars_1m")
        | sp.map(add_vwap, name="bar_vwap") | sp.write.to_files("bars", name="bars_out"),
        trades | sp.window("time", "5 minutes", {{"volume": "sum(size)", "trades": "count(1)"}}, by="sym",
                           slide="1 minute", name="volume_5m")
        | sp.write.to_files("volume", name="volume_out"),
    )
'''


def table(args: argparse.Namespace, runs: dict[str, list[dict]], overrides: dict[str, str]) -> list[str]:
    rates = {v: [r["rate"] for r in rs] for v, rs in runs.items()}
    spark = median(rates.get("spark", []))
    lines = [f"# Throughput of event-time windows ({args.events:,} events, {args.per_second:,} a second of "
             f"event time, {args.rounds} rounds interleaved, 1 worker, 2 cores)", "",
             f"Command: `{' '.join(sys.argv)}`", "",
             "| variant | median events/s | min | max | ratio to spark | note |", "|---|---|---|---|---|---|"]
    for variant, values in rates.items():
        partial = sum(r["partial"] for r in runs[variant])
        note = f"{partial} run(s) cut at {args.limit:.0f} s" if partial else ""
        lines.append(f"| {variant} | {median(values):,.0f} | {min(values):,.0f} | {max(values):,.0f} "
                     f"| {median(values) / spark:.2f} | {note} |")
    lines += ["", "Both windows emit final windows to Parquet files, under a 10 s watermark. Spark variants: "
              f"local[2], 2 shuffle partitions, about {args.batch:,} events per batch. Sparkpoint: the worker's "
              f"shipped defaults, SP_CHECKPOINT_FREQ 1000; overrides: {overrides_text(overrides)}."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=4_000_000)
    parser.add_argument("--per-second", type=int, default=1000, help="trades a second of event time")
    parser.add_argument("--batch", type=int, default=WorkerSettings.model_fields["max_records_per_batch"].default,
                        help="Spark variants: about this many events a batch (default: the worker's shipped cap)")
    args, variants = parse_rounds(parser, VARIANTS)
    overrides = parse_settings(args.set)
    data = prepare(args.cache, args.events, args.per_second)
    args.batch = min(args.batch, max(1, args.events // 5))
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="sp-bench-windows-") as tmp:
        pipeline = Path(tmp) / "windows_files.py"
        pipeline.write_text(textwrap.dedent(PIPELINE.format(pipelines=str(REPO / "pipelines"))))
        for round_ in range(args.rounds):
            for variant in variants:
                work = Path(tmp) / f"{round_}-{variant}"
                work.mkdir()
                if variant == "sparkpoint":
                    run = run_sparkpoint(data, work, {"SP_REPORT_INTERVAL": REPORT_INTERVAL_MS,
                                                      "SP_CHECKPOINT_FREQ": "1000", **overrides},
                                         args.limit, args.poll, pipeline=pipeline)
                else:
                    run = run_spark("json" if variant == "spark" else "log", data, work, args.events, args.batch,
                                    args.limit, computation="windows")
                runs[variant].append(run)
                print(f"round {round_ + 1}: {variant}: {run['rate']:,.0f} events/s"
                      + (" (partial)" if run["partial"] else ""), flush=True)
    name = unused_name(f"windows-{time.strftime('%Y-%m-%d')}")
    publish_table(name, table(args, runs, overrides))
    publish_json(name, {"events": args.events, "per_second": args.per_second, "rounds": args.rounds,
                        "batch": args.batch, "overrides": overrides, "runs": runs})


if __name__ == "__main__":
    main()
