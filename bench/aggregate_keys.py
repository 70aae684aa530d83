"""Cost vs keys: a running aggregate into an upsert, emitting the keys each
batch changed (``sp.aggregate(emit="updates")``, the default into an upsert)
side by side with the whole table (``emit="table"``: Spark's complete mode,
what every aggregate emitted before), over 10, 10,000 and 1,000,000
distinct keys (issue 39, "aggregates that emit only what changed").

    .venv/bin/python bench/aggregate_keys.py [--keys 10 10000 1000000] [--batch 200 20000] [--batches 12] [--rounds 3]
        [--emits updates table] [--spark-conf KEY=VALUE ...]

One Spark session (the worker's, default settings); per variant, the
worker's own query (``worker.runtime.queries.start_query``): an event log
of 2 partitions -> ``sp.aggregate("key", {"n": "count(1)", "total":
"sum(value)"}, emit=...)`` -> ``sp.write.to_postgres("agg", key="key",
version="n")``, staged by the worker's stager. The publisher is not run:
each batch's staged rows are what the upsert target would write.

1. State: a first run of the query, capped at the key count, reads one
   batch holding each key once.
2. The query again from its checkpoint, capped at ``--batch`` events a batch
   (a 1 s trigger's worth at 200 or 20,000 events/s), reads ``--batches``
   batches of events over random keys. Per batch: Spark's duration
   (``triggerExecution``) and the rows staged; over them all, the CPU of
   the JVM and of this Python process (``/proc``), per batch.

A warm-up variant runs first, unrecorded (the JVM's JIT); then ``--rounds``
rounds of every variant, interleaved. Prints, per variant, the median over
the rounds of its per-batch figures, with its CPU's ratio to the same emit
at the fewest keys, and writes bench/results/aggregate_keys-<date>.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.report import publish_json, publish_table, python_loop_s, unused_name  # noqa: E402

SCHEMA = "key long, value long"
TICK = os.sysconf("SC_CLK_TCK")


def process_ticks(pid: int) -> int:
    """User and system CPU ticks of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def append_events(log, keys: list[int], rng: random.Random) -> None:
    from sparkpoint.eventlog import partition_for_key

    by_partition: dict[int, list[dict]] = {0: [], 1: []}
    for key in keys:
        by_partition[partition_for_key(str(key), 2)].append({"key": key, "value": rng.randrange(1000)})
    for partition, records in by_partition.items():
        log.append(partition, records)


def run_query(spark, settings, root: Path, emit: str, cap: int):
    """The variant's query, started with ``cap`` events a batch (from its checkpoint, if any)."""
    from worker import api as sp
    from worker.runtime.queries import start_query

    branch = (sp.read.from_log("log", schema=SCHEMA, max_records_per_batch=cap, name="events")
              | sp.aggregate("key", {"n": "count(1)", "total": "sum(value)"}, emit=emit, name="totals")
              | sp.write.to_postgres("agg", key="key", version="n", name="out"))
    (query,) = sp.Pipeline.of(branch).queries()
    staging = root / "staging"
    staging.mkdir(exist_ok=True)
    return start_query(spark, query, settings, root / "queries", {"out": staging})


def staged_rows(staging: Path, batch_id: int) -> int:
    import pyarrow.parquet as pq

    from worker.publishing.staging import batch_dir_name

    directory = staging / batch_dir_name(batch_id)
    return sum(pq.ParquetFile(f).metadata.num_rows for f in directory.glob("*.parquet"))


def progress_of(query) -> list[dict]:
    """Spark's progress events of the query's recent batches, as dicts."""
    return [p if isinstance(p, dict) else json.loads(p.json) for p in query.recentProgress]


def variant(spark, work: Path, keys: int, emit: str, batch: int, batches: int, seed: int) -> dict:
    from sparkpoint.eventlog import EventLog
    from worker.settings import WorkerSettings

    root = work / f"{emit}-{keys}-{batch}"
    settings = WorkerSettings.model_construct(worker_id="bench", log_dir=root, trigger_interval_ms=100,
                                              upsert_trigger_interval_ms=100)
    log = EventLog.create(root / "log", 2)
    rng = random.Random(seed)
    # 1.
    append_events(log, list(range(keys)), rng)
    query = run_query(spark, settings, root, emit, keys)
    query.processAllAvailable()
    query.stop()
    # 2.
    append_events(log, [rng.randrange(keys) for _ in range(batch * batches)], rng)
    jvm = spark._jvm.ProcessHandle.current().pid()
    first_batch = progress_of(query)[-1]["batchId"] + 1
    jvm_before, python_before, started = process_ticks(jvm), os.times(), time.perf_counter()
    query = run_query(spark, settings, root, emit, batch)
    query.processAllAvailable()
    jvm_ticks, python_after, wall = process_ticks(jvm) - jvm_before, os.times(), time.perf_counter() - started
    progress = [p for p in progress_of(query) if p["batchId"] >= first_batch and p["numInputRows"] > 0]
    query.stop()
    python_s = (python_after.user + python_after.system) - (python_before.user + python_before.system)
    ran = len(progress)
    result = {
        "keys": keys, "emit": emit, "batch": batch, "batches": ran,
        "ms_per_batch": statistics.median(p["durationMs"]["triggerExecution"] for p in progress),
        "cpu_ms_per_batch": (jvm_ticks / TICK + python_s) * 1000 / ran,
        "rows_per_batch": statistics.median(staged_rows(root / "staging", p["batchId"]) for p in progress),
        "wall_s": wall,
    }
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result), flush=True)
    return result


def summarize(results: list[dict]) -> list[dict]:
    """Per variant, the median over the rounds of each figure."""
    variants: dict[tuple, list[dict]] = {}
    for result in results:
        variants.setdefault((result["batch"], result["emit"], result["keys"]), []).append(result)
    return [{"batch": batch, "emit": emit, "keys": keys, "rounds": len(runs),
             **{figure: statistics.median(r[figure] for r in runs)
                for figure in ("ms_per_batch", "cpu_ms_per_batch", "rows_per_batch")},
             "cpu_ms_min": min(r["cpu_ms_per_batch"] for r in runs), "cpu_ms_max": max(r["cpu_ms_per_batch"] for r in runs)}
            for (batch, emit, keys), runs in variants.items()]


def table(summary: list[dict], loop_s: float, batches: int) -> list[str]:
    lines = [f"Cost vs keys: a running aggregate into an upsert. Per batch, each variant's median over "
             f"{summary[0]['rounds']} rounds of {batches} batches (CPU: the JVM and the driver's Python over the "
             f"batches; min-max over the rounds). Machine: a 20M-addition Python loop took {loop_s:.2f} s.", "",
             "| events/batch | keys | emit | ms/batch (Spark) | CPU ms/batch | rows written/batch "
             "| CPU vs fewest keys |",
             "|---|---|---|---|---|---|---|"]
    for row in summary:
        base = next(r for r in summary if r["emit"] == row["emit"] and r["batch"] == row["batch"])
        lines.append(f"| {row['batch']:,} | {row['keys']:,} | {row['emit']} | {row['ms_per_batch']:,.0f} "
                     f"| {row['cpu_ms_per_batch']:,.0f} ({row['cpu_ms_min']:,.0f}-{row['cpu_ms_max']:,.0f}) "
                     f"| {row['rows_per_batch']:,.0f} | {row['cpu_ms_per_batch'] / base['cpu_ms_per_batch']:.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, nargs="+", default=[10, 10_000, 1_000_000])
    parser.add_argument("--batch", type=int, nargs="+", default=[200, 20_000])
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--emits", nargs="+", default=["updates", "table"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark SQL setting for the queries, e.g. the state store's provider class")
    args = parser.parse_args()

    from worker.runtime.session import start_session
    from worker.settings import WorkerSettings

    spark = start_session(WorkerSettings.model_construct(worker_id="bench"))
    for setting in args.spark_conf:
        spark.conf.set(*setting.split("=", 1))
    loop_s = python_loop_s()
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-aggregate-keys-"))
    results = []
    try:
        variant(spark, work, min(args.keys), args.emits[0], min(args.batch), args.batches, args.seed)   # warm-up
        for round_ in range(args.rounds):
            for batch in args.batch:
                for emit in args.emits:
                    for keys in sorted(args.keys):
                        results.append(variant(spark, work, keys, emit, batch, args.batches, args.seed + round_))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    name = unused_name(f"aggregate_keys-{time.strftime('%Y-%m-%d')}")
    summary = summarize(results)
    publish_table(name, table(summary, loop_s, args.batches))
    publish_json(name, {"args": vars(args), "python_loop_s": loop_s, "summary": summary, "results": results})


if __name__ == "__main__":
    main()
