"""What REST serves about savepoints (``/savepoints``, ``/status``)."""

from __future__ import annotations

from dataclasses import dataclass

from controller.savepoints.exports import ExportJob, ExportState
from controller.savepoints.model import Savepoint, SavepointState


@dataclass(frozen=True)
class ExportView:
    savepoint_id: str
    path: str                   # relative to the savepoint root
    state: ExportState
    workers_written: int
    worker_count: int
    error: str
    started_at: float
    finished_at: float | None


@dataclass(frozen=True)
class SavepointView:
    id: str
    label: str
    state: SavepointState
    created_at: float
    completed_at: float | None
    failure: str
    pipeline_fingerprint: str
    worker_count: int
    checkpoints: dict[str, int]     # worker index -> the checkpoint it pins (so far, while pending)
    imported_from: str
    exports: list[ExportView]       # of this controller process (exports in progress do not survive a restart)


@dataclass(frozen=True)
class RestorePart:
    worker_index: int
    checkpoint_id: int
    import_dir: str             # an imported savepoint's part, relative to the savepoint root
    worker_id: str              # the worker holding the index now; "" if none has registered


@dataclass(frozen=True)
class RestoreView:
    savepoint_id: str
    label: str
    allow_republish: bool
    workers: list[RestorePart]
    republished: list[str]      # sinks that will publish again what they published past the savepoint


@dataclass(frozen=True)
class SavepointSummary:
    count: int
    newest_id: str = ""
    newest_label: str = ""
    newest_state: str = ""


def export_view(job: ExportJob) -> ExportView:
    return ExportView(job.savepoint_id, job.path, job.state, len(job.written), len(job.checkpoints), job.error,
                      job.started_at, job.finished_at)


def savepoint_view(savepoint: Savepoint, exports: list[ExportJob]) -> SavepointView:
    return SavepointView(
        id=savepoint.savepoint_id,
        label=savepoint.label,
        state=savepoint.state,
        created_at=savepoint.created_at,
        completed_at=savepoint.completed_at,
        failure=savepoint.failure,
        pipeline_fingerprint=savepoint.pipeline_fingerprint,
        worker_count=savepoint.worker_count,
        checkpoints={str(index): checkpoint for index, checkpoint in sorted(savepoint.checkpoints.items())},
        imported_from=savepoint.imported_from,
        exports=[export_view(job) for job in exports],
    )


def savepoint_summary(savepoints: list[Savepoint]) -> SavepointSummary:
    """``savepoints`` oldest first."""
    if not savepoints:
        return SavepointSummary(0)
    newest = savepoints[-1]
    return SavepointSummary(len(savepoints), newest.savepoint_id, newest.label, newest.state.value)
