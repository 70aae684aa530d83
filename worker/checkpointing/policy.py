"""Pure checkpoint bookkeeping: when one is due, which to keep, which
completions to deliver. No I/O and no clock of its own: tests drive it."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass


class Tick(enum.Enum):
    NOT_DUE = "not_due"
    DUE = "due"
    DROPPED = "dropped"      # due, but the previous checkpoint is still being written


@dataclass(frozen=True)
class TickResult:
    kind: Tick
    checkpoint_id: int | None = None


class CheckpointScheduler:
    """Every ``frequency_ms`` a checkpoint is due; one due while another is in
    flight is dropped and counted, not queued (KX). Ids strictly increase,
    continuing after ``last_id`` (the highest id this worker ever used).

    Due times fall ``phase_ms`` past each multiple of ``frequency_ms`` of the
    wall clock (``wall_ms``: the wall clock when ``now_ms`` was read; the
    scheduler itself runs on ``now_ms``'s clock): the first within one
    interval of ``now_ms``."""

    def __init__(self, frequency_ms: int, now_ms: float, last_id: int = 0, *, wall_ms: float | None = None,
                 phase_ms: float = 0.0) -> None:
        if frequency_ms <= 0:
            raise ValueError("a scheduler needs a positive frequency")
        self.frequency_ms = frequency_ms
        wall = now_ms if wall_ms is None else wall_ms
        self._next_due = now_ms + frequency_ms - (wall - phase_ms) % frequency_ms
        self._last_id = last_id
        self.in_flight: int | None = None
        self.dropped = 0

    def tick(self, now_ms: float) -> TickResult:
        if now_ms < self._next_due:
            return TickResult(Tick.NOT_DUE)
        # Skip whole missed intervals: a stalled worker does not owe a backlog.
        missed = int((now_ms - self._next_due) // self.frequency_ms)
        self._next_due += (missed + 1) * self.frequency_ms
        if self.in_flight is not None:
            self.dropped += 1
            return TickResult(Tick.DROPPED)
        return self.start()

    def start(self) -> TickResult:
        """Start a checkpoint now (also used for on-demand checkpoints)."""
        if self.in_flight is not None:
            self.dropped += 1
            return TickResult(Tick.DROPPED)
        self._last_id += 1
        self.in_flight = self._last_id
        return TickResult(Tick.DUE, self._last_id)

    def finished(self, checkpoint_id: int, *, taken: bool = True) -> None:
        """The checkpoint is done (durable, or failed). ``taken=False``: there
        was nothing to checkpoint yet, and the id is handed back unused."""
        if self.in_flight == checkpoint_id:
            self.in_flight = None
            if not taken and checkpoint_id == self._last_id:
                self._last_id -= 1


def retention_plan(checkpoint_ids: Iterable[int], keep_last: int, pinned: Iterable[int] = ()) -> list[int]:
    """Ids to delete: all but the newest ``keep_last``, sparing pinned ones."""
    ordered = sorted(set(checkpoint_ids))
    keep = set(ordered[-keep_last:]) | set(pinned) if keep_last > 0 else set(pinned)
    return [checkpoint_id for checkpoint_id in ordered if checkpoint_id not in keep]


def pressure_plan(checkpoint_ids: Iterable[int], newest_complete: int, pinned: Iterable[int] = ()) -> list[int]:
    """Ids to delete when the volume is full: every unpinned checkpoint
    older than the newest complete one. A restore needs that one or a newer
    one (never one below a published mark, and marks only follow
    completions); the older ones were fallbacks only. Nothing while no
    checkpoint is complete."""
    spared = set(pinned)
    return [checkpoint_id for checkpoint_id in sorted(set(checkpoint_ids))
            if checkpoint_id < newest_complete and checkpoint_id not in spared]


class Notified(enum.Enum):
    DELIVERED = "delivered"
    SUBSUMED = "subsumed"    # an equal or newer completion was already delivered


class CompletionNotifier:
    """Delivers "checkpoint k complete" under Flink's subsuming contract:
    notifications may be skipped or arrive late; completing k means every
    checkpoint before k is complete too, so listeners only ever see
    increasing ids and a late or repeated one is dropped."""

    def __init__(self, last_completed: int = 0) -> None:
        """``last_completed``: complete already (the checkpoint a run restored)."""
        self.last_completed = last_completed
        self._listeners: list[Callable[[int], None]] = []

    def subscribe(self, listener: Callable[[int], None]) -> None:
        self._listeners.append(listener)

    def complete(self, checkpoint_id: int) -> Notified:
        if checkpoint_id <= self.last_completed:
            return Notified.SUBSUMED
        self.last_completed = checkpoint_id
        for listener in self._listeners:
            listener(checkpoint_id)
        return Notified.DELIVERED


def restore_candidates(available: Iterable[int], chosen: int | None, floor: int | None = None) -> list[int]:
    """Checkpoints to try, newest first: the chosen one, then older ones as
    fallbacks, never older than ``floor`` (the newest checkpoint whose output
    a sink already published: going back past it would publish twice)."""
    if chosen is None:
        return []
    return [c for c in sorted(set(available), reverse=True)
            if c <= chosen and (floor is None or c >= floor)]
