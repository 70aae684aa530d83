"""Carrying out the controller's commands on this worker: savepoint
checkpoints, exports of a savepoint's checkpoint, and restarts."""

from __future__ import annotations

import logging
import threading
from functools import partial

from sparkpoint.messages import Export, RegisterResult, ReportOutcome, Restart
from sparkpoint.paths import UnsafePath, resolve_under_root
from worker.checkpointing.manifest import ManifestError
from worker.checkpointing.runner import CheckpointRunner
from worker.checkpointing.store import CheckpointStore, CorruptCheckpoint
from worker.checkpointing.transfer import export_checkpoint
from worker.control.commands import CommandBook, StartExport, TakeCheckpoint
from worker.settings import WorkerSettings

log = logging.getLogger("sparkpoint.worker.commands")


class CommandExecutor:
    """Fed every reply the reporter gets (on the reporter's thread)."""

    def __init__(self, book: CommandBook, store: CheckpointStore, settings: WorkerSettings) -> None:
        self.book = book
        self._store = store
        self._settings = settings
        self.runner: CheckpointRunner | None = None     # set once checkpoints run
        self.restart = threading.Event()                 # the controller holds a new restore plan

    def attach(self, runner: CheckpointRunner) -> None:
        """Checkpoints run from now on: pinned ones (from replies so far) are spared at once."""
        runner.pin(self.book.pinned())
        self.runner = runner

    def on_reply(self, reply: ReportOutcome) -> None:
        for action in self.book.on_reply(reply):
            if isinstance(action, TakeCheckpoint):
                self._take_checkpoint(action.savepoint_id)
            elif isinstance(action, StartExport):
                threading.Thread(target=self.export, args=(action.export,), name="sparkpoint-export",
                                 daemon=True).start()
            elif isinstance(action, Restart) and not self.restart.is_set():
                log.info("the controller asks for a restart (a savepoint restore)")
                self.restart.set()
        if self.runner is not None:
            self.runner.pin(self.book.pinned())

    def on_registered(self, result: RegisterResult) -> None:
        """A registration in the middle of the run (the reporter's): one that
        hands over a savepoint to restore must be carried out, so restart
        (the next registration gets the plan again)."""
        if result.restore.savepoint_id and not self.restart.is_set():
            log.info("the controller holds savepoint %s for this worker: restarting to restore it",
                     result.restore.savepoint_id)
            self.restart.set()

    def _take_checkpoint(self, savepoint_id: str) -> None:
        if self.runner is None:
            # Checkpoints are off (or not started yet): the controller keeps
            # asking, and fails the savepoint after its timeout.
            log.warning("savepoint %s: no checkpoint can be taken (SP_CHECKPOINT_FREQ=0 or still starting)",
                        savepoint_id)
            return
        log.info("savepoint %s: taking a checkpoint now", savepoint_id)
        self.runner.request(partial(self.book.checkpoint_taken, savepoint_id))

    def export(self, export: Export) -> None:
        """Write this worker's checkpoint of a savepoint under SP_SAVEPOINT_DIR."""
        try:
            directory = resolve_under_root(self._settings.savepoint_dir, export.dir, max_depth=None)
            export_checkpoint(self._store, export.checkpoint_id, directory)
        except (UnsafePath, ManifestError, CorruptCheckpoint, OSError) as error:
            log.error("savepoint %s: export of checkpoint %d to %s failed: %s", export.savepoint_id,
                      export.checkpoint_id, export.dir, error)
            self.book.export_done(export, str(error))
            return
        log.info("savepoint %s: checkpoint %d exported to %s", export.savepoint_id, export.checkpoint_id, directory)
        self.book.export_done(export)
