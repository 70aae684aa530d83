"""The wire conversion: every message survives a trip through protobuf
unchanged, and values a newer peer may send map to safe defaults."""

from __future__ import annotations

from sparkpoint import wire
from sparkpoint.messages import (
    CheckpointInfo,
    CheckpointNow,
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
    WorkerState,
)
from sparkpoint.v1 import controller_pb2 as pb

CHECKPOINT = CheckpointInfo(7, (QueryCut("out", 3, {"0": 120, "1": 64}),), size_bytes=900, duration_ms=12.5,
                            created_at=1700000000.5, bytes_copied=300)


def reparsed(message, to_pb, from_pb):
    """Through protobuf's own bytes, as the other side reads it."""
    encoded = to_pb(message)
    return from_pb(type(encoded).FromString(encoded.SerializeToString()))


def test_registration_and_its_result_round_trip():
    registration = Registration("worker-1", 1, 2, "fp", ("trades", "agg", "out"), (CHECKPOINT,), (
        PipelineNode("trades", "source.log"), PipelineNode("agg", "aggregate", True, ("trades",)),
        PipelineNode("out", "sink.files", inputs=("agg",))), "s0", VolumeFence("f" * 32, 3), "c0ffee", 7)
    assert reparsed(registration, wire.registration_to_pb, wire.registration_from_pb) == registration
    for restore in (RestoreDecision(), RestoreDecision(4, "sp-000002", "exports/a/worker-1", True)):
        result = RegisterResult("s1", 1, 2, restore, last_checkpoint_id=9)
        assert reparsed(result, wire.register_result_to_pb, wire.register_result_from_pb) == result


def test_a_full_report_round_trips():
    report = ProgressReport(
        worker_id="worker-0", session_id="s1", seq=4, state=WorkerState.RECOVERING,
        queries=(QueryProgress("out", 5, {"0": 480}, 20, 12.5, True, "", {"0": 700}, 1, {"bars": 3}),
                 QueryProgress("agg", 2, active=False, error="boom")),
        dropped_checkpoints=2, failed_checkpoints=1, checkpoint_error="checkpoint 3: OSError: disk full",
        restored_checkpoint_id=3, recovery=Recovery(True, 1000, 400, 1700000000.25, 0.0),
        sinks=(SinkProgress("events_pg", "PostgreSQL table events", SinkContract.TRANSACTIONAL, SinkState.WAITING,
                            "OperationalError: refused", 10.0, 12.0, 3, 5, 1, 4),
               SinkProgress("vwap_pg", "PostgreSQL table vwap", SinkContract.UPSERT, published_batch_id=7)),
        savepoint_answers=(SavepointAnswer("sp-000001", 3),),
        exports=(ExportAnswer("sp-000001", "exports/a/worker-0", "disk full"),),
        finished_nodes=("trades",),
        checkpoints=(CHECKPOINT,),
        restarts=Restarts(3, 2, "ValueError: bad row", 1700000001.5),
    )
    assert reparsed(report, wire.report_to_pb, wire.report_from_pb) == report


def test_checkpoints_not_known_yet_differ_from_none_held():
    for checkpoints in (None, ()):
        report = ProgressReport(checkpoints=checkpoints)
        assert reparsed(report, wire.report_to_pb, wire.report_from_pb).checkpoints == checkpoints


def test_lag_is_what_the_source_holds_past_the_offsets():
    query = QueryProgress("out", 5, {"0": 480, "1": 100}, latest_offsets={"0": 700, "1": 100, "2": 50})
    assert query.lag_bytes == 220 + 0 + 50
    assert QueryProgress("out", 5, {"0": 480}).lag_bytes == 0     # a source that reports no end


def test_a_standby_report_round_trips_in_every_state():
    for state in StandbyState:
        report = StandbyReport("worker-0", "c0ffee", 7, state, 1700000000.5)
        assert reparsed(report, wire.standby_report_to_pb, wire.standby_report_from_pb) == report


def test_every_state_and_contract_has_a_wire_value():
    for state in WorkerState:
        assert wire.report_from_pb(wire.report_to_pb(ProgressReport(state=state))).state is state
    for contract in SinkContract:
        report = ProgressReport(sinks=(SinkProgress("s", contract=contract),))
        assert wire.report_from_pb(wire.report_to_pb(report)).sinks[0].contract is contract


def test_replies_and_commits_round_trip():
    outcome = ReportOutcome(ReportStatus.ACCEPTED, (CheckpointNow("sp-000001"), Restart(),
                                                    Export("sp-000001", 3, "exports/a/worker-0")), frozenset({3, 5}))
    assert reparsed(outcome, wire.report_outcome_to_pb, wire.report_outcome_from_pb) == outcome
    for status in ReportStatus:
        commit = CommitOutcome(status, 7)
        assert reparsed(commit, wire.commit_outcome_to_pb, wire.commit_outcome_from_pb) == commit
    request = wire.commit_to_pb("worker-0", "s1", CHECKPOINT)
    assert (request.worker_id, request.session_id, wire.checkpoint_from_pb(request.checkpoint)) == \
        ("worker-0", "s1", CHECKPOINT)


def test_values_a_newer_peer_may_send_map_to_safe_defaults():
    report = wire.report_from_pb(pb.ProgressReport(
        state=pb.WORKER_STATE_UNSPECIFIED,
        sinks=[pb.SinkProgress(name="s", contract=pb.SINK_CONTRACT_UNSPECIFIED, state=pb.SINK_STATE_UNSPECIFIED)]))
    assert report.state is WorkerState.STARTING             # it promises nothing
    assert report.sinks[0].contract is SinkContract.TRANSACTIONAL   # the republish check stays on
    assert report.sinks[0].state is SinkState.OK
    # A command this worker does not know is skipped, the rest kept.
    ack = pb.ProgressAck(status=pb.REPORT_STATUS_ACCEPTED, commands=[pb.Command(), pb.Command(restart=True)])
    assert wire.report_outcome_from_pb(ack).commands == (Restart(),)
    # A standby in a state this side does not know is up, not ready.
    assert wire.standby_report_from_pb(pb.StandbyReport(host="c0ffee", state=99)).state is StandbyState.STARTING
    # An unknown status is never "accepted".
    assert wire.report_outcome_from_pb(pb.ProgressAck(status=99)).status is ReportStatus.STALE
