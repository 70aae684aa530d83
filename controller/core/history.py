"""The recent history served by ``GET /history``: each worker's rows/s and
lag, and its checkpoints' durations, over the last minutes (the status
page's charts)."""

from __future__ import annotations

from dataclasses import dataclass

from controller.progress.observations import WorkerHistory


@dataclass(frozen=True)
class HistoryView:
    now: float                  # the controller's clock: ask again with since=now for what came after
    window_s: float
    workers: dict[str, WorkerHistory]
