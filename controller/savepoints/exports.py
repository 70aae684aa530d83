"""Exports in progress: pure bookkeeping with an injected clock.

Worker volumes are per worker, so each worker writes its own part of an
export (``Export`` commands, repeated until it answers); the controller
commits the export by writing its record once every part is durable
(``ready``). Kept in memory only: an export a controller restart interrupts
is forgotten (the directory lacks its record, so nothing imports it).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from controller.savepoints.model import Savepoint, SavepointConflict
from sparkpoint.messages import Export, ExportAnswer


class ExportState(str, enum.Enum):
    PENDING = "pending"     # workers are writing their parts
    COMPLETE = "complete"   # every part and the record are written
    FAILED = "failed"       # ``error`` says why


def worker_dir(export_path: str, worker_index: int) -> str:
    """A worker's part of the export at ``export_path`` (both relative to the savepoint root)."""
    return f"{export_path}/worker-{worker_index}"


@dataclass(frozen=True)
class ExportJob:
    savepoint_id: str
    path: str                           # relative to the savepoint root
    checkpoints: Mapping[int, int]      # worker index -> its checkpoint in the savepoint
    started_at: float
    written: frozenset[int] = frozenset()   # workers whose part is durable
    state: ExportState = ExportState.PENDING
    error: str = ""
    finished_at: float | None = None

    @property
    def ready(self) -> bool:
        """Every part is written: the record may be committed."""
        return self.state is ExportState.PENDING and self.written == set(self.checkpoints)


class ExportTracker:
    def __init__(self, clock: Callable[[], float], *, timeout_s: float) -> None:
        self._clock = clock
        self._timeout_s = timeout_s
        self._jobs: dict[str, ExportJob] = {}     # by path: one export per directory

    def start(self, savepoint: Savepoint, path: str) -> ExportJob:
        """Raises ``SavepointConflict`` if an export to ``path`` is in progress."""
        running = self._jobs.get(path)
        if running is not None and running.state is ExportState.PENDING:
            raise SavepointConflict(f"{path}: savepoint {running.savepoint_id} is being exported there")
        job = ExportJob(savepoint.savepoint_id, path, dict(savepoint.checkpoints), self._clock())
        self._jobs[path] = job
        return job

    def requests(self, worker_index: int) -> list[Export]:
        """What this worker still has to write."""
        return [Export(job.savepoint_id, job.checkpoints[worker_index], worker_dir(job.path, worker_index))
                for job in self._jobs.values()
                if job.state is ExportState.PENDING and worker_index in job.checkpoints
                and worker_index not in job.written]

    def answer(self, worker_index: int, answer: ExportAnswer) -> ExportJob | None:
        """Record a worker's answer; returns the export if it is now ``ready``.
        Late, repeated and unknown answers change nothing (expected races)."""
        for path, job in self._jobs.items():
            if (job.state is ExportState.PENDING and job.savepoint_id == answer.savepoint_id
                    and answer.dir == worker_dir(path, worker_index) and worker_index not in job.written):
                if answer.error:
                    self.fail(path, f"worker {worker_index} could not write {answer.dir}: {answer.error}")
                    return None
                self._jobs[path] = replace(job, written=job.written | {worker_index})
                return self._jobs[path] if self._jobs[path].ready else None
        return None

    def complete(self, path: str) -> None:
        self._jobs[path] = replace(self._jobs[path], state=ExportState.COMPLETE, finished_at=self._clock())

    def fail(self, path: str, error: str) -> None:
        self._jobs[path] = replace(self._jobs[path], state=ExportState.FAILED, error=error,
                                   finished_at=self._clock())

    def expire(self) -> None:
        """Fail exports some worker has not answered within the timeout."""
        now = self._clock()
        for path, job in list(self._jobs.items()):
            if job.state is ExportState.PENDING and now - job.started_at >= self._timeout_s:
                silent = ", ".join(str(i) for i in sorted(set(job.checkpoints) - job.written))
                self.fail(path, f"worker {silent} did not write its part within {self._timeout_s:g} s")

    def of(self, savepoint_id: str) -> list[ExportJob]:
        """The savepoint's exports, oldest first."""
        return sorted((job for job in self._jobs.values() if job.savepoint_id == savepoint_id),
                      key=lambda job: job.started_at)

    def forget(self, savepoint_id: str) -> None:
        """A disposed savepoint: its exports in progress stop being asked for."""
        self._jobs = {path: job for path, job in self._jobs.items() if job.savepoint_id != savepoint_id}
