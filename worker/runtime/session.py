"""The worker's Spark session."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from worker.settings import WorkerSettings
from worker.sinks.console import ConsoleDataSource
from worker.sinks.staging import StagingDataSource
from worker.sources.log_source import EventLogDataSource


def start_session(settings: WorkerSettings) -> SparkSession:
    # Spark's Python workers must run this interpreter (it has pyarrow and
    # the sparkpoint packages), not whatever python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(settings.spark_master)
        .appName(f"sparkpoint-{settings.worker_id}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register_data_sources(spark)
    return spark


def register_data_sources(spark: SparkSession) -> None:
    for source in (EventLogDataSource, StagingDataSource, ConsoleDataSource):
        spark.dataSource.register(source)
