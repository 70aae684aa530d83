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
log has no more. Then each query starts again from its scratch checkpoint
and runs its last batch once more: a take-over's first batch goes through
Spark's restart path (offset and commit logs read back, state loaded from
its files, operator metadata and state schemas checked), which the first
round never takes (cold, a take-over's aggregate planned its first batch
in 0.3-0.5 s on a busy two-core stack; warm, in 0.1-0.3 s). Nothing is
published and no durable state is touched; the scratch directory is
deleted afterwards.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from sparkpoint.eventlog import EventLog
from worker.api.graph import Pipeline
from worker.checkpointing.cut import committed_batch, planned_batch
from worker.publishing.sinks import stages
from worker.runtime.progress import summarize_error
from worker.runtime.queries import source_logs, start_query
from worker.settings import WorkerSettings

log = logging.getLogger("sparkpoint.worker")

RECORDS = 1000
BATCHES = 5
TIMEOUT_S = 120.0


class RehearsalFailed(RuntimeError):
    """A rehearsal's query failed: the standby waits on, cold."""


def rehearsed(progress: dict | None) -> bool:
    """Whether a query's last progress (None before its first batch) ends its rehearsal."""
    return progress is not None and (progress["batchId"] >= BATCHES - 1 or progress["numInputRows"] < RECORDS)


def uncommit_last(query_dir: Path) -> None:
    """Remove a stopped query's last commit, unless a later batch is
    planned but uncommitted: either way, started again, the query runs
    its newest batch again."""
    batch = committed_batch(query_dir)
    if batch is not None and planned_batch(query_dir) == batch:
        (query_dir / "commits" / str(batch)).unlink()


def rehearse(spark: SparkSession, pipeline: Pipeline, settings: WorkerSettings, scratch: Path,
             stop: threading.Event, clock: Callable[[], float] = time.monotonic) -> None:
    """Steps (each ends early on ``stop`` or after ``TIMEOUT_S`` in all):
    1. Run each of the pipeline's unbounded queries for ``BATCHES``
       batches, or to the end of the log; not before its logs exist.
    2. Stop them, remove each one's last commit and start them again: each
       runs its last batch again, from its checkpoint.
    """
    if not all(EventLog(path).exists() for path in source_logs(pipeline, settings)):
        log.info("standby: no event log yet to rehearse on; taking over will run cold")
        return
    started = clock()
    shutil.rmtree(scratch, ignore_errors=True)     # a killed standby's
    # Back to back, without a test's faults (they are for the real run).
    rehearsal = settings.model_copy(update={"test_fault": "", "trigger_interval_ms": 0,
                                            "upsert_trigger_interval_ms": 0})
    unbounded = [query for query in pipeline.queries() if not query.bounded]
    staging = {sink.name: scratch / "staging" / sink.name for query in unbounded for sink in query.sinks
               if stages(sink)}
    for directory in staging.values():
        directory.mkdir(parents=True)
    queries: list[StreamingQuery] = []

    def run(done: Callable[[dict | None], bool]) -> None:
        if stop.is_set() or clock() - started >= TIMEOUT_S:
            return
        queries[:] = [start_query(spark, query, rehearsal, scratch / "queries", staging, cap=RECORDS)
                      for query in unbounded]
        while not stop.is_set() and clock() - started < TIMEOUT_S and any(
                query.isActive and not done(query.lastProgress) for query in queries):
            stop.wait(0.1)
        for query in queries:
            if not query.isActive and (error := query.exception()) is not None:
                raise RehearsalFailed(f"query {query.name}: {summarize_error(str(error))}")
            query.stop()

    try:
        # 1.
        run(rehearsed)
        # 2.
        for query in unbounded:
            uncommit_last(scratch / "queries" / query.name)
        run(lambda progress: progress is not None)
    except Exception as error:   # a rehearsal only warms up: whatever stops it, the standby waits on, cold
        log.warning("standby: the rehearsal failed (taking over will run cold): %s", summarize_error(str(error)))
        return
    finally:
        for query in queries:
            query.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    log.info("standby: rehearsed %d queries and their restart in %.1f s", len(queries), clock() - started)
