"""Latency of final windows, event to row in PostgreSQL, Sparkpoint against
plain PySpark, side by side in one run (issue 39's target: p99 within the
window's end + the lateness + 2.5 s; not part of the test suite).

    .venv/bin/python bench/windows_latency.py [--seconds 120] [--rate 500] [--window 5] [--lateness 2]

The producer appends ``--rate`` trades a second, stamped with the wall
clock, for ``--seconds``; a query keeps per-symbol tumbling windows of
``--window`` seconds under a ``--lateness`` watermark and writes each
window once, when the watermark passes its end, to a PostgreSQL table whose
``inserted_at`` column (``clock_timestamp()``) says when each row was
written. A row's latency is ``inserted_at`` minus (window end + lateness):
the least any engine could do is 0 (the watermark passes the end once a
trade that much later arrives). The variants, each on a fresh JVM and
database:

- ``sparkpoint``: a controller and one worker, the window final into a
  transactional table (exactly once: published when a checkpoint covering
  it completes), at the shipped defaults (1 s checkpoints and triggers);
- ``spark``: plain PySpark over the same event log, the same window,
  ``foreachBatch`` inserting each batch's rows (at-least-once), checkpoint
  on local disk, the default trigger (the next batch as soon as the last).

Windows ending in the first 20 s (start-up) or within the last two windows
(the watermark stops with the producer) are left out. Prints a table and
writes bench/results/windows_latency-<date>.md and .json.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402

from bench.measure import percentile  # noqa: E402
from bench.report import publish_json, publish_table, unused_name  # noqa: E402
from sparkpoint.devstack import REPO, LocalStack, StackConfig, free_port  # noqa: E402
from tests.pgserver import PostgresServer  # noqa: E402

VARIANTS = ("spark", "sparkpoint")
SCHEMA = "id long, sym string, price double, size long, time timestamp"
TABLE = """CREATE TABLE bars (window_start timestamptz, window_end timestamptz, sym text, trades bigint,
                              volume bigint, inserted_at timestamptz NOT NULL DEFAULT clock_timestamp())"""

PIPELINE = '''
    from worker import api as sp

    trades = sp.read.from_log("trades", schema={schema!r}, name="trades", watermark="time",
                              lateness="{lateness} seconds")
    sp.run(trades | sp.window("time", "{window} seconds", {{"trades": "count(1)", "volume": "sum(size)"}}, by="sym",
                              name="bars_state")
           | sp.write.to_postgres("bars", name="bars_pg"))
'''


def baseline(log: Path, dsn: str, work: Path, window: int, lateness: int, seconds: float) -> None:
    """The plain PySpark variant, in this process (``--baseline``), for ``seconds``."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from worker.runtime.session import JVM_JAR  # the event log source's classes
    from worker.sources.log_source import read_log

    spark = (SparkSession.builder.master("local[2]").appName("bench-windows-latency")
             .config("spark.driver.extraClassPath", str(JVM_JAR)).config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.session.timeZone", "UTC")
             .config("spark.pyspark.python", sys.executable).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    bars = (read_log(spark, log, SCHEMA).withWatermark("time", f"{lateness} seconds")
            .groupBy(F.window("time", f"{window} seconds").alias("window"), "sym")
            .agg(F.count(F.lit(1)).alias("trades"), F.sum("size").alias("volume"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    "sym", "trades", "volume"))

    def insert(batch, _batch_id) -> None:
        rows = [tuple(row) for row in batch.collect()]
        if rows:
            with psycopg.connect(dsn, autocommit=True) as conn, conn.cursor() as cursor:
                cursor.executemany("INSERT INTO bars (window_start, window_end, sym, trades, volume) "
                                   "VALUES (%s AT TIME ZONE 'UTC', %s AT TIME ZONE 'UTC', %s, %s, %s)", rows)
    query = (bars.writeStream.outputMode("append").foreachBatch(insert)
             .option("checkpointLocation", str(work / "checkpoint")).start())
    query.awaitTermination(seconds)
    query.stop()
    spark.stop()


def latencies(dsn: str, lateness: int, window: int, started: float, stopped: float) -> list[float]:
    with psycopg.connect(dsn) as conn:
        rows = list(conn.execute("SELECT extract(epoch FROM window_end)::float8, "
                                 "extract(epoch FROM inserted_at)::float8 FROM bars"))
    return [inserted - (end + lateness) for end, inserted in rows
            if started + 20 <= end <= stopped - 2 * window]


def run(variant: str, root: Path, server: PostgresServer, args: argparse.Namespace) -> dict:
    name = f"bench_{variant}_{int(time.time() * 1000) % 10**9}"
    with psycopg.connect(server.dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    dsn = server.dsn_for(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE)
    pipeline = root / "pipeline.py"
    pipeline.write_text(textwrap.dedent(PIPELINE.format(schema=SCHEMA, window=args.window, lateness=args.lateness)))
    config = StackConfig(root=root, workers=1, grpc_port=free_port(), http_port=free_port(),
                         env={"SP_PG_DSN": dsn, "SP_PRODUCER_RATE": str(args.rate)})
    config.pipeline = pipeline
    stack = LocalStack(config)
    baseline_process = None
    try:
        started = time.time()
        stack.start_producer()      # first: it creates the log the pipeline reads
        if variant == "sparkpoint":
            stack.start_controller()
            stack.start_worker(0)
        else:
            baseline_process = subprocess.Popen(
                [sys.executable, __file__, "--baseline", str(config.log_dir / "trades"), dsn, str(root),
                 str(args.window), str(args.lateness), str(args.seconds + 30)], cwd=REPO,
                stdout=open(root / "spark.log", "wb"), stderr=subprocess.STDOUT)
        time.sleep(args.seconds)    # the run's length: the producer appends meanwhile
        stopped = time.time()
        stack.stop("producer")
    finally:
        stack.stop_all()
        if baseline_process is not None:
            baseline_process.terminate()
            baseline_process.wait(60)
    values = latencies(dsn, args.lateness, args.window, started, stopped)
    return {"latencies": values}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--baseline":
        log, dsn, work, window, lateness, seconds = sys.argv[2:]
        baseline(Path(log), dsn, Path(work), int(window), int(lateness), float(seconds))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=120)
    parser.add_argument("--rate", type=int, default=500)
    parser.add_argument("--window", type=int, default=5, help="tumbling window, seconds")
    parser.add_argument("--lateness", type=int, default=2, help="the watermark's lateness, seconds")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="sp-bench-windows-latency-") as tmp, PostgresServer() as server:
        for round_ in range(args.rounds):
            for variant in VARIANTS:
                root = Path(tmp) / f"{round_}-{variant}"
                root.mkdir()
                runs[variant].append(run(variant, root, server, args))
                values = runs[variant][-1]["latencies"]
                print(f"round {round_ + 1}: {variant}: {len(values)} windows, p50 {percentile(values, 0.5):.2f} s, "
                      f"p99 {percentile(values, 0.99):.2f} s", flush=True)
    lines = [f"# Final window to PostgreSQL: latency past window end + lateness ({args.rate} trades/s for "
             f"{args.seconds} s, {args.window} s windows, {args.lateness} s lateness, {args.rounds} rounds "
             "interleaved, 1 worker, 2 cores)", "", f"Command: `{' '.join(sys.argv)}`", "",
             "| variant | windows | p50 (s) | p99 (s) | max (s) | p99 of each round (s) |", "|---|---|---|---|---|---|"]
    for variant, rs in runs.items():
        values = [v for r in rs for v in r["latencies"]]
        rounds = ", ".join(f"{percentile(r['latencies'], 0.99):.2f}" for r in rs)
        lines.append(f"| {variant} | {len(values)} | {percentile(values, 0.5):.2f} | {percentile(values, 0.99):.2f} "
                     f"| {max(values, default=float('nan')):.2f} | {rounds} |")
    lines += ["", "Target (issue 39): p99 ≤ 2.5 s. Sparkpoint: exactly once (transactional table, published on "
              "checkpoint completion, SP_CHECKPOINT_FREQ 1000, SP_TRIGGER_INTERVAL 1000); spark: at-least-once "
              "(foreachBatch inserts), default trigger."]
    name = unused_name(f"windows_latency-{time.strftime('%Y-%m-%d')}")
    publish_table(name, lines)
    publish_json(name, {"args": vars(args), "runs": runs})


if __name__ == "__main__":
    main()
