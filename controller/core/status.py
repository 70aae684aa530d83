"""The pipeline status view served by ``GET /status``."""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.core.standbys import StandbyView
from controller.progress.table import WorkerRecord
from controller.savepoints.view import SavepointSummary
from sparkpoint.messages import (
    CheckpointInfo,
    QueryProgress,
    Restarts,
    SinkContract,
    SinkProgress,
    SinkState,
    VolumeUse,
    WorkerState,
)


@dataclass(frozen=True)
class CheckpointView:
    checkpoint_id: int
    batch_ids: dict[str, int]
    offsets: dict[str, dict[str, int]]
    size_bytes: int
    bytes_copied: int
    duration_ms: float
    created_at: float
    age_s: float


@dataclass(frozen=True)
class RecoveryView:
    active: bool
    restored_checkpoint_id: int
    target_bytes: int
    replayed_bytes: int
    caught_up_pct: float
    started_at: float           # the worker's clock; 0: this run restored nothing
    duration_s: float           # how long it took to catch up; 0 while active


@dataclass(frozen=True)
class SinkView:
    name: str
    query: str                  # the worker's query whose batches it publishes
    target: str
    contract: SinkContract
    state: SinkState
    error: str
    waiting_s: float            # how long it has been waiting
    next_retry_in_s: float
    published_checkpoint_id: int
    published_batch_id: int
    pending_batches: int
    lag_batches: int            # its query's batch minus the published one
    retries: int                # failed publish attempts in the worker's run


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    worker_index: int
    host: str                   # where its process runs ("": not said); in compose, the container's short id ...
    pid: int                    # ... and its pid there (0: not said)
    state: WorkerState
    batch_id: int
    offsets: dict[str, dict[str, int]]
    rows_processed: int
    rows_per_second: float
    lag_bytes: int              # input behind the source's end: its slowest query's
    kafka_lag: dict[str, int]   # consumer lag per Kafka partition (<topic>:<partition> -> records): its slowest query's
    last_heartbeat: float
    heartbeat_age_s: float
    pipeline_fingerprint: str
    dropped_checkpoints: int
    failed_checkpoints: int
    checkpoint_error: str
    waiting_for: str            # why it waits before running its queries (a source missing); "": it does not
    checkpoint_volume: VolumeUse    # bytes used and free on its checkpoint volume
    checkpoints_completed: int
    last_checkpoint: CheckpointView | None
    recovery: RecoveryView
    recoveries: int
    registrations: int
    durable_checkpoints: int    # on its volume, as last reported
    restarts: Restarts          # in its living Spark session after a query failed
    finished_nodes: list[str] = field(default_factory=list)
    queries: list[QueryProgress] = field(default_factory=list)
    sinks: list[SinkView] = field(default_factory=list)


@dataclass(frozen=True)
class PipelineStatus:
    state: str
    workers_expected: int
    workers_registered: int
    rows_processed: int
    rows_per_second: float
    lag_bytes: int
    workers: list[WorkerStatus]
    savepoints: SavepointSummary
    standbys: list[StandbyView]     # waiting to take over a worker's index


def pipeline_state(records: list[WorkerRecord], expected: int) -> str:
    states = {record.state for record in records}
    if WorkerState.FAILED in states:
        return WorkerState.FAILED.value
    if WorkerState.RESTARTING in states:
        return WorkerState.RESTARTING.value
    if WorkerState.RECOVERING in states:
        return WorkerState.RECOVERING.value
    if len(records) < expected or WorkerState.STARTING in states:
        return WorkerState.STARTING.value
    if states == {WorkerState.FINISHED}:
        return WorkerState.FINISHED.value
    return WorkerState.RUNNING.value


def checkpoint_view(checkpoint: CheckpointInfo | None, now: float) -> CheckpointView | None:
    if checkpoint is None:
        return None
    return CheckpointView(
        checkpoint_id=checkpoint.checkpoint_id,
        batch_ids={q.name: q.batch_id for q in checkpoint.queries},
        offsets={q.name: dict(q.offsets) for q in checkpoint.queries},
        size_bytes=checkpoint.size_bytes,
        bytes_copied=checkpoint.bytes_copied,
        duration_ms=checkpoint.duration_ms,
        created_at=checkpoint.created_at,
        age_s=round(max(0.0, now - checkpoint.created_at), 3),
    )


def recovery_view(record: WorkerRecord) -> RecoveryView:
    recovery = record.recovery
    pct = 100.0 if recovery.target_bytes == 0 else 100.0 * recovery.replayed_bytes / recovery.target_bytes
    return RecoveryView(recovery.active, record.restored_checkpoint_id, recovery.target_bytes,
                        recovery.replayed_bytes, round(min(100.0, pct), 1), recovery.started_at,
                        round(recovery.duration_ms / 1000, 3))


def worker_rows_per_second(queries: tuple[QueryProgress, ...]) -> float:
    """Every query reads the worker's whole share of the source: the worker
    goes as fast as its slowest query."""
    return min((q.rows_per_second for q in queries), default=0.0)


def worker_lag_bytes(queries: tuple[QueryProgress, ...]) -> int:
    """How far behind the source's end the worker is: its slowest query."""
    return max((q.lag_bytes for q in queries), default=0)


def worker_kafka_lag(queries: tuple[QueryProgress, ...]) -> dict[str, int]:
    """Each Kafka partition's consumer lag: its slowest query's."""
    lag: dict[str, int] = {}
    for query in queries:
        for key, records in query.kafka_lag.items():
            lag[key] = max(records, lag.get(key, 0))
    return dict(sorted(lag.items()))


def sink_view(sink: SinkProgress, now: float, query_batch: int = -1) -> SinkView:
    waiting = sink.state is SinkState.WAITING
    return SinkView(
        name=sink.name,
        query=sink.query or sink.name,
        target=sink.target,
        contract=sink.contract,
        state=sink.state,
        error=sink.error,
        waiting_s=round(max(0.0, now - sink.waiting_since), 3) if waiting else 0.0,
        next_retry_in_s=round(max(0.0, sink.next_retry_at - now), 3) if waiting else 0.0,
        published_checkpoint_id=sink.published_checkpoint_id,
        published_batch_id=sink.published_batch_id,
        pending_batches=sink.pending_batches,
        lag_batches=max(0, query_batch - sink.published_batch_id),
        retries=sink.retries,
    )


def worker_status(record: WorkerRecord, now: float) -> WorkerStatus:
    queries = list(record.queries)
    batches = {q.name: q.batch_id for q in queries}
    return WorkerStatus(
        worker_id=record.worker_id,
        worker_index=record.worker_index,
        host=record.host,
        pid=record.pid,
        state=record.state,
        # The worker is as far as its slowest query.
        batch_id=min((q.batch_id for q in queries), default=-1),
        offsets={q.name: dict(q.offsets) for q in queries},
        # Every query reads the worker's whole share of the source: an event
        # is processed once every query has processed it.
        rows_processed=min((q.rows_processed for q in queries), default=0),
        rows_per_second=worker_rows_per_second(record.queries),
        lag_bytes=worker_lag_bytes(record.queries),
        kafka_lag=worker_kafka_lag(record.queries),
        last_heartbeat=record.last_heartbeat,
        heartbeat_age_s=round(max(0.0, now - record.last_heartbeat), 3),
        pipeline_fingerprint=record.pipeline_fingerprint,
        dropped_checkpoints=record.dropped_checkpoints,
        failed_checkpoints=record.failed_checkpoints,
        checkpoint_error=record.checkpoint_error,
        waiting_for=record.waiting_for,
        checkpoint_volume=record.checkpoint_volume,
        checkpoints_completed=record.checkpoints_completed,
        last_checkpoint=checkpoint_view(record.last_checkpoint, now),
        recovery=recovery_view(record),
        recoveries=record.recoveries,
        registrations=record.registrations,
        durable_checkpoints=len(record.checkpoints),
        restarts=record.restarts,
        finished_nodes=list(record.finished_nodes),
        queries=queries,
        sinks=[sink_view(sink, now, batches.get(sink.query or sink.name, -1)) for sink in record.sinks],
    )


def build_status(records: list[WorkerRecord], expected: int, now: float,
                 savepoints: SavepointSummary, standbys: list[StandbyView]) -> PipelineStatus:
    workers = [worker_status(r, now) for r in sorted(records, key=lambda r: r.worker_index)]
    return PipelineStatus(
        state=pipeline_state(records, expected),
        workers_expected=expected,
        workers_registered=len(records),
        rows_processed=sum(w.rows_processed for w in workers),
        rows_per_second=sum(w.rows_per_second for w in workers),
        lag_bytes=sum(w.lag_bytes for w in workers),
        workers=workers,
        savepoints=savepoints,
        standbys=standbys,
    )
