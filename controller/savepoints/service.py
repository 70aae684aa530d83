"""Savepoints as the controller serves them: the registry and its records on
disk, restores waiting for workers, and exports in progress.

Not thread-safe: ``ControllerService`` calls it under its lock, with the
progress table's worker records, so a trigger and a commit never cross.

Records are written before a change is acknowledged: a user's change whose
record cannot be written is undone and refused (``RecordNotWritten``, REST
503), never left in memory. A change a worker's call brought (a savepoint
pinned, completed, failed) cannot be refused to the worker: its record is
kept to write again, and until it is written every user call retries it
and is refused if it still fails, so nobody is shown a state the disk does
not hold; ``problems`` names it for ``/health``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from controller.progress.table import WorkerRecord
from controller.savepoints.exported import RECORD_FILE, ExportedSavepoints
from controller.savepoints.exports import ExportJob, ExportTracker, worker_dir
from controller.savepoints.model import RecordNotWritten, Savepoint, SavepointConflict, SavepointState
from controller.savepoints.registry import SavepointRegistry
from controller.savepoints.restores import RestoreRequest, RestoreRequests, republish_refusal, republished_sinks
from controller.savepoints.store import SavepointStore
from controller.savepoints.view import (
    ExportView,
    RestorePart,
    RestoreView,
    SavepointSummary,
    SavepointView,
    export_view,
    savepoint_summary,
    savepoint_view,
)
from sparkpoint.messages import CheckpointNow, Command, ProgressReport, Restart, RestoreDecision

log = logging.getLogger("sparkpoint.controller.savepoints")


@dataclass(frozen=True)
class SavepointConfig:
    records: Path           # the controller's own records: SP_CONTROLLER_STATE_DIR/savepoints
    root: Path              # SP_SAVEPOINT_DIR, shared with the workers: exports and imports
    timeout_s: float        # SP_SAVEPOINT_TIMEOUT: for taking one and for exporting one
    worker_count: int


class SavepointService:
    def __init__(self, config: SavepointConfig, registry: SavepointRegistry, *,
                 clock: Callable[[], float]) -> None:
        self._config = config
        self._registry = registry
        self._store = SavepointStore(config.records)
        self._exported = ExportedSavepoints(config.root)
        self._restores = RestoreRequests()
        self._exports = ExportTracker(clock, timeout_s=config.timeout_s)
        self._clock = clock
        self._unwritten: dict[str, Savepoint] = {}     # changed by a worker's call, record not written yet
        self._write_error = ""                          # the last failed write's; empty once one succeeds

    @classmethod
    def open(cls, config: SavepointConfig, *, clock: Callable[[], float]) -> tuple[SavepointService, list[str]]:
        """Load the records at start-up; returns the service and one line per
        record that could not be read (moved aside). Raises OSError if the
        records' directory cannot be read or written."""
        loaded = SavepointStore(config.records).load()
        registry = SavepointRegistry(clock, timeout_s=config.timeout_s, savepoints=loaded.savepoints,
                                     highest_used=loaded.highest_used)
        service = cls(config, registry, clock=clock)
        for savepoint in registry.failed_on_load:
            service._store.save(savepoint)
        return service, loaded.problems

    def _write(self, savepoint: Savepoint) -> None:
        """Write its record; raises ``RecordNotWritten``."""
        try:
            self._store.save(savepoint)
        except OSError as error:
            self._write_error = (f"cannot write savepoint record {self._store.path(savepoint.savepoint_id)}: "
                                f"{error.strerror or error}")
            raise RecordNotWritten(self._write_error) from None
        self._unwritten.pop(savepoint.savepoint_id, None)
        self._write_error = ""

    def _write_later(self, savepoints: Iterable[Savepoint]) -> None:
        """For changes a worker's call brought: its call must not fail for
        them; what cannot be written now is written again by the next call."""
        self._unwritten.update((savepoint.savepoint_id, savepoint) for savepoint in savepoints)
        try:
            self._flush()
        except RecordNotWritten as error:
            log.error("%s (will retry)", error)

    def _flush(self) -> None:
        """Write what a worker's call changed and could not write; raises
        ``RecordNotWritten`` while that still fails."""
        for savepoint in list(self._unwritten.values()):
            self._write(savepoint)

    def _checked_in(self) -> None:
        """Before any user call: nothing unwritten left (raises
        ``RecordNotWritten``), and what is overdue failed (every read does
        this, so a stalled savepoint fails on time)."""
        self._unwritten.update((savepoint.savepoint_id, savepoint) for savepoint in self._registry.expire())
        self._flush()
        self._exports.expire()

    def problems(self) -> list[str]:
        """For ``/health``: records cannot be written. After a failure it
        tries again (the unwritten records, else a probe), so the answer
        turns healthy once the disk has room again."""
        if self._write_error:
            try:
                if self._unwritten:
                    self._flush()
                else:
                    self._store.probe()
                    self._write_error = ""
            except RecordNotWritten:
                pass
            except OSError as error:
                self._write_error = f"cannot write savepoint records in {self._store.directory}: " \
                                   f"{error.strerror or error}"
        return [self._write_error] if self._write_error else []

    def _view(self, savepoint: Savepoint) -> SavepointView:
        return savepoint_view(savepoint, self._exports.of(savepoint.savepoint_id))

    # -- for users -------------------------------------------------------------
    def trigger(self, label: str, workers: Sequence[WorkerRecord]) -> SavepointView:
        """Raises ``InvalidLabel``; ``SavepointConflict`` if a worker is missing or
        the workers run different pipelines; ``RecordNotWritten``."""
        self._checked_in()
        fingerprints = sorted({worker.pipeline_fingerprint for worker in workers})
        if len(fingerprints) > 1:
            raise SavepointConflict(f"the workers run different pipelines ({', '.join(fingerprints)}): a savepoint "
                                    "needs one pipeline on every worker")
        result = self._registry.trigger(label, fingerprints[0] if fingerprints else "", self._config.worker_count,
                                        {worker.worker_index: worker.last_checkpoint_id for worker in workers})
        if result.savepoint is None:
            raise SavepointConflict(result.refused)
        self._write_or_forget(result.savepoint)
        return self._view(result.savepoint)

    def _write_or_forget(self, savepoint: Savepoint) -> None:
        """A new savepoint's record, or none at all: if it cannot be written
        the registry forgets it (its id is not given out again by this
        process) and ``RecordNotWritten`` is raised."""
        try:
            self._write(savepoint)
        except RecordNotWritten:
            self._registry.dispose(savepoint.savepoint_id)
            try:
                self._store.delete(savepoint.savepoint_id)     # written, but not made durable
            except OSError:
                pass
            raise

    def list(self) -> list[SavepointView]:
        self._checked_in()
        return [self._view(savepoint) for savepoint in self._registry.list()]

    def get(self, savepoint_id: str) -> SavepointView:
        self._checked_in()
        return self._view(self._registry.get(savepoint_id))

    def summary(self) -> SavepointSummary:
        return savepoint_summary(self._registry.list())

    def dispose(self, savepoint_id: str) -> SavepointView:
        """Forget it and delete its record: retention may delete what it
        pinned (unless a restore still waits for it)."""
        self._checked_in()
        self._registry.get(savepoint_id)        # raises UnknownSavepoint
        try:
            self._store.delete(savepoint_id)
        except OSError as error:
            raise RecordNotWritten(f"cannot delete savepoint record {self._store.path(savepoint_id)}: "
                                   f"{error.strerror or error}") from None
        disposed = self._registry.dispose(savepoint_id)
        self._exports.forget(savepoint_id)
        return savepoint_view(disposed, [])

    def restore(self, savepoint_id: str, allow_republish: bool, workers: Sequence[WorkerRecord]) -> RestoreView:
        """Ask every worker to restart from its part of the savepoint. Raises
        ``SavepointNotRestorable``, ``WorkerCountMismatch``; ``RepublishRefused``
        without ``allow_republish`` when a transactional sink would publish
        output again (checked against the sinks the workers last reported)."""
        self._checked_in()
        savepoint = self._registry.get(savepoint_id)
        targets = self._registry.restore_target(savepoint_id, self._config.worker_count)
        by_index = {worker.worker_index: worker for worker in workers}
        republished = republished_sinks(savepoint, {index: worker.sinks for index, worker in by_index.items()})
        if republished and not allow_republish:
            raise republish_refusal(savepoint, republished)
        now = self._clock()
        requests = {index: RestoreRequest(savepoint_id, checkpoint,
                                          worker_dir(savepoint.imported_from, index) if savepoint.imported_from
                                          else "", allow_republish, now)
                    for index, checkpoint in targets.items()}
        self._restores.request(requests)
        log.info("restore of savepoint %s requested: %s", savepoint_id,
                 ", ".join(f"worker {i} from checkpoint {r.checkpoint_id}" for i, r in sorted(requests.items())))
        return RestoreView(
            savepoint_id, savepoint.label, allow_republish,
            [RestorePart(index, request.checkpoint_id, request.import_dir,
                         by_index[index].worker_id if index in by_index else "")
             for index, request in sorted(requests.items())],
            republished)

    def export(self, savepoint_id: str, user_path: str) -> ExportView:
        """Start writing a self-contained copy under the savepoint root.
        Raises ``UnsafePath``; ``SavepointConflict`` if the savepoint is
        not complete or is imported, or the target is taken."""
        self._checked_in()
        savepoint = self._registry.get(savepoint_id)
        if savepoint.state is not SavepointState.COMPLETE:
            raise SavepointConflict(f"savepoint {savepoint_id} is {savepoint.state.value}: only a complete savepoint "
                                    "can be exported")
        if savepoint.imported_from:
            raise SavepointConflict(f"savepoint {savepoint_id} was imported from {savepoint.imported_from}, which "
                                    "is already a self-contained export: copy that directory instead")
        try:
            claimed = self._exported.claim(user_path)
        except OSError as error:
            raise RecordNotWritten(f"cannot create the export's directory under the savepoint root: "
                                   f"{error.strerror or error}") from None
        job = self._exports.start(savepoint, claimed)
        log.info("export of savepoint %s to %s started", savepoint_id, job.path)
        return export_view(job)

    def read_export(self, user_path: str) -> tuple[str, Savepoint]:
        """The exported savepoint at ``user_path``: its path under the root and
        its record (file reads only, no state: callers need no lock). Raises
        ``UnsafePath``, ``SavepointRecordError``."""
        return self._exported.read(user_path)

    def import_(self, export: tuple[str, Savepoint], label: str | None) -> SavepointView:
        """Record an exported savepoint (``read_export``'s) as a new one of
        ours. Raises ``InvalidLabel``; ``SavepointConflict`` if it was
        imported already."""
        self._checked_in()
        path, exported = export
        for savepoint in self._registry.list():
            if savepoint.imported_from == path:
                raise SavepointConflict(f"{path} is imported already, as savepoint {savepoint.savepoint_id}")
        savepoint = self._registry.adopt(exported, path, label)
        self._write_or_forget(savepoint)
        log.info("savepoint %s imported from %s as %s", exported.savepoint_id, path, savepoint.savepoint_id)
        return self._view(savepoint)

    # -- for workers -------------------------------------------------------------
    def restore_plan(self, worker_index: int, session_id: str) -> RestoreDecision | None:
        """A savepoint restore waiting for this registration, if any."""
        request = self._restores.deliver(worker_index, session_id)
        return None if request is None else request.decision()

    def report(self, worker: WorkerRecord, report: ProgressReport) -> tuple[tuple[Command, ...], frozenset[int]]:
        """Take a report's answers; returns the commands for its worker and
        the checkpoints its retention must keep."""
        index = worker.worker_index
        changed = [self._registry.acknowledge(answer.savepoint_id, index, answer.checkpoint_id)
                   for answer in report.savepoint_answers]
        self._write_later(savepoint for savepoint in changed if savepoint is not None)
        for answer in report.exports:
            ready = self._exports.answer(index, answer)
            if ready is not None:
                self._commit_export(ready)
        self._write_later(self._registry.expire())
        self._exports.expire()
        commands: list[Command] = [CheckpointNow(savepoint_id) for savepoint_id in self._registry.requests(index)]
        if self._restores.needs_restart(index):
            commands.append(Restart())
        commands.extend(self._exports.requests(index))
        return tuple(commands), frozenset(self._registry.pinned(index) | self._restores.pinned(index))

    def _commit_export(self, job: ExportJob) -> None:
        """Every part is written: the record makes the export whole."""
        try:
            self._exported.commit(job.path, self._registry.get(job.savepoint_id))
        except OSError as error:
            self._exports.fail(job.path, f"cannot write {job.path}/{RECORD_FILE}: {error}")
            return
        self._exports.complete(job.path)
        log.info("savepoint %s exported to %s", job.savepoint_id, job.path)

    def committed(self, worker: WorkerRecord, checkpoint_id: int, session_id: str) -> None:
        self._write_later(self._registry.committed(worker.worker_index, checkpoint_id))
        self._restores.committed(worker.worker_index, session_id)
