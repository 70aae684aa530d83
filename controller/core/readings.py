"""Everything ``GET /metrics`` reads, taken at once under the service's lock
at scrape time: the status, the graph, the savepoints, and each worker's
duration histograms."""

from __future__ import annotations

from dataclasses import dataclass

from controller.core.graph import PipelineView
from controller.core.status import PipelineStatus
from controller.progress.observations import HistogramView
from controller.savepoints.view import SavepointView


@dataclass(frozen=True)
class WorkerDurations:
    checkpoints: HistogramView      # seconds each checkpoint took, as committed or reported
    recoveries: HistogramView       # seconds from restoring a checkpoint to catching up with the log


@dataclass(frozen=True)
class Readings:
    status: PipelineStatus
    pipeline: PipelineView
    savepoints: list[SavepointView]
    durations: dict[str, WorkerDurations]      # by worker id
