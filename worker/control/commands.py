"""What the controller asked of this worker, and what the worker answered.

Pure and thread-safe: the reporter feeds in each reply and takes the answers
for the next report; the worker carries out the actions ``on_reply`` returns
(take a checkpoint, export one, restart) and reports back here.

The exchange is at-least-once in both directions, without a separate
acknowledgement: the controller repeats a command until an answer reaches it,
and the worker repeats an answer until a reply no longer repeats the command.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from sparkpoint.messages import (
    CheckpointNow,
    Export,
    ExportAnswer,
    ReportOutcome,
    ReportStatus,
    Restart,
    SavepointAnswer,
)


@dataclass(frozen=True)
class TakeCheckpoint:
    savepoint_id: str


@dataclass(frozen=True)
class StartExport:
    export: Export


Action = TakeCheckpoint | StartExport | Restart


@dataclass(frozen=True)
class Answers:
    """What the next report carries."""

    savepoints: tuple[SavepointAnswer, ...]     # the checkpoint covering each savepoint
    exports: tuple[ExportAnswer, ...]


class CommandBook:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taking: set[str] = set()                        # checkpoint requested, no answer yet
        self._answers: dict[str, int] = {}
        self._exports: dict[tuple[str, str], ExportAnswer | None] = {}   # None: still being written
        self._sent_answers: set[str] = set()                  # answers in the report being sent
        self._sent_exports: set[tuple[str, str]] = set()
        self._pinned: frozenset[int] = frozenset()

    def answers(self) -> Answers:
        """For the next report (and remembered as sent with it)."""
        with self._lock:
            self._sent_answers = set(self._answers)
            self._sent_exports = {key for key, answer in self._exports.items() if answer is not None}
            return Answers(tuple(SavepointAnswer(s, c) for s, c in sorted(self._answers.items())),
                           tuple(self._exports[key] for key in sorted(self._sent_exports)))

    def on_reply(self, reply: ReportOutcome) -> list[Action]:
        """The controller's reply to the report built from the last ``answers()``;
        returns what to start now (each command once, however often repeated)."""
        actions: list[Action] = []
        with self._lock:
            if reply.status is not ReportStatus.ACCEPTED:
                # The report was ignored (stale, duplicate): its answers did not arrive.
                self._sent_answers, self._sent_exports = set(), set()
                return actions
            asked = {c.savepoint_id for c in reply.commands if isinstance(c, CheckpointNow)}
            exports = {(c.savepoint_id, c.dir): c for c in reply.commands if isinstance(c, Export)}
            # An answer that was sent and is not asked for again has arrived.
            for savepoint_id in self._sent_answers - asked:
                self._answers.pop(savepoint_id, None)
            for key in self._sent_exports - exports.keys():
                self._exports.pop(key, None)
            self._sent_answers, self._sent_exports = set(), set()
            for savepoint_id in sorted(asked - self._taking - self._answers.keys()):
                self._taking.add(savepoint_id)
                actions.append(TakeCheckpoint(savepoint_id))
            for key, export in exports.items():
                if key not in self._exports:
                    self._exports[key] = None
                    actions.append(StartExport(export))
            if any(isinstance(c, Restart) for c in reply.commands):
                actions.append(Restart())
            self._pinned = reply.pinned
        return actions

    def checkpoint_taken(self, savepoint_id: str, checkpoint_id: int) -> None:
        with self._lock:
            self._taking.discard(savepoint_id)
            self._answers[savepoint_id] = checkpoint_id

    def export_done(self, export: Export, error: str = "") -> None:
        with self._lock:
            self._exports[(export.savepoint_id, export.dir)] = ExportAnswer(export.savepoint_id, export.dir, error)

    def pinned(self) -> frozenset[int]:
        """Checkpoints retention must keep: the controller's pins, and every
        answer not yet known to have arrived (the controller pins it, or a
        newer one, once it has it)."""
        with self._lock:
            return self._pinned | frozenset(self._answers.values())
