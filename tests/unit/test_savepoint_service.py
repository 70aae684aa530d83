"""Savepoints through ControllerService: taking one against the workers'
reports and commits, durable records across a controller restart, restores
handed to registrations, exports and imports under the savepoint root.
Fake clock and session ids; no sleeps, no Spark."""

from __future__ import annotations

import json
import os
import threading

import pytest

from controller.savepoints.exported import ExportedSavepoints, ExportTargetNotEmpty
from controller.savepoints.model import SavepointConflict, SavepointRecordError, SavepointState, from_json
from controller.savepoints.registry import SavepointNotRestorable, UnknownSavepoint, WorkerCountMismatch
from controller.savepoints.restores import RepublishRefused
from controller.settings import ControllerSettings
from sparkpoint.messages import (
    CheckpointInfo,
    CheckpointNow,
    Export,
    ExportAnswer,
    Restart,
    RestoreDecision,
    SinkContract,
    SinkProgress,
)
from sparkpoint.paths import OutsideRoot, ParentReference
from sparkpoint.settings import SettingsError
from tests.unit.fakes import SAVEPOINT_TIMEOUT_S, new_service
from tests.unit.savepoint_support import Pipeline, export, take, write_part
from tests.unit.test_settings import NO_AUTH


def record_file(tmp_path, savepoint_id: str):
    return tmp_path / "controller" / "savepoints" / f"{savepoint_id}.json"


# --- taking one ------------------------------------------------------------------------------

def test_a_savepoint_is_asked_for_answered_committed_pinned_and_written(pipeline, clock, tmp_path):
    view = pipeline.service.trigger_savepoint("before v2")
    assert (view.id, view.label, view.state, view.pipeline_fingerprint, view.worker_count) == (
        "sp-000001", "before v2", SavepointState.PENDING, "fp-1", 2)
    assert json.loads(record_file(tmp_path, "sp-000001").read_text())["state"] == "pending"

    # Each report is asked again until the worker answers.
    assert pipeline.report(0).commands == (CheckpointNow("sp-000001"),)
    assert pipeline.report(0).commands == (CheckpointNow("sp-000001"),)
    assert pipeline.report(0, {"sp-000001": 5}).commands == ()
    pipeline.commit(0, 5)
    assert pipeline.service.savepoint("sp-000001").checkpoints == {"0": 5}
    assert pipeline.report(0).pinned == {5}
    # Worker 1 was idle: its newest checkpoint already covers the request.
    clock.now += 2
    assert pipeline.report(1, {"sp-000001": 9}).pinned == {9}
    done = pipeline.service.savepoint("sp-000001")
    assert (done.state, done.checkpoints, done.completed_at) == (SavepointState.COMPLETE, {"0": 5, "1": 9}, clock.now)
    record = from_json(record_file(tmp_path, "sp-000001").read_text(), "record")
    assert (record.state, record.checkpoints) == (SavepointState.COMPLETE, {0: 5, 1: 9})


def test_records_are_reloaded_after_a_restart_and_ids_continue(pipeline, clock, tmp_path):
    done = take(pipeline)
    pipeline.service.trigger_savepoint("interrupted")
    restarted = new_service(clock, tmp_path)
    assert [(s.id, s.state) for s in restarted.savepoints()] == [
        (done, SavepointState.COMPLETE), ("sp-000002", SavepointState.FAILED)]
    # The pending one failed with the old process, and says so on disk too.
    assert json.loads(record_file(tmp_path, "sp-000002").read_text())["failure"] == (
        "the controller restarted while it was being taken")
    # The restarted controller tells the workers what to keep before anything else.
    again = Pipeline(restarted)
    again.register(0)
    assert again.report(0).pinned == {5}
    again.register(1)
    assert restarted.trigger_savepoint("next").id == "sp-000003"


def test_an_unreadable_record_is_moved_aside_and_its_id_never_reused(pipeline, clock, tmp_path):
    take(pipeline)
    record_file(tmp_path, "sp-000001").write_text('{"format": 1, "id": "sp-00')
    record_file(tmp_path, "sp-000001").parent.joinpath(".sp-000002.json.123.tmp").write_text("{")
    restarted = new_service(clock, tmp_path)
    assert restarted.savepoints() == []
    records = tmp_path / "controller" / "savepoints"
    assert sorted(p.name for p in records.iterdir()) == ["quarantine"]
    assert (records / "quarantine" / "sp-000001.json").exists()
    Pipeline(restarted).register(0)
    Pipeline(restarted).register(1)
    assert restarted.trigger_savepoint("next").id == "sp-000002"


def test_a_savepoint_needs_every_worker_registered(service):
    Pipeline(service).register(0)
    with pytest.raises(SavepointConflict, match="^worker 1 of 2 is not registered: a savepoint needs a checkpoint"):
        service.trigger_savepoint("x")
    assert service.savepoints() == []


def test_workers_running_different_pipelines_are_refused(service):
    Pipeline(service, "fp-1").register(0)
    Pipeline(service, "fp-2").register(1)
    with pytest.raises(SavepointConflict, match=r"the workers run different pipelines \(fp-1, fp-2\)"):
        service.trigger_savepoint("x")


def test_a_stalled_savepoint_fails_on_time_when_listed(pipeline, clock, tmp_path):
    savepoint_id = pipeline.service.trigger_savepoint("x").id
    pipeline.report(0, {savepoint_id: 5})
    clock.now += SAVEPOINT_TIMEOUT_S
    [failed] = pipeline.service.savepoints()
    assert failed.state is SavepointState.FAILED
    assert failed.failure == "worker 1 did not answer the request and worker 0 did not commit its checkpoint within 60 s"
    assert json.loads(record_file(tmp_path, savepoint_id).read_text())["state"] == "failed"
    assert pipeline.report(1).commands == ()


def test_disposing_releases_the_pins_and_deletes_the_record(pipeline, tmp_path):
    savepoint_id = take(pipeline)
    assert pipeline.service.dispose_savepoint(savepoint_id).id == savepoint_id
    assert not record_file(tmp_path, savepoint_id).exists()
    assert pipeline.report(0).pinned == frozenset()
    with pytest.raises(UnknownSavepoint, match="^there is no savepoint sp-000001$"):
        pipeline.service.dispose_savepoint(savepoint_id)


def test_status_counts_savepoints_and_names_the_newest(pipeline):
    assert pipeline.service.status().savepoints.count == 0
    take(pipeline, "first")
    pipeline.service.trigger_savepoint("second")
    summary = pipeline.service.status().savepoints
    assert (summary.count, summary.newest_id, summary.newest_label, summary.newest_state) == (
        2, "sp-000002", "second", "pending")


# --- restoring one ------------------------------------------------------------------------------

def test_a_restore_restarts_each_worker_once_and_its_registration_gets_the_savepoint(pipeline):
    savepoint_id = take(pipeline)
    pipeline.commit(0, 6)
    view = pipeline.service.restore_savepoint(savepoint_id, allow_republish=False)
    assert [(p.worker_index, p.checkpoint_id, p.worker_id) for p in view.workers] == [(0, 5, "w0"), (1, 10, "w1")]
    # Told to restart on every report until it registers again; the checkpoint stays pinned.
    assert pipeline.report(0).commands == (Restart(),)
    assert pipeline.report(0).commands == (Restart(),)
    assert pipeline.register(0, held=(5, 6)) == RestoreDecision(5, savepoint_id, "", False)
    assert pipeline.report(0).commands == ()
    # A crash before the restored run's first checkpoint restores the savepoint again,
    # not checkpoint 6 (taken before the restore).
    assert pipeline.register(0, held=(5, 6)).savepoint_id == savepoint_id
    pipeline.commit(0, 7)
    assert pipeline.register(0, held=(5, 6, 7)) == RestoreDecision(7)
    # Worker 1 has not reported since: its restore still waits.
    assert pipeline.report(1).commands == (Restart(),)


def test_a_commit_of_an_older_session_does_not_end_the_restore(pipeline):
    savepoint_id = take(pipeline)
    pipeline.service.restore_savepoint(savepoint_id, allow_republish=False)
    old_session = pipeline.sessions[0]
    pipeline.register(0)
    pipeline.service.commit_checkpoint("w0", CheckpointInfo(11), old_session)
    assert pipeline.register(0).savepoint_id == savepoint_id


def test_a_worker_not_running_yet_starts_from_the_savepoint(pipeline, clock, tmp_path):
    savepoint_id = take(pipeline)
    fresh = new_service(clock, tmp_path)        # a new deployment of the same controller state
    fresh.restore_savepoint(savepoint_id, allow_republish=False)
    assert Pipeline(fresh).register(1) == RestoreDecision(10, savepoint_id)


def test_a_transactional_sink_published_past_the_savepoint_needs_consent(pipeline):
    savepoint_id = take(pipeline)
    pipeline.sinks[1] = (SinkProgress("events_pg", contract=SinkContract.TRANSACTIONAL, published_checkpoint_id=12),
                         SinkProgress("vwap_pg", contract=SinkContract.UPSERT, published_checkpoint_id=99))
    pipeline.report(1)
    with pytest.raises(RepublishRefused) as refused:
        pipeline.service.restore_savepoint(savepoint_id, allow_republish=False)
    assert str(refused.value) == (
        "restoring savepoint sp-000001 would publish output again: sink events_pg on worker 1 has published up to "
        "checkpoint 12, past checkpoint 10 in the savepoint. To restore it anyway, pass --allow-republish (CLI) or "
        "allow_republish=true (REST)")
    assert pipeline.report(0).commands == ()            # nothing was requested
    view = pipeline.service.restore_savepoint(savepoint_id, allow_republish=True)
    assert view.republished == ["sink events_pg on worker 1 has published up to checkpoint 12, past checkpoint 10 "
                                "in the savepoint"]
    assert pipeline.register(1) == RestoreDecision(10, savepoint_id, "", True)


def test_a_sink_at_the_savepoint_has_nothing_to_publish_again(pipeline):
    savepoint_id = take(pipeline)
    pipeline.sinks[1] = (SinkProgress("events_pg", contract=SinkContract.TRANSACTIONAL, published_checkpoint_id=10),)
    pipeline.report(1)
    assert pipeline.service.restore_savepoint(savepoint_id, allow_republish=False).republished == []


def test_restoring_with_another_worker_count_says_what_is_needed(pipeline, clock, tmp_path):
    savepoint_id = take(pipeline)
    with pytest.raises(WorkerCountMismatch, match="taken with 2 workers, but this deployment runs 3: restore it "
                                                  "with SP_WORKER_COUNT=2"):
        new_service(clock, tmp_path, worker_count=3).restore_savepoint(savepoint_id, allow_republish=False)


def test_a_pending_savepoint_cannot_be_restored(pipeline):
    savepoint_id = pipeline.service.trigger_savepoint("x").id
    with pytest.raises(SavepointNotRestorable, match="is still being taken"):
        pipeline.service.restore_savepoint(savepoint_id, allow_republish=False)


# --- exporting and importing ------------------------------------------------------------------

def test_each_worker_writes_its_part_then_the_record_is_written_last(pipeline, savepoint_root):
    savepoint_id = take(pipeline)
    view = pipeline.service.export_savepoint(savepoint_id, "exports/one")
    assert (view.path, view.state.value, view.workers_written, view.worker_count) == ("exports/one", "pending", 0, 2)
    assert pipeline.report(0).commands == (Export(savepoint_id, 5, "exports/one/worker-0"),)
    write_part(savepoint_root, Export(savepoint_id, 5, "exports/one/worker-0"))
    assert pipeline.report(0, exports=(ExportAnswer(savepoint_id, "exports/one/worker-0"),)).commands == ()
    assert not (savepoint_root / "exports/one/savepoint.json").exists()
    assert pipeline.service.savepoint(savepoint_id).exports[0].workers_written == 1
    [command] = pipeline.report(1).commands
    write_part(savepoint_root, command)
    pipeline.report(1, exports=(ExportAnswer(savepoint_id, command.dir),))
    [done] = pipeline.service.savepoint(savepoint_id).exports
    assert (done.state.value, done.workers_written, done.error) == ("complete", 2, "")
    record = from_json((savepoint_root / "exports/one/savepoint.json").read_text(), "savepoint.json")
    assert (record.savepoint_id, record.checkpoints, record.label) == (savepoint_id, {0: 5, 1: 10}, "before v2")


def test_a_worker_error_fails_the_export_naming_it(pipeline, savepoint_root):
    savepoint_id = take(pipeline)
    pipeline.service.export_savepoint(savepoint_id, "exports/one")
    pipeline.report(0, exports=(ExportAnswer(savepoint_id, "exports/one/worker-0", "No space left on device"),))
    [failed] = pipeline.service.savepoint(savepoint_id).exports
    assert (failed.state.value, failed.error) == (
        "failed", "worker 0 could not write exports/one/worker-0: No space left on device")
    assert pipeline.report(1).commands == ()
    assert not (savepoint_root / "exports/one/savepoint.json").exists()


def test_an_export_no_worker_answers_fails_on_time(pipeline, clock):
    savepoint_id = take(pipeline)
    pipeline.service.export_savepoint(savepoint_id, "exports/one")
    clock.now += SAVEPOINT_TIMEOUT_S
    [failed] = pipeline.service.savepoint(savepoint_id).exports
    assert failed.error == "worker 0, 1 did not write its part within 60 s"


def test_export_targets_must_be_new_and_inside_the_root(pipeline, savepoint_root, tmp_path):
    savepoint_id = take(pipeline)
    (savepoint_root / "taken").mkdir(parents=True)
    (savepoint_root / "taken" / "file").write_text("x")
    with pytest.raises(ExportTargetNotEmpty, match="'taken' already exists and is not an empty directory"):
        pipeline.service.export_savepoint(savepoint_id, "taken")
    with pytest.raises(ParentReference):
        pipeline.service.export_savepoint(savepoint_id, "../outside")
    (tmp_path / "outside").mkdir()
    (savepoint_root / "escape").symlink_to(tmp_path / "outside")
    with pytest.raises(OutsideRoot):
        pipeline.service.export_savepoint(savepoint_id, "escape/x")
    assert list((tmp_path / "outside").iterdir()) == []
    pipeline.service.export_savepoint(savepoint_id, "exports/one")
    with pytest.raises(SavepointConflict, match="sp-000001 is being exported there"):
        pipeline.service.export_savepoint(savepoint_id, "exports/one")


def test_only_complete_savepoints_of_this_deployment_are_exported(pipeline):
    pending = pipeline.service.trigger_savepoint("x").id
    with pytest.raises(SavepointConflict, match="savepoint sp-000001 is pending: only a complete savepoint"):
        pipeline.service.export_savepoint(pending, "exports/one")


def test_an_export_is_imported_as_a_new_savepoint_that_pins_nothing(pipeline, savepoint_root, clock, tmp_path):
    savepoint_id = take(pipeline)
    export(pipeline, savepoint_root, savepoint_id)
    # Another deployment, with the same savepoint root mounted.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "savepoints").symlink_to(savepoint_root)
    elsewhere = new_service(clock, tmp_path / "other")
    other = Pipeline(elsewhere)
    imported = elsewhere.import_savepoint("exports/one", None)
    assert (imported.id, imported.label, imported.state, imported.checkpoints, imported.imported_from) == (
        "sp-000001", "before v2", SavepointState.COMPLETE, {"0": 5, "1": 10}, "exports/one")
    other.register(0)
    assert other.report(0).pinned == frozenset()
    with pytest.raises(SavepointConflict, match="exports/one is imported already, as savepoint sp-000001"):
        elsewhere.import_savepoint("exports/one", "again")
    with pytest.raises(SavepointConflict, match="was imported from exports/one, which is already a self-contained"):
        elsewhere.export_savepoint(imported.id, "exports/two")
    # Restoring it hands each worker its part of the export.
    elsewhere.restore_savepoint(imported.id, allow_republish=False)
    assert other.register(0) == RestoreDecision(5, "sp-000001", "exports/one/worker-0", False)
    assert other.report(0).pinned == frozenset()


def test_an_imported_savepoint_needs_consent_once_a_transactional_sink_has_published(pipeline, savepoint_root):
    savepoint_id = take(pipeline)
    export(pipeline, savepoint_root, savepoint_id)
    imported = pipeline.service.import_savepoint("exports/one", "moved")
    pipeline.sinks[0] = (SinkProgress("events_pg", contract=SinkContract.TRANSACTIONAL, published_checkpoint_id=1),)
    pipeline.report(0)
    with pytest.raises(RepublishRefused, match=r"^restoring savepoint sp-000002 \(imported from exports/one: its "
                                               r"state comes from another deployment\) would publish output again: "
                                               r"sink events_pg on worker 0 has published up to checkpoint 1 of this "
                                               r"deployment\. To restore"):
        pipeline.service.restore_savepoint(imported.id, allow_republish=False)


@pytest.mark.parametrize(("damage", "message"), [
    ("no record", "exports/one/savepoint.json: no such file: exports/one is not an exported savepoint"),
    ("bad record", "exports/one/savepoint.json: not a valid savepoint record"),
    ("missing part", "exports/one/worker-1/manifests/000000000010.json: no such file: worker 1's checkpoint 10 is "
                     "missing from the export"),
])
def test_an_incomplete_export_is_refused_naming_the_file(pipeline, savepoint_root, damage, message):
    savepoint_id = take(pipeline)
    export(pipeline, savepoint_root, savepoint_id)
    if damage == "no record":
        (savepoint_root / "exports/one/savepoint.json").unlink()
    elif damage == "bad record":
        (savepoint_root / "exports/one/savepoint.json").write_text("{")
    else:
        (savepoint_root / "exports/one/worker-1/manifests/000000000010.json").unlink()
    with pytest.raises(SavepointRecordError) as refused:
        pipeline.service.import_savepoint("exports/one", None)
    assert str(refused.value).startswith(message)
    assert [s.id for s in pipeline.service.savepoints()] == [savepoint_id]


@pytest.mark.parametrize("plant, why", [
    (lambda record: os.mkfifo(record), "not a regular file"),          # reading it would wait forever
    (lambda record: os.truncate(record, 8 << 30), "larger than 1,048,576 bytes"),     # sparse: costs nothing
])
def test_a_record_that_is_not_a_small_regular_file_is_refused_unread(pipeline, savepoint_root, plant, why):
    savepoint_id = take(pipeline)
    export(pipeline, savepoint_root, savepoint_id)
    record = savepoint_root / "exports/one/savepoint.json"
    if why == "not a regular file":
        record.unlink()
    plant(record)
    with pytest.raises(SavepointRecordError, match=f"^exports/one/savepoint.json: cannot be read \\({why}\\)"):
        pipeline.service.import_savepoint("exports/one", None)


def test_an_import_reads_its_files_without_holding_up_the_controllers_other_calls(pipeline, savepoint_root,
                                                                                  monkeypatch):
    savepoint_id = take(pipeline)
    export(pipeline, savepoint_root, savepoint_id)
    reading, release = threading.Event(), threading.Event()
    read = ExportedSavepoints.read

    def slow_read(self, user_path):     # a slow disk, a file that takes its time
        reading.set()
        assert release.wait(30)
        return read(self, user_path)

    monkeypatch.setattr(ExportedSavepoints, "read", slow_read)
    importing = threading.Thread(target=pipeline.service.import_savepoint, args=("exports/one", "late"))
    importing.start()
    assert reading.wait(30)
    answered: list = []
    other = threading.Thread(target=lambda: answered.append([s.id for s in pipeline.service.savepoints()]))
    other.start()
    other.join(30)          # (bounds a failure: under the lock it would wait for the release below)
    release.set()
    importing.join(30)
    assert answered == [[savepoint_id]], "a call waited for an import's file reads"
    assert [s.label for s in pipeline.service.savepoints()] == ["before v2", "late"]


def test_an_export_whose_part_links_outside_the_root_is_refused(pipeline, savepoint_root, tmp_path):
    savepoint_id = take(pipeline)
    export(pipeline, savepoint_root, savepoint_id)
    outside = tmp_path / "outside"
    (savepoint_root / "exports/one/worker-1").rename(outside)
    (savepoint_root / "exports/one/worker-1").symlink_to(outside)
    with pytest.raises(OutsideRoot):
        pipeline.service.import_savepoint("exports/one", None)


# --- settings -----------------------------------------------------------------------------------

def test_savepoint_settings_and_their_defaults():
    defaults = ControllerSettings.from_env(NO_AUTH)
    assert (str(defaults.savepoint_dir), defaults.savepoint_timeout_ms) == ("var/savepoints", 120000)
    chosen = ControllerSettings.from_env({**NO_AUTH, "SP_SAVEPOINT_DIR": "/mnt/sp", "SP_SAVEPOINT_TIMEOUT": "500"})
    assert (str(chosen.savepoint_dir), chosen.savepoint_timeout_ms) == ("/mnt/sp", 500)


@pytest.mark.parametrize("value", ["0", "soon"])
def test_a_bad_savepoint_timeout_is_named(value):
    with pytest.raises(SettingsError, match="^SP_SAVEPOINT_TIMEOUT: "):
        ControllerSettings.from_env({**NO_AUTH, "SP_SAVEPOINT_TIMEOUT": value})
