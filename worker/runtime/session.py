"""The worker's Spark session."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark.sql import SparkSession

from worker.runtime.ui import spark_ui_conf
from worker.settings import WorkerSettings

# The worker's JVM classes (jvm/ in the repository; `make jars` builds the jar
# into the package, `make deps` and `make images` run it). First on the
# driver's class path, it also shadows Hadoop's yarn-default.xml
# (jvm/resources/): half of what every batch serializes of Hadoop's settings.
JVM_JAR = Path(__file__).parent / "jars" / "sparkpoint-jvm.jar"
# The classes the worker's JVM loads, archived for the next start
# (worker.runtime.classarchive; `make jars` and the image's build write it).
CLASS_ARCHIVE = JVM_JAR.parent / "spark-classes.jsa"


def class_archive_options() -> str:
    """The driver JVM's options: map the archived classes when there is an
    archive. (-Xshare:auto, the default, skips one this JVM cannot use:
    another JDK, changed jars.)"""
    return f"-XX:SharedArchiveFile={CLASS_ARCHIVE}" if CLASS_ARCHIVE.is_file() else ""


def driver_java_options(settings: WorkerSettings) -> str:
    """The class archive's options, then the user's (``SP_JAVA_OPTIONS``:
    a later option wins in the JVM)."""
    return " ".join(filter(None, (class_archive_options(), settings.java_options)))


# Spark settings the data path depends on.
SESSION_CONF = {
    # Hadoop's local file system, minus a `chmod` process per file it
    # creates (jvm/sparkpoint/hadoop/NioLocalFileSystem.java).
    "spark.hadoop.fs.file.impl": "sparkpoint.hadoop.NioLocalFileSystem",
    "spark.driver.extraClassPath": str(JVM_JAR),
    # Hadoop's local file system renames through FileContext, which resolves
    # links by running `readlink` in a child process: a few process spawns
    # per batch and query. The FileSystem-based manager renames in the JVM.
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    # Spark's own working checkpoint keeps what a restart of this run needs,
    # not a history: durable checkpoints are the worker's (worker.checkpointing).
    "spark.sql.streaming.minBatchesToRetain": "10",
    # State store maintenance (a snapshot once 10 deltas accumulated, files
    # of versions past retention deleted) every 5 s, not Spark's 60: between
    # runs of it a query at 2 batches/s piles up to 120 deltas, which each
    # checkpoint cuts (lists, stats, records in its manifest) and a
    # restarted query's first batch reads back one by one.
    "spark.sql.streaming.stateStore.maintenanceInterval": "5s",
    # Staged batches (worker.sinks.staging): standard Parquet timestamps, and
    # no _SUCCESS marker for the stager to remove again.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}


class MissingJar(Exception):
    pass


def start_session(settings: WorkerSettings, *, java_options: str | None = None) -> SparkSession:
    """The worker's session. ``java_options``: its JVM's options (default:
    ``driver_java_options``); a JVM already running in this process keeps its own."""
    if not JVM_JAR.is_file():
        raise MissingJar(f"{JVM_JAR} is missing: `make jars` builds it (`make deps` and `make images` do)")
    # Spark's Python workers must run this interpreter (it has pyarrow and
    # the sparkpoint packages), not whatever python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(settings.spark_master)
        .appName(f"sparkpoint-{settings.worker_id}")
        .config(map=spark_ui_conf(settings.spark_ui_port))
        .config(map=SESSION_CONF)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.driver.extraJavaOptions", driver_java_options(settings) if java_options is None
                else java_options)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def session_alive(spark: SparkSession) -> bool:
    """Whether the session can still run queries: its JVM answers and its
    SparkContext is not stopped (a failed query can be restarted in it)."""
    try:
        return not spark.sparkContext._jsc.sc().isStopped()
    except Exception:  # noqa: BLE001 - py4j's errors when the JVM is gone, whatever their type
        return False
