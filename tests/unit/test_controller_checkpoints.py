"""The controller's side of checkpoints: commits (subsuming), what a
registering worker restores, the controller's own checkpoint, the status
view, and the CommitCheckpoint RPC end to end (in-process gRPC)."""

from __future__ import annotations

import dataclasses

import pytest

from controller.checkpointing.store import ControllerCheckpointError, ControllerCheckpointStore
from controller.core.service import InvalidSnapshot
from sparkpoint.messages import (
    CheckpointInfo,
    ProgressReport,
    QueryCut,
    QueryProgress,
    Recovery,
    Registration,
    ReportStatus,
    VolumeFence,
    WorkerState,
)
from tests.unit.fakes import new_service, process_died
from tests.unit.grpc_support import GRPC_TOKEN
from worker.checkpointing.manifest import FileEntry, Manifest
from worker.checkpointing.manifest import QueryCut as ManifestCut
from worker.control.client import ControllerClient, NotRegistered, WorkerIdentity


def checkpoint(checkpoint_id: int, batch_id: int = 3, created_at: float = 990.0) -> CheckpointInfo:
    return CheckpointInfo(checkpoint_id=checkpoint_id, queries=(QueryCut("counts", batch_id, {"0": 120, "1": 64}),),
                          size_bytes=4096, duration_ms=35.5, created_at=created_at, bytes_copied=512)


def registration(worker_id="w0", index=0, checkpoints=()) -> Registration:
    return Registration(worker_id=worker_id, worker_index=index, worker_count=2, pipeline_fingerprint="fp",
                        node_names=("src", "counts"), checkpoints=tuple(checkpoints))


def commit(service, worker_id: str, info: CheckpointInfo):
    """A commit in the worker's current session, as the worker sends it."""
    record = service.worker(worker_id)
    return service.commit_checkpoint(worker_id, info, record.session_id if record else "s0")


# --- commit_checkpoint --------------------------------------------------------------

def test_commit_from_an_unknown_worker(service):
    outcome = commit(service, "w9", checkpoint(1))
    assert (outcome.status, outcome.completed_checkpoint_id) == (ReportStatus.UNKNOWN_WORKER, 0)


def test_a_newer_checkpoint_is_accepted(service):
    service.register(registration())
    for checkpoint_id in (1, 3):
        outcome = commit(service, "w0", checkpoint(checkpoint_id))
        assert (outcome.status, outcome.completed_checkpoint_id) == (ReportStatus.ACCEPTED, checkpoint_id)
    record = service.worker("w0")
    assert record.last_checkpoint == checkpoint(3)
    assert record.checkpoints_completed == 2


@pytest.mark.parametrize("checkpoint_id", [2, 1])
def test_a_same_or_older_checkpoint_is_a_duplicate_naming_the_newest(service, checkpoint_id):
    service.register(registration())
    commit(service, "w0", checkpoint(2))
    outcome = commit(service, "w0", checkpoint(checkpoint_id, batch_id=0))
    assert (outcome.status, outcome.completed_checkpoint_id) == (ReportStatus.DUPLICATE, 2)
    assert service.worker("w0").last_checkpoint == checkpoint(2)
    assert service.worker("w0").checkpoints_completed == 1


# --- reconciliation at registration --------------------------------------------------

def test_restore_what_the_worker_holds_when_the_controller_knows_a_newer_one(service, clock):
    service.register(registration())
    commit(service, "w0", checkpoint(3))
    process_died(clock)
    # The worker's volume lost checkpoint 3.
    result = service.register(registration(checkpoints=[checkpoint(1), checkpoint(2)]))
    assert result.restore.checkpoint_id == 2
    assert result.last_checkpoint_id == 3      # new ids go above 3


def test_restore_the_workers_newer_checkpoint(service, clock):
    service.register(registration())
    commit(service, "w0", checkpoint(3))
    process_died(clock)
    # Durable on the volume, its commit never reached the controller.
    result = service.register(registration(checkpoints=[checkpoint(4), checkpoint(5)]))
    assert result.restore.checkpoint_id == 5
    assert result.last_checkpoint_id == 5
    assert service.status().workers[0].last_checkpoint.checkpoint_id == 5


def test_no_checkpoints_restores_nothing(service):
    result = service.register(registration())
    assert result.restore.checkpoint_id is None
    assert result.last_checkpoint_id == 0


def test_no_checkpoints_on_the_volume_restores_nothing_but_keeps_the_id(service, clock):
    service.register(registration())
    commit(service, "w0", checkpoint(3))
    process_died(clock)
    result = service.register(registration())
    assert result.restore.checkpoint_id is None
    assert result.last_checkpoint_id == 3


# --- the controller's own checkpoint ---------------------------------------------------

def test_snapshot_round_trip_through_the_controller_checkpoint_store(service, clock, tmp_path):
    service.register(dataclasses.replace(registration("w0", 0), fence=VolumeFence("c" * 32, 2)))
    service.register(registration("w1", 1))
    service.report_progress(ProgressReport("w0", "s1", 1, WorkerState.RUNNING,
                                           (QueryProgress("counts", 3, {"0": 120}, 40, 2.5),)))
    commit(service, "w0", checkpoint(4))
    store = ControllerCheckpointStore(tmp_path / "controller")
    store.save(service.snapshot())

    restarted = new_service(clock, tmp_path)
    restarted.load_snapshot(store.load())
    for worker_id in ("w0", "w1"):
        assert restarted.worker(worker_id) == service.worker(worker_id)
    record = restarted.worker("w0")
    assert (record.last_checkpoint, record.state, record.session_id) == (checkpoint(4), WorkerState.RUNNING, "s1")
    assert record.fence == VolumeFence("c" * 32, 2)
    # The worker carries on without registering again.
    assert restarted.report_progress(ProgressReport("w0", "s1", 2, WorkerState.RUNNING)).status \
        is ReportStatus.ACCEPTED
    assert commit(restarted, "w0", checkpoint(4)).status is ReportStatus.DUPLICATE
    assert commit(restarted, "w0", checkpoint(5)).status is ReportStatus.ACCEPTED


def test_no_controller_checkpoint_yet_loads_none(tmp_path):
    assert ControllerCheckpointStore(tmp_path).load() is None


@pytest.mark.parametrize("content", ['{"version": 1, "state": {"work', '{"version": 7, "state": {}}', "[]"])
def test_a_corrupt_controller_checkpoint_names_the_file(tmp_path, content):
    store = ControllerCheckpointStore(tmp_path)
    store.path.write_text(content)
    with pytest.raises(ControllerCheckpointError) as raised:
        store.load()
    assert str(store.path) in str(raised.value)


@pytest.mark.parametrize("damage", ["unknown state", "missing field"])
def test_a_controller_checkpoint_with_malformed_workers_is_refused(service, clock, tmp_path, damage):
    # controller/main.py turns InvalidSnapshot into one line naming the file.
    service.register(registration())
    snapshot = service.snapshot()
    record = snapshot["workers"][0]
    if damage == "unknown state":
        record["state"] = "paused"
    else:
        del record["session_id"]
    store = ControllerCheckpointStore(tmp_path)
    store.save(snapshot)
    with pytest.raises(InvalidSnapshot):
        new_service(clock, tmp_path).load_snapshot(store.load())


# --- status ---------------------------------------------------------------------------

def test_status_shows_the_last_checkpoint_and_its_age(service, clock):
    service.register(registration())
    commit(service, "w0", checkpoint(4, batch_id=7, created_at=clock.now - 30))
    clock.now += 12
    view = service.status().workers[0].last_checkpoint
    assert (view.checkpoint_id, view.age_s) == (4, 42.0)
    assert view.batch_ids == {"counts": 7}
    assert view.offsets == {"counts": {"0": 120, "1": 64}}
    assert (view.size_bytes, view.bytes_copied, view.duration_ms) == (4096, 512, 35.5)
    assert service.status().workers[0].checkpoints_completed == 1


def test_status_shows_recovery_progress(service):
    service.register(registration())
    service.report_progress(ProgressReport("w0", "s1", 1, WorkerState.RECOVERING, restored_checkpoint_id=4,
                                           recovery=Recovery(active=True, target_bytes=400, replayed_bytes=100)))
    recovery = service.status().workers[0].recovery
    assert (recovery.active, recovery.restored_checkpoint_id, recovery.caught_up_pct) == (True, 4, 25.0)


def test_status_without_a_checkpoint(service):
    service.register(registration())
    worker = service.status().workers[0]
    assert worker.last_checkpoint is None
    assert worker.recovery.caught_up_pct == 100.0


# --- gRPC round trip --------------------------------------------------------------------

def manifest(checkpoint_id: int) -> Manifest:
    files = {"offsets/3": FileEntry("ab" * 32, 300), "commits/3": FileEntry("cd" * 32, 29)}
    return Manifest(checkpoint_id=checkpoint_id, worker_id="w0", created_at=990.25, duration_ms=18.5,
                    bytes_copied=300, node_names=("src", "counts"),
                    queries=(ManifestCut("counts", 3, {"0": 120, "1": 64}, files),))


@pytest.fixture
def make_client(address):
    clients: list[ControllerClient] = []

    def make(worker_id="w0", index=0, checkpoints=list) -> ControllerClient:
        client = ControllerClient(address, WorkerIdentity(worker_id, index, 2, "fp", ("src", "counts")),
                                  timeout_s=5, checkpoints=checkpoints, token=GRPC_TOKEN)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def test_commit_checkpoint_over_grpc_returns_the_completed_id(service, make_client):
    client = make_client()
    client.register_once()
    assert client.commit_checkpoint(manifest(2)) == 2
    assert client.commit_checkpoint(manifest(1)) == 2     # late: subsumed by 2
    recorded = service.worker("w0").last_checkpoint
    assert recorded == CheckpointInfo(2, (QueryCut("counts", 3, {"0": 120, "1": 64}),), size_bytes=329,
                                      duration_ms=18.5, created_at=990.25, bytes_copied=300)


def test_commit_checkpoint_for_a_worker_the_controller_does_not_know(make_client):
    with pytest.raises(NotRegistered):
        make_client("w1", 1).commit_checkpoint(manifest(1))


def test_registering_over_grpc_reports_the_volumes_checkpoints(make_client):
    client = make_client(checkpoints=lambda: [manifest(1), manifest(2)])
    registered = client.register_once()
    assert registered.restore.checkpoint_id == 2
    assert registered.last_checkpoint_id == 2
