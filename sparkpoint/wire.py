"""Conversion between ``sparkpoint.messages`` and the generated protobuf
messages of ``sparkpoint.v1``: the one place either service touches them.

The controller's gRPC servicer reads requests (``*_from_pb``) and writes
replies (``*_to_pb``); the worker's gRPC client does the reverse with the
same functions. An enum value a newer peer sends that this side does not
know maps to a safe default, named at each mapping.
"""

from __future__ import annotations

from sparkpoint.messages import (
    CheckpointInfo,
    CheckpointNow,
    Command,
    CommitOutcome,
    Export,
    ExportAnswer,
    PipelineNode,
    ProgressReport,
    QueryCut,
    QueryProgress,
    Recovery,
    RegisterResult,
    Registration,
    ReportOutcome,
    ReportStatus,
    Restart,
    Restarts,
    RestoreDecision,
    SavepointAnswer,
    SinkContract,
    SinkProgress,
    SinkState,
    StandbyReport,
    StandbyState,
    VolumeFence,
    VolumeUse,
    WorkerState,
)
from sparkpoint.v1 import controller_pb2 as pb

_WORKER_STATES = {
    WorkerState.STARTING: pb.WORKER_STATE_STARTING,
    WorkerState.RECOVERING: pb.WORKER_STATE_RECOVERING,
    WorkerState.RUNNING: pb.WORKER_STATE_RUNNING,
    WorkerState.FAILED: pb.WORKER_STATE_FAILED,
    WorkerState.FINISHED: pb.WORKER_STATE_FINISHED,
    WorkerState.RESTARTING: pb.WORKER_STATE_RESTARTING,
}
_REPORT_STATUSES = {
    ReportStatus.ACCEPTED: pb.REPORT_STATUS_ACCEPTED,
    ReportStatus.DUPLICATE: pb.REPORT_STATUS_DUPLICATE,
    ReportStatus.STALE: pb.REPORT_STATUS_STALE,
    ReportStatus.UNKNOWN_WORKER: pb.REPORT_STATUS_UNKNOWN_WORKER,
}
_SINK_STATES = {SinkState.OK: pb.SINK_STATE_OK, SinkState.WAITING: pb.SINK_STATE_WAITING}
_SINK_CONTRACTS = {
    SinkContract.TRANSACTIONAL: pb.SINK_CONTRACT_TRANSACTIONAL,
    SinkContract.UPSERT: pb.SINK_CONTRACT_UPSERT,
    SinkContract.AT_LEAST_ONCE: pb.SINK_CONTRACT_AT_LEAST_ONCE,
}
_STANDBY_STATES = {StandbyState.STARTING: pb.STANDBY_STATE_STARTING, StandbyState.READY: pb.STANDBY_STATE_READY}


def _reverse(mapping: dict) -> dict:
    return {value: key for key, value in mapping.items()}


_WORKER_STATES_FROM_PB = _reverse(_WORKER_STATES)
_REPORT_STATUSES_FROM_PB = _reverse(_REPORT_STATUSES)
_SINK_STATES_FROM_PB = _reverse(_SINK_STATES)
_SINK_CONTRACTS_FROM_PB = _reverse(_SINK_CONTRACTS)
_STANDBY_STATES_FROM_PB = _reverse(_STANDBY_STATES)


# -- checkpoints -----------------------------------------------------------------------
def checkpoint_to_pb(checkpoint: CheckpointInfo) -> pb.CheckpointRef:
    return pb.CheckpointRef(
        checkpoint_id=checkpoint.checkpoint_id,
        queries=[pb.QueryCut(name=q.name, batch_id=q.batch_id, offsets=q.offsets) for q in checkpoint.queries],
        size_bytes=checkpoint.size_bytes,
        duration_ms=checkpoint.duration_ms,
        created_at=checkpoint.created_at,
        bytes_copied=checkpoint.bytes_copied,
    )


def checkpoint_from_pb(ref: pb.CheckpointRef) -> CheckpointInfo:
    return CheckpointInfo(
        checkpoint_id=ref.checkpoint_id,
        queries=tuple(QueryCut(q.name, q.batch_id, dict(q.offsets)) for q in ref.queries),
        size_bytes=ref.size_bytes,
        duration_ms=ref.duration_ms,
        created_at=ref.created_at,
        bytes_copied=ref.bytes_copied,
    )


def commit_to_pb(worker_id: str, session_id: str, checkpoint: CheckpointInfo) -> pb.CheckpointCommit:
    return pb.CheckpointCommit(worker_id=worker_id, session_id=session_id, checkpoint=checkpoint_to_pb(checkpoint))


def commit_outcome_to_pb(outcome: CommitOutcome) -> pb.CheckpointAck:
    return pb.CheckpointAck(status=_REPORT_STATUSES[outcome.status],
                            completed_checkpoint_id=outcome.completed_checkpoint_id)


def commit_outcome_from_pb(ack: pb.CheckpointAck) -> CommitOutcome:
    # An unknown status is treated as "not accepted, try again later".
    return CommitOutcome(_REPORT_STATUSES_FROM_PB.get(ack.status, ReportStatus.STALE), ack.completed_checkpoint_id)


# -- registration ----------------------------------------------------------------------
def registration_to_pb(registration: Registration) -> pb.RegisterRequest:
    return pb.RegisterRequest(
        worker_id=registration.worker_id,
        worker_index=registration.worker_index,
        worker_count=registration.worker_count,
        pipeline_fingerprint=registration.pipeline_fingerprint,
        node_names=list(registration.node_names),
        checkpoints=[checkpoint_to_pb(c) for c in registration.checkpoints],
        nodes=[pb.PipelineNode(name=n.name, kind=n.kind, stateful=n.stateful, inputs=list(n.inputs))
               for n in registration.nodes],
        session_id=registration.session_id,
        fence=pb.VolumeFence(volume_id=registration.fence.volume_id, generation=registration.fence.generation),
        host=registration.host,
        pid=registration.pid,
    )


def registration_from_pb(request: pb.RegisterRequest) -> Registration:
    return Registration(
        worker_id=request.worker_id,
        worker_index=request.worker_index,
        worker_count=request.worker_count,
        pipeline_fingerprint=request.pipeline_fingerprint,
        node_names=tuple(request.node_names),
        checkpoints=tuple(checkpoint_from_pb(c) for c in request.checkpoints),
        nodes=tuple(PipelineNode(n.name, n.kind, n.stateful, tuple(n.inputs)) for n in request.nodes),
        session_id=request.session_id,
        fence=VolumeFence(request.fence.volume_id, request.fence.generation),
        host=request.host,
        pid=request.pid,
    )


def register_result_to_pb(result: RegisterResult) -> pb.RegisterResponse:
    decision = result.restore
    return pb.RegisterResponse(
        session_id=result.session_id,
        assignment=pb.Assignment(worker_index=result.worker_index, worker_count=result.worker_count),
        restore=pb.RestorePlan(checkpoint_id=decision.checkpoint_id or 0, savepoint_id=decision.savepoint_id or "",
                               import_dir=decision.import_dir, allow_republish=decision.allow_republish),
        last_checkpoint_id=result.last_checkpoint_id,
    )


def register_result_from_pb(response: pb.RegisterResponse) -> RegisterResult:
    plan = response.restore
    return RegisterResult(
        session_id=response.session_id,
        worker_index=response.assignment.worker_index,
        worker_count=response.assignment.worker_count,
        restore=RestoreDecision(plan.checkpoint_id or None, plan.savepoint_id or None, plan.import_dir,
                                plan.allow_republish),
        last_checkpoint_id=response.last_checkpoint_id,
    )


# -- progress reports ----------------------------------------------------------------------
def report_to_pb(report: ProgressReport) -> pb.ProgressReport:
    return pb.ProgressReport(
        worker_id=report.worker_id,
        session_id=report.session_id,
        seq=report.seq,
        state=_WORKER_STATES[report.state],
        queries=[pb.QueryProgress(name=q.name, batch_id=q.batch_id, offsets=q.offsets,
                                  rows_processed=q.rows_processed, rows_per_second=q.rows_per_second,
                                  active=q.active, error=q.error, latest_offsets=q.latest_offsets,
                                  data_losses=q.data_losses, late_rows=q.late_rows)
                 for q in report.queries],
        dropped_checkpoints=report.dropped_checkpoints,
        failed_checkpoints=report.failed_checkpoints,
        checkpoint_error=report.checkpoint_error,
        checkpoint_volume=pb.VolumeUse(used_bytes=report.checkpoint_volume.used_bytes,
                                       free_bytes=report.checkpoint_volume.free_bytes),
        restored_checkpoint_id=report.restored_checkpoint_id,
        recovery=pb.Recovery(active=report.recovery.active, target_bytes=report.recovery.target_bytes,
                             replayed_bytes=report.recovery.replayed_bytes, started_at=report.recovery.started_at,
                             duration_ms=report.recovery.duration_ms),
        sinks=[pb.SinkProgress(
            name=s.name, query=s.query, target=s.target, contract=_SINK_CONTRACTS[s.contract], state=_SINK_STATES[s.state],
            error=s.error, waiting_since=s.waiting_since, next_retry_at=s.next_retry_at,
            published_checkpoint_id=s.published_checkpoint_id, published_batch_id=s.published_batch_id,
            pending_batches=s.pending_batches, retries=s.retries) for s in report.sinks],
        restarts=pb.Restarts(count=report.restarts.count, same_in_a_row=report.restarts.same_in_a_row,
                             last_error=report.restarts.last_error, last_failed_at=report.restarts.last_failed_at),
        savepoint_answers=[pb.SavepointAnswer(savepoint_id=a.savepoint_id, checkpoint_id=a.checkpoint_id)
                           for a in report.savepoint_answers],
        exports=[pb.ExportAnswer(savepoint_id=e.savepoint_id, dir=e.dir, error=e.error) for e in report.exports],
        finished_nodes=list(report.finished_nodes),
        checkpoints=None if report.checkpoints is None else pb.CheckpointList(
            checkpoints=[checkpoint_to_pb(c) for c in report.checkpoints]),
        waiting_for=report.waiting_for,
    )


def report_from_pb(request: pb.ProgressReport) -> ProgressReport:
    return ProgressReport(
        worker_id=request.worker_id,
        session_id=request.session_id,
        seq=request.seq,
        # A state this controller does not know yet: starting (it promises nothing).
        state=_WORKER_STATES_FROM_PB.get(request.state, WorkerState.STARTING),
        queries=tuple(QueryProgress(q.name, q.batch_id, dict(q.offsets), q.rows_processed, q.rows_per_second,
                                    q.active, q.error, dict(q.latest_offsets), q.data_losses,
                                    dict(q.late_rows))
                      for q in request.queries),
        dropped_checkpoints=request.dropped_checkpoints,
        failed_checkpoints=request.failed_checkpoints,
        checkpoint_error=request.checkpoint_error,
        checkpoint_volume=VolumeUse(request.checkpoint_volume.used_bytes, request.checkpoint_volume.free_bytes),
        restored_checkpoint_id=request.restored_checkpoint_id,
        recovery=Recovery(request.recovery.active, request.recovery.target_bytes, request.recovery.replayed_bytes,
                          request.recovery.started_at, request.recovery.duration_ms),
        sinks=tuple(SinkProgress(
            name=s.name, query=s.query, target=s.target,
            # An unknown contract counts as transactional: the republish check stays on the safe side.
            contract=_SINK_CONTRACTS_FROM_PB.get(s.contract, SinkContract.TRANSACTIONAL),
            state=_SINK_STATES_FROM_PB.get(s.state, SinkState.OK), error=s.error,
            waiting_since=s.waiting_since, next_retry_at=s.next_retry_at,
            published_checkpoint_id=s.published_checkpoint_id, published_batch_id=s.published_batch_id,
            pending_batches=s.pending_batches, retries=s.retries) for s in request.sinks),
        restarts=Restarts(request.restarts.count, request.restarts.same_in_a_row, request.restarts.last_error,
                          request.restarts.last_failed_at),
        savepoint_answers=tuple(SavepointAnswer(a.savepoint_id, a.checkpoint_id) for a in request.savepoint_answers),
        exports=tuple(ExportAnswer(e.savepoint_id, e.dir, e.error) for e in request.exports),
        finished_nodes=tuple(request.finished_nodes),
        checkpoints=tuple(checkpoint_from_pb(c) for c in request.checkpoints.checkpoints)
        if request.HasField("checkpoints") else None,
        waiting_for=request.waiting_for,
    )


def _command_to_pb(command: Command) -> pb.Command:
    if isinstance(command, CheckpointNow):
        return pb.Command(checkpoint_now=command.savepoint_id)
    if isinstance(command, Restart):
        return pb.Command(restart=True)
    return pb.Command(export=pb.ExportRequest(savepoint_id=command.savepoint_id,
                                              checkpoint_id=command.checkpoint_id, dir=command.dir))


def _command_from_pb(command: pb.Command) -> Command | None:
    kind = command.WhichOneof("kind")
    if kind == "checkpoint_now":
        return CheckpointNow(command.checkpoint_now)
    if kind == "restart":
        return Restart()
    if kind == "export":
        return Export(command.export.savepoint_id, command.export.checkpoint_id, command.export.dir)
    return None     # a command of a newer controller: ignored


def report_outcome_to_pb(outcome: ReportOutcome) -> pb.ProgressAck:
    return pb.ProgressAck(status=_REPORT_STATUSES[outcome.status],
                          commands=[_command_to_pb(c) for c in outcome.commands],
                          pinned_checkpoints=sorted(outcome.pinned))


def report_outcome_from_pb(ack: pb.ProgressAck) -> ReportOutcome:
    commands = (_command_from_pb(c) for c in ack.commands)
    return ReportOutcome(_REPORT_STATUSES_FROM_PB.get(ack.status, ReportStatus.STALE),
                         tuple(c for c in commands if c is not None), frozenset(ack.pinned_checkpoints))


# -- standbys ----------------------------------------------------------------------
def standby_report_to_pb(report: StandbyReport) -> pb.StandbyReport:
    return pb.StandbyReport(worker_id=report.worker_id, host=report.host, pid=report.pid,
                            state=_STANDBY_STATES[report.state], started_at=report.started_at)


def standby_report_from_pb(request: pb.StandbyReport) -> StandbyReport:
    # A state this side does not know: the standby is up, not (yet) ready.
    return StandbyReport(request.worker_id, request.host, request.pid,
                         _STANDBY_STATES_FROM_PB.get(request.state, StandbyState.STARTING), request.started_at)
