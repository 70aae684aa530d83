"""gRPC client for the controller: registration and progress reports."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import grpc

from proto.sparkpoint.v1 import controller_pb2 as pb
from proto.sparkpoint.v1 import controller_pb2_grpc as pb_grpc
from worker.control.backoff import Backoff
from worker.checkpointing.manifest import Manifest
from worker.publishing.publisher import SinkStatus
from worker.runtime.progress import QueryStatus

log = logging.getLogger("sparkpoint.worker.control")

# Errors that mean "the controller is not reachable right now": retry.
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}


class RegistrationRefused(Exception):
    """The controller refused this worker; the message says why."""


class NotRegistered(Exception):
    """The controller has no record of this worker: register again, then retry."""


@dataclass(frozen=True)
class WorkerIdentity:
    worker_id: str
    worker_index: int
    worker_count: int
    pipeline_fingerprint: str
    node_names: tuple[str, ...]


@dataclass(frozen=True)
class RestoreTarget:
    """What the controller told this worker to restore (``RestorePlan``)."""

    checkpoint_id: int | None = None     # None: nothing, start from the beginning of the source
    savepoint_id: str = ""               # the user chose this savepoint
    import_dir: str = ""                 # an imported savepoint's part, relative to SP_SAVEPOINT_DIR
    allow_republish: bool = False        # output published past it may be published again

    def describe(self) -> str:
        if self.checkpoint_id is None:
            return "nothing"
        where = f" of savepoint {self.savepoint_id}" if self.savepoint_id else ""
        imported = f" (imported from {self.import_dir})" if self.import_dir else ""
        return f"checkpoint {self.checkpoint_id}{where}{imported}"


@dataclass(frozen=True)
class Registered:
    session_id: str
    worker_index: int
    worker_count: int
    restore: RestoreTarget
    last_checkpoint_id: int


# Commands the controller sends with its acknowledgement of a report.
@dataclass(frozen=True)
class CheckpointNow:
    """Take a checkpoint now for this savepoint and answer with its id."""

    savepoint_id: str


@dataclass(frozen=True)
class Restart:
    """Stop the queries and register again: a new restore plan waits."""


@dataclass(frozen=True)
class Export:
    """Copy checkpoint ``checkpoint_id`` of a savepoint to ``dir`` (relative to SP_SAVEPOINT_DIR)."""

    savepoint_id: str
    checkpoint_id: int
    dir: str


Command = CheckpointNow | Restart | Export


@dataclass(frozen=True)
class ExportAnswer:
    savepoint_id: str
    dir: str
    error: str = ""      # empty: written and durable


@dataclass(frozen=True)
class ReportReply:
    status: int                          # pb.ReportStatus
    commands: tuple[Command, ...] = ()
    pinned: frozenset[int] = frozenset()  # this worker's checkpoints that savepoints pin


def command_from_pb(command: pb.Command) -> Command | None:
    kind = command.WhichOneof("kind")
    if kind == "checkpoint_now":
        return CheckpointNow(command.checkpoint_now)
    if kind == "restart":
        return Restart()
    if kind == "export":
        return Export(command.export.savepoint_id, command.export.checkpoint_id, command.export.dir)
    return None     # a command of a newer controller: ignored


def checkpoint_ref(manifest: Manifest) -> pb.CheckpointRef:
    return pb.CheckpointRef(
        checkpoint_id=manifest.checkpoint_id,
        queries=[pb.QueryCut(name=q.name, batch_id=q.batch_id, offsets=q.offsets) for q in manifest.queries],
        size_bytes=manifest.size_bytes,
        duration_ms=manifest.duration_ms,
        created_at=manifest.created_at,
        bytes_copied=manifest.bytes_copied,
    )


def sink_progress(status: SinkStatus) -> pb.SinkProgress:
    return pb.SinkProgress(
        name=status.name, target=status.target, contract=status.contract,
        state=pb.SINK_STATE_WAITING if status.waiting else pb.SINK_STATE_OK, error=status.error,
        waiting_since=status.waiting_since, next_retry_at=status.next_retry_at,
        published_checkpoint_id=status.published_checkpoint_id, published_batch_id=status.published_batch_id,
        pending_batches=status.pending_batches,
    )


class ControllerClient:
    def __init__(self, address: str, identity: WorkerIdentity, *, timeout_s: float = 5.0,
                 checkpoints: Callable[[], list[Manifest]] = list) -> None:
        self._channel = grpc.insecure_channel(address)
        self._stub = pb_grpc.ControllerStub(self._channel)
        self._identity = identity
        self._timeout_s = timeout_s
        self._checkpoints = checkpoints   # durable checkpoints on the volume, read at each registration
        self.address = address
        self.session_id = ""

    def register_once(self) -> Registered:
        identity = self._identity
        try:
            response = self._stub.Register(pb.RegisterRequest(
                worker_id=identity.worker_id,
                worker_index=identity.worker_index,
                worker_count=identity.worker_count,
                pipeline_fingerprint=identity.pipeline_fingerprint,
                node_names=list(identity.node_names),
                checkpoints=[checkpoint_ref(m) for m in self._checkpoints()],
            ), timeout=self._timeout_s)
        except grpc.RpcError as error:
            if error.code() in RETRYABLE:
                raise
            raise RegistrationRefused(error.details()) from None
        plan = response.restore
        self.session_id = response.session_id
        return Registered(
            session_id=response.session_id,
            worker_index=response.assignment.worker_index,
            worker_count=response.assignment.worker_count,
            restore=RestoreTarget(plan.checkpoint_id or None, plan.savepoint_id, plan.import_dir,
                                  plan.allow_republish),
            last_checkpoint_id=response.last_checkpoint_id,
        )

    def register(self, stop: threading.Event, backoff: Backoff | None = None,
                 wait: Callable[[float], bool] | None = None) -> Registered | None:
        """Register, retrying with backoff while the controller is unreachable.

        Returns None if ``stop`` is set first; raises RegistrationRefused if the
        controller says no.
        """
        backoff = backoff or Backoff()
        wait = wait or stop.wait
        announced = False
        while not stop.is_set():
            try:
                return self.register_once()
            except grpc.RpcError as error:
                if not announced:
                    log.warning("controller at %s unreachable (%s); retrying with backoff",
                                self.address, error.code().name)
                    announced = True
                wait(backoff.next_delay())
        return None

    def report(self, seq: int, state: int, queries: list[QueryStatus], *, dropped_checkpoints: int = 0,
               restored_checkpoint_id: int = 0, recovery: pb.Recovery | None = None,
               sinks: list[SinkStatus] = (), savepoint_answers: Mapping[str, int] | None = None,
               exports: Sequence[ExportAnswer] = ()) -> ReportReply:
        """Send one progress report; returns the controller's status, its commands and pins."""
        ack = self._stub.ReportProgress(pb.ProgressReport(
            worker_id=self._identity.worker_id,
            session_id=self.session_id,
            seq=seq,
            state=state,
            queries=[pb.QueryProgress(name=q.name, batch_id=q.batch_id, offsets=q.offsets,
                                      rows_processed=q.rows_processed, rows_per_second=q.rows_per_second,
                                      active=q.active, error=q.error) for q in queries],
            dropped_checkpoints=dropped_checkpoints,
            restored_checkpoint_id=restored_checkpoint_id,
            recovery=recovery,
            sinks=[sink_progress(s) for s in sinks],
            savepoint_answers=[pb.SavepointAnswer(savepoint_id=savepoint_id, checkpoint_id=checkpoint_id)
                               for savepoint_id, checkpoint_id in (savepoint_answers or {}).items()],
            exports=[pb.ExportAnswer(savepoint_id=e.savepoint_id, dir=e.dir, error=e.error) for e in exports],
        ), timeout=self._timeout_s)
        commands = (command_from_pb(c) for c in ack.commands)
        return ReportReply(ack.status, tuple(c for c in commands if c is not None),
                           frozenset(ack.pinned_checkpoints))

    def commit_checkpoint(self, manifest: Manifest) -> int:
        """Commit a durable checkpoint; returns the id the controller holds as complete."""
        ack = self._stub.CommitCheckpoint(pb.CheckpointCommit(
            worker_id=self._identity.worker_id,
            session_id=self.session_id,
            checkpoint=checkpoint_ref(manifest),
        ), timeout=self._timeout_s)
        if ack.status == pb.REPORT_STATUS_UNKNOWN_WORKER:
            # A restarted controller that has not seen us yet: the reporter
            # re-registers; this commit is retried.
            raise NotRegistered("the controller does not know this worker yet (restarted?)")
        return ack.completed_checkpoint_id

    def close(self) -> None:
        self._channel.close()
