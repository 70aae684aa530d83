"""What one micro-batch costs at a trickle: CPU per trigger of a streaming
query, Sparkpoint's data path side by side with plain PySpark on the same
source (issue 12's "default stack at 200 events/s <= 0.5 core").

    .venv/bin/python bench/trigger_cost.py [--rate 100] [--trigger-ms 500] [--warm 120] [--seconds 60]
        [--windows 1] [--variants V ...] [--java-options=OPTS]

Each variant runs in a process of its own (its own Spark session and JVM)
over an event log of 2 partitions that a thread of that process appends
``--rate`` events/s to (100: one worker's share of the default stack's 200),
with Spark's ``checkpointLocation`` on local disk and a ``--trigger-ms``
processing-time trigger:

| variant | session | query |
|---|---|---|
| spark-noop | plain PySpark (bench/spark_baseline.py's) | source -> enrich -> Spark's ``noop`` sink: a micro-batch and nothing else |
| spark-parquet | plain PySpark | source -> enrich -> Spark's Parquet file sink |
| sparkpoint-staged | the worker's (worker.runtime.session, default settings) | the worker's query (worker.runtime.queries.start_query): source -> enrich -> ``foreachBatch(BatchStager)``, the worker's files and PostgreSQL sinks |
| spark-aggregate | plain PySpark | source -> per-symbol VWAP, complete -> ``foreachBatch`` Parquet overwrite |
| sparkpoint-aggregate | the worker's | the worker's query: source -> per-symbol VWAP, complete -> ``foreachBatch(BatchStager)`` |

The source is Sparkpoint's event log in every variant (Spark's file
sources cannot tail a growing file). After ``--warm`` seconds each variant
counts its batches and the CPU its JVM (``/proc``; the JIT compiler's
threads apart) and its Python process (minus the appending thread) used for
``--seconds``, in ``--windows`` windows back to back: a curve of the JIT's
warm-up (the worker's JVM leaves C2 to code ten times hotter than the JVM's
own thresholds, so at 2 batches/s it settles over minutes). ``--java-options``
are added to the Sparkpoint variants' JVM options (a flight recording, say).
Prints a table and writes bench/results/trigger_cost-<date>.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "pipelines")]

from bench.measure import JIT, thread_group, thread_stat  # noqa: E402
from bench.report import publish_json, publish_table, unused_name  # noqa: E402

VARIANTS = {
    "spark-noop": "plain PySpark, noop sink",
    "spark-parquet": "plain PySpark, Parquet file sink",
    "sparkpoint-staged": "Sparkpoint, staged (files, PostgreSQL)",
    "spark-aggregate": "plain PySpark, aggregate, foreachBatch Parquet",
    "sparkpoint-aggregate": "Sparkpoint, aggregate, staged",
}
TICK = os.sysconf("SC_CLK_TCK")


def thread_ticks(pid: int) -> tuple[int, int]:
    """CPU ticks of process ``pid``: in all, and in its JIT compiler threads."""
    total = compiler = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name, ticks = thread_stat((task / "stat").read_text())
        except FileNotFoundError:
            continue        # a thread that ended meanwhile
        total += ticks
        compiler += ticks if thread_group("java", name) == JIT else 0
    return total, compiler


def sparkpoint_query(variant: str, root: Path, trigger_ms: int, java_options: str):
    """The worker's own query (worker.runtime.queries.start_query) over the
    log at ``root``: as the worker plans it, staged by the worker's stager."""
    from trading import TRADE_SCHEMA, VWAP_AGGREGATIONS, enrich

    from worker import api as sp
    from worker.runtime.queries import start_query
    from worker.runtime.session import driver_java_options, start_session
    from worker.settings import WorkerSettings

    settings = WorkerSettings.model_construct(worker_id="bench", log_dir=root, trigger_interval_ms=trigger_ms,
                                              upsert_trigger_interval_ms=trigger_ms)
    spark = start_session(settings, java_options=f"{driver_java_options(settings)} {java_options}".strip())
    trades = sp.read.from_log("log", schema=TRADE_SCHEMA, name="trades")
    if variant.endswith("aggregate"):
        branch = trades | sp.aggregate("sym", VWAP_AGGREGATIONS, name="vwap") | sp.write.to_files("out", name="out")
    else:
        branch = trades | sp.map(enrich, name="enrich") | sp.write.to_files("out", name="out")
    (pipeline_query,) = sp.Pipeline.of(branch).queries()
    (root / "out").mkdir()
    return spark, start_query(spark, pipeline_query, settings, root / "queries", {"out": root / "out"})


def query(variant: str, root: Path, trigger_ms: int, java_options: str = ""):
    """The variant's streaming query, started; ``java_options`` added to a
    Sparkpoint variant's JVM options."""
    if variant.startswith("sparkpoint-"):
        return sparkpoint_query(variant, root, trigger_ms, java_options)
    from pyspark.sql import functions as F
    from trading import TRADE_SCHEMA, VWAP_AGGREGATIONS, enrich

    from bench.spark_baseline import session
    from worker.sources.log_source import read_log

    spark = session()
    df = read_log(spark, root / "log", TRADE_SCHEMA)
    if variant.endswith("aggregate"):
        df = df.groupBy("sym").agg(*(F.expr(expr).alias(column) for column, expr in VWAP_AGGREGATIONS.items()))
        writer = df.writeStream.outputMode("complete")
    else:
        writer = enrich(df).writeStream.outputMode("append")
    writer = writer.option("checkpointLocation", str(root / "checkpoint")).trigger(
        processingTime=f"{trigger_ms} milliseconds")
    (root / "out").mkdir()
    if variant == "spark-noop":
        writer = writer.format("noop")
    elif variant == "spark-parquet":
        writer = writer.format("parquet").option("path", str(root / "out"))
    else:
        writer = writer.foreachBatch(lambda batch, _: batch.write.mode("overwrite").parquet(str(root / "out")))
    return spark, writer.start()


def run_variant(args: argparse.Namespace) -> list[dict]:
    """One variant in this process; its figures, a dict per window."""
    from sparkpoint.eventlog import EventLog
    from sparkpoint.producer import append_trades, trades

    root = Path(tempfile.mkdtemp(prefix="trigger-cost-"))
    log = EventLog.create(root / "log", 2)
    events = trades(seed=1)
    stop = threading.Event()
    # The appending thread's CPU (seconds), kept out of the Python process's figure.
    producer_cpu = [0.0]

    def produce() -> None:
        tick = 0.05
        while not stop.wait(tick):
            append_trades(log, [next(events) for _ in range(max(1, round(args.rate * tick)))])
            producer_cpu[0] = time.thread_time()

    append_trades(log, [next(events) for _ in range(args.rate)])
    threading.Thread(target=produce, daemon=True).start()
    spark, started = query(args.variant, root, args.trigger_ms, args.java_options)
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())

    def reading() -> tuple[int, int, int, float]:
        progress = started.lastProgress
        total, compiler = thread_ticks(jvm)
        return (progress["batchId"] if progress else 0), total, compiler, sum(os.times()[:2]) - producer_cpu[0]

    stop.wait(args.warm)
    readings = [reading()]
    for _ in range(args.windows):
        stop.wait(args.seconds)
        readings.append(reading())
    if started.exception():
        raise SystemExit(f"{args.variant}: the query failed: {started.exception()}")
    stop.set()
    started.stop()
    spark.stop()
    shutil.rmtree(root)
    windows = []
    for index, (before, after) in enumerate(zip(readings, readings[1:])):
        batches = after[0] - before[0]
        windows.append({"variant": args.variant, "from": args.warm + index * args.seconds, "batches": batches,
                        "seconds": args.seconds, "jvm_ms": 1000 * (after[1] - before[1]) / TICK / batches,
                        "compiler_ms": 1000 * (after[2] - before[2]) / TICK / batches,
                        "python_ms": 1000 * (after[3] - before[3]) / batches})
    return windows


def table(args: argparse.Namespace, results: list[dict]) -> list[str]:
    lines = [f"# CPU per micro-batch at {args.rate} events/s, a trigger every {args.trigger_ms} ms "
             f"({args.windows} x {args.seconds} s measured after {args.warm} s)", "",
             f"Command: `{' '.join(['bench/trigger_cost.py', *sys.argv[1:]])}`", "",
             "| variant | from (s) | batches | JVM ms/batch | of which JIT | Python ms/batch | cores | vs spark-noop |",
             "|---|---|---|---|---|---|---|---|"]
    # spark-noop's batch in the same window, when it ran
    floors = {r["from"]: r["jvm_ms"] + r["python_ms"] for r in results if r["variant"] == "spark-noop"}
    for r in results:
        per_batch = r["jvm_ms"] + r["python_ms"]
        cores = per_batch * r["batches"] / r["seconds"] / 1000
        ratio = f"{per_batch / floors[r['from']]:.2f}" if r["from"] in floors else "-"
        lines.append(f"| {VARIANTS[r['variant']]} | {r['from']:g} | {r['batches']} | {r['jvm_ms']:.1f} "
                     f"| {r['compiler_ms']:.1f} | {r['python_ms']:.1f} | {cores:.3f} | {ratio} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=100, help="events/s appended")
    parser.add_argument("--trigger-ms", type=int, default=500)
    parser.add_argument("--warm", type=float, default=120, help="seconds before measuring")
    parser.add_argument("--seconds", type=float, default=60, help="seconds measured")
    parser.add_argument("--windows", type=int, default=1, help="windows of --seconds measured back to back")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS), help="variants to run")
    parser.add_argument("--java-options", default="",
                        help="added to the Sparkpoint variants' JVM options (written --java-options=-XX:...)")
    parser.add_argument("--variant", choices=VARIANTS, help="run this variant here (the bench runs each so)")
    args = parser.parse_args()
    if args.windows < 1:
        parser.error("--windows: at least 1")
    if args.variant:
        print(json.dumps(run_variant(args)))
        return
    results = []
    for variant in args.variants:
        child = subprocess.run([sys.executable, __file__, "--variant", variant, "--rate", str(args.rate),
                                "--trigger-ms", str(args.trigger_ms), "--warm", str(args.warm),
                                "--seconds", str(args.seconds), "--windows", str(args.windows),
                                f"--java-options={args.java_options}"], capture_output=True, text=True)
        if child.returncode:
            raise SystemExit(f"{variant} failed:\n{child.stderr[-3000:]}")
        results += json.loads(child.stdout.splitlines()[-1])
        print(f"{variant}: {results[-1]}", file=sys.stderr)
    name = unused_name(f"trigger_cost-{time.strftime('%Y-%m-%d')}")
    publish_table(name, table(args, results))
    publish_json(name, {"rate": args.rate, "trigger_ms": args.trigger_ms, "warm": args.warm,
                        "seconds": args.seconds, "windows": args.windows, "java_options": args.java_options,
                        "results": results})


if __name__ == "__main__":
    main()
