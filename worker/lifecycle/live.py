"""What the reporter sees of a run as it starts, and the report built from it."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from sparkpoint.messages import ProgressReport, QueryProgress, Recovery, Restarts, VolumeUse, WorkerState
from worker.api.graph import Pipeline
from worker.checkpointing.manifest import Manifest
from worker.checkpointing.runner import CheckpointRunner
from worker.control.commands import CommandBook
from worker.healthcheck import write_health
from worker.publishing.publisher import Publisher
from worker.runtime.progress import ProgressTracker
from worker.runtime.recovery import RecoveryTracker
from worker.settings import WorkerSettings
from worker.sources.kafka import losses as kafka_losses

if TYPE_CHECKING:
    from pyspark.sql.streaming import StreamingQuery


def worker_state(queries: list[QueryProgress], expected: int, recovering: bool = False) -> WorkerState:
    """The worker's state as the controller sees it, from its queries."""
    if any(q.error for q in queries):
        return WorkerState.FAILED
    if len(queries) == expected and queries and not any(q.active for q in queries):
        return WorkerState.FINISHED
    if recovering and queries:
        return WorkerState.RECOVERING
    if len(queries) == expected and all(q.batch_id >= 0 for q in queries):
        return WorkerState.RUNNING
    return WorkerState.STARTING


def volume_use(directory: Path) -> VolumeUse:
    """The filesystem of ``directory``: bytes used, and free for this worker."""
    try:
        usage = shutil.disk_usage(directory)
    except OSError:
        return VolumeUse()
    return VolumeUse(usage.used, usage.free)


@dataclass
class LiveRun:
    """What the reporter sees of this run, filled in as it starts."""

    expected_queries: int
    pipeline: Pipeline | None = None
    tracker: ProgressTracker = field(default_factory=ProgressTracker)
    queries: list[StreamingQuery] = field(default_factory=list)
    finished: set[str] = field(default_factory=set)     # queries whose bounded input ended
    restored: Manifest | None = None
    recovery: RecoveryTracker | None = None
    runner: CheckpointRunner | None = None
    restarts: Callable[[], Restarts] = Restarts     # the worker's restarts in its Spark session so far
    failure: str = ""           # the failed query's error (Spark's text), when one failed
    restarting: bool = False    # a query failed: this run ends, the next restores in the same session
    waiting_for: str = ""       # why the run waits before starting its queries (a source missing)
    data_losses: dict[str, Path] = field(default_factory=dict)  # each Kafka query's file of losses gone past
    # Set when one of the run's queries ends (Spark's listener): wakes the supervisor at once.
    terminated: threading.Event = field(default_factory=threading.Event)

    def report(self, publisher: Publisher, commands: CommandBook, settings: WorkerSettings) -> ProgressReport:
        """The next progress report (the reporter numbers it); writes the
        container's health file on the way."""
        statuses = [replace(q, data_losses=kafka_losses.count(self.data_losses[q.name]))
                    if q.name in self.data_losses else q for q in self.tracker.snapshot()]
        recovery = self.recovery.progress(statuses) if self.recovery else Recovery()
        state = WorkerState.RESTARTING if self.restarting else \
            worker_state(statuses, self.expected_queries, recovery.active)
        write_health(settings.work_dir, registered=True,
                     queries_alive=self.restarting or all(q.isActive or q.name in self.finished for q in self.queries),
                     state=state.value)
        answers = commands.answers()
        stats = self.runner.stats() if self.runner else None
        return ProgressReport(
            state=state,
            queries=tuple(statuses),
            dropped_checkpoints=stats.dropped if stats else 0,
            failed_checkpoints=stats.failed if stats else 0,
            checkpoint_error=stats.error if stats else "",
            checkpoint_volume=volume_use(settings.checkpoint_dir),
            restored_checkpoint_id=self.restored.checkpoint_id if self.restored else 0,
            recovery=recovery,
            restarts=self.restarts(),
            sinks=tuple(publisher.statuses()),
            savepoint_answers=answers.savepoints,
            exports=answers.exports,
            finished_nodes=self.pipeline.finished_nodes(self.finished) if self.pipeline else (),
            checkpoints=stats.durable if stats else None,
            waiting_for=self.waiting_for,
        )
