"""Taking, listing, restoring and disposing savepoints: pure bookkeeping with
an injected clock. Not thread-safe: the controller service calls it under
its lock, and writes the records each call returns as changed.

Taking one (Flink's "trigger"):
1. ``trigger`` records it as pending, with each worker's newest committed
   checkpoint at that moment.
2. Each worker is asked (``requests``) for an immediate checkpoint and answers
   with the id of the checkpoint that covers its state as of the request
   (``acknowledge``): the one it started, or its newest if nothing was
   committed since. Answers and commits may arrive in either order.
3. A worker is done when a commit at or after that id is known: the newest
   such checkpoint is pinned (commits subsume older ones, and the newest is
   the last that retention would delete). When every worker is done the
   savepoint is complete; past the timeout it fails, naming who is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from controller.savepoints.model import (
    Savepoint,
    SavepointConflict,
    SavepointError,
    SavepointState,
    format_savepoint_id,
    savepoint_number,
    validate_label,
)


class UnknownSavepoint(SavepointError):
    pass


class SavepointNotRestorable(SavepointConflict):
    pass


class WorkerCountMismatch(SavepointConflict):
    pass


@dataclass
class _Progress:
    """One worker's part of a pending savepoint."""

    newest: int                 # its newest committed checkpoint we know of
    covering: int | None = None   # the checkpoint it named as covering the request


@dataclass(frozen=True)
class TriggerResult:
    """The new pending savepoint, or why none was taken (an expected state, not an error)."""

    savepoint: Savepoint | None
    refused: str = ""


class SavepointRegistry:
    def __init__(self, clock: Callable[[], float], *, timeout_s: float, savepoints: Iterable[Savepoint] = (),
                 highest_used: int = 0) -> None:
        """``highest_used``: the highest savepoint number ever given out, the
        records that could not be loaded included: ids are never reused."""
        self._clock = clock
        self._timeout_s = timeout_s
        self._savepoints: dict[str, Savepoint] = {}
        self._progress: dict[str, dict[int, _Progress]] = {}
        # Pending records of an earlier controller process, failed here: to write back.
        self.failed_on_load: list[Savepoint] = []
        for savepoint in savepoints:
            if savepoint.state is SavepointState.PENDING:
                # Its workers' answers went with that process.
                savepoint = replace(savepoint, state=SavepointState.FAILED, checkpoints={},
                                    failure="the controller restarted while it was being taken")
                self.failed_on_load.append(savepoint)
            self._savepoints[savepoint.savepoint_id] = savepoint
        self._next_number = 1 + max([highest_used, *(savepoint_number(i) for i in self._savepoints)])

    # -- taking one ------------------------------------------------------------
    def trigger(self, label: str, pipeline_fingerprint: str, worker_count: int,
                committed: Mapping[int, int]) -> TriggerResult:
        """Start a savepoint. ``committed``: each registered worker's newest
        committed checkpoint (0 for none yet). Raises ``InvalidLabel``."""
        validate_label(label)
        missing = [index for index in range(worker_count) if index not in committed]
        if missing:
            names = ", ".join(str(index) for index in missing)
            return TriggerResult(None, f"worker {names} of {worker_count} is not registered: a savepoint needs "
                                       "a checkpoint of every worker")
        savepoint = Savepoint(format_savepoint_id(self._next_number), label, self._clock(), pipeline_fingerprint,
                              worker_count, SavepointState.PENDING)
        self._next_number += 1
        self._savepoints[savepoint.savepoint_id] = savepoint
        self._progress[savepoint.savepoint_id] = {index: _Progress(committed[index]) for index in range(worker_count)}
        return TriggerResult(savepoint)

    def adopt(self, exported: Savepoint, imported_from: str, label: str | None = None) -> Savepoint:
        """Record a complete savepoint another deployment exported (to
        ``imported_from``) under a new id of ours; ``label`` replaces its
        label. Raises ``InvalidLabel``."""
        savepoint = replace(exported, savepoint_id=format_savepoint_id(self._next_number),
                            label=validate_label(exported.label if label is None else label),
                            imported_from=imported_from)
        self._next_number += 1
        self._savepoints[savepoint.savepoint_id] = savepoint
        return savepoint

    def requests(self, worker_index: int) -> list[str]:
        """Pending savepoints this worker has not answered: it should take a checkpoint now."""
        return [savepoint_id for savepoint_id, workers in self._progress.items()
                if worker_index in workers and workers[worker_index].covering is None]

    def acknowledge(self, savepoint_id: str, worker_index: int, checkpoint_id: int) -> Savepoint | None:
        """The worker's answer: ``checkpoint_id`` covers its state as of the
        request. Returns the savepoint if this changed it; None for a late or
        unknown answer (an expected race)."""
        progress = self._progress.get(savepoint_id, {}).get(worker_index)
        if progress is None or progress.covering is not None:
            return None
        progress.covering = checkpoint_id
        return self._advance(savepoint_id)

    def committed(self, worker_index: int, checkpoint_id: int) -> list[Savepoint]:
        """A worker committed a checkpoint; returns the savepoints this changed."""
        changed = []
        for savepoint_id, workers in list(self._progress.items()):
            progress = workers.get(worker_index)
            if progress is not None and checkpoint_id > progress.newest:
                progress.newest = checkpoint_id
                updated = self._advance(savepoint_id)
                if updated is not None:
                    changed.append(updated)
        return changed

    def _advance(self, savepoint_id: str) -> Savepoint | None:
        """Pin what is now known; complete the savepoint when every worker is pinned."""
        savepoint = self._savepoints[savepoint_id]
        pins = dict(savepoint.checkpoints)
        for index, progress in self._progress[savepoint_id].items():
            if index not in pins and progress.covering is not None and progress.newest >= progress.covering:
                pins[index] = progress.newest
        if pins == savepoint.checkpoints:
            return None
        if len(pins) == savepoint.worker_count:
            del self._progress[savepoint_id]
            updated = replace(savepoint, checkpoints=pins, state=SavepointState.COMPLETE, completed_at=self._clock())
        else:
            updated = replace(savepoint, checkpoints=pins)
        self._savepoints[savepoint_id] = updated
        return updated

    def expire(self) -> list[Savepoint]:
        """Fail pending savepoints older than the timeout; returns them."""
        failed = []
        now = self._clock()
        for savepoint_id, workers in list(self._progress.items()):
            savepoint = self._savepoints[savepoint_id]
            if now - savepoint.created_at < self._timeout_s:
                continue
            silent = [str(i) for i, p in workers.items() if p.covering is None]
            uncommitted = [str(i) for i, p in workers.items() if p.covering is not None and i not in savepoint.checkpoints]
            reasons = ([f"worker {', '.join(silent)} did not answer the request"] if silent else []) + (
                [f"worker {', '.join(uncommitted)} did not commit its checkpoint"] if uncommitted else [])
            failure = f"{' and '.join(reasons)} within {self._timeout_s:g} s"
            del self._progress[savepoint_id]
            self._savepoints[savepoint_id] = replace(savepoint, state=SavepointState.FAILED, checkpoints={},
                                                     failure=failure)
            failed.append(self._savepoints[savepoint_id])
        return failed

    # -- using them ------------------------------------------------------------
    def get(self, savepoint_id: str) -> Savepoint:
        """Raises ``InvalidSavepointId`` or ``UnknownSavepoint``."""
        savepoint_number(savepoint_id)
        try:
            return self._savepoints[savepoint_id]
        except KeyError:
            raise UnknownSavepoint(f"there is no savepoint {savepoint_id}") from None

    def list(self) -> list[Savepoint]:
        """Oldest first."""
        return sorted(self._savepoints.values(), key=lambda s: savepoint_number(s.savepoint_id))

    def dispose(self, savepoint_id: str) -> Savepoint | None:
        """Forget a savepoint (a pending one stops being taken): its pins are
        released. Returns it, or None if it was already gone (an expected race)."""
        savepoint_number(savepoint_id)
        self._progress.pop(savepoint_id, None)
        return self._savepoints.pop(savepoint_id, None)

    def pinned(self, worker_index: int) -> set[int]:
        """The worker's checkpoints that retention must keep (``retention_plan(pinned=...)``):
        those of complete savepoints, and those already pinned by pending ones.
        Imported savepoints' ids are another deployment's: they pin nothing."""
        return {s.checkpoints[worker_index] for s in self._savepoints.values()
                if worker_index in s.checkpoints and not s.imported_from}

    def restore_target(self, savepoint_id: str, worker_count: int) -> Mapping[int, int]:
        """Each worker's checkpoint to restore for the savepoint."""
        savepoint = self.get(savepoint_id)
        if savepoint.state is SavepointState.PENDING:
            raise SavepointNotRestorable(
                f"savepoint {savepoint_id} is still being taken ({len(savepoint.checkpoints)} of "
                f"{savepoint.worker_count} workers have a checkpoint in it)")
        if savepoint.state is SavepointState.FAILED:
            raise SavepointNotRestorable(f"savepoint {savepoint_id} failed ({savepoint.failure}): it cannot be restored")
        if worker_count != savepoint.worker_count:
            raise WorkerCountMismatch(
                f"savepoint {savepoint_id} was taken with {savepoint.worker_count} workers, but this deployment runs "
                f"{worker_count}: restore it with SP_WORKER_COUNT={savepoint.worker_count} on every worker and the "
                "controller (each worker's state covers its own input partitions and cannot be split or merged)")
        return savepoint.checkpoints
