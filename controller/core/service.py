"""ControllerService: the one place the controller's behaviour lives.

The gRPC servicer and the REST app are thin adapters over it. Time and
session ids are injected, so tests drive it without sleeps.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller.core import validation
from controller.core.checkpoints import DurableCheckpoint, worker_checkpoints
from controller.core.errors import Conflict, InvalidRequest, NotFound, SessionActive, Superseded, Unavailable
from controller.core.graph import PipelineView, pipeline_view
from controller.core.history import HistoryView
from controller.core.readings import Readings, WorkerDurations
from controller.core.standbys import Standbys
from controller.core.status import (
    PipelineStatus,
    WorkerStatus,
    build_status,
    worker_lag_bytes,
    worker_rows_per_second,
    worker_status,
)
from controller.progress.observations import HISTORY_WINDOW_S, Observations
from controller.progress.table import ProgressTable, WorkerRecord
from controller.savepoints.service import SavepointService
from controller.savepoints.view import ExportView, RestoreView, SavepointView
from sparkpoint.messages import (
    CheckpointInfo,
    CommitOutcome,
    ProgressReport,
    RegisterResult,
    Registration,
    ReportOutcome,
    ReportStatus,
    RestoreDecision,
    StandbyReport,
    WorkerState,
)

log = logging.getLogger("sparkpoint.controller")


class InvalidSnapshot(ValueError):
    """The controller's checkpoint does not describe a progress table."""


def decide_restore(registration: Registration, record: WorkerRecord) -> RestoreDecision:
    """The newest checkpoint the worker holds durably, or nothing.

    The controller's own record may name a newer one (the worker's volume lost
    it): that cannot be restored, and is reported, not silently hidden.
    """
    held = max((c.checkpoint_id for c in registration.checkpoints), default=None)
    if record.last_checkpoint_id and (held is None or record.last_checkpoint_id > held):
        log.warning("%s: checkpoint %d is complete but not on its volume any more; restoring %s",
                    registration.worker_id, record.last_checkpoint_id, held or "nothing")
    return RestoreDecision(checkpoint_id=held)


# A worker that reported this recently is alive: releasing its index would
# only make it register again (or, with another worker id on the index,
# refuse it).
RELEASE_SILENCE_S = 30.0
# A worker id's session is alive while it reported (or registered) within
# this many seconds: another registration under that id is refused meanwhile
# unless it names that session (the same process registering again).
TAKEOVER_SILENCE_S = 10.0


@dataclass(frozen=True)
class ServiceConfig:
    worker_count: int


class ControllerService:
    def __init__(self, config: ServiceConfig, *, clock: Callable[[], float], savepoints: SavepointService,
                 new_session_id: Callable[[], str] = lambda: uuid.uuid4().hex,
                 save_table: Callable[[dict[str, Any]], None] = lambda snapshot: None) -> None:
        """``save_table``: writes the progress table's snapshot (the
        controller's checkpoint) durably, raising OSError if it cannot; an
        operator's change to the table is written with it before it is made."""
        self._config = config
        self._save_table = save_table
        self._clock = clock
        self._new_session_id = new_session_id
        # One lock for the table and the savepoints: a savepoint reads the
        # workers' committed checkpoints, and a commit may complete one.
        self._lock = threading.Lock()
        self._table = ProgressTable()
        self._savepoints = savepoints
        self._observations = Observations()     # in memory: durations and recent history
        self._standbys = Standbys()             # in memory: they say they wait every report interval

    def register(self, registration: Registration) -> RegisterResult:
        """Admit a worker (first start, restart, or after a controller restart).

        Steps:
        1. Validate the request (``validation``) and its identity against the
           configured worker count.
        2. Refuse a second worker id claiming an index another worker holds,
           a second process taking the session of a live one (``SessionActive``:
           it may retry once that one has been silent ``TAKEOVER_SILENCE_S``,
           unless it holds a later generation of the same checkpoint volume's
           fence: then that one's process is gone or fenced off), a process
           holding an earlier generation than the record (``Superseded``:
           taken over, it must stop),
           and checkpoints too far past the newest known of this worker.
        3. Record it under a new session id: reports and commits of older
           sessions become stale. Its process, if a standby's, stands by no more.
        4. Decide what it restores: its part of a savepoint the user chose to
           restore, else its newest durable checkpoint (the worker verifies it
           and falls back to an older intact one).
        """
        # 1.
        validation.registration(registration)
        if registration.worker_count != self._config.worker_count:
            raise Conflict(
                f"{registration.worker_id} was started with SP_WORKER_COUNT={registration.worker_count}, "
                f"but the controller expects {self._config.worker_count} workers")
        if not 0 <= registration.worker_index < registration.worker_count:
            raise InvalidRequest(
                f"worker_index {registration.worker_index} is outside 0..{registration.worker_count - 1}")
        with self._lock:
            # 2.
            holder = self._table.by_index(registration.worker_index)
            if holder is not None and holder.worker_id != registration.worker_id:
                raise Conflict(
                    f"worker index {registration.worker_index} is already held by {holder.worker_id}; "
                    f"{registration.worker_id} needs a different SP_WORKER_INDEX")
            known = self._table.workers.get(registration.worker_id)
            if known is not None and known.fence.supersedes(registration.fence):
                raise Superseded(
                    f"{registration.worker_id}: a later holder of its checkpoint volume's lock has registered "
                    f"(generation {known.fence.generation}, this process holds {registration.fence.generation}): "
                    f"index {registration.worker_index} was taken over")
            if (known is not None and known.session_id != registration.session_id
                    and not registration.fence.supersedes(known.fence)):
                silent_s = self._clock() - known.last_heartbeat
                if silent_s < TAKEOVER_SILENCE_S:
                    raise SessionActive(
                        f"{registration.worker_id} has a live session (it reported {max(silent_s, 0):.0f} s ago): "
                        f"another process with this id? Retry once it has been silent for "
                        f"{TAKEOVER_SILENCE_S:.0f} s")
            if known is not None:
                validation.all_believable(registration.checkpoints, known.last_checkpoint_id, "checkpoints")
            # 3.
            record = self._table.register(registration, self._new_session_id(), self._clock())
            self._observations.worker(record.worker_id, floor=record.last_checkpoint_id)
            self._standbys.registered(registration.host, registration.pid)
            # 4.
            restore = (self._savepoints.restore_plan(record.worker_index, record.session_id)
                       or decide_restore(registration, record))
        return RegisterResult(
            session_id=record.session_id,
            worker_index=record.worker_index,
            worker_count=record.worker_count,
            restore=restore,
            last_checkpoint_id=record.last_checkpoint_id,
        )

    def report_progress(self, report: ProgressReport) -> ReportOutcome:
        """Record progress; an accepted report's acknowledgement carries the
        worker's savepoint commands and pinned checkpoints. Raises
        ``InvalidRequest`` (also for durable checkpoints too far past the
        newest known); an older session is ``STALE``."""
        report = validation.report(report)
        with self._lock:
            before = self._table.workers.get(report.worker_id)
            if before is not None and before.session_id == report.session_id:
                validation.all_believable(report.checkpoints or (), before.last_checkpoint_id, "checkpoints")
            now = self._clock()
            status = self._table.report(report, now)
            if status is not ReportStatus.ACCEPTED:
                return ReportOutcome(status)
            record = self._table.workers[report.worker_id]
            self._observe(before, record, report, now)
            commands, pinned = self._savepoints.report(record, report)
        return ReportOutcome(status, commands, pinned)

    def _observe(self, before: WorkerRecord, record: WorkerRecord, report: ProgressReport, now: float) -> None:
        """An accepted report's durations and history."""
        observed = self._observations.worker(record.worker_id, floor=before.last_checkpoint_id)
        if record.recoveries > before.recoveries:
            observed.recovered(report.recovery.duration_ms / 1000)
        observed.checkpoints_seen(report.checkpoints or (), now)
        observed.progressed(now, worker_rows_per_second(report.queries), worker_lag_bytes(report.queries))

    def commit_checkpoint(self, worker_id: str, checkpoint: CheckpointInfo, session_id: str) -> CommitOutcome:
        """A worker's checkpoint is durable; acknowledging it completes it
        (and may complete a savepoint). ``session_id``: the worker's current
        registration (an older one's commit is ``STALE``), which a restore
        waits for. Raises ``InvalidRequest`` for an id not believed: beyond
        ``CHECKPOINT_ID_MAX``, or too far past the newest known."""
        validation.commit(worker_id, session_id, checkpoint)
        with self._lock:
            before = self._table.workers.get(worker_id)
            if before is not None and before.session_id == session_id:
                validation.believable(checkpoint.checkpoint_id, before.last_checkpoint_id,
                                      "checkpoint.checkpoint_id")
            status, completed = self._table.commit(worker_id, session_id, checkpoint)
            if status is ReportStatus.ACCEPTED:
                self._observations.worker(worker_id, floor=before.last_checkpoint_id).checkpoints_seen(
                    [checkpoint], self._clock())
                self._savepoints.committed(self._table.workers[worker_id], checkpoint.checkpoint_id, session_id)
        return CommitOutcome(status, completed)

    def stand_by(self, report: StandbyReport) -> None:
        """A standby says it waits. Raises ``InvalidRequest``."""
        validation.standby(report)
        with self._lock:
            self._standbys.heard(report, self._clock())

    def release_worker(self, worker_id: str) -> WorkerRecord:
        """Forget a worker that is gone for good, so another worker id may
        take its index (it starts from its own checkpoints, and its sinks'
        marks are its own). Raises ``InvalidRequest``, ``NotFound``;
        ``Conflict`` if it reported within ``RELEASE_SILENCE_S``;
        ``Unavailable`` if the controller's checkpoint cannot be written
        (nothing is released then).

        Steps:
        1. Find it; refuse while it is alive.
        2. Write the table without it; only then forget it (and what was
           observed of it).
        """
        with self._lock:
            # 1.
            record = self._registered(worker_id)
            silent_s = self._clock() - record.last_heartbeat
            if silent_s < RELEASE_SILENCE_S:
                raise Conflict(f"{worker_id} reported {silent_s:.0f} s ago: it is alive. Stop it first; a worker is "
                               f"released once it has been silent for {RELEASE_SILENCE_S:.0f} s")
            # 2.
            remaining = self._table.without(worker_id)
            try:
                self._save_table(remaining.to_snapshot())
            except OSError as error:
                raise Unavailable(f"cannot write the controller's checkpoint: {error.strerror or error}; "
                                  f"{worker_id} is not released") from None
            self._table = remaining
            self._observations.forget(worker_id)
        log.info("released %s: worker index %d is free", worker_id, record.worker_index)
        return record

    # -- savepoints (REST) ------------------------------------------------------
    def trigger_savepoint(self, label: str) -> SavepointView:
        with self._lock:
            return self._savepoints.trigger(label, list(self._table.workers.values()))

    def savepoints(self) -> list[SavepointView]:
        with self._lock:
            return self._savepoints.list()

    def savepoint(self, savepoint_id: str) -> SavepointView:
        with self._lock:
            return self._savepoints.get(savepoint_id)

    def dispose_savepoint(self, savepoint_id: str) -> SavepointView:
        with self._lock:
            return self._savepoints.dispose(savepoint_id)

    def restore_savepoint(self, savepoint_id: str, allow_republish: bool) -> RestoreView:
        with self._lock:
            return self._savepoints.restore(savepoint_id, allow_republish, list(self._table.workers.values()))

    def export_savepoint(self, savepoint_id: str, path: str) -> ExportView:
        with self._lock:
            return self._savepoints.export(savepoint_id, path)

    def import_savepoint(self, path: str, label: str | None) -> SavepointView:
        # The export's files are read before the lock every call takes: a slow
        # or hostile file (a FIFO, a huge one: refused) stalls no other call.
        export = self._savepoints.read_export(path)
        with self._lock:
            return self._savepoints.import_(export, label)

    def snapshot(self) -> dict[str, Any]:
        """The state the controller checkpoints (JSON-able)."""
        with self._lock:
            return self._table.to_snapshot()

    def load_snapshot(self, data: dict[str, Any]) -> None:
        """Resume from the controller's own checkpoint, before serving."""
        try:
            table = ProgressTable.from_snapshot(data)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise InvalidSnapshot(f"{type(error).__name__}: {error}") from None
        with self._lock:
            self._table = table

    def problems(self) -> list[str]:
        """What keeps the controller from writing its savepoint records (for ``/health``)."""
        with self._lock:
            return self._savepoints.problems()

    def worker(self, worker_id: str) -> WorkerRecord | None:
        with self._lock:
            return self._table.workers.get(worker_id)

    def _registered(self, worker_id: str) -> WorkerRecord:
        """The worker's record (under the lock). Raises ``InvalidRequest``
        for what cannot be a worker id, ``NotFound``."""
        validation.name(worker_id, "worker id")
        record = self._table.workers.get(worker_id)
        if record is None:
            raise NotFound(f"no worker {worker_id!r} has registered")
        return record

    def worker_status(self, worker_id: str) -> WorkerStatus:
        """Raises ``InvalidRequest`` for what cannot be a worker id, ``NotFound``."""
        with self._lock:
            record = self._registered(worker_id)
        return worker_status(record, self._clock())

    def status(self) -> PipelineStatus:
        with self._lock:
            return self._status(list(self._table.workers.values()))

    def _status(self, records: list[WorkerRecord]) -> PipelineStatus:
        """The status view of ``records`` now (under the lock)."""
        now = self._clock()
        return build_status(records, self._config.worker_count, now, self._savepoints.summary(),
                            self._standbys.listing(now))

    # -- the operator's views (REST: /pipeline, /history, /metrics, checkpoints) --
    def pipeline(self) -> PipelineView:
        with self._lock:
            return pipeline_view(list(self._table.workers.values()))

    def checkpoints(self, worker_id: str) -> list[DurableCheckpoint]:
        """The worker's durable checkpoints, oldest first. Raises
        ``InvalidRequest`` for what cannot be a worker id, ``NotFound``."""
        with self._lock:
            return worker_checkpoints(self._registered(worker_id), self._savepoints.list(), self._clock())

    def history(self, since: float = 0.0) -> HistoryView:
        """Each worker's samples taken after ``since`` (the controller's clock), within the window."""
        with self._lock:
            now = self._clock()
            workers = {worker_id: observed.history(max(since, now - HISTORY_WINDOW_S))
                       for worker_id in self._table.workers
                       if (observed := self._observations.get(worker_id)) is not None}
        return HistoryView(now, HISTORY_WINDOW_S, workers)

    def readings(self) -> Readings:
        """What a metrics scrape reads, taken at once."""
        with self._lock:
            records = list(self._table.workers.values())
            status = self._status(records)
            durations = {record.worker_id: WorkerDurations(observed.checkpoint_durations.view(),
                                                           observed.recovery_durations.view())
                         for record in records
                         if (observed := self._observations.get(record.worker_id)) is not None}
            return Readings(status, pipeline_view(records), self._savepoints.list(), durations)


__all__ = ["ControllerService", "ServiceConfig", "WorkerState"]
