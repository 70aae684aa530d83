"""Worker entry point: ``python -m worker``.

Steps:
1. Read settings and load the pipeline file; check every sink can keep its
   contract as configured (errors name the variable or file).
2. Fence the checkpoint directory: one live worker per directory; start the
   Spark session (its JVM is forked before any gRPC channel exists: gRPC's
   fork handlers can break the launch).
3. Register with the controller (retrying while it is unreachable), reporting
   the durable checkpoints on the volume; learn what to restore.
4. Read every sink's mark ("published up to", waiting while its target is
   unreachable); restore the controller's checkpoint, or an older intact one,
   never one older than a published mark, into a fresh working directory.
5. Staging: keep the output staged up to the restored checkpoint (it counts
   as complete: published at once), forget what was staged after it.
6. Start the pipeline's queries; Spark replays the source from the restored
   offsets.
7. Checkpoint, publish and report progress in the background until a query
   stops or SIGTERM arrives.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from proto.sparkpoint.v1 import controller_pb2 as pb
from sparkpoint.env import SettingsError, exit_with_error
from sparkpoint.eventlog import EventLog, committed_end
from worker.api.graph import Pipeline, PipelineError
from worker.api.loader import load_pipeline
from worker.checkpointing.faults import FaultInjector
from worker.checkpointing.manifest import Manifest
from worker.checkpointing.policy import CheckpointScheduler, CompletionNotifier
from worker.checkpointing.restore import RestoreRefused, restore
from worker.checkpointing.runner import CheckpointCommitter, CheckpointRunner, monotonic_ms
from worker.checkpointing.store import CheckpointStore, FenceError
from worker.checkpointing.writer import CheckpointWriter
from worker.control.backoff import Backoff
from worker.control.client import ControllerClient, RegistrationRefused, WorkerIdentity
from worker.control.reporter import Reporter, WorkerSnapshot
from worker.healthcheck import clear_health, write_health
from worker.publishing.book import restore_floor
from worker.publishing.publisher import Publisher
from worker.publishing.sinks import check_sinks, publications
from worker.runtime.progress import ProgressTracker, QueryStatus, summarize_error
from worker.runtime.queries import source_logs
from worker.runtime.recovery import RecoveryTracker
from worker.settings import WorkerSettings
from worker.sources.log_source import owned_partitions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("sparkpoint.worker")
PROGRAM = "sparkpoint-worker"


def worker_state(queries: list[QueryStatus], expected: int, recovering: bool = False) -> int:
    """The worker's state as the controller sees it, from its queries."""
    if any(q.error for q in queries):
        return pb.WORKER_STATE_FAILED
    if len(queries) == expected and queries and not any(q.active for q in queries):
        return pb.WORKER_STATE_FINISHED
    if recovering and queries:
        return pb.WORKER_STATE_RECOVERING
    if len(queries) == expected and all(q.batch_id >= 0 for q in queries):
        return pb.WORKER_STATE_RUNNING
    return pb.WORKER_STATE_STARTING


def wait_for_logs(pipeline: Pipeline, settings: WorkerSettings, stop: threading.Event) -> bool:
    """Wait until every source log exists (the producer creates them)."""
    backoff = Backoff(initial_s=0.2, maximum_s=2.0)
    announced = False
    while not stop.is_set():
        missing = [str(p) for p in source_logs(pipeline, settings) if not EventLog(p).exists()]
        if not missing:
            return True
        if not announced:
            log.info("waiting for event log(s) %s", ", ".join(missing))
            announced = True
        stop.wait(backoff.next_delay())
    return False


def fresh_run_dir(settings: WorkerSettings) -> Path:
    """A new working directory for this run; earlier runs' are removed.

    A killed worker's Spark JVM may outlive it for a moment: it must never
    write into the directory the new run restores into.
    """
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    for old in settings.work_dir.glob("run-*"):
        shutil.rmtree(old, ignore_errors=True)
    run_dir = settings.work_dir / f"run-{int(time.time() * 1000)}-{os.getpid()}"
    (run_dir / "queries").mkdir(parents=True)
    return run_dir


def recovery_tracker(pipeline: Pipeline, settings: WorkerSettings, restored: Manifest | None) -> RecoveryTracker:
    """Replay from the restored offsets to the end of the log as it is now."""
    target: dict[str, int] = {}
    for directory in source_logs(pipeline, settings):
        log_ = EventLog(directory)
        for p in owned_partitions(log_.partitions(), settings.worker_index, settings.worker_count):
            target[str(p)] = committed_end(log_.path(p), 0)
    start: dict[str, int] = {}
    if restored is not None:
        for partition in target:
            start[partition] = min((q.offsets.get(partition, 0) for q in restored.queries), default=0)
    return RecoveryTracker(start, target if restored is not None else start)


@dataclass
class LiveRun:
    """What the reporter sees of this run, filled in as it starts."""

    expected_queries: int
    tracker: ProgressTracker = field(default_factory=ProgressTracker)
    queries: list[StreamingQuery] = field(default_factory=list)
    restored: Manifest | None = None
    recovery: RecoveryTracker | None = None
    runner: CheckpointRunner | None = None


def snapshot(live: LiveRun, publisher: Publisher, settings: WorkerSettings) -> WorkerSnapshot:
    statuses = live.tracker.snapshot()
    progress = live.recovery.progress(statuses) if live.recovery else None
    state = worker_state(statuses, live.expected_queries, progress.active if progress else False)
    write_health(settings.work_dir, registered=True, queries_alive=all(q.isActive for q in live.queries),
                 state=pb.WorkerState.Name(state))
    return WorkerSnapshot(
        state=state,
        queries=statuses,
        dropped_checkpoints=live.runner.stats().dropped if live.runner else 0,
        restored_checkpoint_id=live.restored.checkpoint_id if live.restored else 0,
        recovery=pb.Recovery(active=progress.active, target_bytes=progress.target_bytes,
                             replayed_bytes=progress.replayed_bytes) if progress else pb.Recovery(),
        sinks=publisher.statuses(),
    )


def run(settings: WorkerSettings, pipeline: Pipeline, stop: threading.Event) -> int:
    checkpoints_on = settings.checkpoint_freq_ms > 0
    clear_health(settings.work_dir)
    # 2.
    store = CheckpointStore(settings.checkpoint_dir)
    try:
        store.acquire(settings.worker_id)
    except (FenceError, OSError) as error:
        exit_with_error(PROGRAM, f"SP_CHECKPOINT_DIR: {error}")
    for problem in store.quarantine_unreadable() if checkpoints_on else []:
        log.error("unreadable checkpoint manifest, moved to quarantine: %s", problem)
    from pyspark.errors import PySparkException

    from worker.runtime.session import start_session

    try:
        spark = start_session(settings)
    except PySparkException as error:
        exit_with_error(PROGRAM, f"cannot start Spark (SP_SPARK_MASTER={settings.spark_master}): "
                                 f"{summarize_error(str(error))}")
    try:
        return serve(settings, pipeline, stop, store, spark)
    finally:
        spark.stop()
        store.release()


def serve(settings: WorkerSettings, pipeline: Pipeline, stop: threading.Event, store: CheckpointStore,
          spark: SparkSession) -> int:
    """Steps 3-7, with the checkpoint directory fenced and Spark started."""
    from worker.runtime.progress import SparkProgressListener
    from worker.runtime.queries import start_queries

    checkpoints_on = settings.checkpoint_freq_ms > 0
    # 3.
    identity = WorkerIdentity(settings.worker_id, settings.worker_index, settings.worker_count,
                              pipeline.fingerprint(), tuple(n.name for n in pipeline.nodes()))
    client = ControllerClient(settings.controller_addr, identity,
                              checkpoints=lambda: store.readable()[0] if checkpoints_on else [])
    try:
        registered = client.register(stop)
    except RegistrationRefused as error:
        exit_with_error(PROGRAM, f"the controller refused this worker: {error}")
    if registered is None:
        return 0
    log.info("registered as %s (index %d of %d); restore: %s", settings.worker_id, registered.worker_index,
             registered.worker_count, registered.restore.describe())
    if not wait_for_logs(pipeline, settings, stop):
        return 0
    run_dir = fresh_run_dir(settings)
    query_root = run_dir / "queries"
    publisher = Publisher(publications(pipeline, settings, run_dir.name))
    live = LiveRun(expected_queries=len(pipeline.branches))
    reporter = Reporter(client, lambda: snapshot(live, publisher, settings), settings.report_interval_ms / 1000)
    reporter.start()
    try:
        # 4.
        if not publisher.resume_all(stop):
            return 0
        floor = restore_floor(publisher.marks())
        try:
            outcome = restore(store, registered.restore.checkpoint_id if checkpoints_on else None, query_root,
                              floor=floor)
        except RestoreRefused as error:
            exit_with_error(PROGRAM, error)
        live.restored = restored = outcome.manifest
        if restored is not None:
            log.info("restored checkpoint %d (batches %s)", restored.checkpoint_id,
                     {q.name: q.batch_id for q in restored.queries})
        live.recovery = recovery_tracker(pipeline, settings, restored)
        # 5.
        batches = {q.name: q.batch_id for q in restored.queries} if restored else {}
        for publication in publisher.publications:
            kept = publication.staging.recover(keep_through=batches.get(publication.name))
            if kept:
                log.info("sink %s: %d staged batch(es) up to the restored checkpoint kept for publishing",
                         publication.name, kept)
        if restored is not None:
            publisher.restored(restored)
        publisher.start()
        # 6.
        spark.streams.addListener(SparkProgressListener(live.tracker, {}, on_batch=publisher.wake))
        live.queries = start_queries(spark, pipeline, settings, query_root,
                                     {p.name: p.staging.run_dir for p in publisher.publications})
        log.info("running %d queries: %s", len(live.queries), ", ".join(q.name for q in live.queries))
        # 7.
        if checkpoints_on:
            notifier = CompletionNotifier()
            notifier.subscribe(publisher.completed)
            writer = CheckpointWriter(store, query_root, settings.worker_id, identity.node_names,
                                      identity.pipeline_fingerprint,
                                      faults=FaultInjector(settings.test_fault, settings.checkpoint_dir))
            scheduler = CheckpointScheduler(settings.checkpoint_freq_ms, monotonic_ms(),
                                            last_id=max(store.highest_id_ever(), registered.last_checkpoint_id))
            live.runner = CheckpointRunner(writer, store, scheduler,
                                           CheckpointCommitter(client.commit_checkpoint, notifier),
                                           retain=settings.checkpoint_retain, clock_ms=monotonic_ms,
                                           on_durable=publisher.durable)
            live.runner.start()
        failed = None
        while not stop.is_set():
            failed = next((q for q in live.queries if not q.isActive), None)
            if failed is not None:
                break
            stop.wait(0.5)
        error = failed.exception() if failed is not None else None
        if live.runner is not None:
            live.runner.stop()
        for query in live.queries:
            query.stop()
        if error is not None:
            live.tracker.on_terminated(failed.name, str(error))
    finally:
        publisher.stop()
        reporter.stop()
        client.close()
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
        check_sinks(pipeline, settings)
    except (SettingsError, PipelineError) as error:
        exit_with_error(PROGRAM, error)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    raise SystemExit(run(settings, pipeline, stop))


if __name__ == "__main__":
    main()
