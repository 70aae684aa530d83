"""Thin gRPC adapter over ControllerService: convert, call, convert back.

Core errors become gRPC status codes here and only here (``_status_for``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent import futures
from typing import Any, TypeVar

import grpc

from controller.core import errors
from controller.core.model import (
    CheckpointInfo,
    CheckpointNow,
    Command,
    Export,
    ExportAnswer,
    ProgressReport,
    QueryCut,
    QueryProgress,
    Recovery,
    Registration,
    ReportStatus,
    Restart,
    SavepointAnswer,
    SinkProgress,
    SinkState,
    WorkerState,
)
from controller.core.service import ControllerService
from proto.sparkpoint.v1 import controller_pb2 as pb
from proto.sparkpoint.v1 import controller_pb2_grpc as pb_grpc

_STATE_FROM_PB = {
    pb.WORKER_STATE_STARTING: WorkerState.STARTING,
    pb.WORKER_STATE_RECOVERING: WorkerState.RECOVERING,
    pb.WORKER_STATE_RUNNING: WorkerState.RUNNING,
    pb.WORKER_STATE_FAILED: WorkerState.FAILED,
    pb.WORKER_STATE_FINISHED: WorkerState.FINISHED,
}
_SINK_STATE_FROM_PB = {pb.SINK_STATE_OK: SinkState.OK, pb.SINK_STATE_WAITING: SinkState.WAITING}
_REPORT_STATUS_TO_PB = {
    ReportStatus.ACCEPTED: pb.REPORT_STATUS_ACCEPTED,
    ReportStatus.DUPLICATE: pb.REPORT_STATUS_DUPLICATE,
    ReportStatus.STALE: pb.REPORT_STATUS_STALE,
    ReportStatus.UNKNOWN_WORKER: pb.REPORT_STATUS_UNKNOWN_WORKER,
}


def _status_for(error: errors.ControllerError) -> grpc.StatusCode:
    if isinstance(error, errors.InvalidRequest):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(error, errors.NotFound):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(error, errors.Conflict):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL


Handler = TypeVar("Handler", bound=Callable[..., Any])


def _mapped(method: Handler) -> Handler:
    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except errors.ControllerError as error:
            context.abort(_status_for(error), str(error))

    return wrapper  # type: ignore[return-value]


def checkpoint_from_pb(ref: pb.CheckpointRef) -> CheckpointInfo:
    return CheckpointInfo(
        checkpoint_id=ref.checkpoint_id,
        queries=tuple(QueryCut(q.name, q.batch_id, dict(q.offsets)) for q in ref.queries),
        size_bytes=ref.size_bytes,
        duration_ms=ref.duration_ms,
        created_at=ref.created_at,
        bytes_copied=ref.bytes_copied,
    )


def command_to_pb(command: Command) -> pb.Command:
    if isinstance(command, CheckpointNow):
        return pb.Command(checkpoint_now=command.savepoint_id)
    if isinstance(command, Restart):
        return pb.Command(restart=True)
    assert isinstance(command, Export)
    return pb.Command(export=pb.ExportRequest(savepoint_id=command.savepoint_id,
                                              checkpoint_id=command.checkpoint_id, dir=command.dir))


class ControllerServicer(pb_grpc.ControllerServicer):
    def __init__(self, service: ControllerService) -> None:
        self._service = service

    @_mapped
    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.RegisterResponse:  # noqa: N802
        result = self._service.register(Registration(
            worker_id=request.worker_id,
            worker_index=request.worker_index,
            worker_count=request.worker_count,
            pipeline_fingerprint=request.pipeline_fingerprint,
            node_names=tuple(request.node_names),
            checkpoints=tuple(checkpoint_from_pb(c) for c in request.checkpoints),
        ))
        decision = result.restore
        restore = pb.RestorePlan(checkpoint_id=decision.checkpoint_id or 0, savepoint_id=decision.savepoint_id or "",
                                 import_dir=decision.import_dir, allow_republish=decision.allow_republish)
        return pb.RegisterResponse(
            session_id=result.session_id,
            assignment=pb.Assignment(worker_index=result.worker_index, worker_count=result.worker_count),
            restore=restore,
            last_checkpoint_id=result.last_checkpoint_id,
        )

    @_mapped
    def ReportProgress(self, request: pb.ProgressReport, context: grpc.ServicerContext) -> pb.ProgressAck:  # noqa: N802
        outcome = self._service.report_progress(ProgressReport(
            worker_id=request.worker_id,
            session_id=request.session_id,
            seq=request.seq,
            state=_STATE_FROM_PB.get(request.state, WorkerState.STARTING),
            queries=tuple(
                QueryProgress(q.name, q.batch_id, dict(q.offsets), q.rows_processed, q.rows_per_second,
                              q.active, q.error)
                for q in request.queries),
            dropped_checkpoints=request.dropped_checkpoints,
            restored_checkpoint_id=request.restored_checkpoint_id,
            recovery=Recovery(request.recovery.active, request.recovery.target_bytes, request.recovery.replayed_bytes),
            sinks=tuple(
                SinkProgress(s.name, s.target, s.contract, _SINK_STATE_FROM_PB.get(s.state, SinkState.OK), s.error,
                             s.waiting_since, s.next_retry_at, s.published_checkpoint_id, s.published_batch_id,
                             s.pending_batches)
                for s in request.sinks),
            savepoint_answers=tuple(SavepointAnswer(a.savepoint_id, a.checkpoint_id)
                                    for a in request.savepoint_answers),
            exports=tuple(ExportAnswer(e.savepoint_id, e.dir, e.error) for e in request.exports),
        ))
        return pb.ProgressAck(
            status=_REPORT_STATUS_TO_PB[outcome.status],
            commands=[command_to_pb(c) for c in outcome.commands],
            pinned_checkpoints=sorted(outcome.pinned),
        )

    @_mapped
    def CommitCheckpoint(self, request: pb.CheckpointCommit, context: grpc.ServicerContext) -> pb.CheckpointAck:  # noqa: N802
        outcome = self._service.commit_checkpoint(request.worker_id, checkpoint_from_pb(request.checkpoint),
                                                  request.session_id)
        return pb.CheckpointAck(status=_REPORT_STATUS_TO_PB[outcome.status],
                                completed_checkpoint_id=outcome.completed_checkpoint_id)


def start_grpc_server(service: ControllerService, bind: str, port: int) -> tuple[grpc.Server, int]:
    """Start serving; returns the server and the port it bound (``port=0`` picks one)."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    pb_grpc.add_ControllerServicer_to_server(ControllerServicer(service), server)
    bound = server.add_insecure_port(f"{bind}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind gRPC port {bind}:{port}")
    server.start()
    return server, bound
