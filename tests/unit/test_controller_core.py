"""ControllerService: registration, progress reports and the status view,
driven with a fake clock and deterministic session ids (no sleeps)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from controller.core.errors import Conflict, InvalidRequest, SessionActive, Superseded
from controller.core.service import TAKEOVER_SILENCE_S
from controller.core.standbys import MAX_STANDBYS, STANDBY_SILENCE_S
from sparkpoint.messages import (
    ProgressReport,
    QueryProgress,
    Registration,
    ReportStatus,
    Restarts,
    RestoreDecision,
    StandbyReport,
    StandbyState,
    VolumeFence,
    WorkerState,
)
from tests.unit.fakes import process_died


def registration(worker_id="w0", index=0, count=2) -> Registration:
    return Registration(worker_id=worker_id, worker_index=index, worker_count=count,
                        pipeline_fingerprint="fp", node_names=("src", "out"))


def report(session, seq, *, worker_id="w0", state=WorkerState.RUNNING, queries=()) -> ProgressReport:
    return ProgressReport(worker_id=worker_id, session_id=session, seq=seq, state=state, queries=tuple(queries))


def query(name, batch_id=0, rows=0, rps=0.0, offsets=None) -> QueryProgress:
    return QueryProgress(name, batch_id, offsets or {}, rows, rps)


# --- registration ----------------------------------------------------------------

def test_register_returns_assignment_and_empty_restore(service, clock):
    result = service.register(registration("w1", 1))
    assert result.session_id == "s1"
    assert (result.worker_index, result.worker_count) == (1, 2)
    assert result.restore == RestoreDecision(checkpoint_id=None, savepoint_id=None)
    record = service.worker("w1")
    assert record.state == WorkerState.STARTING
    assert record.registered_at == record.last_heartbeat == clock.now
    assert record.registrations == 1


def test_worker_count_mismatch_is_a_conflict(service):
    with pytest.raises(Conflict, match="SP_WORKER_COUNT=3"):
        service.register(registration(count=3))
    assert service.worker("w0") is None


@pytest.mark.parametrize("index", [2, -1])
def test_index_out_of_range_is_invalid(service, index):
    with pytest.raises(InvalidRequest, match="outside 0..1"):
        service.register(registration(index=index))


def test_missing_worker_id_is_invalid(service):
    with pytest.raises(InvalidRequest):
        service.register(registration(worker_id=""))


def test_second_worker_claiming_a_held_index_is_a_conflict(service):
    service.register(registration("w0", 0))
    with pytest.raises(Conflict, match="already held by w0"):
        service.register(registration("intruder", 0))
    assert service.worker("intruder") is None
    assert service.worker("w0").session_id == "s1"


def test_a_second_process_cannot_take_a_live_workers_session(service, clock):
    """Issue 15: registering as w0 while w0 reports is refused (the real one
    would get STALE for ever); it may retry once w0 has been silent."""
    session = service.register(registration()).session_id
    clock.now += TAKEOVER_SILENCE_S - 1
    assert service.report_progress(report(session, 1)).status == ReportStatus.ACCEPTED   # alive
    clock.now += TAKEOVER_SILENCE_S - 1
    with pytest.raises(SessionActive, match="w0 has a live session"):
        service.register(registration())
    with pytest.raises(SessionActive):
        service.register(Registration("w0", 0, 2, "fp", ("src", "out"), session_id="a-guessed-session"))
    assert service.worker("w0").session_id == session and service.worker("w0").registrations == 1
    assert service.report_progress(report(session, 2)).status == ReportStatus.ACCEPTED
    clock.now += TAKEOVER_SILENCE_S          # now w0 is silent: its process is gone
    taken = service.register(registration()).session_id
    assert taken != session and service.report_progress(report(session, 3)).status == ReportStatus.STALE


def test_a_later_generation_of_the_same_volumes_fence_takes_over_at_once(service, clock):
    """The restarted container took its checkpoint volume's lock after the
    live session's process: that process is gone, no silence to wait out."""
    volume = "a" * 32
    session = service.register(dataclasses.replace(registration(), fence=VolumeFence(volume, 4))).session_id
    assert service.report_progress(report(session, 1)).status == ReportStatus.ACCEPTED   # alive a moment ago
    for not_later in (VolumeFence(volume, 4), VolumeFence("b" * 32, 5), VolumeFence()):
        with pytest.raises(SessionActive):
            service.register(dataclasses.replace(registration(), fence=not_later))
    taken = service.register(dataclasses.replace(registration(), fence=VolumeFence(volume, 5))).session_id
    assert taken != session and service.report_progress(report(session, 2)).status == ReportStatus.STALE
    assert service.worker("w0").fence == VolumeFence(volume, 5)


def test_a_process_holding_an_earlier_generation_is_told_it_was_taken_over(service, clock):
    """A hung worker whose lock a standby broke (the volume's next
    generation) registers again once it runs: it is told to stop, however
    long the new holder has been silent."""
    volume = "a" * 32
    old = service.register(dataclasses.replace(registration(), fence=VolumeFence(volume, 4))).session_id
    new = service.register(dataclasses.replace(registration(), fence=VolumeFence(volume, 5))).session_id
    assert service.report_progress(report(old, 1)).status == ReportStatus.STALE
    for silent_s in (0, TAKEOVER_SILENCE_S):
        clock.now += silent_s
        with pytest.raises(Superseded, match="generation 5, this process holds 4.*index 0 was taken over"):
            service.register(dataclasses.replace(registration(), fence=VolumeFence(volume, 4), session_id=old))
    assert service.worker("w0").session_id == new


def test_the_same_process_registers_again_naming_its_session(service):
    """A worker restarting its pipeline in process (a restore) continues its session."""
    session = service.register(registration()).session_id
    again = service.register(Registration("w0", 0, 2, "fp", ("src", "out"), session_id=session)).session_id
    assert again != session and service.worker("w0").registrations == 2


def test_reregistration_gets_new_session_and_old_reports_are_stale(service, clock):
    old = service.register(registration()).session_id
    assert service.report_progress(report(old, 1)).status == ReportStatus.ACCEPTED
    process_died(clock)
    new = service.register(registration()).session_id
    assert new != old
    assert service.worker("w0").registrations == 2
    assert service.report_progress(report(old, 2)).status == ReportStatus.STALE
    assert service.worker("w0").state == WorkerState.STARTING
    # The new session starts its own sequence.
    assert service.report_progress(report(new, 1)).status == ReportStatus.ACCEPTED
    assert service.worker("w0").state == WorkerState.RUNNING


# --- reports -----------------------------------------------------------------------

def test_duplicate_and_out_of_order_reports_leave_the_table_unchanged(service, clock):
    session = service.register(registration()).session_id
    assert service.report_progress(report(session, 5, queries=[query("out", 3, 30)])).status == ReportStatus.ACCEPTED
    before = service.worker("w0")
    clock.now += 10
    for seq in (5, 4, 0):
        outcome = service.report_progress(report(session, seq, state=WorkerState.FAILED, queries=[query("out", 9, 90)]))
        assert outcome.status == ReportStatus.DUPLICATE
    assert service.worker("w0") == before
    assert service.report_progress(report(session, 6, queries=[query("out", 4, 40)])).status == ReportStatus.ACCEPTED
    assert service.worker("w0").queries[0].batch_id == 4


def test_unknown_worker(service):
    assert service.report_progress(report("s1", 1, worker_id="ghost")).status == ReportStatus.UNKNOWN_WORKER
    assert service.worker("ghost") is None


# --- status ------------------------------------------------------------------------

def test_pipeline_state_transitions(service):
    assert service.status().state == "starting"
    s0 = service.register(registration("w0", 0)).session_id
    service.report_progress(report(s0, 1, worker_id="w0"))
    status = service.status()
    assert (status.state, status.workers_registered, status.workers_expected) == ("starting", 1, 2)

    s1 = service.register(registration("w1", 1)).session_id
    assert service.status().state == "starting"          # w1 has not reported yet
    service.report_progress(report(s1, 1, worker_id="w1"))
    assert service.status().state == "running"

    service.report_progress(report(s1, 2, worker_id="w1", state=WorkerState.RECOVERING))
    assert service.status().state == "recovering"
    service.report_progress(report(s0, 2, worker_id="w0", state=WorkerState.RESTARTING))
    assert service.status().state == "restarting"
    service.report_progress(report(s0, 3, worker_id="w0", state=WorkerState.FAILED))
    assert service.status().state == "failed"

    service.report_progress(report(s0, 4, worker_id="w0", state=WorkerState.FINISHED))
    service.report_progress(report(s1, 3, worker_id="w1", state=WorkerState.FINISHED))
    assert service.status().state == "finished"


def test_heartbeat_age_follows_the_clock(service, clock):
    clock.now = 100.0
    session = service.register(registration()).session_id
    clock.now = 103.0
    service.report_progress(report(session, 1))
    clock.now = 110.5
    worker = service.status().workers[0]
    assert worker.last_heartbeat == 103.0
    assert worker.heartbeat_age_s == pytest.approx(7.5)
    clock.now = 111.0
    service.report_progress(report(session, 1))            # duplicate: no heartbeat
    assert service.status().workers[0].heartbeat_age_s == pytest.approx(8.0)


# --- standbys -------------------------------------------------------------------------

def test_a_standby_is_listed_while_it_says_it_waits_and_no_longer_once_its_host_runs_a_worker(service, clock):
    clock.now = 100.0
    service.stand_by(StandbyReport("worker-0", "c0ffee", 7, StandbyState.STARTING, started_at=90.0))
    service.stand_by(StandbyReport("worker-0", "beef", 7, StandbyState.READY, started_at=80.0))
    service.stand_by(StandbyReport("worker-0", "beef", 8, StandbyState.READY, started_at=85.0))
    clock.now = 101.5
    service.stand_by(StandbyReport("worker-0", "c0ffee", 7, StandbyState.READY, started_at=90.0))
    clock.now = 102.0
    assert [(s.host, s.pid, s.state, s.started_at, s.heartbeat_age_s) for s in service.status().standbys] == [
        ("beef", 7, StandbyState.READY, 80.0, 2.0), ("beef", 8, StandbyState.READY, 85.0, 2.0),
        ("c0ffee", 7, StandbyState.READY, 90.0, 0.5)]
    # beef's pid 7 takes an index over: it registers as that worker.
    service.register(dataclasses.replace(registration("w1", 1), host="beef", pid=7))
    status = service.status()
    assert [(s.host, s.pid) for s in status.standbys] == [("beef", 8), ("c0ffee", 7)]
    assert [(w.worker_id, w.host, w.pid) for w in status.workers] == [("w1", "beef", 7)]


def test_a_silent_standby_leaves_the_list(service, clock):
    clock.now = 100.0
    service.stand_by(StandbyReport("worker-0", "c0ffee", 7, StandbyState.READY))
    clock.now = 100.0 + STANDBY_SILENCE_S
    assert [s.host for s in service.status().standbys] == ["c0ffee"]
    clock.now += 0.1
    assert service.status().standbys == []


@pytest.mark.parametrize("field, bad", [("host", ""), ("host", "a/b"), ("worker_id", "x" * 65), ("pid", 0),
                                        ("pid", 2**31 - 1), ("started_at", float("nan")), ("started_at", -1.0)])
def test_a_standby_report_with_a_bad_field_is_refused_naming_it(service, field, bad):
    report = dataclasses.replace(StandbyReport("worker-0", "c0ffee", 7, StandbyState.READY), **{field: bad})
    with pytest.raises(InvalidRequest, match=f"^{field}: "):
        service.stand_by(report)
    assert service.status().standbys == []


def test_the_standbys_listed_are_bounded(service, clock):
    for n in range(MAX_STANDBYS):
        service.stand_by(StandbyReport("worker-0", f"host-{n}", 7, StandbyState.READY))
    with pytest.raises(InvalidRequest, match=f"{MAX_STANDBYS} standbys are listed already"):
        service.stand_by(StandbyReport("worker-0", "one-more", 7, StandbyState.READY))
    service.stand_by(StandbyReport("worker-0", "host-0", 7, StandbyState.READY))      # a listed one goes on
    clock.now += STANDBY_SILENCE_S + 1
    service.stand_by(StandbyReport("worker-0", "one-more", 7, StandbyState.READY))     # the silent ones left
    assert [s.host for s in service.status().standbys] == ["one-more"]


@pytest.mark.parametrize("field, bad", [("host", "no such host"), ("pid", -1), ("pid", 2**22 + 1)])
def test_a_registration_naming_its_process_badly_is_refused(service, field, bad):
    with pytest.raises(InvalidRequest, match=f"^{field}: "):
        service.register(dataclasses.replace(registration(), **{field: bad}))


def test_worker_rows_are_the_slowest_query_and_pipeline_sums_workers(service):
    s0 = service.register(registration("w0", 0)).session_id
    s1 = service.register(registration("w1", 1)).session_id
    service.report_progress(report(s0, 1, worker_id="w0", queries=[
        query("a", batch_id=7, rows=500, rps=50.0, offsets={"0": 900}),
        query("b", batch_id=5, rows=300, rps=20.0, offsets={"0": 700}),
    ]))
    service.report_progress(report(s1, 1, worker_id="w1", queries=[query("a", batch_id=2, rows=40, rps=4.0)]))
    status = service.status()
    w0, w1 = status.workers
    assert [w.worker_id for w in status.workers] == ["w0", "w1"]
    assert (w0.rows_processed, w0.batch_id, w0.rows_per_second) == (300, 5, 20.0)
    assert w0.offsets == {"a": {"0": 900}, "b": {"0": 700}}
    assert w1.rows_processed == 40
    assert status.rows_processed == 340
    assert status.rows_per_second == pytest.approx(24.0)


def test_worker_without_queries(service):
    service.register(registration())
    worker = service.status().workers[0]
    assert (worker.batch_id, worker.rows_processed, worker.offsets) == (-1, 0, {})


def test_restarts_show_in_status_through_a_re_registration_and_the_controllers_checkpoint(service):
    session = service.register(registration()).session_id
    failed = Restarts(count=2, same_in_a_row=1, last_error="ValueError: bad row", last_failed_at=1700000000.0)
    service.report_progress(dataclasses.replace(report(session, 1, state=WorkerState.RESTARTING), restarts=failed))
    worker = service.status().workers[0]
    assert (worker.state, worker.restarts) == (WorkerState.RESTARTING, failed)
    # The restart registers again (the same process: it names its session); still shown until it reports.
    service.register(dataclasses.replace(registration(), session_id=session))
    assert service.status().workers[0].restarts == failed
    snapshot = service.snapshot()
    service.load_snapshot(json.loads(json.dumps(snapshot)))
    assert service.status().workers[0].restarts == failed


def test_reregistration_keeps_last_known_queries(service, clock):
    session = service.register(registration()).session_id
    service.report_progress(report(session, 1, queries=[query("out", 3, 30)]))
    process_died(clock)
    service.register(registration())
    worker = service.status().workers[0]
    assert (worker.batch_id, worker.rows_processed, worker.registrations) == (3, 30, 2)
