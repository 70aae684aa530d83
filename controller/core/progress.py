"""The pipeline-wide progress table: one record per worker, updated by reports."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from controller.core.model import (
    CheckpointInfo,
    ProgressReport,
    QueryProgress,
    Registration,
    ReportStatus,
    WorkerState,
)


@dataclass(frozen=True)
class WorkerRecord:
    worker_id: str
    worker_index: int
    worker_count: int
    pipeline_fingerprint: str
    session_id: str
    registered_at: float
    last_heartbeat: float
    state: WorkerState = WorkerState.STARTING
    last_seq: int = -1
    queries: tuple[QueryProgress, ...] = ()
    dropped_checkpoints: int = 0
    last_checkpoint: CheckpointInfo | None = None
    registrations: int = 1


@dataclass
class ProgressTable:
    """Pure bookkeeping; the service supplies time and session ids."""

    workers: dict[str, WorkerRecord] = field(default_factory=dict)

    def register(self, registration: Registration, session_id: str, now: float) -> WorkerRecord:
        previous = self.workers.get(registration.worker_id)
        record = WorkerRecord(
            worker_id=registration.worker_id,
            worker_index=registration.worker_index,
            worker_count=registration.worker_count,
            pipeline_fingerprint=registration.pipeline_fingerprint,
            session_id=session_id,
            registered_at=now,
            last_heartbeat=now,
            queries=previous.queries if previous else (),
            last_checkpoint=previous.last_checkpoint if previous else None,
            registrations=previous.registrations + 1 if previous else 1,
        )
        self.workers[registration.worker_id] = record
        return record

    def report(self, report: ProgressReport, now: float) -> ReportStatus:
        record = self.workers.get(report.worker_id)
        if record is None:
            return ReportStatus.UNKNOWN_WORKER
        if report.session_id != record.session_id:
            return ReportStatus.STALE
        if report.seq <= record.last_seq:
            return ReportStatus.DUPLICATE
        self.workers[report.worker_id] = replace(
            record,
            state=report.state,
            last_seq=report.seq,
            queries=report.queries,
            dropped_checkpoints=report.dropped_checkpoints,
            last_heartbeat=now,
        )
        return ReportStatus.ACCEPTED

    def by_index(self, index: int) -> WorkerRecord | None:
        for record in self.workers.values():
            if record.worker_index == index:
                return record
        return None
