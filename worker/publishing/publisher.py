"""The publisher: a thread of the worker's main process that moves staged
batches to each sink's target and deletes them from staging afterwards.

- transactional sinks publish when a checkpoint completes (the runner hands
  over each durable checkpoint, the committer each completion);
- immediate sinks publish whatever is staged, woken by Spark's progress events.

A target that fails is retried with backoff, and before anything else its
mark is read again: after a connection broke during COMMIT, the mark alone
says whether the publish happened. Meanwhile the worker keeps processing and
staging; the sink's state is reported to the controller.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkpoint.backoff import Backoff
from sparkpoint.errors import describe_error
from sparkpoint.messages import SinkContract, SinkProgress, SinkState
from worker.checkpointing.manifest import Manifest
from worker.publishing.book import Contract, Mark, SinkBook
from worker.publishing.staging import StagingArea
from worker.publishing.targets import Outcome, Target

log = logging.getLogger("sparkpoint.worker.publisher")

# Publishes in one pass over a sink at most (a target whose mark keeps moving
# under us must not hold the thread).
_ROUNDS = 8


class Health:
    """A sink's retry state: ok, or waiting since a time, retrying at another."""

    def __init__(self, backoff: Backoff) -> None:
        self._backoff = backoff
        self.error = ""
        self.since = 0.0
        self.retry_at = 0.0
        self.failures = 0       # failed attempts in this run, each retried

    @property
    def waiting(self) -> bool:
        return bool(self.error)

    def due(self, now: float) -> bool:
        return now >= self.retry_at

    def failed(self, error: str, now: float) -> float:
        """Record a failure; returns the delay until the next attempt."""
        if not self.waiting:
            self.since = now
        self.error = error
        self.failures += 1
        delay = self._backoff.next_delay()
        self.retry_at = now + delay
        return delay

    def ok(self) -> None:
        self.error = ""
        self.since = self.retry_at = 0.0
        self._backoff.reset()


@dataclass
class Publication:
    """One staged sink: its bookkeeping, target and staging."""

    name: str                       # the sink node's name
    query: str                      # its query's (Pipeline.queries): the batch ids it stages are that query's
    contract: SinkContract
    book: SinkBook
    target: Target
    staging: StagingArea
    health: Health = field(default_factory=lambda: Health(Backoff(initial_s=0.5, maximum_s=10.0)))
    needs_resume: bool = True
    pending: int = 0


class Publisher:
    def __init__(self, publications: list[Publication], *, clock: Callable[[], float] = time.time,
                 poll_s: float = 0.25, guard: Callable[[], None] = lambda: None) -> None:
        """``guard``: raises if this process may no longer write for its
        index (``CheckpointStore.guard``); called before each target is
        touched."""
        self.publications = publications
        self._guard = guard
        self._clock = clock
        self._poll_s = poll_s
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkpoint-publisher", daemon=True)

    # -- start-up ------------------------------------------------------------------
    def resume_all(self, stop: threading.Event) -> bool:
        """Read every target's mark, waiting (with backoff, visible in status)
        while a target is unreachable. False if ``stop`` came first."""
        for publication in self.publications:
            while not self._resume(publication):
                if stop.wait(max(0.0, publication.health.retry_at - self._clock())):
                    return False
        return True

    def marks(self) -> list[Mark | None]:
        """The transactional sinks' marks (their restore floor)."""
        with self._lock:
            return [p.book.mark for p in self.publications if p.book.contract is Contract.ON_COMPLETION]

    def rewind(self, manifest: Manifest) -> list[str]:
        """The user restored ``manifest`` (an older savepoint) and accepted that
        output published past it is published again: move every transactional
        sink's mark back to its cut. Returns one line per sink rewound."""
        rewound = []
        with self._lock:
            for publication, batch_id in self._cuts(manifest):
                old = publication.book.mark
                if publication.book.contract is Contract.ON_COMPLETION and old is not None \
                        and old.batch_id > batch_id:
                    mark = Mark(manifest.checkpoint_id, batch_id)
                    publication.target.rewind(mark)
                    publication.book.resume(mark)
                    rewound.append(f"sink {publication.name}: published up to checkpoint {old.checkpoint_id}, "
                                   f"batch {old.batch_id}; rewound to checkpoint {mark.checkpoint_id}, "
                                   f"batch {batch_id}: its output past that is published again")
        return rewound

    def restored(self, manifest: Manifest) -> None:
        with self._lock:
            for publication, batch_id in self._cuts(manifest):
                publication.book.restored(manifest.checkpoint_id, batch_id)
        self.wake()

    # -- from the checkpoint threads ---------------------------------------------------
    def durable(self, manifest: Manifest) -> None:
        with self._lock:
            for publication, batch_id in self._cuts(manifest):
                publication.book.durable(manifest.checkpoint_id, batch_id)

    def completed(self, checkpoint_id: int) -> None:
        with self._lock:
            for publication in self.publications:
                publication.book.complete_through(checkpoint_id)
        self.wake()

    def wake(self) -> None:
        self._wake.set()

    def _cuts(self, manifest: Manifest):
        batches = {query.name: query.batch_id for query in manifest.queries}
        return [(p, batches[p.query]) for p in self.publications if p.query in batches]

    # -- publishing ----------------------------------------------------------------------
    def step(self) -> None:
        """One pass over every sink (the thread's loop; tests call it directly)."""
        for publication in self.publications:
            if publication.health.due(self._clock()):
                self._publish(publication)
            else:
                # Waiting: staging keeps growing, and status should show it.
                staged = publication.staging.batches()
                with self._lock:
                    publication.pending = publication.book.pending(staged)

    def _resume(self, publication: Publication) -> bool:
        try:
            self._guard()
            mark = publication.target.resume()
        except Exception as error:
            self._failed(publication, error)
            return False
        with self._lock:
            publication.book.resume(mark)
            publication.needs_resume = False
            self._ok(publication)
        return True

    def _publish(self, publication: Publication) -> None:
        """Steps (repeated while there is something to publish):
        1. After a failure, read the target's mark again first.
        2. Plan from what is staged; delete staged batches no longer needed.
        3. Publish the planned batches with their mark; a mark that moved
           meanwhile sends us back to 1.
        """
        for _ in range(_ROUNDS):
            # 1.
            if publication.needs_resume and not self._resume(publication):
                return
            # 2.
            try:
                self._guard()
                staged = publication.staging.batches()
                with self._lock:
                    plan = publication.book.plan(staged)
                    publication.pending = publication.book.pending(staged)
                publication.staging.discard(plan.discard)
                if plan.mark is None:
                    with self._lock:
                        self._ok(publication)
                    return
                # 3.
                outcome = publication.target.publish([publication.staging.batch(b) for b in plan.batches],
                                                     plan.mark)
            except Exception as error:
                self._failed(publication, error)
                return
            with self._lock:
                if outcome is Outcome.MARK_MOVED:
                    log.info("sink %s: the mark at %s moved (an earlier attempt committed); reading it again",
                             publication.name, publication.target.description)
                    publication.needs_resume = True
                    continue
                publication.book.published(plan.mark)
                publication.pending = publication.book.pending(staged)
                self._ok(publication)
            log.debug("sink %s: published %d batch(es) up to checkpoint %d, batch %d", publication.name,
                      len(plan.batches), plan.mark.checkpoint_id, plan.mark.batch_id)

    def _ok(self, publication: Publication) -> None:
        if publication.health.waiting:
            log.info("sink %s: %s reachable again", publication.name, publication.target.description)
        publication.health.ok()

    def _failed(self, publication: Publication, error: Exception) -> None:
        message = describe_error(error)
        with self._lock:
            publication.needs_resume = True
            repeated = publication.health.error == message
            delay = publication.health.failed(message, self._clock())
        if not repeated:
            log.warning("sink %s: cannot publish to %s (%s); still processing and staging, retrying in %.1f s",
                        publication.name, publication.target.description, message, delay)

    # -- status --------------------------------------------------------------------------
    def statuses(self) -> list[SinkProgress]:
        with self._lock:
            return [SinkProgress(
                name=p.name, query=p.query, target=p.target.description, contract=p.contract,
                state=SinkState.WAITING if p.health.waiting else SinkState.OK,
                error=p.health.error, waiting_since=p.health.since, next_retry_at=p.health.retry_at,
                published_checkpoint_id=p.book.mark.checkpoint_id if p.book.mark else 0,
                published_batch_id=p.book.published_batch, pending_batches=p.pending,
                retries=p.health.failures,
            ) for p in self.publications]

    # -- the thread ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.step()
            self._wake.wait(self._poll_s)
            self._wake.clear()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        for publication in self.publications:
            publication.target.close()
