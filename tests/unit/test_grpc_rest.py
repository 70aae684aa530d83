"""The controller's transports, in-process: a real gRPC server with the worker's
client against it, and the REST app through FastAPI's TestClient."""

from __future__ import annotations

import json
import socket
import threading

import grpc
import pytest

from controller.grpc.servicer import start_grpc_server
from sparkpoint.messages import (
    CheckpointInfo,
    CheckpointNow,
    Export,
    ExportAnswer,
    ProgressReport,
    QueryProgress,
    ReportStatus,
    Restart,
    RestoreDecision,
    SavepointAnswer,
    SinkContract,
    SinkProgress,
    SinkState,
    WorkerState,
)
from tests.unit.fakes import new_service, process_died
from tests.unit.grpc_support import GRPC_TOKEN
from tests.unit.rest_support import client_for
from worker.control.client import ControllerClient, RegistrationRefused, WorkerIdentity


@pytest.fixture
def grpc_port(service):
    server, port = start_grpc_server(service, "127.0.0.1", 0, token=GRPC_TOKEN)
    yield port
    server.stop(grace=None).wait()


@pytest.fixture
def make_client(grpc_port):
    clients: list[ControllerClient] = []

    def make(worker_id="w0", index=0, count=2, address=None) -> ControllerClient:
        identity = WorkerIdentity(worker_id, index, count, "fp-1", ("src", "out"))
        client = ControllerClient(address or f"127.0.0.1:{grpc_port}", identity, timeout_s=5, token=GRPC_TOKEN)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


@pytest.fixture
def rest(service):
    with client_for(service) as client:
        yield client


def send(client: ControllerClient, seq: int, state: WorkerState, queries=(), **fields):
    """One progress report through the worker's client."""
    return client.report(ProgressReport(seq=seq, state=state, queries=tuple(queries), **fields))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- gRPC ----------------------------------------------------------------------------

def test_register_once(make_client, service):
    registered = make_client("w1", 1).register_once()
    assert registered.session_id == "s1"
    assert (registered.worker_index, registered.worker_count) == (1, 2)
    assert registered.restore == RestoreDecision()
    assert service.worker("w1").pipeline_fingerprint == "fp-1"


def test_report_statuses(make_client, service):
    client = make_client()
    session = client.register_once().session_id
    assert client.session_id == session
    queries = [QueryProgress("out", batch_id=2, offsets={"0": 120, "1": 64}, rows_processed=9, rows_per_second=3.5)]
    assert send(client, 1, WorkerState.RUNNING, queries).status == ReportStatus.ACCEPTED
    assert send(client, 1, WorkerState.RUNNING, queries).status == ReportStatus.DUPLICATE
    assert send(make_client("ghost", 1), 1, WorkerState.RUNNING, []).status == ReportStatus.UNKNOWN_WORKER
    record = service.worker("w0")
    assert record.state.value == "running"
    assert record.queries[0].offsets == {"0": 120, "1": 64}
    assert (record.queries[0].batch_id, record.queries[0].rows_processed) == (2, 9)


def test_reports_of_an_older_session_are_stale(make_client, clock):
    old = make_client()
    old.register_once()
    process_died(clock)
    new = make_client()
    new.register_once()                       # the same worker id, restarted
    assert new.session_id != old.session_id
    assert send(old, 5, WorkerState.RUNNING, []).status == ReportStatus.STALE
    assert send(new, 1, WorkerState.RUNNING, []).status == ReportStatus.ACCEPTED


def test_worker_count_conflict_is_refused(make_client):
    with pytest.raises(RegistrationRefused, match="SP_WORKER_COUNT=3"):
        make_client(count=3).register_once()


def test_held_index_is_refused_without_retrying(make_client):
    make_client("w0", 0).register_once()
    waits: list[float] = []
    with pytest.raises(RegistrationRefused, match="already held by w0"):
        make_client("other", 0).register(threading.Event(), wait=lambda d: waits.append(d) or False)
    assert waits == []


def test_index_out_of_range_is_refused(make_client):
    with pytest.raises(RegistrationRefused, match="outside"):
        make_client("w5", 5).register_once()


def test_unreachable_controller_is_retried_until_stopped(make_client):
    client = make_client(address=f"127.0.0.1:{closed_port()}")
    with pytest.raises(grpc.RpcError) as caught:
        client.register_once()
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE

    stop = threading.Event()
    waits: list[float] = []

    def wait(delay: float) -> bool:
        waits.append(delay)
        if len(waits) == 3:
            stop.set()
        return stop.is_set()

    assert client.register(stop, wait=wait) is None
    assert waits == pytest.approx([0.2, 0.4, 0.8])


def test_register_returns_none_when_already_stopped(make_client):
    stop = threading.Event()
    stop.set()
    assert make_client().register(stop, wait=lambda d: pytest.fail("must not wait")) is None


# --- savepoints over gRPC: commands, answers, pins and restore plans -----------------------

def checkpoint(checkpoint_id: int) -> CheckpointInfo:
    return CheckpointInfo(checkpoint_id=checkpoint_id, created_at=1.0, duration_ms=1.0)


def test_a_savepoint_is_taken_restored_and_exported_through_the_workers_client(make_client, service):
    workers = [make_client(f"w{i}", i) for i in (0, 1)]
    for worker, committed in zip(workers, (4, 9)):
        worker.register_once()
        worker.commit_checkpoint(checkpoint(committed))
    savepoint_id = service.trigger_savepoint("before v2").id

    reply = send(workers[0], 1, WorkerState.RUNNING, [])
    assert reply.commands == (CheckpointNow(savepoint_id),) and reply.pinned == frozenset()
    answered = send(workers[0], 2, WorkerState.RUNNING, savepoint_answers=(SavepointAnswer(savepoint_id, 5),))
    assert answered.commands == ()
    workers[0].commit_checkpoint(checkpoint(5))
    assert send(workers[1], 1, WorkerState.RUNNING, savepoint_answers=(SavepointAnswer(savepoint_id, 9),)).pinned == {9}
    assert send(workers[0], 3, WorkerState.RUNNING, []).pinned == {5}

    service.restore_savepoint(savepoint_id, allow_republish=True)
    assert send(workers[0], 4, WorkerState.RUNNING, []).commands == (Restart(),)
    assert workers[0].register_once().restore == RestoreDecision(5, savepoint_id, "", True)

    service.export_savepoint(savepoint_id, "exports/one")
    [export] = send(workers[1], 2, WorkerState.RUNNING, []).commands[1:]
    assert export == Export(savepoint_id, 9, "exports/one/worker-1")
    failed = ExportAnswer(savepoint_id, export.dir, "disk full")
    assert send(workers[1], 3, WorkerState.RUNNING, [], exports=(failed,)).commands == (Restart(),)
    [export_view] = service.savepoint(savepoint_id).exports
    assert export_view.error == "worker 1 could not write exports/one/worker-1: disk full"


def test_an_imported_savepoint_plan_names_the_import_dir(make_client, service, tmp_path):
    export = tmp_path / "savepoints" / "exports" / "one"
    for index, checkpoint_id in ((0, 3), (1, 4)):
        (export / f"worker-{index}" / "manifests").mkdir(parents=True)
        (export / f"worker-{index}" / "manifests" / f"{checkpoint_id:012d}.json").write_text("{}")
    (export / "savepoint.json").write_text(json.dumps({
        "format": 1, "id": "sp-000007", "label": "from prod", "created_at": 1.0, "completed_at": 2.0,
        "state": "complete", "failure": "", "pipeline_fingerprint": "fp-1", "worker_count": 2,
        "checkpoints": {"0": 3, "1": 4}}))
    savepoint_id = service.import_savepoint("exports/one", None).id
    service.restore_savepoint(savepoint_id, allow_republish=False)
    restore = make_client("w1", 1).register_once().restore
    assert restore == RestoreDecision(4, savepoint_id, "exports/one/worker-1", False)
    assert restore.describe() == f"checkpoint 4 of savepoint {savepoint_id} (imported from exports/one/worker-1)"


# --- REST ----------------------------------------------------------------------------

def test_health(rest):
    response = rest.get("/health")
    assert response.status_code == 200 and response.json() == {"status": "ok", "problems": []}


def test_health_is_503_naming_each_problem(service):
    problems = ["cannot write the controller checkpoint /state/controller-checkpoint.json: No space left on device"]
    with client_for(service, lambda: problems) as client:
        response = client.get("/health")
    assert response.status_code == 503 and response.json() == {"status": "unhealthy", "problems": problems}


def test_status_after_grpc_registration_and_report(make_client, rest, clock):
    client = make_client("w0", 0)
    client.register_once()
    clock.now += 2
    send(client, 1, WorkerState.RUNNING,
                  [QueryProgress("out", batch_id=4, offsets={"0": 120}, rows_processed=30, rows_per_second=6.0)])
    clock.now += 1.5
    response = rest.get("/status")
    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "starting"            # 1 of 2 workers registered
    assert (body["workers_expected"], body["workers_registered"], body["rows_processed"]) == (2, 1, 30)
    [worker] = body["workers"]
    assert worker["worker_id"] == "w0" and worker["state"] == "running"
    assert worker["batch_id"] == 4
    assert worker["offsets"] == {"out": {"0": 120}}
    assert worker["heartbeat_age_s"] == pytest.approx(1.5)
    assert worker["queries"][0]["name"] == "out"

    one = rest.get("/workers/w0")
    assert one.status_code == 200 and one.json()["batch_id"] == 4


def test_sinks_publishing_and_waiting_reach_status(make_client, rest, clock, service, tmp_path):
    client = make_client("w0", 0)
    client.register_once()
    sinks = [
        SinkProgress("events_pg", "PostgreSQL table events (transactional)", SinkContract.TRANSACTIONAL,
                     SinkState.WAITING, error="OperationalError: connection refused", waiting_since=clock.now - 20,
                     next_retry_at=clock.now + 4, published_checkpoint_id=7, published_batch_id=31,
                     pending_batches=5, retries=6, query="events"),
        SinkProgress("vwap_pg", "PostgreSQL table vwap (upsert on sym, version trades)", SinkContract.UPSERT,
                     SinkState.OK, published_batch_id=40),
    ]
    send(client, 1, WorkerState.RUNNING, [QueryProgress("events", batch_id=36)], sinks=tuple(sinks))
    clock.now += 1
    [worker] = rest.get("/status").json()["workers"]
    waiting, ok = worker["sinks"]
    assert waiting == {"name": "events_pg", "query": "events", "target": "PostgreSQL table events (transactional)",
                       "contract": "transactional", "state": "waiting", "error": "OperationalError: connection refused",
                       "waiting_s": 21.0, "next_retry_in_s": 3.0, "published_checkpoint_id": 7,
                       "published_batch_id": 31, "pending_batches": 5, "lag_batches": 5, "retries": 6}
    assert (ok["state"], ok["waiting_s"], ok["next_retry_in_s"], ok["published_batch_id"]) == ("ok", 0.0, 0.0, 40)
    assert ok["query"] == "vwap_pg"     # a sink that does not say: the query named after it
    # The controller's own checkpoint keeps them.
    restarted = new_service(clock, tmp_path)
    restarted.load_snapshot(json.loads(json.dumps(service.snapshot())))
    assert restarted.worker("w0").sinks == service.worker("w0").sinks


def test_unknown_worker_is_404_json(rest):
    response = rest.get("/workers/nobody")
    assert response.status_code == 404
    assert response.json() == {"error": "no worker 'nobody' has registered"}


def test_unknown_route_is_404_json(rest):
    response = rest.get("/no/such/route")
    assert response.status_code == 404
    assert set(response.json()) == {"error"}


def test_wrong_method_is_json(rest):
    response = rest.post("/status")
    assert response.status_code == 405
    assert set(response.json()) == {"error"}


def test_openapi_lists_status(rest):
    paths = rest.get("/openapi.json").json()["paths"]
    assert {"/status", "/health", "/workers/{worker_id}"} <= set(paths)
