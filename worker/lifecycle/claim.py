"""Which worker index this process runs: its own, or -- waiting as a
standby -- the first whose worker is gone.

A checkpoint directory's lock (``CheckpointStore.acquire``) is held as long
as its worker process lives, and the kernel releases it the moment that
process ends, however it ends. So a process runs an index exactly while it
holds that index's lock. A standby tries every index's lock every
``poll_s`` and takes over the first it gets: a crashed worker is replaced
within milliseconds of its death, with no heartbeat to wait out. A paused
or cut-off process keeps its flock, but not its index: the lock of a holder
that has not touched it (``LockKeeper``) for ``SP_HEARTBEAT_TIMEOUT`` is
broken (``worker.checkpointing.lock``), and the old holder, once it runs
again, writes nothing more and stops.

With ``{index}`` in ``SP_CHECKPOINT_DIR`` (``WorkerSettings.takes_over``)
every index's directory is reachable, each index's settings derive from
the same environment (``WorkerSettings.for_index``), and a worker whose own
index is held waits as a standby too: the container Docker restarts after
a crash becomes the next standby.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sparkpoint.messages import VolumeFence
from worker.checkpointing.lock import FenceError
from worker.checkpointing.store import CheckpointStore
from worker.settings import WorkerSettings

log = logging.getLogger("sparkpoint.worker")

GRACE_S = 30.0      # the longest a restarted worker holds back its Spark session for a take-over


@dataclass(frozen=True)
class Claim:
    """An index this process holds: its settings, its fenced store and the fence."""

    settings: WorkerSettings
    store: CheckpointStore
    fence: VolumeFence


def claim(settings: WorkerSettings) -> Claim:
    """Take ``settings``' index -- breaking the lock of a holder silent for
    ``SP_HEARTBEAT_TIMEOUT`` -- or raise ``FenceError`` naming the live
    holder."""
    store = CheckpointStore(settings.checkpoint_dir)
    return Claim(settings, store, store.acquire(settings.worker_id, silence_s=settings.heartbeat_timeout_s))


def try_claim(settings: WorkerSettings) -> Claim | None:
    """``settings``' index if its lock is free (taken), else None."""
    try:
        return claim(settings)
    except FenceError:
        return None


def claim_own(settings: WorkerSettings, stop: threading.Event) -> Claim | None:
    """A worker's own index; if a live process holds it, ``FenceError``
    -- unless the worker may take over another (``takes_over``): then
    None, once it may start its Spark session and stand by
    (``after_takeover``), or its own index if that comes free first."""
    try:
        return claim(settings)
    except FenceError as error:
        if not settings.takes_over:
            raise
        log.info("index %d is held by %s: waiting as a standby", settings.worker_index, error.holder)
    return after_takeover(settings, stop)


def after_takeover(settings: WorkerSettings, stop: threading.Event, *, clock: Callable[[], float] = time.monotonic,
                   poll_s: float = 0.5, limit_s: float = GRACE_S) -> Claim | None:
    """A worker whose own index is held -- taken over, most likely, just
    after this container crashed -- holds back its Spark session until the
    index's new holder has checkpointed, in every query, a batch newer than
    any checkpointed before (its first batches committed; an idle query's
    never is: then ``limit_s``), at most ``limit_s``: a JVM
    starting meanwhile would take the cores the take-over's first batches
    need. Returns the index if its lock comes free meanwhile (it runs it,
    cold), else None: go on to stand by."""
    return until_progressed([CheckpointStore(settings.checkpoint_dir)], stop, clock=clock, poll_s=poll_s,
                            limit_s=limit_s, take=lambda: try_claim(settings))


def until_progressed(stores: list[CheckpointStore], stop: threading.Event, *, clock: Callable[[], float],
                     poll_s: float, limit_s: float, take: Callable[[], Claim | None] = lambda: None) -> Claim | None:
    """Wait until the stores have ``progressed`` since now (None), ``take``
    returns an index (it), ``stop`` or ``limit_s`` (None); ``take`` is
    tried first at each poll."""
    before = [newest_batches(store) for store in stores]
    deadline = clock() + limit_s
    while not stop.is_set() and clock() < deadline:
        if (taken := take()) is not None:
            return taken
        if progressed(stores, before):
            return None
        stop.wait(poll_s)
    return None


def progressed(stores: list[CheckpointStore], before: list[dict[str, int]]) -> bool:
    """Whether each store's newest checkpoint holds, in every query, a newer
    batch than ``before`` (each store's ``newest_batches`` then)."""
    return all((newest := newest_batches(store)) and all(batch > old.get(query, -1) for query, batch in newest.items())
               for store, old in zip(stores, before))


def newest_batches(store: CheckpointStore) -> dict[str, int]:
    """Each query's batch in the newest checkpoint that reads (none: empty)."""
    for checkpoint_id in reversed(store.checkpoint_ids()):
        try:
            return {query.name: query.batch_id for query in store.load(checkpoint_id).queries}
        except (OSError, ValueError):      # being written, or unreadable: the next older one
            continue
    return {}


class Standby:
    """Waits for an index whose lock is free (every index's settings are
    derived once, from ``environ``; each keeps this process's ``work_dir``)."""

    def __init__(self, environ: Mapping[str, str], own: WorkerSettings, *, poll_s: float = 0.1) -> None:
        self._candidates = [own if index == own.worker_index else
                            WorkerSettings.for_index(environ, index).model_copy(update={"work_dir": own.work_dir})
                            for index in range(own.worker_count)]
        self._poll_s = poll_s

    def hold_back(self, stop: threading.Event, *, clock: Callable[[], float] = time.monotonic,
                  poll_s: float = 0.5, limit_s: float = GRACE_S) -> None:
        """A standby starting holds back its Spark session until every
        index's worker has checkpointed a new batch of every query (they
        have just started too, or one has just taken over), at most
        ``limit_s``: its JVM's start would slow theirs."""
        until_progressed([CheckpointStore(settings.checkpoint_dir) for settings in self._candidates], stop,
                         clock=clock, poll_s=poll_s, limit_s=limit_s)

    def try_once(self) -> Claim | None:
        """The first index whose lock is free, taken; None if every one is held."""
        return next((taken for settings in self._candidates if (taken := try_claim(settings)) is not None), None)

    def wait(self, stop: threading.Event, on_idle: Callable[[], None] = lambda: None) -> Claim | None:
        """Until an index is taken (returned) or ``stop`` (None); ``on_idle``
        runs between tries (the health file)."""
        log.info("standby: every index (%d) is held; taking over the first whose worker ends",
                 len(self._candidates))
        while not stop.is_set():
            if (taken := self.try_once()) is not None:
                log.info("standby: taking over index %d as %s", taken.settings.worker_index,
                         taken.settings.worker_id)
                return taken
            on_idle()
            stop.wait(self._poll_s)
        return None
