"""The worker's Spark session: two queries over the event log started
together, each batch staged by Spark's Parquet writer, the progress listener
seeing each query's rows and end; the same session run (one Spark session is
seconds of the suite) also checks the worker's local file system and its
Hadoop configuration without YARN's defaults (``jvm/``)."""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq
import pytest

from sparkpoint.devstack import free_port
from sparkpoint.eventlog import EventLog
from sparkpoint.producer import write_trades
from tests.support import get_json, wait_until
from worker.runtime.progress import ProgressTracker, SparkProgressListener
from worker.runtime.queries import start_queries
from worker.runtime.session import start_session
from worker.settings import WorkerSettings

pytestmark = pytest.mark.integration


def check_local_file_system(spark, directory) -> None:
    """Spark's local file system is the worker's (jvm/): modes set in the JVM,
    no ``.crc`` side files."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)
    assert fs.getClass().getName() == "sparkpoint.hadoop.NioLocalFileSystem"
    path = jvm.org.apache.hadoop.fs.Path(str(directory / "f"))
    fs.create(path, True).close()
    for mode in (0o640, 0o751, 0o000, 0o777):
        fs.setPermission(path, jvm.org.apache.hadoop.fs.permission.FsPermission(mode))
        assert (directory / "f").stat().st_mode & 0o777 == mode
    assert [p.name for p in directory.iterdir()] == ["f"]


def check_hadoop_defaults(spark) -> None:
    """The worker's jar shadows Hadoop's yarn-default.xml
    (jvm/resources/): a batch's Hadoop configuration carries none of YARN's
    defaults, and keeps Hadoop's own and MapReduce's."""
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    assert conf.get("yarn.resourcemanager.address") is None
    sources = {key: list(conf.getPropertySources(key)) for key in conf.getValByRegex(r"^yarn\.").keySet()}
    assert not [key for key, files in sources.items() if "yarn-default.xml" in files]
    assert list(conf.getPropertySources("fs.defaultFS")) == ["core-default.xml"]
    assert list(conf.getPropertySources("mapreduce.job.maps")) == ["mapred-default.xml"]


def kept_history(spark) -> tuple[int, int, list[str]] | None:
    """What Spark's status listeners keep of past jobs and SQL executions
    (counts, and each kept execution's plan description), once no more
    than ten of each remain (their clean-up runs on the listener thread)."""
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup(None))
    executions = spark._jsparkSession.sharedState().statusStore().executionsList()
    plans = [executions.apply(i).physicalPlanDescription() for i in range(executions.size())]
    return (jobs, len(plans), plans) if jobs <= 10 and len(plans) <= 10 else None


def all_ended(tracker: ProgressTracker, count: int) -> list | None:
    queries = tracker.snapshot()
    return queries if len(queries) == count and not any(q.active for q in queries) else None


def test_two_queries_started_together_stage_every_event(tmp_path):
    from worker import api as sp

    settings = WorkerSettings.from_env({"SP_SPARK_MASTER": "local[2]", "SP_LOG_DIR": str(tmp_path / "log"),
                                        "SP_MAX_RECORDS_PER_BATCH": "200"})
    log = EventLog.create(settings.log_dir / "trades", 2)
    events = write_trades(log, 500, seed=3)
    trades = sp.read.from_log("trades", schema="id long, sym string, size long", name="trades", bounded=True)
    pipeline = sp.Pipeline.of(
        trades | sp.write.to_files("a", name="a_out"),
        trades | sp.aggregate("sym", {"n": "count(1)"}, name="counts") | sp.write.to_files("b", name="b_out"))
    spark = start_session(settings)
    assert spark.sparkContext.uiWebUrl is None                  # Spark's UI is off by default
    tracker = ProgressTracker()
    listener = SparkProgressListener(tracker)
    listener.register(spark)
    try:
        (tmp_path / "fs").mkdir()
        check_local_file_system(spark, tmp_path / "fs")
        check_hadoop_defaults(spark)
        staging = {name: tmp_path / "staging" / name for name in ("a_out", "b_out")}
        for directory in staging.values():
            directory.mkdir(parents=True)
        queries = start_queries(spark, pipeline, settings, tmp_path / "queries", staging)
        for query in queries:
            query.awaitTermination(300)
            assert query.exception() is None and not query.isActive
        assert all(query.lastProgress is not None for query in queries)
        # One shuffle partition (the default): the aggregate's batches are one
        # stage, with no shuffle before its state store.
        plans = {query.name: query._jsq.streamingQuery().lastExecution().executedPlan().toString() for query in queries}
        assert "StateStoreSave" in plans["b_out"] and "Exchange" not in plans["b_out"]
        # The listener saw both queries start, read every event and end (its
        # events arrive on Spark's listener thread, after the queries ended).
        ended = wait_until(lambda: all_ended(tracker, 2), timeout_s=60,
                           what="both queries ended, as the listener saw them")
        listener.unregister(spark)
        # With the UI off, Spark's status listeners keep little history: ten
        # jobs and SQL executions, each plan described as its plain tree.
        for _ in range(20):
            spark.range(3).collect()
        jobs, executions, plans = wait_until(lambda: kept_history(spark), timeout_s=60,
                                             what="Spark keeping at most ten past jobs and executions")
        assert jobs and executions
        assert all(plan.startswith("== Physical Plan ==") and "Arguments:" not in plan for plan in plans), plans[:1]
    finally:
        spark.stop()
    assert [(q.name, q.rows_processed, q.error) for q in ended] == [("a_out", 500, ""), ("b_out", 500, "")]
    assert all(sum(q.offsets.values()) > 0 for q in ended)
    # Spark's Parquet writer staged every batch: each event once, only files with rows.
    batches = sorted(staging["a_out"].glob("b*"))
    files = [path for batch in batches for path in sorted(batch.iterdir())]
    assert all(path.suffix == ".parquet" and pq.read_metadata(path).num_rows for path in files)
    staged = [i for path in files for i in pq.read_table(path).column("id").to_pylist()]
    assert sorted(staged) == sorted(event["id"] for event in events)
    # The aggregate's last batch (complete mode) counts every event by symbol.
    last = pq.read_table(sorted(staging["b_out"].glob("b*"))[-1]).to_pylist()
    assert {row["sym"]: row["n"] for row in last} == Counter(event["sym"] for event in events)

def test_sparks_ui_serves_the_worker_on_the_port_asked_for(tmp_path):
    port = free_port()
    settings = WorkerSettings.from_env({"SP_SPARK_MASTER": "local[1]", "SP_WORKER_ID": "worker-ui",
                                        "SP_SPARK_UI_PORT": str(port)})
    spark = start_session(settings)
    try:
        assert spark.sparkContext.uiWebUrl.endswith(f":{port}")
        # Bound to every interface: what a container's published port reaches.
        # The first request initialises Spark's REST API (2.2 s on a quiet
        # machine, more than 5 under load): a generous timeout.
        applications = get_json(f"http://127.0.0.1:{port}/api/v1/applications", timeout_s=60)
        assert [app["name"] for app in applications] == ["sparkpoint-worker-ui"]
    finally:
        spark.stop()
