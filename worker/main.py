"""Worker entry point: ``python -m worker``.

Steps:
1. Read settings and load the pipeline file (errors name the variable or file).
2. Register with the controller (retrying while it is unreachable); learn the
   assignment and what to restore.
3. Wait for the source logs, start the Spark session and the pipeline's queries.
4. Report progress in the background until a query stops or SIGTERM arrives.
"""

from __future__ import annotations

import logging
import os
import signal
import threading

from proto.sparkpoint.v1 import controller_pb2 as pb
from sparkpoint.env import SettingsError, exit_with_error
from sparkpoint.eventlog import EventLog
from worker.api.graph import Pipeline, PipelineError
from worker.api.loader import load_pipeline
from worker.control.backoff import Backoff
from worker.control.client import ControllerClient, RegistrationRefused, WorkerIdentity
from worker.control.reporter import Reporter
from worker.runtime.progress import ProgressTracker, QueryStatus, summarize_error
from worker.runtime.queries import plan_branch
from worker.settings import WorkerSettings

log = logging.getLogger("sparkpoint.worker")
PROGRAM = "sparkpoint-worker"


def worker_state(queries: list[QueryStatus], expected: int) -> int:
    """The worker's state as the controller sees it, from its queries."""
    if any(q.error for q in queries):
        return pb.WORKER_STATE_FAILED
    if len(queries) == expected and queries and not any(q.active for q in queries):
        return pb.WORKER_STATE_FINISHED
    if len(queries) == expected and all(q.batch_id >= 0 for q in queries):
        return pb.WORKER_STATE_RUNNING
    return pb.WORKER_STATE_STARTING


def wait_for_logs(pipeline: Pipeline, settings: WorkerSettings, stop: threading.Event) -> bool:
    """Wait until every source log exists (the producer creates them)."""
    logs = {path for branch in pipeline.branches for path in plan_branch(branch, settings).source_logs}
    backoff = Backoff(initial_s=0.2, maximum_s=2.0)
    announced = False
    while not stop.is_set():
        missing = sorted(str(p) for p in logs if not EventLog(p).exists())
        if not missing:
            return True
        if not announced:
            log.info("waiting for event log(s) %s", ", ".join(missing))
            announced = True
        stop.wait(backoff.next_delay())
    return False


def run(settings: WorkerSettings, pipeline: Pipeline, stop: threading.Event) -> int:
    identity = WorkerIdentity(settings.worker_id, settings.worker_index, settings.worker_count,
                              pipeline.fingerprint(), tuple(n.name for n in pipeline.nodes()))
    client = ControllerClient(settings.controller_addr, identity)
    # 2.
    try:
        registered = client.register(stop)
    except RegistrationRefused as error:
        exit_with_error(PROGRAM, f"the controller refused this worker: {error}")
    if registered is None:
        return 0
    log.info("registered as %s (index %d of %d)", settings.worker_id, registered.worker_index,
             registered.worker_count)
    # 3.
    if not wait_for_logs(pipeline, settings, stop):
        return 0
    from worker.runtime.progress import SparkProgressListener
    from worker.runtime.queries import start_queries
    from worker.runtime.session import start_session

    spark = start_session(settings)
    tracker = ProgressTracker()
    spark.streams.addListener(SparkProgressListener(tracker, {}))
    expected = len(pipeline.branches)
    reporter = Reporter(client, tracker, registered.session_id, settings.report_interval_ms / 1000,
                        state=lambda: worker_state(tracker.snapshot(), expected))
    queries = start_queries(spark, pipeline, settings)
    reporter.start()
    log.info("running %d queries: %s", len(queries), ", ".join(q.name for q in queries))
    # 4.
    failed = None
    while not stop.is_set():
        failed = next((q for q in queries if not q.isActive), None)
        if failed is not None:
            break
        stop.wait(0.5)
    error = failed.exception() if failed is not None else None
    for query in queries:
        query.stop()
    if error is not None:
        tracker.on_terminated(failed.name, str(error))
    reporter.stop()
    client.close()
    spark.stop()
    if error is not None:
        log.error("query %s failed: %s", failed.name, summarize_error(str(error)))
        return 1
    return 0


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # 1.
    try:
        settings = WorkerSettings.from_env(os.environ)
        pipeline = load_pipeline(settings.pipeline)
    except (SettingsError, PipelineError) as error:
        exit_with_error(PROGRAM, error)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    raise SystemExit(run(settings, pipeline, stop))


if __name__ == "__main__":
    main()
