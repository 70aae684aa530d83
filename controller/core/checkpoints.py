"""A worker's durable checkpoints as ``GET /workers/{id}/checkpoints`` serves
them (``sparkpoint checkpoints WORKER``): what its volume holds, as it last
reported, and which savepoints pin them."""

from __future__ import annotations

from dataclasses import dataclass

from controller.core.status import CheckpointView, checkpoint_view
from controller.progress.table import WorkerRecord
from controller.savepoints.model import SavepointState
from controller.savepoints.view import SavepointView


@dataclass(frozen=True)
class DurableCheckpoint:
    checkpoint: CheckpointView
    complete: bool              # the controller acknowledged it (or a newer one: completion subsumes)
    pinned_by: list[str]        # savepoints that keep it from retention


def worker_checkpoints(record: WorkerRecord, savepoints: list[SavepointView], now: float) -> list[DurableCheckpoint]:
    """Oldest first."""
    index = str(record.worker_index)
    pins: dict[int, list[str]] = {}
    for savepoint in savepoints:
        if savepoint.state is not SavepointState.FAILED and not savepoint.imported_from \
                and index in savepoint.checkpoints:
            pins.setdefault(savepoint.checkpoints[index], []).append(savepoint.id)
    return [DurableCheckpoint(checkpoint_view(c, now), c.checkpoint_id <= record.last_checkpoint_id,
                              pins.get(c.checkpoint_id, []))
            for c in sorted(record.checkpoints, key=lambda c: c.checkpoint_id)]
