"""How far a restored worker's replay has caught up (pure)."""

from __future__ import annotations

from sparkpoint.messages import QueryProgress, Recovery


class RecoveryTracker:
    """Recovery means: replaying from the restored offsets up to the end of the
    log as it was when the worker started. It ends once every query has read
    that far, and then stays ended."""

    def __init__(self, restored: dict[str, int], target: dict[str, int]) -> None:
        self.restored = restored
        self.target = target
        self.total = sum(max(0, end - restored.get(p, 0)) for p, end in target.items())
        self._done = self.total == 0

    def progress(self, queries: list[QueryProgress]) -> Recovery:
        replayed = 0
        for partition, end in self.target.items():
            start = self.restored.get(partition, 0)
            reached = min((q.offsets.get(partition, start) for q in queries), default=start)
            replayed += max(0, min(reached, end) - start)
        if queries and replayed >= self.total:
            self._done = True
        return Recovery(not self._done, self.total, self.total if self._done else replayed)
