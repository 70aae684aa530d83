"""A standby's rehearsal: its Spark session runs the pipeline once, so that
taking over runs warm.

A new JVM's first micro-batch costs seconds the next ones do not: classes
loaded, code generated and compiled, Spark's Python workers started and the
source's modules imported in them, the Parquet writer's first use. A
standby has the time, so it pays them ahead: each query reads the first
``RECORDS`` records of the log from the beginning, through the pipeline's
own transforms, into staging directories under a scratch directory, batch
after batch (no trigger interval) for ``BATCHES`` batches of ``RECORDS``
records -- enough for the JIT to compile the record paths -- or until the
log has no more. Nothing is published and no durable state is touched; the
scratch directory is deleted afterwards.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession

from sparkpoint.eventlog import EventLog
from worker.api.graph import Pipeline
from worker.publishing.sinks import staged_branches
from worker.runtime.progress import summarize_error
from worker.runtime.queries import source_logs, start_branch
from worker.settings import WorkerSettings

log = logging.getLogger("sparkpoint.worker")

RECORDS = 1000
BATCHES = 5
TIMEOUT_S = 120.0


def rehearsed(progress: dict | None) -> bool:
    """Whether a query's last progress (None before its first batch) ends its rehearsal."""
    return progress is not None and (progress["batchId"] >= BATCHES - 1 or progress["numInputRows"] < RECORDS)


def rehearse(spark: SparkSession, pipeline: Pipeline, settings: WorkerSettings, scratch: Path,
             stop: threading.Event, clock: Callable[[], float] = time.monotonic) -> None:
    """Run each of the pipeline's unbounded queries for ``BATCHES`` batches,
    or to the end of the log (or ``TIMEOUT_S``, or ``stop``); not before its
    logs exist."""
    if not all(EventLog(path).exists() for path in source_logs(pipeline, settings)):
        log.info("standby: no event log yet to rehearse on; taking over will run cold")
        return
    started = clock()
    shutil.rmtree(scratch, ignore_errors=True)     # a killed standby's
    # Back to back, without a test's faults (they are for the real run).
    rehearsal = settings.model_copy(update={"test_fault": "", "trigger_interval_ms": 0,
                                            "upsert_trigger_interval_ms": 0})
    staged = {branch.sink.name for branch in staged_branches(pipeline)}
    branches = [branch for branch in pipeline.branches if not branch.bounded]
    queries = []
    try:
        for branch in branches:
            staging = {}
            if branch.sink.name in staged:
                staging[branch.sink.name] = scratch / "staging" / branch.sink.name
                staging[branch.sink.name].mkdir(parents=True)
            queries.append(start_branch(spark, branch, rehearsal, scratch / "queries", staging, cap=RECORDS))
        while not stop.is_set() and clock() - started < TIMEOUT_S and any(
                query.isActive and not rehearsed(query.lastProgress) for query in queries):
            stop.wait(0.1)
        for query in queries:
            if not query.isActive and (error := query.exception()) is not None:
                log.warning("standby: rehearsing query %s failed (taking over will run cold): %s", query.name,
                            summarize_error(str(error)))
    except Exception as error:   # a rehearsal only warms up: whatever stops it, the standby waits on, cold
        log.warning("standby: the rehearsal failed (taking over will run cold): %s", summarize_error(str(error)))
        return
    finally:
        for query in queries:
            query.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    log.info("standby: rehearsed %d queries in %.1f s", len(queries), clock() - started)
