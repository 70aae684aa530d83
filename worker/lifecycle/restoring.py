"""Steps 4 and 5 of a run: bring the chosen checkpoint back into a fresh
working directory (state by node name, never below a published mark), and
recover staging to match it."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

from sparkpoint.eventlog import EventLog, committed_end
from sparkpoint.messages import RestoreDecision
from sparkpoint.offsets import kafka_partition
from sparkpoint.paths import UnsafePath, resolve_under_root
from sparkpoint.settings import exit_with_error
from worker.api.graph import Pipeline
from worker.checkpointing.manifest import Manifest, ManifestError
from worker.checkpointing.store import CheckpointStore, CorruptCheckpoint
from worker.checkpointing.transfer import import_checkpoint
from worker.publishing.book import restore_floor
from worker.publishing.publisher import Publisher
from worker.runtime.queries import source_logs
from worker.runtime.recovery import RecoveryTracker
from worker.settings import WorkerSettings
from worker.sources.log_source import owned_partitions
from worker.stateplan.layout import PipelineLayout
from worker.stateplan.restore import RestoreOutcome, RestoreRefused, restore

log = logging.getLogger("sparkpoint.worker")
PROGRAM = "sparkpoint-worker"


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


def import_savepoint(store: CheckpointStore, settings: WorkerSettings, target: RestoreDecision,
                     floor: int | None, last_id: int) -> int:
    """Copy an imported savepoint's checkpoint into the store; returns its new id."""
    if floor is not None:
        exit_with_error(PROGRAM, f"savepoint {target.savepoint_id} comes from another deployment, but sinks of this "
                                 f"one already published output (up to checkpoint {floor}): restore it with "
                                 "--allow-republish, or into a fresh deployment")
    new_id = max(store.highest_id_ever(), last_id) + 1
    try:
        directory = resolve_under_root(settings.savepoint_dir, target.import_dir, max_depth=None)
        import_checkpoint(directory, target.checkpoint_id, store, new_id)
    except (UnsafePath, ManifestError, CorruptCheckpoint, OSError) as error:
        exit_with_error(PROGRAM, f"savepoint {target.savepoint_id}: cannot import {target.import_dir} "
                                 f"(SP_SAVEPOINT_DIR={settings.savepoint_dir}): {error}")
    log.info("savepoint %s: imported checkpoint %d of %s as checkpoint %d", target.savepoint_id,
             target.checkpoint_id, target.import_dir, new_id)
    return new_id


def restore_checkpoint(store: CheckpointStore, settings: WorkerSettings, layout: PipelineLayout,
                       publisher: Publisher, target: RestoreDecision, last_checkpoint_id: int,
                       query_root: Path) -> RestoreOutcome:
    """Step 4, once every sink's mark is known: import an imported
    savepoint's checkpoint; restore the chosen checkpoint, or an older intact
    one, never one older than a published mark (unless the user allowed
    publishing again: then the marks move back), state matched by node name."""
    floor = None if target.allow_republish else restore_floor(publisher.marks())
    chosen = target.checkpoint_id if settings.checkpoint_freq_ms > 0 else None
    if chosen is not None and target.import_dir:
        chosen = import_savepoint(store, settings, target, floor, last_checkpoint_id)
    try:
        outcome = restore(store, chosen, query_root, layout, floor=floor,
                          force_graph_change=settings.force_graph_change)
    except RestoreRefused as refused:
        exit_with_error(PROGRAM, refused)
    resumed = outcome.resumed
    if resumed is not None:
        log.info("restored checkpoint %d (batches %s)", resumed.checkpoint_id,
                 {q.name: q.batch_id for q in resumed.queries})
        if target.allow_republish:
            for line in publisher.rewind(resumed):
                log.warning(line)
    return outcome


def recover_staging(publisher: Publisher, resumed: Manifest | None) -> None:
    """Step 5: keep the output staged up to the restored checkpoint (it counts
    as complete: published at once), forget what was staged after it."""
    batches = {q.name: q.batch_id for q in resumed.queries} if resumed else {}
    for publication in publisher.publications:
        kept = publication.staging.recover(keep_through=batches.get(publication.query))
        if kept:
            log.info("sink %s: %d staged batch(es) up to the restored checkpoint kept for publishing",
                     publication.name, kept)
    if resumed is not None:
        publisher.restored(resumed)


def recovery_tracker(pipeline: Pipeline, settings: WorkerSettings, restored: Manifest | None,
                     started_at: float = 0.0) -> RecoveryTracker:
    """Replay from the restored offsets to the end of the log as it is now;
    ``started_at``: when the restore began (a recovery's duration counts from it)."""
    target: dict[str, int] = {}
    for directory in source_logs(pipeline, settings):
        log_ = EventLog(directory)
        for p in owned_partitions(log_.partitions(), settings.worker_index, settings.worker_count):
            target[str(p)] = committed_end(log_.path(p), 0)
    start: dict[str, int] = {}
    if restored is not None:
        for partition in target:
            start[partition] = min((q.offsets.get(partition, 0) for q in restored.queries), default=0)
    if restored is None:
        return RecoveryTracker(start, start)
    return RecoveryTracker(start, target, started_at=started_at)


def share_mismatch(pipeline: Pipeline, settings: WorkerSettings, resumed: Manifest | None) -> str | None:
    """Why this worker must not resume ``resumed``: a query's offsets cover
    other partitions of its log than the worker owns now (the checkpoint was
    taken with another ``SP_WORKER_COUNT`` or index). Resuming it would read
    partitions another worker already published from their start (output
    twice), or leave partitions no worker reads. None when the shares match."""
    if resumed is None:
        return None
    sources = {query.name: query.source for query in pipeline.queries()}
    for query in resumed.queries:
        source = sources.get(query.name)
        if source is None or source.kind != "source.log" or not query.offsets:
            continue
        log_ = EventLog(settings.log_dir / source.params["log"])
        owned = owned_partitions(log_.partitions(), settings.worker_index, settings.worker_count)
        taken = sorted(int(p) for p in query.offsets if kafka_partition(p) is None)
        if taken != owned:
            return (f"checkpoint {resumed.checkpoint_id} was taken over partitions {taken} of log "
                    f"{source.params['log']}, but {settings.worker_id} (SP_WORKER_INDEX={settings.worker_index}, "
                    f"SP_WORKER_COUNT={settings.worker_count}) owns partitions {owned}: run the worker count the "
                    f"checkpoints were taken with, or start on empty checkpoint volumes")
    return None


def staying_finished(pipeline: Pipeline, resumed: Manifest | None) -> set[str]:
    """Queries restored finished into the unchanged pipeline: they stay
    finished (a changed one restores only with SP_FORCE_GRAPH_CHANGE, and
    then every branch runs again)."""
    if resumed is None or not resumed.finished_nodes or resumed.pipeline_fingerprint != pipeline.fingerprint():
        return set()
    done = set(resumed.finished_nodes)
    return {q.name for q in pipeline.queries() if all(n.name in done for n in q.nodes)}
