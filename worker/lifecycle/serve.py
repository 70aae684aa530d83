"""One run of the pipeline in the worker's living Spark session.

Steps (``serve``):
3. Register with the controller (retrying while it is unreachable),
   reporting the durable checkpoints on the volume; learn what to restore:
   the newest checkpoint, or the user's savepoint. Start reporting.
4. Wait for the source logs and Kafka topics (the reports say which is
   missing). Read every sink's mark ("published up to", waiting while its target is
   unreachable), then restore (``restoring.restore_checkpoint``) into a
   fresh working directory; refuse a checkpoint taken over another share
   of the log's partitions (``restoring.share_mismatch``).
5. Staging: keep the output staged up to the restored checkpoint, forget
   what was staged after it; start publishing.
6. Start the pipeline's queries (not the finished ones); Spark replays the
   source from the restored offsets.
7. Checkpoint, publish, report progress and carry out the controller's
   commands in the background; supervise the queries until one fails, the
   controller asks for a restart (a savepoint restore) or refuses this
   worker (released, its index taken), or SIGTERM arrives.
8. A failed query ends the run, not the worker: the restart policy
   (``restarts``) decides whether the next run restores the last complete
   checkpoint into this Spark session (after a backoff), or the worker
   stops (the same failure again and again, or Spark's JVM gone). The last
   report says which: state ``restarting``, or ``failed``.

Steps 1 and 2 (settings, the fence, the Spark session) are ``worker.main``'s.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint.backoff import Backoff
from sparkpoint.eventlog import EventLog
from sparkpoint.faults import FaultInjector
from sparkpoint.messages import VolumeFence
from sparkpoint.settings import exit_with_error
from worker.api.graph import Pipeline
from worker.checkpointing.manifest import Manifest
from worker.checkpointing.policy import CheckpointScheduler, CompletionNotifier
from worker.checkpointing.runner import CheckpointCommitter, CheckpointRunner, monotonic_ms
from worker.checkpointing.store import CheckpointStore
from worker.checkpointing.writer import CheckpointWriter
from worker.control.actions import CommandExecutor
from worker.control.client import ControllerClient, RegistrationRefused
from worker.control.commands import CommandBook
from worker.control.reporter import Reporter
from worker.lifecycle.live import LiveRun
from worker.lifecycle.restarts import RestartDecision, RestartPolicy
from worker.lifecycle.restoring import (
    fresh_run_dir,
    recover_staging,
    recovery_tracker,
    restore_checkpoint,
    share_mismatch,
    staying_finished,
)
from worker.publishing.publisher import Publisher
from worker.publishing.sinks import publications
from worker.runtime.progress import ProgressTracker, stateful_operators, summarize_error
from worker.runtime.queries import checkpoint_phase_ms, kafka_data_losses, kafka_queries, kafka_topics, source_logs
from worker.settings import WorkerSettings
from worker.sources.kafka.broker import Broker, BrokerUnavailable, client_config
from worker.sources.kafka.groups import GroupOffsets
from worker.stateplan.layout import PipelineLayout

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger("sparkpoint.worker")
PROGRAM = "sparkpoint-worker"


class RunEnd(enum.Enum):
    """How a run ended, and so what the worker does next."""

    STOPPED = "stopped"     # SIGTERM (or stopped before registering): exit 0
    FAILED = "failed"       # refused by the controller, or a failure the worker does not restart after: exit 1
    RESTART = "restart"     # register again and restore, same session: a savepoint restore, or a query failed
    QUERY_FAILED = "query_failed"   # ``supervise`` only: a query failed (``LiveRun.failure``)


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended; ``delay_s``: a restart after a failed query backs
    off this long first; ``reason``: why the worker stops (FAILED)."""

    end: RunEnd
    delay_s: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class Session:
    """What outlives a run: the worker's settings, pipeline and its layout,
    the fenced checkpoint store and the fence this process holds of it, the
    Spark session, the controller client and the restart policy (what
    failed before counts)."""

    settings: WorkerSettings
    pipeline: Pipeline
    layout: PipelineLayout
    store: CheckpointStore
    spark: SparkSession
    client: ControllerClient
    restarts: RestartPolicy
    fence: VolumeFence = VolumeFence()


def wait_for_sources(pipeline: Pipeline, settings: WorkerSettings, stop: threading.Event,
                     waiting: Callable[[str], None] = lambda why: None) -> bool:
    """Wait until every source log exists (the producer creates them) and
    Kafka has every source topic (brokers unreachable: waits too);
    ``waiting`` hears why while it waits, and "" once it does not."""
    topics = kafka_topics(pipeline)
    broker = Broker(client_config(*settings.kafka)) if topics else None
    backoff = Backoff(initial_s=0.2, maximum_s=2.0)
    announced = ""
    while not stop.is_set():
        missing = [f"event log {p}" for p in source_logs(pipeline, settings) if not EventLog(p).exists()]
        if broker is not None:
            try:
                broker.partitions(topics)
            except BrokerUnavailable as error:
                missing.append(str(error))
        if not missing:
            waiting("")
            return True
        if ", ".join(missing) != announced:
            announced = ", ".join(missing)
            log.info("waiting for %s", announced)
            waiting(announced)
        stop.wait(backoff.next_delay())
    return False


def kafka_groups(pipeline: Pipeline, settings: WorkerSettings, query_root: Path) -> GroupOffsets | None:
    """The consumer-group offsets of the queries that read Kafka (None: none does)."""
    queries = {q.name: query_root / q.name for q in kafka_queries(pipeline)}
    return GroupOffsets(*settings.kafka, queries) if queries else None


def start_checkpoints(session: Session, live: LiveRun, publisher: Publisher, commands: CommandExecutor,
                      last_checkpoint_id: int, query_root, groups: GroupOffsets | None) -> CheckpointWriter:
    """Step 7's checkpoint threads: each durable checkpoint goes to the
    publisher (its cuts) and ``groups``, then to the controller; each
    completion back to them (the restored checkpoint counts as complete).
    Returns the writer (finished nodes are set on it)."""
    settings, layout = session.settings, session.layout
    notifier = CompletionNotifier(live.restored.checkpoint_id if live.restored else 0)
    notifier.subscribe(publisher.completed)
    on_durable = publisher.durable
    if groups is not None:
        notifier.subscribe(groups.completed)

        def on_durable(manifest: Manifest) -> None:
            publisher.durable(manifest)
            groups.durable(manifest.checkpoint_id, {query.name: query.batch_id for query in manifest.queries})
    writer = CheckpointWriter(session.store, query_root, settings.worker_id, layout.node_names, layout.fingerprint,
                              faults=FaultInjector(settings.test_fault, settings.checkpoint_dir),
                              layouts=layout.queries)
    writer.finished_nodes = session.pipeline.finished_nodes(live.finished)
    scheduler = CheckpointScheduler(settings.checkpoint_freq_ms, monotonic_ms(),
                                    last_id=max(session.store.highest_id_ever(), last_checkpoint_id),
                                    wall_ms=time.time() * 1000, phase_ms=checkpoint_phase_ms(settings))
    live.runner = CheckpointRunner(
        writer, session.store, scheduler, CheckpointCommitter(session.client.commit_checkpoint, notifier),
        retain=settings.checkpoint_retain, clock_ms=monotonic_ms, on_durable=on_durable,
        newest_complete=lambda: notifier.last_completed)
    commands.attach(live.runner)
    live.runner.start()
    return writer


def supervise(live: LiveRun, pipeline: Pipeline, restart: threading.Event, stop: threading.Event,
              refused: threading.Event, on_finished: Callable[[], None], poll_s: float = 0.5) -> RunEnd:
    """Watch the queries until one fails (``QUERY_FAILED``, its error in
    ``live.failure``), a restart is asked for, the
    controller refuses this worker (``refused``: it was released, and
    another worker id holds its index), or ``stop``. A bounded branch whose
    query ends without error is finished: its nodes are recorded
    (``on_finished``), and the others go on. A query's end
    (``live.terminated``) wakes it at once; the rest is seen within ``poll_s``."""
    bounded = {q.name for q in pipeline.queries() if q.bounded}
    while not stop.is_set() and not restart.is_set():
        if refused.is_set():
            log.error("stopping: the controller no longer accepts this worker")
            return RunEnd.FAILED
        for query in live.queries:
            if query.isActive or query.name in live.finished:
                continue
            error = query.exception()
            if query.name in bounded and error is None:
                live.finished.add(query.name)
                log.info("query %s finished: its bounded input is read to the end", query.name)
                on_finished()
                continue
            live.tracker.on_terminated(query.name, str(error))
            log.error("query %s failed: %s", query.name, summarize_error(str(error)))
            live.failure = str(error)
            return RunEnd.QUERY_FAILED
        live.terminated.wait(poll_s)
        live.terminated.clear()
    return RunEnd.STOPPED if stop.is_set() else RunEnd.RESTART


def stop_queries(queries: list[StreamingQuery]) -> None:
    """Stop them together, not one after the other: each stop waits for its
    query's batch in flight. Every stop is tried; then the first error, if
    any, is raised."""
    if queries:
        with ThreadPoolExecutor(max_workers=len(queries), thread_name_prefix="stop-query") as pool:
            stops = [pool.submit(query.stop) for query in queries]
        for stop in stops:
            stop.result()


def after_failure(session: Session, live: LiveRun) -> RunOutcome:
    """Step 8: restart in this session, or stop the worker; the run's last
    report tells the controller which."""
    from worker.runtime.session import session_alive

    if session_alive(session.spark):
        decision = session.restarts.failed(live.failure)
    else:
        decision = RestartDecision(False, reason="Spark's JVM is gone (the Spark session cannot run queries any "
                                                 f"more): {summarize_error(live.failure)}")
    if not decision.restart:
        log.error("stopping: %s", decision.reason)
        return RunOutcome(RunEnd.FAILED, reason=decision.reason)
    live.restarting = True
    count = session.restarts.view().count
    log.warning("restart %d: restoring the last complete checkpoint into this Spark session%s", count,
                f" in {decision.delay_s:.1f} s" if decision.delay_s else "")
    return RunOutcome(RunEnd.RESTART, delay_s=decision.delay_s)


def serve(session: Session, stop: threading.Event) -> RunOutcome:
    """Steps 3-8 (see the module's docstring)."""
    from worker.runtime.progress import SparkProgressListener
    from worker.runtime.queries import start_queries

    settings, pipeline, spark, client = session.settings, session.pipeline, session.spark, session.client
    # 3.
    try:
        registered = client.register(stop)
    except RegistrationRefused as error:
        exit_with_error(PROGRAM, f"the controller refused this worker: {error}")
    if registered is None:
        return RunOutcome(RunEnd.STOPPED)
    log.info("registered as %s (index %d of %d); restore: %s", settings.worker_id, registered.worker_index,
             registered.worker_count, registered.restore.describe())
    run_dir = fresh_run_dir(settings)
    query_root = run_dir / "queries"
    records = settings.checkpoint_dir / "sources"
    publisher = Publisher(publications(pipeline, settings, run_dir.name, session.fence), guard=session.store.guard)
    live = LiveRun(expected_queries=len(pipeline.queries()), pipeline=pipeline, restarts=session.restarts.view,
                   data_losses=kafka_data_losses(pipeline, records),
                   tracker=ProgressTracker(stateful_operators(pipeline)))
    commands = CommandExecutor(CommandBook(), session.store, settings)
    reporter = Reporter(client, lambda: live.report(publisher, commands.book, settings),
                        settings.report_interval_ms / 1000, on_reply=commands.on_reply,
                        on_registered=commands.on_registered)
    reporter.start()
    listener = None
    groups: GroupOffsets | None = None
    try:
        # 4.
        def waiting(why: str) -> None:
            live.waiting_for = why
            reporter.wake()

        if not wait_for_sources(pipeline, settings, stop, waiting):
            return RunOutcome(RunEnd.STOPPED)
        if not publisher.resume_all(stop):
            return RunOutcome(RunEnd.STOPPED)
        restore_started = time.time()
        outcome = restore_checkpoint(session.store, settings, session.layout, publisher, registered.restore,
                                     registered.last_checkpoint_id, query_root)
        live.restored = outcome.manifest
        resumed = outcome.resumed
        if (mismatch := share_mismatch(pipeline, settings, resumed)) is not None:
            exit_with_error(PROGRAM, mismatch)
        live.recovery = recovery_tracker(pipeline, settings, resumed, restore_started)
        # 5.
        recover_staging(publisher, resumed)
        publisher.start()
        # 6.
        live.finished = staying_finished(pipeline, resumed)
        for query in resumed.queries if resumed else ():
            live.tracker.restored(query.name, query.batch_id, query.offsets, finished=query.name in live.finished)
        listener = SparkProgressListener(live.tracker, on_batch=publisher.wake, on_terminated=live.terminated.set,
                                         on_first_rows=reporter.wake)
        listener.register(spark)
        live.queries = start_queries(spark, pipeline, settings, query_root,
                                     {p.name: p.staging.run_dir for p in publisher.publications}, live.finished,
                                     records=records)
        session.restarts.run_started()
        log.info("running %d queries: %s%s", len(live.queries), ", ".join(q.name for q in live.queries),
                 f" ({', '.join(sorted(live.finished))} stay finished)" if live.finished else "")
        # 7.
        writer = None
        if settings.checkpoint_freq_ms > 0:
            groups = kafka_groups(pipeline, settings, query_root)
            writer = start_checkpoints(session, live, publisher, commands, registered.last_checkpoint_id,
                                       query_root, groups)

        def finished() -> None:
            if live.runner is not None:
                # Recorded by the next checkpoint, taken now.
                writer.finished_nodes = pipeline.finished_nodes(live.finished)
                live.runner.request(lambda checkpoint_id: None)

        end = supervise(live, pipeline, commands.restart, stop, reporter.refused, finished)
        if live.runner is not None:
            live.runner.stop()
        stop_queries(live.queries)
        # 8.
        return after_failure(session, live) if end is RunEnd.QUERY_FAILED else RunOutcome(end)
    finally:
        if listener is not None:
            listener.unregister(spark)
        publisher.stop()
        reporter.stop()
        if groups is not None:
            groups.close()
