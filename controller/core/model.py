"""The controller's domain types, independent of gRPC and REST."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class WorkerState(str, enum.Enum):
    STARTING = "starting"
    RECOVERING = "recovering"
    RUNNING = "running"
    FAILED = "failed"
    FINISHED = "finished"


class ReportStatus(str, enum.Enum):
    """Outcome of a report. Duplicates and late reports are expected races, not errors."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    STALE = "stale"
    UNKNOWN_WORKER = "unknown_worker"


@dataclass(frozen=True)
class QueryCut:
    name: str
    batch_id: int
    offsets: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointInfo:
    checkpoint_id: int
    queries: tuple[QueryCut, ...] = ()
    size_bytes: int = 0
    duration_ms: float = 0.0
    created_at: float = 0.0
    bytes_copied: int = 0


@dataclass(frozen=True)
class Recovery:
    active: bool = False
    target_bytes: int = 0
    replayed_bytes: int = 0


@dataclass(frozen=True)
class Registration:
    worker_id: str
    worker_index: int
    worker_count: int
    pipeline_fingerprint: str
    node_names: tuple[str, ...] = ()
    checkpoints: tuple[CheckpointInfo, ...] = ()


@dataclass(frozen=True)
class RestoreDecision:
    """What a worker restores: nothing, a checkpoint id, or a savepoint id."""

    checkpoint_id: int | None = None
    savepoint_id: str | None = None


@dataclass(frozen=True)
class RegisterResult:
    session_id: str
    worker_index: int
    worker_count: int
    restore: RestoreDecision
    last_checkpoint_id: int = 0


@dataclass(frozen=True)
class QueryProgress:
    name: str
    batch_id: int = -1
    offsets: dict[str, int] = field(default_factory=dict)
    rows_processed: int = 0
    rows_per_second: float = 0.0
    active: bool = True
    error: str = ""


class SinkState(str, enum.Enum):
    OK = "ok"
    WAITING = "waiting"     # its target fails; the worker retries with backoff, staging meanwhile


@dataclass(frozen=True)
class SinkProgress:
    """One sink's publishing on one worker."""

    name: str
    target: str = ""
    contract: str = ""
    state: SinkState = SinkState.OK
    error: str = ""
    waiting_since: float = 0.0      # worker's clock, seconds since the epoch
    next_retry_at: float = 0.0
    published_checkpoint_id: int = 0
    published_batch_id: int = -1
    pending_batches: int = 0


@dataclass(frozen=True)
class ProgressReport:
    worker_id: str
    session_id: str
    seq: int
    state: WorkerState
    queries: tuple[QueryProgress, ...] = ()
    dropped_checkpoints: int = 0
    restored_checkpoint_id: int = 0
    recovery: Recovery = Recovery()
    sinks: tuple[SinkProgress, ...] = ()


@dataclass(frozen=True)
class ReportOutcome:
    status: ReportStatus
    commands: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommitOutcome:
    """ACCEPTED: a newer checkpoint; DUPLICATE: one the controller already holds
    (or an older one, subsumed). Either way ``completed_checkpoint_id`` is
    the newest complete checkpoint of the worker."""

    status: ReportStatus
    completed_checkpoint_id: int = 0
