"""gRPC client for the controller: registration and progress reports."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
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
class Registered:
    session_id: str
    worker_index: int
    worker_count: int
    restore_checkpoint_id: int | None
    restore_savepoint_id: str | None
    last_checkpoint_id: int


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
        restore = response.restore
        source = restore.WhichOneof("source")
        self.session_id = response.session_id
        return Registered(
            session_id=response.session_id,
            worker_index=response.assignment.worker_index,
            worker_count=response.assignment.worker_count,
            restore_checkpoint_id=restore.checkpoint_id if source == "checkpoint_id" else None,
            restore_savepoint_id=restore.savepoint_id if source == "savepoint_id" else None,
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
               sinks: list[SinkStatus] = ()) -> int:
        """Send one progress report; returns the controller's ReportStatus."""
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
        ), timeout=self._timeout_s)
        return ack.status

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
