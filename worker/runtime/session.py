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
    prefill_python_environment(spark)
    register_data_sources(spark)
    return spark


def prefill_python_environment(spark: SparkSession) -> None:
    """Give the environment of the Python functions registered from now on
    the entries Spark's streaming source runner adds to it.

    Why: a registered data source has one Python function, and one
    environment map, shared by every query that reads it. When a query's
    source starts, ``PythonStreamingSourceRunner.init`` puts
    ``SPARK_LOCAL_DIRS``, ``SPARK_AUTH_SOCKET_TIMEOUT`` and
    ``SPARK_BUFFER_SIZE`` into that map, on the query's own thread, while
    another query that started with it may be serialising a task holding the
    same map: a ``HashMap`` that grows while it is written is a corrupt task,
    and every attempt fails with ``java.io.OptionalDataException`` (seen when
    a restored worker starts its queries together). With the keys present
    (same values), those puts only replace values and the map never changes
    shape. ``bench/query_start_race.py`` reproduces the failure without this.
    """
    sc = spark.sparkContext
    jvm = sc._jvm
    local_dirs = jvm.org.apache.spark.SparkEnv.get().blockManager().diskBlockManager().localDirs()
    timeout = sc.getConf().get("spark.python.authenticate.socketTimeout", "15s")
    sc.environment.update({
        "SPARK_LOCAL_DIRS": ",".join(str(d.getPath()) for d in local_dirs),
        "SPARK_AUTH_SOCKET_TIMEOUT": str(jvm.org.apache.spark.network.util.JavaUtils.timeStringAsSec(timeout)),
        "SPARK_BUFFER_SIZE": str(int(sc.getConf().get("spark.buffer.size", "65536"))),
    })


def register_data_sources(spark: SparkSession) -> None:
    for source in (EventLogDataSource, StagingDataSource, ConsoleDataSource):
        spark.dataSource.register(source)
