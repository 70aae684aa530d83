"""The worker-controller protocol as plain Python: what the two services say
to each other, independent of gRPC.

Each service converts between these and the generated protobuf messages at
its edge only (``sparkpoint.wire``: the controller's gRPC servicer, the
worker's gRPC client); everything behind the edges works with these.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from sparkpoint.offsets import kafka_partition


class WorkerState(str, enum.Enum):
    STARTING = "starting"
    RECOVERING = "recovering"
    RESTARTING = "restarting"   # a query failed: restoring into the living Spark session
    RUNNING = "running"
    FAILED = "failed"
    FINISHED = "finished"


class ReportStatus(str, enum.Enum):
    """Outcome of a report or commit. Duplicates and late reports are expected races, not errors."""

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    STALE = "stale"
    UNKNOWN_WORKER = "unknown_worker"


class SinkState(str, enum.Enum):
    OK = "ok"
    WAITING = "waiting"     # its target fails; the worker retries with backoff, staging meanwhile


class SinkContract(str, enum.Enum):
    """What a sink promises; the controller's republish check depends on it."""

    TRANSACTIONAL = "transactional"     # published on checkpoint completion: exactly once
    UPSERT = "upsert"                   # idempotent upsert, at once
    AT_LEAST_ONCE = "at-least-once"     # published as it comes (files with checkpoints off)


@dataclass(frozen=True)
class QueryCut:
    """One query's part of a checkpoint: its last committed batch and the
    source offsets after it (log partition -> byte offset)."""

    name: str
    batch_id: int
    offsets: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointInfo:
    """A durable checkpoint a worker holds. Ids start at 1 and strictly
    increase per worker, across restarts."""

    checkpoint_id: int
    queries: tuple[QueryCut, ...] = ()
    size_bytes: int = 0         # everything the checkpoint references
    duration_ms: float = 0.0
    created_at: float = 0.0     # seconds since the epoch
    bytes_copied: int = 0       # what this checkpoint added (incremental)


@dataclass(frozen=True)
class Recovery:
    """How far a restored worker's replay has caught up with the source as
    it was when the worker started."""

    active: bool = False
    target_bytes: int = 0
    replayed_bytes: int = 0
    started_at: float = 0.0     # worker's clock, when this run began restoring; 0: it restored nothing
    duration_ms: float = 0.0    # from started_at until caught up; 0 while active


@dataclass(frozen=True)
class Restarts:
    """A worker's restarts in its living Spark session after a query failed
    (its process and JVM lived on)."""

    count: int = 0              # since the worker's process started
    same_in_a_row: int = 0      # the last failure's, counting it (SP_MAX_SAME_FAILURES stops the worker)
    last_error: str = ""        # the last failure, one line
    last_failed_at: float = 0.0     # worker's clock, seconds since the epoch; 0: none yet


@dataclass(frozen=True)
class PipelineNode:
    """One node of the pipeline graph, as the controller shows it."""

    name: str
    kind: str                       # e.g. "source.log", "map", "aggregate", "sink.files"
    stateful: bool = False
    inputs: tuple[str, ...] = ()    # the nodes feeding it


@dataclass(frozen=True)
class VolumeUse:
    """A filesystem's use in bytes: used, and free for the worker (a full
    checkpoint volume fails checkpoints and stalls staging)."""

    used_bytes: int = 0
    free_bytes: int = 0


@dataclass(frozen=True)
class VolumeFence:
    """A worker's checkpoint volume (its id) and which taking of its lock
    this process holds (``generation``: each process taking it counts one
    up). The lock is released only when its holder ends, so a later
    generation of the same volume proves every earlier holder gone."""

    volume_id: str = ""         # "": no fence
    generation: int = 0

    def supersedes(self, other: VolumeFence) -> bool:
        return bool(self.volume_id) and self.volume_id == other.volume_id and self.generation > other.generation


@dataclass(frozen=True)
class Registration:
    worker_id: str
    worker_index: int
    worker_count: int
    pipeline_fingerprint: str
    node_names: tuple[str, ...] = ()
    checkpoints: tuple[CheckpointInfo, ...] = ()    # durable on the worker's volume, oldest first
    nodes: tuple[PipelineNode, ...] = ()            # the graph, in pipeline order
    session_id: str = ""                            # the session this continues ("": a new process)
    fence: VolumeFence = VolumeFence()              # its checkpoint volume's, as this process holds it
    host: str = ""                                  # the process's host name ("": not said) ...
    pid: int = 0                                    # ... and its pid there (0: not said)


class StandbyState(str, enum.Enum):
    STARTING = "starting"   # holding back or starting its Spark session
    READY = "ready"         # its session up and rehearsed: it takes over the first index whose worker is gone


@dataclass(frozen=True)
class StandbyReport:
    """A warm standby waiting to take over a worker's index, as it says
    every report interval."""

    worker_id: str          # whom its credentials name: authentication only
    host: str               # its process's host name ...
    pid: int                # ... and pid there: together they name it
    state: StandbyState
    started_at: float = 0.0     # when its process started (seconds since the epoch, its clock)


@dataclass(frozen=True)
class RestoreDecision:
    """What a worker restores: nothing, a checkpoint of its own, or its part of
    a savepoint the user chose to restore."""

    checkpoint_id: int | None = None    # None: nothing, start from the beginning of the source
    savepoint_id: str | None = None
    # An imported savepoint: this worker's part, relative to the savepoint
    # root; checkpoint_id is its id there.
    import_dir: str = ""
    # The user accepted that transactional sinks publish again what they
    # published past this checkpoint.
    allow_republish: bool = False

    def describe(self) -> str:
        if self.checkpoint_id is None:
            return "nothing"
        where = f" of savepoint {self.savepoint_id}" if self.savepoint_id else ""
        imported = f" (imported from {self.import_dir})" if self.import_dir else ""
        return f"checkpoint {self.checkpoint_id}{where}{imported}"


@dataclass(frozen=True)
class RegisterResult:
    session_id: str             # progress from an older registration is stale
    worker_index: int
    worker_count: int
    restore: RestoreDecision
    last_checkpoint_id: int = 0     # new ids go above it even if the worker's volume lost its checkpoints


@dataclass(frozen=True)
class QueryProgress:
    """One streaming query's progress (one query per sink node)."""

    name: str
    batch_id: int = -1
    offsets: dict[str, int] = field(default_factory=dict)
    rows_processed: int = 0
    rows_per_second: float = 0.0
    active: bool = True
    error: str = ""
    # The source's end when the batch was planned; minus ``offsets``: how far behind.
    latest_offsets: dict[str, int] = field(default_factory=dict)
    # Records its Kafka source found gone and went on past (fail_on_data_loss=False): how many times.
    data_losses: int = 0
    # Rows each stateful node dropped behind its watermark in this run (node name -> rows).
    late_rows: dict[str, int] = field(default_factory=dict)

    @property
    def lag_bytes(self) -> int:
        """Bytes of the log behind its end, as of the last batch."""
        return sum(max(0, end - self.offsets.get(partition, 0)) for partition, end in self.latest_offsets.items()
                   if kafka_partition(partition) is None)

    @property
    def kafka_lag(self) -> dict[str, int]:
        """Consumer lag: each Kafka partition's records past the last batch,
        as of its planning (``<topic>:<partition>`` -> records)."""
        return {key: max(0, end - self.offsets.get(key, 0)) for key, end in sorted(self.latest_offsets.items())
                if kafka_partition(key) is not None}


@dataclass(frozen=True)
class SinkProgress:
    """One sink's publishing on one worker."""

    name: str
    target: str = ""            # e.g. "PostgreSQL table trades (transactional)"
    contract: SinkContract = SinkContract.TRANSACTIONAL
    state: SinkState = SinkState.OK
    error: str = ""             # why it is waiting
    waiting_since: float = 0.0  # worker's clock, seconds since the epoch; 0 when not waiting
    next_retry_at: float = 0.0
    published_checkpoint_id: int = 0    # the mark: published up to this checkpoint ...
    published_batch_id: int = -1        # ... and this batch (-1: nothing yet)
    pending_batches: int = 0            # staged, not yet published
    retries: int = 0                    # failed publish attempts in this run
    query: str = ""                     # the query whose batches it publishes (empty: the one named after it)


@dataclass(frozen=True)
class SavepointAnswer:
    """The checkpoint that covers a worker's state as of a savepoint request."""

    savepoint_id: str
    checkpoint_id: int


@dataclass(frozen=True)
class ExportAnswer:
    """A worker wrote (or failed to write) its part of an export to ``dir``."""

    savepoint_id: str
    dir: str
    error: str = ""     # empty: written and durable


@dataclass(frozen=True)
class ProgressReport:
    worker_id: str = ""
    session_id: str = ""
    seq: int = 0                # strictly increasing within a session
    state: WorkerState = WorkerState.STARTING
    queries: tuple[QueryProgress, ...] = ()
    dropped_checkpoints: int = 0
    failed_checkpoints: int = 0
    checkpoint_error: str = ""      # the last failed checkpoint's error
    checkpoint_volume: VolumeUse = VolumeUse()      # SP_CHECKPOINT_DIR's filesystem
    restored_checkpoint_id: int = 0     # 0: started without a checkpoint
    recovery: Recovery = Recovery()
    sinks: tuple[SinkProgress, ...] = ()
    restarts: Restarts = Restarts()
    savepoint_answers: tuple[SavepointAnswer, ...] = ()
    exports: tuple[ExportAnswer, ...] = ()
    finished_nodes: tuple[str, ...] = ()    # nodes whose every branch has finished
    # The durable checkpoints on the worker's volume, oldest first; None: not
    # known yet in this run (the controller keeps what it had).
    checkpoints: tuple[CheckpointInfo, ...] | None = None
    waiting_for: str = ""       # why it waits before running its queries (a source missing); "": it does not


# Commands the acknowledgement of a report carries to its worker. Each is
# repeated on every report until the worker's answer (or registration) makes
# it moot, so a lost acknowledgement loses nothing.
@dataclass(frozen=True)
class CheckpointNow:
    """Take a checkpoint now for this savepoint; answer with a ``SavepointAnswer``."""

    savepoint_id: str


@dataclass(frozen=True)
class Restart:
    """Stop the queries and register again: a savepoint restore waits."""


@dataclass(frozen=True)
class Export:
    """Copy checkpoint ``checkpoint_id`` into ``dir`` (relative to the savepoint
    root, checkpoint-store layout); answer with an ``ExportAnswer``."""

    savepoint_id: str
    checkpoint_id: int
    dir: str


Command = CheckpointNow | Restart | Export


@dataclass(frozen=True)
class ReportOutcome:
    status: ReportStatus
    commands: tuple[Command, ...] = ()
    pinned: frozenset[int] = frozenset()    # the worker's checkpoints retention must keep


@dataclass(frozen=True)
class CommitOutcome:
    """ACCEPTED: a newer checkpoint; DUPLICATE: one the controller already holds
    (or an older one, subsumed). Either way ``completed_checkpoint_id`` is
    the newest complete checkpoint of the worker."""

    status: ReportStatus
    completed_checkpoint_id: int = 0
