"""The pipeline-wide progress table: one record per worker, updated by reports
and checkpoint commits, and serialisable for the controller's own checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sparkpoint.messages import (
    CheckpointInfo,
    PipelineNode,
    ProgressReport,
    QueryCut,
    QueryProgress,
    Recovery,
    Registration,
    ReportStatus,
    Restarts,
    SinkContract,
    SinkProgress,
    SinkState,
    VolumeFence,
    VolumeUse,
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
    failed_checkpoints: int = 0
    checkpoint_error: str = ""
    waiting_for: str = ""                           # why it waits before running its queries ("": it does not)
    checkpoint_volume: VolumeUse = VolumeUse()
    last_checkpoint: CheckpointInfo | None = None
    checkpoints_completed: int = 0
    restored_checkpoint_id: int = 0
    recovery: Recovery = Recovery()
    registrations: int = 1
    sinks: tuple[SinkProgress, ...] = ()
    nodes: tuple[PipelineNode, ...] = ()            # the pipeline graph it runs
    finished_nodes: tuple[str, ...] = ()
    checkpoints: tuple[CheckpointInfo, ...] = ()    # durable on its volume, as last reported
    recoveries: int = 0                             # recoveries that caught up
    last_recovery_started_at: float = 0.0           # the worker's clock: which recovery was counted last
    restarts: Restarts = Restarts()                 # in its living Spark session, as last reported
    fence: VolumeFence = VolumeFence()              # its checkpoint volume's, as the session's process holds it
    host: str = ""                                  # where the session's process runs ("": not said) ...
    pid: int = 0                                    # ... and its pid there

    @property
    def last_checkpoint_id(self) -> int:
        return self.last_checkpoint.checkpoint_id if self.last_checkpoint else 0


def _checkpoint(item: dict[str, Any]) -> CheckpointInfo:
    return CheckpointInfo(**{k: v for k, v in item.items() if k != "queries"},
                          queries=tuple(QueryCut(**q) for q in item.get("queries", [])))


def _contract(value: object) -> SinkContract:
    """A recorded sink contract; a label this version does not know counts as
    transactional, so the republish check stays on the safe side."""
    try:
        return SinkContract(value)
    except ValueError:
        return SinkContract.TRANSACTIONAL


def ended_uncounted(recovery: Recovery, counted_started_at: float) -> bool:
    """``recovery`` ended and is not the one counted last: its run restored a
    checkpoint (it has a start time, unique per run) and caught up."""
    return bool(recovery.started_at) and not recovery.active and recovery.started_at != counted_started_at


def newest(*checkpoints: CheckpointInfo | None) -> CheckpointInfo | None:
    present = [c for c in checkpoints if c is not None]
    return max(present, key=lambda c: c.checkpoint_id) if present else None


@dataclass
class ProgressTable:
    """Pure bookkeeping; the service supplies time and session ids."""

    workers: dict[str, WorkerRecord] = field(default_factory=dict)

    def register(self, registration: Registration, session_id: str, now: float) -> WorkerRecord:
        previous = self.workers.get(registration.worker_id)
        # Reconcile: the newer of our record and what the worker holds durably.
        reported = newest(*registration.checkpoints)
        record = WorkerRecord(
            worker_id=registration.worker_id,
            worker_index=registration.worker_index,
            worker_count=registration.worker_count,
            pipeline_fingerprint=registration.pipeline_fingerprint,
            session_id=session_id,
            registered_at=now,
            last_heartbeat=now,
            queries=previous.queries if previous else (),
            sinks=previous.sinks if previous else (),
            last_checkpoint=newest(previous.last_checkpoint if previous else None, reported),
            checkpoints_completed=previous.checkpoints_completed if previous else 0,
            registrations=previous.registrations + 1 if previous else 1,
            nodes=registration.nodes,
            checkpoints=registration.checkpoints,
            recoveries=previous.recoveries if previous else 0,
            last_recovery_started_at=previous.last_recovery_started_at if previous else 0.0,
            # Registering again is how a worker restarts in its Spark session: its restarts stay shown.
            restarts=previous.restarts if previous else Restarts(),
            fence=registration.fence,
            host=registration.host,
            pid=registration.pid,
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
            failed_checkpoints=report.failed_checkpoints,
            checkpoint_error=report.checkpoint_error,
            waiting_for=report.waiting_for,
            checkpoint_volume=report.checkpoint_volume,
            restored_checkpoint_id=report.restored_checkpoint_id,
            recovery=report.recovery,
            sinks=report.sinks,
            restarts=report.restarts,
            last_heartbeat=now,
            finished_nodes=report.finished_nodes,
            checkpoints=record.checkpoints if report.checkpoints is None else report.checkpoints,
        )
        if ended_uncounted(report.recovery, record.last_recovery_started_at):
            self.workers[report.worker_id] = replace(self.workers[report.worker_id], recoveries=record.recoveries + 1,
                                                     last_recovery_started_at=report.recovery.started_at)
        return ReportStatus.ACCEPTED

    def commit(self, worker_id: str, session_id: str, checkpoint: CheckpointInfo) -> tuple[ReportStatus, int]:
        """Record a durable checkpoint of the worker's current session (an
        older session's is ``STALE``: whoever registered since speaks for the
        worker); ids only grow."""
        record = self.workers.get(worker_id)
        if record is None:
            return ReportStatus.UNKNOWN_WORKER, 0
        if session_id != record.session_id:
            return ReportStatus.STALE, record.last_checkpoint_id
        if checkpoint.checkpoint_id <= record.last_checkpoint_id:
            return ReportStatus.DUPLICATE, record.last_checkpoint_id
        self.workers[worker_id] = replace(record, last_checkpoint=checkpoint,
                                          checkpoints_completed=record.checkpoints_completed + 1)
        return ReportStatus.ACCEPTED, checkpoint.checkpoint_id

    def without(self, worker_id: str) -> ProgressTable:
        """A copy without this worker (released: its index is free)."""
        return ProgressTable({w: record for w, record in self.workers.items() if w != worker_id})

    def by_index(self, index: int) -> WorkerRecord | None:
        for record in self.workers.values():
            if record.worker_index == index:
                return record
        return None

    # -- the controller's own checkpoint ------------------------------------
    def to_snapshot(self) -> dict[str, Any]:
        return {"workers": [asdict(record) for record in self.workers.values()]}

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> ProgressTable:
        table = cls()
        for item in data.get("workers", []):
            checkpoint = item.get("last_checkpoint")
            table.workers[item["worker_id"]] = WorkerRecord(
                **{k: v for k, v in item.items()
                   if k not in ("state", "queries", "last_checkpoint", "recovery", "sinks", "nodes", "finished_nodes",
                                "checkpoints", "checkpoint_volume", "restarts", "fence")},
                state=WorkerState(item["state"]),
                queries=tuple(QueryProgress(**q) for q in item.get("queries", [])),
                last_checkpoint=None if checkpoint is None else _checkpoint(checkpoint),
                nodes=tuple(PipelineNode(**{**node, "inputs": tuple(node.get("inputs", ()))})
                            for node in item.get("nodes", [])),
                finished_nodes=tuple(item.get("finished_nodes", ())),
                checkpoints=tuple(_checkpoint(c) for c in item.get("checkpoints", [])),
                recovery=Recovery(**item.get("recovery", {})),
                checkpoint_volume=VolumeUse(**item.get("checkpoint_volume", {})),
                restarts=Restarts(**item.get("restarts", {})),
                fence=VolumeFence(**item.get("fence", {})),
                sinks=tuple(SinkProgress(**{**sink, "state": SinkState(sink["state"]),
                                            "contract": _contract(sink.get("contract"))})
                            for sink in item.get("sinks", [])),
            )
        return table
