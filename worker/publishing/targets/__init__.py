"""What the publisher needs of a sink's target (files, PostgreSQL)."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Protocol

from sparkpoint.messages import VolumeFence
from worker.publishing.book import Mark
from worker.publishing.staging import StagedBatch


class Outcome(enum.Enum):
    PUBLISHED = "published"
    # The target's mark is not the one the publish was planned from (another
    # attempt, whose outcome was unknown, did commit): nothing was written;
    # read the mark again and re-plan.
    MARK_MOVED = "mark_moved"


class Fenced(Exception):
    """A target's mark carries a later generation of the fence of this
    worker's checkpoint volume than this process holds: another process took
    the index over and claimed the mark. This one publishes nothing more
    (the message says so; its lock keeper stops it within a second)."""


def check_fence(stored: VolumeFence, mine: VolumeFence, target: str) -> None:
    """Raise ``Fenced`` if ``stored`` (the mark's) supersedes ``mine``."""
    if stored.supersedes(mine):
        raise Fenced(f"{target}: its mark was claimed by a later holder of this worker's index (fence generation "
                     f"{stored.generation}; this process holds {mine.generation}): it publishes nothing more")


class Target(Protocol):
    description: str    # one line for logs and status, e.g. "files var/output/vwap"

    def resume(self) -> Mark | None:
        """The durable mark ("published up to"), read at start-up and after any
        failed publish; None if nothing was published (or the target keeps no
        mark). Cleans up what an interrupted publish left behind. A target
        with a mark carries the fence of the process that wrote it: it claims
        the mark for this process's fence, or raises ``Fenced`` if a later
        holder of the index claimed it (``publish`` checks that too)."""

    def rewind(self, mark: Mark) -> None:
        """Record ``mark``, older than the current one: the user restored an
        older savepoint and accepted that output past it is published again.
        A target that can take published output back (files) does so."""

    def publish(self, batches: Sequence[StagedBatch], mark: Mark) -> Outcome:
        """Publish ``batches`` and record ``mark``, atomically. An exception
        means the outcome may be unknown: the publisher calls ``resume`` before
        anything else."""

    def close(self) -> None: ...
