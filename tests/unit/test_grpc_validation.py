"""Issue 15's gRPC findings as regression tests, against an in-process server
with the generated stubs (what an attacker on the network has): oversize
and malformed ids refused with a short INVALID_ARGUMENT and nothing
recorded; forged and absurd checkpoint commits refused; commits of another
session stale; a stale worker registers again."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import grpc
import pytest

from controller.core import validation
from controller.core.errors import InvalidRequest
from controller.grpc.servicer import DETAILS_MAX
from sparkpoint import limits
from sparkpoint.grpcauth import with_token
from sparkpoint.messages import (
    CheckpointInfo,
    PipelineNode,
    ProgressReport,
    QueryCut,
    QueryProgress,
    Recovery,
    RegisterResult,
    Registration,
    ReportOutcome,
    ReportStatus,
    Restarts,
    RestoreDecision,
    SinkProgress,
    WorkerState,
)
from sparkpoint.v1 import controller_pb2 as pb
from sparkpoint.v1 import controller_pb2_grpc as pb_grpc
from tests.unit.fakes import new_service, process_died
from tests.unit.grpc_support import GRPC_TOKEN
from tests.unit.rest_support import client_for
from worker.control.actions import CommandExecutor
from worker.control.client import ControllerClient, NotRegistered, WorkerIdentity
from worker.control.commands import CommandBook
from worker.control.reporter import Reporter

INT64_MAX = 2**63 - 1


@pytest.fixture
def stub(address):
    with grpc.insecure_channel(address) as channel:
        yield pb_grpc.ControllerStub(with_token(channel, GRPC_TOKEN))


@pytest.fixture
def worker(address):
    """The real worker's client, registered as w0 (index 0 of 2)."""
    client = ControllerClient(address, WorkerIdentity("w0", 0, 2, "fp", ("src", "counts")), timeout_s=5,
                              token=GRPC_TOKEN)
    client.register_once()
    yield client
    client.close()


def refused(call, code=grpc.StatusCode.INVALID_ARGUMENT) -> str:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    assert caught.value.code() == code, caught.value.details()
    details = caught.value.details()
    assert len(details) <= DETAILS_MAX
    return details


def commit(stub, session_id: str, checkpoint_id: int, worker_id: str = "w0") -> pb.CheckpointAck:
    return stub.CommitCheckpoint(pb.CheckpointCommit(worker_id=worker_id, session_id=session_id,
                                                     checkpoint=pb.CheckpointRef(checkpoint_id=checkpoint_id)))


# --- ids and sizes ----------------------------------------------------------------------

def test_a_3_mb_worker_id_is_refused_briefly_and_never_recorded(stub, service, address):
    huge = "w" * 3_000_000
    details = refused(lambda: stub.Register(pb.RegisterRequest(worker_id=huge, worker_index=0, worker_count=2)))
    assert details.startswith("worker_id: 'wwww") and "(3000000 characters)" in details
    assert service.status().workers == []
    assert json.loads(json.dumps(service.snapshot())) == {"workers": []}
    # The real worker of that index registers, and learns nothing of it.
    client = ControllerClient(address, WorkerIdentity("worker-0", 0, 2, "fp", ()), timeout_s=5, token=GRPC_TOKEN)
    try:
        assert client.register_once().worker_index == 0
    finally:
        client.close()


@pytest.mark.parametrize("worker_id", ["", "../w0", "w 0", "w0\n", "-w0", "w" * 65, "wörker"])
def test_a_worker_id_that_is_not_a_name_is_refused(stub, service, worker_id):
    assert refused(lambda: stub.Register(pb.RegisterRequest(worker_id=worker_id, worker_index=0, worker_count=2))) \
        .startswith("worker_id:")
    assert service.status().workers == []


@pytest.mark.parametrize("report, field", [
    (lambda session: pb.ProgressReport(worker_id="w0", session_id=session, seq=1,
                                       queries=[pb.QueryProgress(name=f"q{i}") for i in range(300)]),
     "queries: 300 entries, at most 256 are accepted"),
    (lambda session: pb.ProgressReport(worker_id="w0", session_id=session, seq=1, queries=[
        pb.QueryProgress(name="q", latest_offsets={str(p): 1 for p in range(5000)})]),
     "queries[0].latest_offsets: 5000 entries, at most 4096 are accepted"),
    (lambda session: pb.ProgressReport(worker_id="w0", session_id=session, seq=1, checkpoints=pb.CheckpointList(
        checkpoints=[pb.CheckpointRef(checkpoint_id=1, queries=[pb.QueryCut(name=f"q{i}") for i in range(257)])])),
     "checkpoints.checkpoints[0].queries: 257 entries, at most 256 are accepted"),
])
def test_an_oversize_collection_is_refused_before_the_request_is_converted(stub, worker, service, monkeypatch,
                                                                            report, field):
    def never(request):
        raise AssertionError("converted before its collections were checked")

    monkeypatch.setattr("sparkpoint.wire.report_from_pb", never)
    assert refused(lambda: stub.ReportProgress(report(worker.session_id))) == field


def test_a_message_past_16_mib_is_refused_by_grpc_itself(stub, worker, service):
    report = pb.ProgressReport(worker_id="w0", session_id=worker.session_id, seq=1, checkpoint_error="e" * (17 << 20))
    assert "larger than max" in refused(lambda: stub.ReportProgress(report), grpc.StatusCode.RESOURCE_EXHAUSTED)
    assert service.worker("w0").checkpoint_error == ""


def test_a_report_with_an_oversize_query_name_is_refused_and_status_stays_small(stub, worker, service):
    report = pb.ProgressReport(worker_id="w0", session_id=worker.session_id, seq=1,
                               queries=[pb.QueryProgress(name="q" * 1_000_000)])
    assert refused(lambda: stub.ReportProgress(report)).startswith("queries[0].name:")
    assert service.worker("w0").queries == ()


def test_numbers_that_would_break_the_status_json_are_refused(stub, worker, rest_client):
    for query in (pb.QueryProgress(name="q", rows_per_second=float("nan")),
                  pb.QueryProgress(name="q", rows_per_second=float("inf")),
                  pb.QueryProgress(name="q", rows_processed=-5)):
        report = pb.ProgressReport(worker_id="w0", session_id=worker.session_id, seq=1, queries=[query])
        refused(lambda: stub.ReportProgress(report))
    assert rest_client.get("/status").status_code == 200


def test_long_error_text_is_clipped_not_refused(stub, worker, service):
    report = pb.ProgressReport(worker_id="w0", session_id=worker.session_id, seq=1,
                               queries=[pb.QueryProgress(name="q", error="E" * 100_000)],
                               checkpoint_error="C" * 100_000, restarts=pb.Restarts(last_error="R" * 100_000))
    assert stub.ReportProgress(report).status == pb.REPORT_STATUS_ACCEPTED
    record = service.worker("w0")
    assert len(record.queries[0].error) == len(record.checkpoint_error) == limits.TEXT_MAX
    assert len(record.restarts.last_error) == limits.TEXT_MAX


@pytest.fixture
def rest_client(service):
    with client_for(service) as client:
        yield client


# --- checkpoint ids the controller can believe ----------------------------------------------

def test_a_forged_commit_of_int64_max_is_refused_and_real_commits_go_on(stub, worker, service, clock, tmp_path):
    assert refused(lambda: commit(stub, worker.session_id, INT64_MAX)).startswith("checkpoint.checkpoint_id:")
    assert worker.commit_checkpoint(CheckpointInfo(1)) == 1
    assert worker.commit_checkpoint(CheckpointInfo(2)) == 2
    # Nothing of it survives a controller restart either.
    restarted = new_service(clock, tmp_path)
    restarted.load_snapshot(json.loads(json.dumps(service.snapshot())))
    assert restarted.worker("w0").last_checkpoint_id == 2


def test_a_commit_too_far_past_the_newest_known_is_not_believed(stub, worker, service):
    worker.commit_checkpoint(CheckpointInfo(5))
    details = refused(lambda: commit(stub, worker.session_id, 5 + limits.CHECKPOINT_ID_STEP_MAX + 1))
    assert "not believed" in details
    assert service.worker("w0").last_checkpoint_id == 5
    assert worker.commit_checkpoint(CheckpointInfo(5 + limits.CHECKPOINT_ID_STEP_MAX)) \
        == 5 + limits.CHECKPOINT_ID_STEP_MAX


def test_ids_stay_within_what_a_worker_can_count_past():
    assert validation.checkpoint_id(limits.CHECKPOINT_ID_MAX, "id") == limits.CHECKPOINT_ID_MAX
    with pytest.raises(InvalidRequest):
        validation.checkpoint_id(limits.CHECKPOINT_ID_MAX + 1, "id")
    assert limits.CHECKPOINT_ID_MAX + limits.CHECKPOINT_ID_STEP_MAX < INT64_MAX
    assert len(f"{limits.CHECKPOINT_ID_MAX:012d}") == 12      # manifest names keep their width


def test_a_registration_claiming_absurd_checkpoints_is_refused(stub, worker, service):
    worker.commit_checkpoint(CheckpointInfo(3))
    request = pb.RegisterRequest(worker_id="w0", worker_index=0, worker_count=2, session_id=worker.session_id,
                                 checkpoints=[pb.CheckpointRef(checkpoint_id=3 + limits.CHECKPOINT_ID_STEP_MAX + 1)])
    assert "not believed" in refused(lambda: stub.Register(request))
    assert service.worker("w0").session_id == worker.session_id      # nothing changed


@pytest.mark.parametrize("checkpoint_id", [0, -1, INT64_MAX])
def test_a_checkpoint_id_out_of_range_is_refused(stub, worker, service, checkpoint_id):
    refused(lambda: commit(stub, worker.session_id, checkpoint_id))
    assert service.worker("w0").last_checkpoint_id == 0


# --- sessions --------------------------------------------------------------------------

def test_a_commit_of_another_session_is_stale_and_not_recorded(stub, worker, service):
    ack = commit(stub, "forged-session", 7)
    assert ack.status == pb.REPORT_STATUS_STALE
    assert service.worker("w0").last_checkpoint_id == 0
    assert worker.commit_checkpoint(CheckpointInfo(1)) == 1


def test_a_workers_commit_after_another_registration_asks_it_to_register_again(worker, address, clock):
    process_died(clock)       # silent long enough: another process may take the id
    other = ControllerClient(address, WorkerIdentity("w0", 0, 2, "fp", ()), timeout_s=5, token=GRPC_TOKEN)
    try:
        other.register_once()
    finally:
        other.close()
    with pytest.raises(NotRegistered, match="newer registration"):
        worker.commit_checkpoint(CheckpointInfo(1))


class ScriptedClient:
    """The reporter's view of the controller: replies in order, registrations counted."""

    def __init__(self, *statuses: ReportStatus, restore: RestoreDecision = RestoreDecision()) -> None:
        self.statuses = list(statuses)
        self.restore = restore
        self.registrations = 0
        self.seqs: list[int] = []

    def report(self, report: ProgressReport) -> ReportOutcome:
        self.seqs.append(report.seq)
        return ReportOutcome(self.statuses.pop(0))

    def register_once(self) -> RegisterResult:
        self.registrations += 1
        return RegisterResult(f"s{self.registrations + 1}", 0, 2, self.restore)


@pytest.mark.parametrize("status", [ReportStatus.STALE, ReportStatus.UNKNOWN_WORKER])
def test_a_stale_or_unknown_worker_registers_again(status):
    client = ScriptedClient(status, ReportStatus.ACCEPTED)
    registered: list[RegisterResult] = []
    reporter = Reporter(client, lambda: ProgressReport(), 1.0, on_registered=registered.append)
    assert reporter.report_now() is status
    assert reporter.report_now() is ReportStatus.ACCEPTED
    assert client.registrations == 1 and [r.session_id for r in registered] == ["s2"]
    assert client.seqs == [1, 1]        # the new session numbers its reports afresh


def test_a_woken_reporter_reports_at_once_not_at_its_interval():
    client = ScriptedClient(ReportStatus.ACCEPTED, ReportStatus.ACCEPTED)
    sent = threading.Event()
    replies: list[ReportOutcome] = []
    reporter = Reporter(client, lambda: ProgressReport(), 3600.0, on_reply=lambda reply: (replies.append(reply),
                                                                                            sent.set()))
    reporter.start()
    try:
        assert not sent.is_set()
        reporter.wake()
        assert sent.wait(30), "no report after wake()"
        assert client.seqs == [1]
    finally:
        reporter.stop(final_report=False)


def test_a_duplicate_does_not_register_again():
    client = ScriptedClient(ReportStatus.DUPLICATE)
    Reporter(client, lambda: ProgressReport(), 1.0).report_now()
    assert client.registrations == 0


def test_a_registration_mid_run_that_hands_over_a_savepoint_restarts_the_run(tmp_path):
    executor = CommandExecutor(CommandBook(), store=None, settings=None)
    executor.on_registered(RegisterResult("s2", 0, 2, RestoreDecision(4)))
    assert not executor.restart.is_set()         # its own newest checkpoint: it runs from it already
    executor.on_registered(RegisterResult("s3", 0, 2, RestoreDecision(5, "sp-000001")))
    assert executor.restart.is_set()


# --- the pure checks, field by field ------------------------------------------------------------

def report(**fields) -> ProgressReport:
    return ProgressReport(**{"worker_id": "w0", "session_id": "s1", "seq": 1, "state": WorkerState.RUNNING,
                             **fields})


@pytest.mark.parametrize("bad, field", [
    (report(seq=-1), "seq"),
    (report(session_id="s" * 129), "session_id"),
    (report(queries=(QueryProgress("q", offsets={"p0": 1}),)), "queries[0].offsets"),
    (report(queries=(QueryProgress("q", offsets={"0": -1}),)), "queries[0].offsets[0]"),
    (report(queries=(QueryProgress("q", batch_id=-2),)), "queries[0].batch_id"),
    (report(queries=tuple(QueryProgress(f"q{i}") for i in range(limits.MAX_QUERIES + 1))), "queries"),
    (report(sinks=(SinkProgress("s", waiting_since=float("nan")),)), "sinks[0].waiting_since"),
    (report(restored_checkpoint_id=limits.CHECKPOINT_ID_MAX + 1), "restored_checkpoint_id"),
    # The operator's fields (issue 14): latest offsets, retries, recovery times, finished nodes, durable checkpoints.
    (report(queries=(QueryProgress("q", latest_offsets={"x": 1}),)), "queries[0].latest_offsets"),
    # A Kafka partition: <topic>:<partition>, a topic name Kafka allows.
    (report(queries=(QueryProgress("q", offsets={"trades:x": 1}),)), "queries[0].offsets"),
    (report(queries=(QueryProgress("q", offsets={"tra des:0": 1}),)), "queries[0].offsets"),
    (report(queries=(QueryProgress("q", offsets={"t" * 250 + ":0": 1}),)), "queries[0].offsets"),
    (report(queries=(QueryProgress("q", latest_offsets={"0": -1}),)), "queries[0].latest_offsets[0]"),
    (report(queries=(QueryProgress("q", latest_offsets={str(p): 1 for p in range(limits.MAX_PARTITIONS + 1)}),)),
     "queries[0].latest_offsets"),
    (report(sinks=(SinkProgress("s", retries=-1),)), "sinks[0].retries"),
    # Late rows per stateful node: node names, counts of 0 or more, bounded.
    (report(queries=(QueryProgress("q", late_rows={"../w": 1}),)), "queries[0].late_rows"),
    (report(queries=(QueryProgress("q", late_rows={"w": -1}),)), "queries[0].late_rows[w]"),
    (report(queries=(QueryProgress("q", late_rows={f"w{i}": 1 for i in range(limits.MAX_NODES + 1)}),)),
     "queries[0].late_rows"),
    (report(recovery=Recovery(started_at=float("nan"))), "recovery.started_at"),
    (report(recovery=Recovery(duration_ms=float("inf"))), "recovery.duration_ms"),
    (report(recovery=Recovery(duration_ms=-1.0)), "recovery.duration_ms"),
    (report(finished_nodes=("../out",)), "finished_nodes[0]"),
    (report(finished_nodes=tuple(f"n{i}" for i in range(limits.MAX_NODES + 1))), "finished_nodes"),
    (report(checkpoints=(CheckpointInfo(0),)), "checkpoints[0].checkpoint_id"),
    (report(checkpoints=(CheckpointInfo(1, duration_ms=float("nan")),)), "checkpoints[0].duration_ms"),
    (report(checkpoints=tuple(CheckpointInfo(i + 1) for i in range(limits.MAX_CHECKPOINTS + 1))), "checkpoints"),
    # In-process restarts (issue 13).
    (report(restarts=Restarts(count=-1)), "restarts.count"),
    (report(restarts=Restarts(same_in_a_row=-1)), "restarts.same_in_a_row"),
    (report(restarts=Restarts(last_failed_at=float("nan"))), "restarts.last_failed_at"),
])
def test_each_report_field_is_checked(bad, field):
    with pytest.raises(InvalidRequest) as caught:
        validation.report(bad)
    assert str(caught.value).startswith(f"{field}:")


def test_kafka_partitions_are_accepted_beside_the_logs():
    query = QueryProgress("q", offsets={"0": 5, "trades.v2_x-y:11": 7}, latest_offsets={"t" * 249 + ":0": 9})
    assert validation.report(report(queries=(query,))).queries == (query,)


def test_a_registration_checks_its_checkpoints_and_node_names():
    good = Registration("w0", 0, 2, "fp", ("src",), (CheckpointInfo(1, (QueryCut("q", 0, {"0": 1}),)),))
    assert validation.registration(good) is good
    with pytest.raises(InvalidRequest, match=r"^node_names\[0\]:"):
        validation.registration(Registration("w0", 0, 2, "fp", ("a/b",)))
    with pytest.raises(InvalidRequest, match=r"^checkpoints\[0\]\.queries\[0\]\.name:"):
        validation.registration(Registration("w0", 0, 2, "fp", (), (CheckpointInfo(1, (QueryCut("", 0),)),)))


GRAPH = (PipelineNode("src", "source.log"), PipelineNode("counts", "aggregate", True, ("src",)))


@pytest.mark.parametrize("nodes, field", [
    ((PipelineNode("a/b", "map"),), r"nodes\[0\]\.name"),
    ((PipelineNode("src", "source log"),), r"nodes\[0\]\.kind"),
    ((*GRAPH, PipelineNode("out", "sink.files", inputs=("n" * 65,))), r"nodes\[2\]\.inputs\[0\]"),
    ((*GRAPH, PipelineNode("out", "sink.files", inputs=("elsewhere",))), r"nodes\[2\]\.inputs\[0\]"),
    ((PipelineNode("out", "sink.files", inputs=tuple(f"n{i}" for i in range(limits.MAX_NODES + 1))),),
     r"nodes\[0\]\.inputs"),
    (tuple(PipelineNode(f"n{i}", "map") for i in range(limits.MAX_NODES + 1)), "nodes"),
])
def test_a_registration_checks_its_graph(nodes, field):
    assert validation.registration(Registration("w0", 0, 2, "fp", (), (), GRAPH)).nodes == GRAPH
    with pytest.raises(InvalidRequest, match=f"^{field}:"):
        validation.registration(Registration("w0", 0, 2, "fp", (), (), nodes))


def test_a_graph_whose_input_is_not_a_node_is_refused_over_grpc_and_not_recorded(stub, service):
    request = pb.RegisterRequest(worker_id="w0", worker_index=0, worker_count=2, nodes=[
        pb.PipelineNode(name="out", kind="sink.files", inputs=["nowhere"])])
    assert refused(lambda: stub.Register(request)) == "nodes[0].inputs[0]: 'nowhere' is not a node of the graph"
    assert service.worker("w0") is None and service.pipeline().nodes == []


def test_durable_checkpoints_too_far_past_the_newest_known_are_not_believed(stub, worker, service, rest_client):
    worker.commit_checkpoint(CheckpointInfo(2))
    far = 2 + limits.CHECKPOINT_ID_STEP_MAX + 1
    report = pb.ProgressReport(worker_id="w0", session_id=worker.session_id, seq=1,
                               checkpoints=pb.CheckpointList(checkpoints=[pb.CheckpointRef(checkpoint_id=2),
                                                                          pb.CheckpointRef(checkpoint_id=far)]))
    assert "not believed" in refused(lambda: stub.ReportProgress(report))
    assert rest_client.get("/workers/w0/checkpoints").json() == []
    held = pb.CheckpointList(checkpoints=[pb.CheckpointRef(checkpoint_id=2), pb.CheckpointRef(checkpoint_id=3)])
    report = pb.ProgressReport(worker_id="w0", session_id=worker.session_id, seq=2, checkpoints=held)
    assert stub.ReportProgress(report).status == pb.REPORT_STATUS_ACCEPTED
    assert [c["checkpoint"]["checkpoint_id"] for c in rest_client.get("/workers/w0/checkpoints").json()] == [2, 3]


def test_a_worker_whose_registration_is_refused_mid_run_stops(address, service, clock):
    """Released (silent too long) and its index taken by another worker id:
    when it comes back, registering again is refused and the run must stop,
    not go on processing an index it no longer owns."""
    from worker.lifecycle.serve import RunEnd, supervise

    client = ControllerClient(address, WorkerIdentity("w0", 0, 2, "fp", ()), timeout_s=5, token=GRPC_TOKEN)
    try:
        client.register_once()
        clock.now += 60
        service.release_worker("w0")
        service.register(Registration("replacement", 0, 2, "fp"))
        reporter = Reporter(client, lambda: ProgressReport(), 0.001)
        reporter.start()
        assert reporter.refused.wait(10)
        reporter.stop(final_report=False)
    finally:
        client.close()
    live = SimpleNamespace(queries=[], finished=set())
    never = threading.Event()
    assert supervise(live, SimpleNamespace(queries=lambda: ()), never, never, reporter.refused, lambda: None) \
        is RunEnd.FAILED


def test_every_collection_a_worker_sends_has_a_bound():
    """A repeated or map field missing from ``COLLECTIONS`` may hold nothing:
    a worker sending one would be refused on every report."""
    unbounded = set()

    def walk(descriptor, seen: set) -> None:
        if descriptor.full_name in seen:
            return
        seen.add(descriptor.full_name)
        for field in descriptor.fields:
            if field.is_repeated and field.name not in validation.COLLECTIONS:
                unbounded.add(f"{descriptor.name}.{field.name}")
            if field.message_type is not None and not field.message_type.GetOptions().map_entry:
                walk(field.message_type, seen)
    for request in (pb.RegisterRequest, pb.ProgressReport, pb.CheckpointCommit, pb.StandbyReport):
        walk(request.DESCRIPTOR, set())
    assert unbounded == set()
