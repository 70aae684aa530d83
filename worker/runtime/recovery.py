"""How far a restored worker's replay has caught up (pure; the clock is injected)."""

from __future__ import annotations

import time
from collections.abc import Callable

from sparkpoint.messages import QueryProgress, Recovery


class RecoveryTracker:
    """Recovery means: replaying from the restored offsets up to the end of the
    log as it was when the worker started. It ends once every query has read
    that far, and then stays ended.

    ``started_at`` (the ``clock``'s time the restore began; 0 when nothing was
    restored) and the time it took are reported with it: the controller counts
    recoveries and their durations from them."""

    def __init__(self, restored: dict[str, int], target: dict[str, int], *, started_at: float = 0.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.restored = restored
        self.target = target
        self.total = sum(max(0, end - restored.get(p, 0)) for p, end in target.items())
        self._started_at = started_at
        self._clock = clock
        self._done = False
        self._duration_ms = 0.0
        if self.total == 0:
            self._finish()

    def _finish(self) -> None:
        self._done = True
        if self._started_at:
            self._duration_ms = max(0.0, (self._clock() - self._started_at) * 1000)

    def progress(self, queries: list[QueryProgress]) -> Recovery:
        replayed = 0
        for partition, end in self.target.items():
            start = self.restored.get(partition, 0)
            reached = min((q.offsets.get(partition, start) for q in queries), default=start)
            replayed += max(0, min(reached, end) - start)
        if queries and replayed >= self.total and not self._done:
            self._finish()
        return Recovery(not self._done, self.total, self.total if self._done else replayed, self._started_at,
                        self._duration_ms)
