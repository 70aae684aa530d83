"""The checkpoint threads, off Spark's query threads.

- the *ticker* asks the scheduler every few milliseconds whether a checkpoint is
  due, and hands a due one to the writer -- or counts it dropped if the writer
  is still busy with the previous one; a requested checkpoint (a savepoint's)
  starts as soon as none is in flight;
- the *writer* takes the checkpoint, applies retention and garbage
  collection, and hands the durable checkpoint to ``on_durable`` (the sinks'
  publisher learns each query's batch in it) and to the committer. On a
  full volume it first frees space (``pressure_plan``: every unpinned
  checkpoint older than the newest complete one, then their files) and
  tries once more before the checkpoint counts as failed;
- the *committer* commits the newest durable checkpoint to the controller,
  retrying with backoff while it is unreachable; an older one still waiting
  is simply replaced (a newer checkpoint subsumes it). The controller's
  acknowledgement is the completion notification.
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from sparkpoint.backoff import Backoff
from sparkpoint.errors import describe_error
from sparkpoint.grpcauth import failure
from sparkpoint.messages import CheckpointInfo
from worker.checkpointing.manifest import Manifest, ManifestError
from worker.checkpointing.policy import (
    CheckpointScheduler,
    CompletionNotifier,
    Tick,
    pressure_plan,
    retention_plan,
)
from worker.checkpointing.store import CheckpointStore
from worker.checkpointing.writer import CheckpointWriter

log = logging.getLogger("sparkpoint.worker.checkpoint")

NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


@dataclass(frozen=True)
class CheckpointStats:
    dropped: int        # due while the previous one was still being written
    failed: int
    error: str          # the last failure's, one line; empty if none
    durable: tuple[CheckpointInfo, ...] = ()    # on the volume after retention, oldest first


class CheckpointCommitter:
    def __init__(self, commit: Callable[[CheckpointInfo], int], notifier: CompletionNotifier) -> None:
        self._commit = commit      # returns the controller's completed checkpoint id
        self._notifier = notifier
        self._pending: Manifest | None = None
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="sparkpoint-committer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def offer(self, manifest: Manifest) -> None:
        with self._cond:
            if self._pending is None or manifest.checkpoint_id > self._pending.checkpoint_id:
                self._pending = manifest
            self._cond.notify()

    def _run(self) -> None:
        backoff = Backoff(initial_s=0.5, maximum_s=5.0)
        while True:
            with self._cond:
                while self._pending is None and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                manifest = self._pending
            try:
                completed = self._commit(manifest.info())
            except Exception as error:  # controller unreachable: keep the newest, retry
                reason = failure(error) if isinstance(error, grpc.RpcError) else str(error)
                log.warning("cannot commit checkpoint %d to the controller (%s); retrying",
                            manifest.checkpoint_id, reason)
                with self._cond:
                    self._cond.wait(backoff.next_delay())
                continue
            backoff.reset()
            with self._cond:
                if self._pending is manifest:
                    self._pending = None
            self._notifier.complete(completed)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=5)


class CheckpointRunner:
    def __init__(self, writer: CheckpointWriter, store: CheckpointStore, scheduler: CheckpointScheduler,
                 committer: CheckpointCommitter, *, retain: int, clock_ms: Callable[[], float],
                 tick_s: float = 0.05, on_durable: Callable[[Manifest], None] = lambda manifest: None,
                 newest_complete: Callable[[], int] = lambda: 0) -> None:
        """``newest_complete``: the newest checkpoint known complete (what a
        full volume's retention must keep, with everything newer)."""
        self._writer = writer
        self._newest_complete = newest_complete
        self._store = store
        self._scheduler = scheduler
        self._committer = committer
        self._retain = retain
        self._clock_ms = clock_ms
        self._tick_s = tick_s
        self._on_durable = on_durable
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._due: int | None = None
        # On-demand requests (savepoints): each gets the id of the checkpoint
        # that covers the state as of its request.
        self._requests: list[Callable[[int], None]] = []
        self._due_requests: list[Callable[[int], None]] = []
        self._pinned: frozenset[int] = frozenset()
        self._stop = threading.Event()
        self.last: Manifest | None = None
        # The store's readable manifests, each parsed once (a manifest is
        # never replaced): what retention keeps and garbage collection spares.
        self._manifests = {manifest.checkpoint_id: manifest for manifest in store.readable()[0]}
        self._durable = tuple(manifest.info() for manifest in self._manifests.values())
        # Whether the next garbage collection lists the whole store: at start
        # (a crash may have left files no manifest references) and after a
        # checkpoint that failed midway. Otherwise it deletes the retired
        # checkpoints' files that no kept one references, by their manifests.
        self._sweep = True
        self.failed = 0
        self.error = ""
        self._threads = [threading.Thread(target=self._tick_loop, name="sparkpoint-ckpt-ticker", daemon=True),
                         threading.Thread(target=self._write_loop, name="sparkpoint-ckpt-writer", daemon=True)]

    def start(self) -> None:
        self._committer.start()
        for thread in self._threads:
            thread.start()

    def stats(self) -> CheckpointStats:
        with self._lock:
            return CheckpointStats(self._scheduler.dropped, self.failed, self.error, self._durable)

    def request(self, on_taken: Callable[[int], None]) -> None:
        """Take a checkpoint as soon as none is in flight, outside the schedule.
        ``on_taken`` gets the id of the checkpoint covering the state as of
        now: the one taken, or the newest durable one if nothing was committed
        since it (an idle pipeline)."""
        with self._lock:
            self._requests.append(on_taken)

    def pin(self, checkpoint_ids: frozenset[int]) -> None:
        """Checkpoints retention must keep (savepoints pin them)."""
        with self._lock:
            self._pinned = frozenset(checkpoint_ids)

    def _tick_loop(self) -> None:
        while not self._stop.wait(self._tick_s):
            with self._lock:
                if self._requests and self._scheduler.in_flight is None and self._due is None:
                    self._due = self._scheduler.start().checkpoint_id
                    self._due_requests, self._requests = self._requests, []
                    self._work.notify()
                    continue
                result = self._scheduler.tick(self._clock_ms())
                if result.kind is Tick.DUE:
                    self._due = result.checkpoint_id
                    self._work.notify()
                elif result.kind is Tick.DROPPED:
                    log.info("checkpoint due while %s is still being written: dropped (%d so far)",
                             self._scheduler.in_flight, self._scheduler.dropped)

    def _write_loop(self) -> None:
        while True:
            with self._lock:
                while self._due is None and not self._stop.is_set():
                    self._work.wait(0.5)
                if self._stop.is_set():
                    return
                checkpoint_id, self._due = self._due, None
                requests, self._due_requests = self._due_requests, []
            empty = False
            try:
                manifest = self._take(checkpoint_id)
                empty = manifest is None
                if manifest is not None:
                    self._manifests[manifest.checkpoint_id] = manifest
                    self._retire(retention_plan(self._store.checkpoint_ids(), self._retain, self._pinned_now()))
            except Exception as error:
                log.exception("checkpoint %d failed", checkpoint_id)
                self._sweep = True      # it may have stored files before it failed
                with self._lock:
                    self.failed += 1
                    self.error = f"checkpoint {checkpoint_id}: {describe_error(error)}"
                manifest = None
            finally:
                with self._lock:
                    self._scheduler.finished(checkpoint_id, taken=not empty)
            self._answer(requests, manifest, failed=not empty and manifest is None)
            if manifest is not None:
                with self._lock:
                    self.last = manifest
                log.info("checkpoint %d durable: %d bytes (%d copied) in %.0f ms", manifest.checkpoint_id,
                         manifest.size_bytes, manifest.bytes_copied, manifest.duration_ms)
                # Before the commit: its completion may only arrive once the cut is known.
                self._on_durable(manifest)
                self._committer.offer(manifest)

    def _answer(self, requests: list[Callable[[int], None]], manifest: Manifest | None, *, failed: bool) -> None:
        """Answer on-demand requests; without a checkpoint to name (it failed,
        or nothing was ever committed) they wait for the next one."""
        if not requests:
            return
        with self._lock:
            newest = self.last.checkpoint_id if self.last else max(self._store.checkpoint_ids(), default=0)
        covering = manifest.checkpoint_id if manifest is not None else 0 if failed else newest
        if covering == 0:
            with self._lock:
                self._requests = requests + self._requests
            return
        for on_taken in requests:
            on_taken(covering)

    def _take(self, checkpoint_id: int) -> Manifest | None:
        """Take the checkpoint; if the volume is full, free space by
        retention (``pressure_plan``) and try once more. Raises OSError
        saying so if there is still no room."""
        manifest, full = self._take_unless_full(checkpoint_id)
        if full is None:
            return manifest
        doomed = pressure_plan(self._store.checkpoint_ids(), self._newest_complete(), self._pinned_now())
        if doomed:
            self._sweep = True          # the attempt may have stored files before the volume filled
            freed = self._retire(doomed)
            log.warning("checkpoint %d: the checkpoint volume is full; deleted checkpoints %s (%d bytes of files), "
                        "trying again", checkpoint_id, ", ".join(map(str, doomed)), freed)
            manifest, full = self._take_unless_full(checkpoint_id)
            if full is None:
                return manifest
        why = (f" even after deleting checkpoints {', '.join(map(str, doomed))}" if doomed else
               ", and nothing is left to delete but the newest complete checkpoint, newer and pinned ones")
        raise OSError(full.errno, f"{full.strerror}: the checkpoint volume is full{why}")

    def _take_unless_full(self, checkpoint_id: int) -> tuple[Manifest | None, OSError | None]:
        """The checkpoint, or the error saying the volume is full (any other is raised)."""
        try:
            return self._writer.take(checkpoint_id), None
        except OSError as error:
            if error.errno not in NO_SPACE:
                raise
            return None, error

    def _pinned_now(self) -> frozenset[int]:
        with self._lock:
            return self._pinned

    def _retire(self, doomed: list[int]) -> int:
        """Delete these checkpoints, then their files no kept checkpoint
        references (on a sweep: every file none references); the kept ones
        are the durable ones reported from now on. Returns the bytes freed."""
        if any(checkpoint_id not in self._manifests for checkpoint_id in doomed):
            self._sweep = True          # a manifest that did not parse: its files are unknown
        retired = set().union(*(self._manifests[i].digests() for i in doomed if i in self._manifests))
        for checkpoint_id in doomed:
            self._store.delete(checkpoint_id)
        kept = self._kept()
        referenced = set().union(*(m.digests() for m in kept))
        with self._lock:
            self._durable = tuple(m.info() for m in kept)
        if self._sweep:
            self._sweep = False
            return self._store.collect_garbage(referenced)
        return self._store.delete_blobs(retired - referenced)

    def _kept(self) -> list[Manifest]:
        """The store's readable manifests, ascending, each parsed once (one
        this runner did not write, on first sight)."""
        manifests = {}
        for checkpoint_id in self._store.checkpoint_ids():
            manifest = self._manifests.get(checkpoint_id)
            if manifest is None:
                try:
                    manifest = self._store.load(checkpoint_id)
                except ManifestError:
                    continue
            manifests[checkpoint_id] = manifest
        self._manifests = manifests
        return list(manifests.values())

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            self._work.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)
        self._committer.stop()


def monotonic_ms() -> float:
    return time.monotonic() * 1000
