"""The holder's side of its index's lock (``worker.checkpointing.lock``):
touch it every ``interval_s``, so that no standby takes this process for
hung, and notice within as long when another process broke it -- this one
was paused or cut off for ``SP_HEARTBEAT_TIMEOUT`` -- and say so
(``on_lost``: the worker logs why and stops at once). Every write to the
store and the sinks checks it too (``CheckpointStore.guard``): after a
pause, the thread that writes may run before this one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from sparkpoint.errors import describe_error
from worker.checkpointing.lock import StoreLock

log = logging.getLogger("sparkpoint.worker")

INTERVAL_S = 1.0


class LockKeeper:
    def __init__(self, lock: StoreLock, on_lost: Callable[[str], None], *, interval_s: float = INTERVAL_S) -> None:
        self._lock = lock
        self._on_lost = on_lost
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkpoint-lock-keeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def check(self) -> bool:
        """One heartbeat: False (after ``on_lost``) if the lock was broken."""
        if (reason := self._lock.lost()) is not None:
            self._on_lost(reason)
            return False
        try:
            self._lock.touch()
        except OSError as error:     # the volume's trouble shows in the store's writes too
            log.warning("cannot touch the checkpoint directory's lock: %s", describe_error(error))
        return True

    def _run(self) -> None:
        while self.check() and not self._stop.wait(self._interval_s):
            pass

    def stop(self) -> None:
        self._stop.set()
