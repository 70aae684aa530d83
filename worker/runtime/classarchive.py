"""A class-data-sharing archive of the classes a worker's JVM loads.

Starting a Spark session loads some ten thousand classes from Spark's jars
(parsed and verified one by one): ~13 s of the JVM's CPU on a quiet two-core
machine, several times the wall time while the rest of the stack runs, and
every crashed worker pays it again. The JVM can map the classes it loaded
once from an archive instead (JDK 17's dynamic AppCDS): about half the CPU.

``python -m worker.runtime.classarchive [FILE]`` writes the archive
(default ``worker.runtime.session.CLASS_ARCHIVE``, next to the worker's jar)
by running a small pipeline through the worker's own session settings -- the
event log source, an aggregation with state, ``foreachBatch`` to Parquet --
in a JVM started with ``-XX:ArchiveClassesAtExit``; ``make jars`` and the
worker image's build run it. ``start_session`` maps it when it exists. An
archive the JVM cannot use (another JDK, changed jars) is skipped without a
word: the classes load from the jars as without one.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from sparkpoint.eventlog.log import EventLog
from worker.runtime.session import CLASS_ARCHIVE, start_session
from worker.settings import WorkerSettings
from worker.sinks.staging import BatchStager
from worker.sources.log_source import read_log


def train(archive: Path, timeout_s: float = 300) -> None:
    """Run a small pipeline in a session whose JVM dumps every class it loaded
    to ``archive`` as it exits; returns once it has."""
    from pyspark import SparkContext

    with tempfile.TemporaryDirectory(prefix="sparkpoint-classarchive-") as directory:
        _run_pipeline(Path(directory), archive)
    # The gateway JVM exits when its stdin closes (as when this process ends);
    # it writes the archive on the way out.
    jvm = SparkContext._gateway.proc
    jvm.stdin.close()
    if jvm.wait(timeout=timeout_s) != 0 or not archive.is_file():
        raise SystemExit(f"the JVM did not write its class archive {archive} (exit status {jvm.returncode})")


def _run_pipeline(root: Path, archive: Path) -> None:
    settings = WorkerSettings.from_env({"SP_WORK_DIR": str(root / "work"), "SP_LOG_DIR": str(root / "log")})
    log = EventLog.create(root / "log" / "trades", 2)
    for partition in range(2):
        log.append(partition, [{"id": i, "sym": f"S{i % 3}", "price": 1.5, "size": i, "time": "2026-01-01T00:00:00Z"}
                               for i in range(partition, 100, 2)])
    (root / "staging").mkdir()
    spark = start_session(settings, java_options=f"-XX:ArchiveClassesAtExit={archive}")
    try:
        counts = (read_log(spark, log.directory, "id long, sym string, price double, size long, time timestamp",
                           max_records_per_batch=30)
                  .groupBy("sym").agg({"size": "sum", "price": "max"}))
        stager = BatchStager([root / "staging"])
        query = (counts.writeStream.outputMode("complete").foreachBatch(stager)
                 .option("checkpointLocation", str(root / "checkpoint")).trigger(processingTime="100 milliseconds")
                 .start())
        query.processAllAvailable()
        query.stop()
    finally:
        spark.stop()


if __name__ == "__main__":
    target = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else CLASS_ARCHIVE
    target.unlink(missing_ok=True)
    train(target)
    print(f"class archive: {target} ({target.stat().st_size >> 20} MiB)")
