"""Idle-trigger benchmark: the source's planning calls on a small and a large log
(not part of the test suite; issue 12, "an idle trigger, log of 10 MB vs 5 GB").

    .venv/bin/python bench/idle_trigger.py [--small-mb 10] [--large-gb 5] [--runs 5] [--calls 2000]

1. Write each log (4 partitions of whole trade records, in large repeated
   chunks) under a temporary directory; refuse if the disk lacks room.
2. Per run, time with a new stream (as a restarted query has; the source's
   ``EventLogStream`` in a worker's JVM, called through py4j, whose round
   trips are in every figure alike): the first ``reportLatestOffset`` (a
   fresh start), then ``--calls`` idle triggers — ``reportLatestOffset`` plus
   a capped ``latestOffset`` from the latest offsets, what Spark asks on each
   trigger — and one trigger after 1,000 records were appended. The stream's
   own count of the bytes it read (``bytesScanned``) is shown beside.
3. Print medians of the runs (min, max) and the large/small ratio, write the
   table to bench/results/idle_trigger.md, and remove the logs.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.report import publish_table, spread_row  # noqa: E402
from sparkpoint.eventlog import EventLog  # noqa: E402
from sparkpoint.producer import append_trades, trades  # noqa: E402
from worker.runtime.session import start_session  # noqa: E402
from worker.settings import WorkerSettings  # noqa: E402

PARTITIONS = 4
CAP = 10_000
RECORD = (b'{"id":123456789,"sym":"AAPL","price":101.2345,"size":500,'
          b'"time":"2026-01-01T00:00:00.000000Z"}\n')
BLOCK = RECORD * ((16 << 20) // len(RECORD))         # ~16 MiB of whole records


def write_log(directory: Path, size: int) -> EventLog:
    """A log of about ``size`` bytes, spread over the partitions, ending in real trades."""
    log = EventLog.create(directory, PARTITIONS)
    per_partition = size // PARTITIONS
    for partition in range(PARTITIONS):
        with open(log.path(partition), "wb") as f:
            written = 0
            while written + len(BLOCK) <= per_partition:
                f.write(BLOCK)
                written += len(BLOCK)
            f.write(RECORD * ((per_partition - written) // len(RECORD)))
    append_trades(log, [event for event, _ in zip(trades(1), range(100))])
    return log


def log_bytes(log: EventLog) -> int:
    return sum(log.path(p).stat().st_size for p in range(PARTITIONS))


def one_run(jvm, log: EventLog, calls: int, seed: int) -> tuple[float, float, float, float, float, float]:
    """(fresh start, idle trigger, trigger after an append): each in
    microseconds, then each in bytes the stream read."""
    schema = jvm.org.apache.spark.sql.types.StructType.fromDDL("id long, sym string")
    stream = jvm.sparkpoint.eventlog.EventLogStream(str(log.directory), 0, 1, CAP, schema)
    limit = jvm.org.apache.spark.sql.connector.read.streaming.ReadLimit.maxRows(CAP)
    began = time.perf_counter()
    latest = stream.reportLatestOffset()
    fresh = time.perf_counter() - began
    fresh_bytes = stream.bytesScanned()
    began = time.perf_counter()
    for _ in range(calls):
        stream.reportLatestOffset()
        stream.latestOffset(latest, limit)
    idle = (time.perf_counter() - began) / calls
    idle_bytes = (stream.bytesScanned() - fresh_bytes) / calls
    append_trades(log, [event for event, _ in zip(trades(seed, 1_000_000 * seed), range(1000))])
    before = stream.bytesScanned()
    began = time.perf_counter()
    stream.reportLatestOffset()
    stream.latestOffset(latest, limit)
    appended = time.perf_counter() - began
    return fresh * 1e6, idle * 1e6, appended * 1e6, fresh_bytes, idle_bytes, stream.bytesScanned() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-mb", type=int, default=10)
    parser.add_argument("--large-gb", type=float, default=5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    sizes = {f"{args.small_mb} MB": args.small_mb * 10**6, f"{args.large_gb:g} GB": int(args.large_gb * 10**9)}
    calls = ("fresh start: first reportLatestOffset", "idle trigger: reportLatestOffset + latestOffset",
             "trigger after 1,000 appended records")
    measures = (*(f"{call} (µs)" for call in calls), *(f"{call} (bytes read)" for call in calls))
    results: dict[str, dict[str, list[float]]] = {label: {m: [] for m in measures} for label in sizes}
    actual: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="sp-idle-") as tmp:
        free = shutil.disk_usage(tmp).free
        if free < sum(sizes.values()) + (2 << 30):
            raise SystemExit(f"{tmp}: {free / 1e9:.1f} GB free, the logs need {sum(sizes.values()) / 1e9:.1f} GB"
                             " and 2 GiB to spare")
        logs = {}
        for label, size in sizes.items():
            began = time.monotonic()
            logs[label] = write_log(Path(tmp) / label.replace(" ", ""), size)
            actual[label] = log_bytes(logs[label])
            print(f"wrote the {label} log ({actual[label]:,} bytes) in {time.monotonic() - began:.1f} s", flush=True)
        spark = start_session(WorkerSettings.from_env({"SP_SPARK_MASTER": "local[1]", "SP_WORK_DIR": tmp}))
        for run in range(args.runs):
            for label, log in logs.items():           # alternate, so machine noise hits both alike
                for measure, value in zip(measures, one_run(spark._jvm, log, args.calls, seed=run + 2)):
                    results[label][measure].append(value)
            print(f"run {run + 1}: " + ", ".join(
                f"{label} idle {results[label][measures[1]][-1]:.1f} µs" for label in logs), flush=True)
        spark.stop()
    small, large = sizes
    lines = [
        f"# Idle trigger vs log size ({PARTITIONS} partitions, cap {CAP:,}, {args.runs} runs, "
        f"{args.calls:,} idle triggers a run, 2 cores)",
        "",
        "Command: `/work/helpers/heavy .venv/bin/python bench/idle_trigger.py "
        f"--small-mb {args.small_mb} --large-gb {args.large_gb:g} --runs {args.runs} --calls {args.calls}`",
        "",
        "| measure | median | min | max |",
        "|---|---|---|---|",
        *(spread_row(f"{measure}, {label} log", results[label][measure], ",.1f")
          for measure in measures for label in sizes),
        *(f"| {measure}: {large} / {small} | "
          f"{statistics.median(results[large][measure]) / statistics.median(results[small][measure]):.2f} | | |"
          for measure in measures[:3]),
        "",
        f"Log sizes: {small} = {actual[small]:,} bytes, {large} = {actual[large]:,} bytes.",
    ]
    publish_table("idle_trigger", lines)


if __name__ == "__main__":
    main()
