"""Worker entry point: ``python -m worker``.

Steps:
1. Read settings and load the pipeline file; check every sink can keep its
   contract as configured (errors name the variable or file).
2. Fence the checkpoint directory: one live worker per directory; start the
   Spark session (its JVM is forked before any gRPC channel exists: gRPC's
   fork handlers can break the launch) and derive the pipeline's layout:
   which state belongs to which node.
3. Register with the controller (retrying while it is unreachable), reporting
   the durable checkpoints on the volume; learn what to restore: the newest
   checkpoint, or the user's savepoint.
4. Read every sink's mark ("published up to", waiting while its target is
   unreachable); import an imported savepoint's checkpoint; restore the
   chosen checkpoint, or an older intact one, never one older than a
   published mark (unless the user allowed publishing again: then the marks
   move back), into a fresh working directory, state matched by node name.
5. Staging: keep the output staged up to the restored checkpoint (it counts
   as complete: published at once), forget what was staged after it.
6. Start the pipeline's queries (not the finished ones); Spark replays the
   source from the restored offsets.
7. Checkpoint, publish, report progress and carry out the controller's
   commands in the background until a query fails or SIGTERM arrives; a
   restart command (a savepoint restore) goes back to 3 in the same session.
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

from controller.savepoints.paths import SavepointPathError, resolve_under_root
from proto.sparkpoint.v1 import controller_pb2 as pb
from sparkpoint.env import SettingsError, exit_with_error
from sparkpoint.eventlog import EventLog, committed_end
from worker.api.graph import Pipeline, PipelineError
from worker.api.loader import load_pipeline
from worker.checkpointing.faults import FaultInjector
from worker.checkpointing.manifest import Manifest, ManifestError
from worker.checkpointing.policy import CheckpointScheduler, CompletionNotifier
from worker.checkpointing.restore import RestoreRefused, restore
from worker.checkpointing.runner import CheckpointCommitter, CheckpointRunner, monotonic_ms
from worker.checkpointing.store import CheckpointStore, CorruptCheckpoint, FenceError
from worker.checkpointing.transfer import import_checkpoint
from worker.checkpointing.writer import CheckpointWriter
from worker.control.backoff import Backoff
from worker.control.actions import CommandExecutor
from worker.control.client import ControllerClient, RegistrationRefused, RestoreTarget, WorkerIdentity
from worker.control.commands import CommandBook
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
from worker.stateplan.layout import PipelineLayout, pipeline_layout

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("sparkpoint.worker")
PROGRAM = "sparkpoint-worker"
RESTART = -1    # serve()'s result when the controller asked for a restart


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


def staying_finished(pipeline: Pipeline, resumed: Manifest | None) -> set[str]:
    """Branches restored finished into the unchanged pipeline: they stay
    finished (a changed one restores only with SP_FORCE_GRAPH_CHANGE, and
    then every branch runs again)."""
    if resumed is None or not resumed.finished_nodes or resumed.pipeline_fingerprint != pipeline.fingerprint():
        return set()
    done = set(resumed.finished_nodes)
    return {b.sink.name for b in pipeline.branches if all(n.name in done for n in b.nodes)}


@dataclass
class LiveRun:
    """What the reporter sees of this run, filled in as it starts."""

    expected_queries: int
    tracker: ProgressTracker = field(default_factory=ProgressTracker)
    queries: list[StreamingQuery] = field(default_factory=list)
    finished: set[str] = field(default_factory=set)     # branches whose bounded input ended
    restored: Manifest | None = None
    recovery: RecoveryTracker | None = None
    runner: CheckpointRunner | None = None


def snapshot(live: LiveRun, publisher: Publisher, commands: CommandBook, settings: WorkerSettings) -> WorkerSnapshot:
    statuses = live.tracker.snapshot()
    progress = live.recovery.progress(statuses) if live.recovery else None
    state = worker_state(statuses, live.expected_queries, progress.active if progress else False)
    write_health(settings.work_dir, registered=True,
                 queries_alive=all(q.isActive or q.name in live.finished for q in live.queries),
                 state=pb.WorkerState.Name(state))
    answers = commands.answers()
    return WorkerSnapshot(
        state=state,
        queries=statuses,
        dropped_checkpoints=live.runner.stats().dropped if live.runner else 0,
        restored_checkpoint_id=live.restored.checkpoint_id if live.restored else 0,
        recovery=pb.Recovery(active=progress.active, target_bytes=progress.target_bytes,
                             replayed_bytes=progress.replayed_bytes) if progress else pb.Recovery(),
        sinks=publisher.statuses(),
        savepoint_answers=answers.savepoints,
        exports=answers.exports,
    )


def import_savepoint(store: CheckpointStore, settings: WorkerSettings, target: RestoreTarget,
                     floor: int | None, last_id: int) -> int:
    """Copy an imported savepoint's checkpoint into the store; returns its new id."""
    if floor is not None:
        exit_with_error(PROGRAM, f"savepoint {target.savepoint_id} comes from another deployment, but sinks of this "
                                 f"one already published output (up to checkpoint {floor}): restore it with "
                                 "--allow-republish, or into a fresh deployment")
    new_id = max(store.highest_id_ever(), last_id) + 1
    try:
        directory = resolve_under_root(settings.savepoint_dir, target.import_dir)
        import_checkpoint(directory, target.checkpoint_id, store, new_id)
    except (SavepointPathError, ManifestError, CorruptCheckpoint, OSError) as error:
        exit_with_error(PROGRAM, f"savepoint {target.savepoint_id}: cannot import {target.import_dir} "
                                 f"(SP_SAVEPOINT_DIR={settings.savepoint_dir}): {error}")
    log.info("savepoint %s: imported checkpoint %d of %s as checkpoint %d", target.savepoint_id,
             target.checkpoint_id, target.import_dir, new_id)
    return new_id


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
    from worker.stateplan.derive import stateful_schemas

    try:
        spark = start_session(settings)
    except PySparkException as error:
        exit_with_error(PROGRAM, f"cannot start Spark (SP_SPARK_MASTER={settings.spark_master}): "
                                 f"{summarize_error(str(error))}")
    try:
        layout = pipeline_layout(pipeline, stateful_schemas(pipeline, spark))
    except PySparkException as error:
        exit_with_error(PROGRAM, f"{settings.pipeline}: {summarize_error(str(error))}")
    identity = WorkerIdentity(settings.worker_id, settings.worker_index, settings.worker_count,
                              pipeline.fingerprint(), layout.node_names)
    client = ControllerClient(settings.controller_addr, identity,
                              checkpoints=lambda: store.readable()[0] if checkpoints_on else [])
    try:
        while (code := serve(settings, pipeline, layout, stop, store, spark, client)) == RESTART:
            log.info("restarting the pipeline: the controller holds a new restore plan")
        return code
    finally:
        client.close()
        spark.stop()
        store.release()


def serve(settings: WorkerSettings, pipeline: Pipeline, layout: PipelineLayout, stop: threading.Event,
          store: CheckpointStore, spark: SparkSession, client: ControllerClient) -> int:
    """Steps 3-7, with the checkpoint directory fenced and Spark started.
    Returns the exit status, or RESTART."""
    from worker.runtime.progress import SparkProgressListener
    from worker.runtime.queries import start_queries

    checkpoints_on = settings.checkpoint_freq_ms > 0
    # 3.
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
    commands = CommandExecutor(CommandBook(), store, settings)
    reporter = Reporter(client, lambda: snapshot(live, publisher, commands.book, settings),
                        settings.report_interval_ms / 1000, on_reply=commands.on_reply)
    reporter.start()
    listener = None
    error = failed = None
    try:
        # 4.
        if not publisher.resume_all(stop):
            return 0
        target = registered.restore
        floor = None if target.allow_republish else restore_floor(publisher.marks())
        chosen = target.checkpoint_id if checkpoints_on else None
        if chosen is not None and target.import_dir:
            chosen = import_savepoint(store, settings, target, floor, registered.last_checkpoint_id)
        try:
            outcome = restore(store, chosen, query_root, layout, floor=floor,
                              force_graph_change=settings.force_graph_change)
        except RestoreRefused as refused:
            exit_with_error(PROGRAM, refused)
        live.restored = outcome.manifest
        resumed = outcome.resumed
        if resumed is not None:
            log.info("restored checkpoint %d (batches %s)", resumed.checkpoint_id,
                     {q.name: q.batch_id for q in resumed.queries})
            if target.allow_republish:
                for line in publisher.rewind(resumed):
                    log.warning(line)
        live.recovery = recovery_tracker(pipeline, settings, resumed)
        # 5.
        batches = {q.name: q.batch_id for q in resumed.queries} if resumed else {}
        for publication in publisher.publications:
            kept = publication.staging.recover(keep_through=batches.get(publication.name))
            if kept:
                log.info("sink %s: %d staged batch(es) up to the restored checkpoint kept for publishing",
                         publication.name, kept)
        if resumed is not None:
            publisher.restored(resumed)
        publisher.start()
        # 6.
        live.finished = staying_finished(pipeline, resumed)
        for query in resumed.queries if resumed else ():
            live.tracker.restored(query.name, query.batch_id, query.offsets, finished=query.name in live.finished)
        listener = SparkProgressListener(live.tracker, {}, on_batch=publisher.wake)
        spark.streams.addListener(listener)
        live.queries = start_queries(spark, pipeline, settings, query_root,
                                     {p.name: p.staging.run_dir for p in publisher.publications}, live.finished)
        log.info("running %d queries: %s%s", len(live.queries), ", ".join(q.name for q in live.queries),
                 f" ({', '.join(sorted(live.finished))} stay finished)" if live.finished else "")
        # 7.
        if checkpoints_on:
            notifier = CompletionNotifier()
            notifier.subscribe(publisher.completed)
            writer = CheckpointWriter(store, query_root, settings.worker_id, layout.node_names, layout.fingerprint,
                                      faults=FaultInjector(settings.test_fault, settings.checkpoint_dir),
                                      layouts=layout.queries)
            writer.finished_nodes = pipeline.finished_nodes(live.finished)
            scheduler = CheckpointScheduler(settings.checkpoint_freq_ms, monotonic_ms(),
                                            last_id=max(store.highest_id_ever(), registered.last_checkpoint_id))
            live.runner = CheckpointRunner(
                writer, store, scheduler, CheckpointCommitter(client.commit_checkpoint, notifier),
                retain=settings.checkpoint_retain, clock_ms=monotonic_ms, on_durable=publisher.durable)
            commands.attach(live.runner)
            live.runner.start()
        bounded = {b.sink.name for b in pipeline.branches if b.bounded}
        while not stop.is_set() and not commands.restart.is_set():
            for query in live.queries:
                if query.isActive or query.name in live.finished:
                    continue
                if query.name in bounded and query.exception() is None:
                    live.finished.add(query.name)
                    log.info("query %s finished: its bounded input is read to the end", query.name)
                    if live.runner is not None:
                        # Recorded by the next checkpoint, taken now.
                        writer.finished_nodes = pipeline.finished_nodes(live.finished)
                        live.runner.request(lambda checkpoint_id: None)
                else:
                    failed = query
                    break
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
        if listener is not None:
            spark.streams.removeListener(listener)
        publisher.stop()
        reporter.stop()
    if error is not None:
        log.error("query %s failed: %s", failed.name, summarize_error(str(error)))
        return 1
    if failed is None and commands.restart.is_set() and not stop.is_set():
        return RESTART
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
