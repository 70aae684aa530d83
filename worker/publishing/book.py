"""Pure publish bookkeeping for one sink: which staged batches to publish now,
up to which mark, and which staged batches are no longer needed.

No I/O and no clock: the publisher lists staging, calls the target and feeds
the results back; tests drive a book with plain numbers.

Terms. A *cut* is a durable checkpoint's batch id for this sink's query. A
*mark* is what the target durably records as published: "up to checkpoint k,
batch b". Flink's subsuming contract: completing checkpoint k completes every
checkpoint before it, and notifications may be skipped or arrive late.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass


class Contract(enum.Enum):
    # Staged batches are published when a checkpoint covering them completes.
    ON_COMPLETION = "transactional"
    # Staged batches are published as soon as they appear.
    IMMEDIATE = "immediate"


@dataclass(frozen=True, order=True)
class Mark:
    checkpoint_id: int      # 0: published without a checkpoint (immediate contract)
    batch_id: int


@dataclass(frozen=True)
class PublishPlan:
    """``mark`` None: nothing to publish now. Otherwise publish ``batches``
    (ascending; possibly none, when only the mark moves) and record ``mark``.
    ``discard``: staged batches to delete, published or superseded."""

    batches: tuple[int, ...] = ()
    mark: Mark | None = None
    discard: tuple[int, ...] = ()


class SinkBook:
    """One sink's publish state on this worker.

    ``complete``: the sink's query runs in complete mode (an aggregation):
    every staged batch is the whole table, so only the newest one up to a
    cut matters.
    """

    def __init__(self, contract: Contract, *, complete: bool) -> None:
        self.contract = contract
        self.complete = complete
        self.mark: Mark | None = None
        self.completed = 0
        self._cuts: dict[int, int] = {}     # durable checkpoint id -> batch id

    @property
    def published_batch(self) -> int:
        return self.mark.batch_id if self.mark else -1

    def durable(self, checkpoint_id: int, batch_id: int) -> None:
        """A checkpoint holding this sink's query at ``batch_id`` is durable."""
        if self.mark is None or checkpoint_id > self.mark.checkpoint_id:
            self._cuts[checkpoint_id] = batch_id

    def complete_through(self, checkpoint_id: int) -> None:
        """Checkpoint ``checkpoint_id`` completed; a late or repeated one changes nothing."""
        self.completed = max(self.completed, checkpoint_id)

    def restored(self, checkpoint_id: int, batch_id: int) -> None:
        """The worker restored this checkpoint: it is durable, and complete (the
        controller chose it), so what was staged up to it is published at once."""
        self.durable(checkpoint_id, batch_id)
        self.complete_through(checkpoint_id)

    def resume(self, mark: Mark | None) -> None:
        """The mark as the target recorded it, read at start-up and again after a
        failed or ambiguous publish: whatever it says is what was published.

        The immediate contract keeps its own mark (what this run published):
        its batches may be published again harmlessly, and after a restart
        without a checkpoint Spark numbers batches from 0 again, below what an
        earlier run recorded."""
        if self.contract is Contract.ON_COMPLETION:
            self.mark = mark
            self._forget_published_cuts()

    def published(self, mark: Mark) -> None:
        self.mark = mark
        self._forget_published_cuts()

    def _forget_published_cuts(self) -> None:
        if self.mark is not None:
            self._cuts = {c: b for c, b in self._cuts.items() if c > self.mark.checkpoint_id}

    def target(self) -> Mark | None:
        """The newest durable cut within the completed checkpoints, if it is past the mark."""
        eligible = [c for c in self._cuts if c <= self.completed]
        if not eligible:
            return None
        newest = max(eligible)
        cut = Mark(newest, self._cuts[newest])
        if cut.batch_id <= self.published_batch:
            return None      # no batch since the mark: nothing to publish
        return cut

    def plan(self, staged: Iterable[int]) -> PublishPlan:
        staged = sorted(set(staged))
        done = tuple(b for b in staged if b <= self.published_batch)
        pending = [b for b in staged if b > self.published_batch]
        if self.contract is Contract.IMMEDIATE:
            if not pending:
                return PublishPlan(discard=done)
            batches = pending[-1:] if self.complete else pending
            return PublishPlan(tuple(batches), Mark(0, pending[-1]), done)
        superseded = self._superseded_tables(pending) if self.complete else ()
        cut = self.target()
        if cut is None:
            return PublishPlan(discard=done + superseded)
        covered = [b for b in pending if b <= cut.batch_id]
        batches = covered[-1:] if self.complete else covered
        return PublishPlan(tuple(batches), cut, done + superseded)

    def _superseded_tables(self, pending: list[int]) -> tuple[int, ...]:
        """Complete mode: staged tables no restore or publish can need. A cut
        needs the newest table at or below its batch; tables past every cut
        may be needed by a checkpoint not yet durable."""
        if not self._cuts:
            return ()
        needed = {max((b for b in pending if b <= cut), default=None) for cut in self._cuts.values()}
        last_cut = max(self._cuts.values())
        return tuple(b for b in pending if b <= last_cut and b not in needed)

    def pending(self, staged: Iterable[int]) -> int:
        """Staged batches not yet published (for status)."""
        return sum(1 for b in staged if b > self.published_batch)


def restore_floor(marks: Iterable[Mark | None]) -> int | None:
    """The oldest checkpoint a restore may use: the newest one whose output a
    transactional sink already published (restoring an older one would
    publish that output twice). None: no restriction."""
    return max((m.checkpoint_id for m in marks if m is not None and m.checkpoint_id > 0), default=None)
