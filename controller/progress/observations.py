"""What the controller observes over time, per worker: histograms of
checkpoint and recovery durations, and a short history of progress and
checkpoints for the status page's charts.

Pure bookkeeping in memory (the service passes the time in): a restarted
controller starts the histograms afresh, which Prometheus reads as a counter
reset, and its history from empty.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from sparkpoint.messages import CheckpointInfo

# Seconds. A checkpoint copies what changed since the last one: usually well
# under a second, longer with large state or a slow volume.
CHECKPOINT_DURATION_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
# A recovery restores a checkpoint and replays the log from its offsets.
RECOVERY_DURATION_BUCKETS_S = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
HISTORY_WINDOW_S = 600.0        # how far back the charts go
SAMPLE_INTERVAL_S = 2.0         # at most one progress sample per worker this often
_SEEN_KEPT = 64                 # checkpoint ids remembered as observed


@dataclass(frozen=True)
class HistogramView:
    """Cumulative counts per upper bound (the last is +Inf), their sum and count."""

    buckets: tuple[tuple[float, int], ...]
    sum: float
    count: int


class Histogram:
    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)     # the last: above every bound
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self._bounds, value)] += 1
        self._sum += value

    def view(self) -> HistogramView:
        cumulative, running = [], 0
        for bound, count in zip((*self._bounds, float("inf")), self._counts):
            running += count
            cumulative.append((bound, running))
        return HistogramView(tuple(cumulative), self._sum, running)


@dataclass(frozen=True)
class ProgressSample:
    at: float                   # the controller's clock, seconds since the epoch
    rows_per_second: float
    lag_bytes: int


@dataclass(frozen=True)
class CheckpointSample:
    at: float                   # when the controller first saw it
    checkpoint_id: int
    duration_s: float
    size_bytes: int


@dataclass(frozen=True)
class WorkerHistory:
    progress: list[ProgressSample] = field(default_factory=list)
    checkpoints: list[CheckpointSample] = field(default_factory=list)


class WorkerObservations:
    """One worker's. Each checkpoint is observed once, whether the controller
    learns it from a commit or from a report of the worker's volume; ids up to
    ``floor`` (known before observing began) never are."""

    def __init__(self, floor: int) -> None:
        self.checkpoint_durations = Histogram(CHECKPOINT_DURATION_BUCKETS_S)
        self.recovery_durations = Histogram(RECOVERY_DURATION_BUCKETS_S)
        self._floor = floor
        self._seen: set[int] = set()
        self._progress: deque[ProgressSample] = deque()
        self._checkpoints: deque[CheckpointSample] = deque()

    def checkpoints_seen(self, checkpoints: Iterable[CheckpointInfo], now: float) -> None:
        for checkpoint in sorted(checkpoints, key=lambda c: c.checkpoint_id):
            if checkpoint.checkpoint_id <= self._floor or checkpoint.checkpoint_id in self._seen:
                continue
            self._seen.add(checkpoint.checkpoint_id)
            if len(self._seen) > _SEEN_KEPT:
                self._floor = min(self._seen)
                self._seen.remove(self._floor)
            duration_s = checkpoint.duration_ms / 1000
            self.checkpoint_durations.observe(duration_s)
            self._checkpoints.append(CheckpointSample(now, checkpoint.checkpoint_id, duration_s,
                                                      checkpoint.size_bytes))
        self._trim(now)

    def recovered(self, duration_s: float) -> None:
        self.recovery_durations.observe(duration_s)

    def progressed(self, now: float, rows_per_second: float, lag_bytes: int) -> None:
        if self._progress and now - self._progress[-1].at < SAMPLE_INTERVAL_S:
            return
        self._progress.append(ProgressSample(now, rows_per_second, lag_bytes))
        self._trim(now)

    def _trim(self, now: float) -> None:
        for samples in (self._progress, self._checkpoints):
            while samples and samples[0].at < now - HISTORY_WINDOW_S:
                samples.popleft()

    def history(self, since: float) -> WorkerHistory:
        return WorkerHistory([s for s in self._progress if s.at > since],
                             [s for s in self._checkpoints if s.at > since])


class Observations:
    def __init__(self) -> None:
        self._workers: dict[str, WorkerObservations] = {}

    def worker(self, worker_id: str, floor: int) -> WorkerObservations:
        """The worker's observations; ``floor``: its newest checkpoint id known
        now, used only if this is the first time the worker is observed."""
        if worker_id not in self._workers:
            self._workers[worker_id] = WorkerObservations(floor)
        return self._workers[worker_id]

    def get(self, worker_id: str) -> WorkerObservations | None:
        return self._workers.get(worker_id)

    def forget(self, worker_id: str) -> None:
        """A released worker's: should its id register again, it is observed afresh."""
        self._workers.pop(worker_id, None)
