"""The plain PySpark baseline of bench/throughput.py and bench/windows.py:
an example pipeline's computation written as a Spark user would, without
Sparkpoint.

    .venv/bin/python bench/spark_baseline.py --source json --input DIR --events N --batch N \
        --work DIR --result FILE [--computation trades|windows]

Two streaming queries over one source, in one Spark session (local[2], 2
shuffle partitions, no UI). ``--computation trades`` (pipelines/trades.py):

- enrich (``trading.enrich``) -> Spark's built-in Parquet file sink (append);
- per-symbol aggregate (``trading.VWAP_AGGREGATIONS``) + ``trading.add_vwap``,
  complete mode -> each batch's table overwritten with Spark's Parquet writer
  through ``foreachBatch`` (the file sink takes appends only);

``--computation windows`` (pipelines/trades_windows.py's windows, both final):

- one-minute bars per symbol (``trading.BAR_AGGREGATIONS`` + ``add_vwap``)
  and a five-minute volume every minute, under a 10 s watermark on ``time``,
  each to Spark's Parquet file sink (append: each window once);

each with Spark's own ``checkpointLocation`` on local disk and the default
trigger (the next batch as soon as the last is done).

``--source json``: Spark's JSON file source over a directory of JSON lines
files, ``maxFilesPerTrigger`` chosen so a batch holds about ``--batch``
events. ``--source log``: Sparkpoint's event log through its source (in the
JVM, jvm/sparkpoint/eventlog/), ``maxRecordsPerBatch`` = ``--batch``.

Stops once both queries have read ``--events`` rows, and writes every
query's progress events (Spark's JSON) to ``--result``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "pipelines")]

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql.streaming import StreamingQueryListener  # noqa: E402
from trading import BAR_AGGREGATIONS, TRADE_SCHEMA, VWAP_AGGREGATIONS, add_vwap, enrich  # noqa: E402

QUERIES = {"trades": ("enriched", "vwap"), "windows": ("bars", "volume")}
VOLUME_AGGREGATIONS = {"volume": "sum(size)", "trades": "count(1)"}


class Collector(StreamingQueryListener):
    def __init__(self, queries: tuple[str, ...]) -> None:
        self.progress: dict[str, list[dict]] = {name: [] for name in queries}

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = json.loads(event.progress.json)
        self.progress.setdefault(progress["name"], []).append(progress)

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass

    def rows(self, name: str) -> int:
        return sum(p["numInputRows"] for p in list(self.progress[name]))


def session() -> SparkSession:
    from worker.runtime.session import JVM_JAR  # the event log source's classes

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("bench-spark-baseline")
             .config("spark.driver.extraClassPath", str(JVM_JAR))
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.pyspark.python", sys.executable)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def json_source(spark: SparkSession, directory: Path, events: int, batch: int):
    """The files hold about the same number of events each."""
    files = len(list(directory.glob("*.json")))
    per_trigger = max(1, round(batch * files / events))
    return spark.readStream.schema(TRADE_SCHEMA).option("maxFilesPerTrigger", per_trigger).json(str(directory))


def log_source(spark: SparkSession, directory: Path, events: int, batch: int):
    from worker.sources.log_source import read_log

    return read_log(spark, directory, TRADE_SCHEMA, max_records_per_batch=batch)


def start(df, work: Path):
    enriched = (enrich(df).writeStream.queryName("enriched").format("parquet")
                .option("path", str(work / "out" / "enriched"))
                .option("checkpointLocation", str(work / "checkpoints" / "enriched")).start())
    aggregations = [F.expr(expr).alias(column) for column, expr in VWAP_AGGREGATIONS.items()]
    table = str(work / "out" / "vwap")
    vwap = (add_vwap(df.groupBy("sym").agg(*aggregations)).writeStream.queryName("vwap").outputMode("complete")
            .foreachBatch(lambda batch, _: batch.write.mode("overwrite").parquet(table))
            .option("checkpointLocation", str(work / "checkpoints" / "vwap")).start())
    return [enriched, vwap]


def start_windows(df, work: Path):
    def windowed(name: str, window, aggregations: dict[str, str], then=lambda frame: frame):
        grouped = df.withWatermark("time", "10 seconds").groupBy(window.alias("window"), "sym").agg(
            *[F.expr(expr).alias(column) for column, expr in aggregations.items()])
        rows = then(grouped.select(F.col("window.start").alias("window_start"),
                                   F.col("window.end").alias("window_end"), "sym", *aggregations))
        return (rows.writeStream.queryName(name).format("parquet").outputMode("append")
                .option("path", str(work / "out" / name))
                .option("checkpointLocation", str(work / "checkpoints" / name)).start())
    return [windowed("bars", F.window("time", "1 minute"), BAR_AGGREGATIONS, add_vwap),
            windowed("volume", F.window("time", "5 minutes", "1 minute"), VOLUME_AGGREGATIONS)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=("json", "log"), required=True)
    parser.add_argument("--input", type=Path, required=True, help="JSON lines directory, or the event log's")
    parser.add_argument("--events", type=int, required=True, help="rows in the input")
    parser.add_argument("--batch", type=int, default=200_000, help="about this many events per batch")
    parser.add_argument("--work", type=Path, required=True, help="checkpoints and output go here")
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--computation", choices=tuple(QUERIES), default="trades")
    args = parser.parse_args()
    spark = session()
    collector = Collector(QUERIES[args.computation])
    spark.streams.addListener(collector)
    read = json_source if args.source == "json" else log_source
    queries = (start if args.computation == "trades" else start_windows)(
        read(spark, args.input, args.events, args.batch), args.work)
    deadline = time.monotonic() + args.timeout
    while any(collector.rows(name) < args.events for name in QUERIES[args.computation]) \
            and time.monotonic() < deadline:
        for query in queries:
            if query.exception():
                raise SystemExit(f"query {query.name} failed: {query.exception()}")
        time.sleep(0.2)     # polling the listener's tally, bounded by the deadline
    for query in queries:
        query.stop()
    args.result.write_text(json.dumps({"queries": collector.progress}))
    spark.stop()


if __name__ == "__main__":
    main()
