"""Savepoints: labels and ids, durable records, taking one against workers'
answers and commits in any order, retention pins, restore checks, and the
paths users give for export and import. Fake clock, no sleeps."""

from __future__ import annotations

import json
import os

import pytest

from controller.savepoints.model import (
    InvalidLabel,
    InvalidSavepointId,
    Savepoint,
    SavepointRecordError,
    SavepointState,
    from_json,
    savepoint_number,
    to_json,
    validate_label,
)
from controller.savepoints.registry import (
    SavepointNotRestorable,
    SavepointRegistry,
    UnknownSavepoint,
    WorkerCountMismatch,
)
from sparkpoint.paths import AbsolutePath, InvalidPath, OutsideRoot, ParentReference, resolve_under_root
from worker.checkpointing.policy import retention_plan

TIMEOUT_S = 60.0


@pytest.fixture
def registry(clock) -> SavepointRegistry:
    return SavepointRegistry(clock, timeout_s=TIMEOUT_S)


def trigger(registry: SavepointRegistry, committed: dict[int, int] | None = None, label: str = "before v2") -> str:
    result = registry.trigger(label, "fp-1", 2, {0: 4, 1: 9} if committed is None else committed)
    assert result.refused == ""
    return result.savepoint.savepoint_id


# --- labels and ids -----------------------------------------------------------------------

@pytest.mark.parametrize("label", ["", "before v2", "Release 2.1 (rollback point) #3", "état-été_2025", "a" * 100])
def test_plain_labels_are_accepted(label):
    assert validate_label(label) == label


@pytest.mark.parametrize(("label", "message"), [
    ("a" * 101, "label: 101 characters, at most 100 are allowed"),
    (" padded", "label: leading or trailing spaces are not allowed"),
    ("new\nline", "label: '\\n' (U+000A) at position 4 is not allowed; use letters, digits, spaces and "
                  "- _ . , : ( ) / + @ #"),
    ("rm $(x)", "label: '$' (U+0024) at position 4 is not allowed"),
    ("evil\u202etxt", "label: '\\u202e' (U+202E) at position 5 is not allowed"),
    ("say \"hi\"", "label: '\"' (U+0022) at position 5 is not allowed"),
    ("tab\there", "label: '\\t' (U+0009) at position 4 is not allowed"),
])
def test_odd_labels_are_refused_naming_the_character(label, message):
    with pytest.raises(InvalidLabel) as refused:
        validate_label(label)
    assert str(refused.value).startswith(message)


@pytest.mark.parametrize("savepoint_id", ["", "sp-1", "sp-00001x", "../sp-000001", "sp-000001/..", "SP-000001",
                                          "sp-000001\n", 7])
def test_anything_but_a_savepoint_id_is_refused(savepoint_id):
    with pytest.raises(InvalidSavepointId, match="is not a savepoint id: ids look like sp-000042"):
        savepoint_number(savepoint_id)


# --- taking one -----------------------------------------------------------------------------

def test_a_savepoint_completes_when_every_worker_has_committed_the_checkpoint_it_named(registry, clock):
    savepoint_id = trigger(registry)
    assert registry.get(savepoint_id).state is SavepointState.PENDING
    assert registry.requests(0) == registry.requests(1) == [savepoint_id]
    assert registry.acknowledge(savepoint_id, 0, 5) is None           # started checkpoint 5, not committed yet
    assert registry.requests(0) == []
    assert registry.committed(0, 5)[0].checkpoints == {0: 5}
    clock.now += 3
    assert registry.acknowledge(savepoint_id, 1, 10) is None
    [done] = registry.committed(1, 10)
    assert (done.state, done.checkpoints, done.completed_at) == (SavepointState.COMPLETE, {0: 5, 1: 10}, clock.now)
    assert registry.requests(1) == []


def test_a_checkpoint_in_flight_at_the_trigger_does_not_count(registry):
    savepoint_id = trigger(registry)
    registry.acknowledge(savepoint_id, 0, 6)       # 5 was in flight: the worker takes 6 for the savepoint
    assert registry.committed(0, 5) == []
    assert registry.get(savepoint_id).checkpoints == {}
    assert registry.committed(0, 6)[0].checkpoints == {0: 6}


def test_a_commit_before_the_answer_is_remembered(registry):
    savepoint_id = trigger(registry)
    assert registry.committed(0, 5) == []           # the answer naming 5 is still on its way
    assert registry.acknowledge(savepoint_id, 0, 5).checkpoints == {0: 5}


def test_a_lost_commit_is_subsumed_by_a_newer_one(registry):
    savepoint_id = trigger(registry)
    registry.acknowledge(savepoint_id, 0, 5)
    assert registry.committed(0, 7)[0].checkpoints == {0: 7}


def test_an_idle_worker_names_its_newest_checkpoint_and_is_pinned_at_once(registry):
    # Nothing was committed since checkpoint 9: that one already covers the request.
    savepoint_id = trigger(registry)
    assert registry.acknowledge(savepoint_id, 1, 9).checkpoints == {1: 9}


def test_late_and_repeated_answers_change_nothing(registry):
    savepoint_id = trigger(registry)
    registry.acknowledge(savepoint_id, 0, 5)
    assert registry.acknowledge(savepoint_id, 0, 8) is None
    assert registry.acknowledge("sp-999999", 0, 5) is None
    assert registry.acknowledge(savepoint_id, 7, 5) is None
    registry.committed(0, 5)
    assert registry.get(savepoint_id).checkpoints == {0: 5}


def test_a_savepoint_needs_every_worker_registered(registry):
    result = registry.trigger("x", "fp-1", 3, {0: 4, 2: 1})
    assert result.savepoint is None
    assert result.refused == "worker 1 of 3 is not registered: a savepoint needs a checkpoint of every worker"
    assert registry.list() == []


def test_a_bad_label_is_refused_before_anything_is_recorded(registry):
    with pytest.raises(InvalidLabel):
        registry.trigger("bad\x00label", "fp-1", 2, {0: 1, 1: 1})
    assert registry.list() == []


def test_a_savepoint_not_finished_within_the_timeout_fails_naming_the_workers(registry, clock):
    savepoint_id = trigger(registry)
    registry.acknowledge(savepoint_id, 0, 5)
    clock.now += TIMEOUT_S - 1
    assert registry.expire() == []
    clock.now += 1
    [failed] = registry.expire()
    assert (failed.state, failed.checkpoints) == (SavepointState.FAILED, {})
    assert failed.failure == "worker 1 did not answer the request and worker 0 did not commit its checkpoint within 60 s"
    assert registry.requests(1) == [] and registry.committed(0, 5) == []


# --- using them -------------------------------------------------------------------------------

def complete(registry: SavepointRegistry, pins: dict[int, int], label: str = "before v2") -> str:
    savepoint_id = trigger(registry, {index: checkpoint - 1 for index, checkpoint in pins.items()}, label)
    for index, checkpoint in pins.items():
        registry.acknowledge(savepoint_id, index, checkpoint)
        registry.committed(index, checkpoint)
    assert registry.get(savepoint_id).state is SavepointState.COMPLETE
    return savepoint_id


def test_retention_spares_what_savepoints_pin_until_they_are_disposed(registry):
    first = complete(registry, {0: 3, 1: 4})
    complete(registry, {0: 8, 1: 9})
    pending = trigger(registry, {0: 11, 1: 12})
    registry.acknowledge(pending, 0, 12)
    registry.committed(0, 12)
    assert registry.pinned(0) == {3, 8, 12}
    assert retention_plan(range(1, 15), keep_last=2, pinned=registry.pinned(0)) == [1, 2, 4, 5, 6, 7, 9, 10, 11]
    assert registry.dispose(first).savepoint_id == first
    assert registry.pinned(0) == {8, 12}
    assert registry.dispose(first) is None                # disposed twice: a race, not an error
    assert registry.dispose(pending) is not None
    assert registry.pinned(0) == {8} and registry.requests(1) == []


def test_listing_getting_and_ids(registry):
    first = complete(registry, {0: 3, 1: 4}, "one")
    second = trigger(registry, label="two")
    assert (first, second) == ("sp-000001", "sp-000002")
    assert [(s.savepoint_id, s.label, s.state) for s in registry.list()] == [
        ("sp-000001", "one", SavepointState.COMPLETE), ("sp-000002", "two", SavepointState.PENDING)]
    with pytest.raises(UnknownSavepoint, match="^there is no savepoint sp-000042$"):
        registry.get("sp-000042")
    with pytest.raises(InvalidSavepointId):
        registry.get("../etc")
    with pytest.raises(InvalidSavepointId):
        registry.dispose("sp-1/../../x")


def test_a_complete_savepoint_restores_every_worker_checkpoint(registry):
    savepoint_id = complete(registry, {0: 3, 1: 4})
    assert registry.restore_target(savepoint_id, 2) == {0: 3, 1: 4}


def test_restoring_with_another_worker_count_says_what_would_be_needed(registry):
    savepoint_id = complete(registry, {0: 3, 1: 4})
    with pytest.raises(WorkerCountMismatch) as refused:
        registry.restore_target(savepoint_id, 3)
    assert str(refused.value) == (
        "savepoint sp-000001 was taken with 2 workers, but this deployment runs 3: restore it with "
        "SP_WORKER_COUNT=2 on every worker and the controller (each worker's state covers its own input "
        "partitions and cannot be split or merged)")


def test_pending_and_failed_savepoints_cannot_be_restored(registry, clock):
    pending = trigger(registry)
    registry.acknowledge(pending, 0, 5)
    registry.committed(0, 5)
    with pytest.raises(SavepointNotRestorable, match=r"is still being taken \(1 of 2 workers have a checkpoint"):
        registry.restore_target(pending, 2)
    clock.now += TIMEOUT_S
    registry.expire()
    with pytest.raises(SavepointNotRestorable, match=r"^savepoint sp-000001 failed \(worker 1 did not answer"):
        registry.restore_target(pending, 2)


# --- durable records ------------------------------------------------------------------------------

def test_records_round_trip_and_a_reloaded_registry_continues_the_ids(registry, clock):
    done = registry.get(complete(registry, {0: 3, 1: 4}))
    pending = registry.get(trigger(registry))
    texts = [to_json(s) for s in registry.list()]
    assert json.loads(texts[0])["checkpoints"] == {"0": 3, "1": 4}
    loaded = [from_json(text, f"sp{n}.json") for n, text in enumerate(texts)]
    assert loaded == [done, pending]
    reloaded = SavepointRegistry(clock, timeout_s=TIMEOUT_S, savepoints=loaded)
    # Its workers' answers are gone with the old process: the pending one failed.
    [failed] = reloaded.failed_on_load
    assert (failed.savepoint_id, failed.state, failed.failure) == (
        "sp-000002", SavepointState.FAILED, "the controller restarted while it was being taken")
    assert reloaded.get("sp-000001") == done
    assert reloaded.trigger("next", "fp-1", 2, {0: 1, 1: 1}).savepoint.savepoint_id == "sp-000003"


RECORD = {"format": 1, "id": "sp-000001", "label": "x", "created_at": 1.0, "completed_at": 2.0, "state": "complete",
          "failure": "", "pipeline_fingerprint": "fp", "worker_count": 2, "checkpoints": {"0": 3, "1": 4}}


@pytest.mark.parametrize(("change", "problem"), [
    ({"format": 2}, "unsupported record format 2"),
    ({"id": "../x"}, "is not a savepoint id"),
    ({"label": "a\x1bb"}, "label: '\\x1b'"),
    ({"state": "done"}, "'done' is not a valid SavepointState"),
    ({"checkpoints": {"0": 3}}, "complete, but pins 1 of 2 workers"),
    ({"checkpoints": {"0": 3, "5": 4}}, "worker 5 pins checkpoint 4"),
    ({"worker_count": 0}, "worker_count 0 is outside 1..1024"),
    ({"created_at": None}, "float() argument must be"),
    # The bounds wire input is held to (an imported record is input).
    ({"checkpoints": {"0": 3, "1": 2**63}}, f"worker 1 pins checkpoint {2**63}"),
    ({"checkpoints": {"0": 3, "1": 0}}, "worker 1 pins checkpoint 0"),
    ({"created_at": "nan"}, "created_at nan is not a finite number >= 0"),
    ({"completed_at": "inf"}, "completed_at inf is not a finite number >= 0"),
    ({"pipeline_fingerprint": "f" * 129}, "pipeline_fingerprint is not printable text of at most 128"),
    ({"pipeline_fingerprint": "fp\n"}, "pipeline_fingerprint is not printable text"),
    ({"worker_count": 5000, "checkpoints": {}, "state": "failed"}, "worker_count 5000 is outside 1..1024"),
    ({"imported_from": "x" * 4097}, "imported_from is longer than 4096 characters"),
])
def test_a_bad_record_is_refused_naming_the_file_and_the_problem(change, problem):
    with pytest.raises(SavepointRecordError, match=r"^sp\.json: not a valid savepoint record \(") as refused:
        from_json(json.dumps({**RECORD, **change}), "sp.json")
    assert problem in str(refused.value)


def test_a_records_failure_is_free_text_clipped_not_refused():
    record = from_json(json.dumps({**RECORD, "state": "failed", "checkpoints": {}, "failure": "worker " * 500}),
                       "sp.json")
    assert len(record.failure) <= 1000 and record.failure.startswith("worker worker")


def test_a_record_that_is_not_json_is_refused():
    with pytest.raises(SavepointRecordError, match=r"^sp\.json: not a valid savepoint record"):
        from_json("{truncated", "sp.json")
    with pytest.raises(SavepointRecordError, match="not a JSON object"):
        from_json("[]", "sp.json")


def test_a_record_is_plain_savepoint_data():
    assert from_json(json.dumps(RECORD), "sp.json") == Savepoint(
        "sp-000001", "x", 1.0, "fp", 2, SavepointState.COMPLETE, {0: 3, 1: 4}, 2.0, "")


# --- paths ------------------------------------------------------------------------------------------

@pytest.fixture
def root(tmp_path):
    root = tmp_path / "savepoints"
    (root / "exports").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    return root


def test_a_relative_path_resolves_inside_the_root(root):
    assert resolve_under_root(root, "exports/sp-000001") == (root / "exports" / "sp-000001").resolve()
    assert resolve_under_root(root, "./new/dir") == (root / "new" / "dir").resolve()


def test_a_link_that_stays_inside_the_root_is_followed(root):
    os.symlink(root / "exports", root / "latest")
    assert resolve_under_root(root, "latest/sp-000001") == (root / "exports" / "sp-000001").resolve()


@pytest.mark.parametrize(("user_path", "error", "message"), [
    ("../elsewhere", ParentReference, "'../elsewhere': '..' is not allowed in a path under the savepoint root"),
    ("exports/../../elsewhere", ParentReference, "'..' is not allowed"),
    ("/etc/passwd", AbsolutePath, "'/etc/passwd': an absolute path is not allowed; give a path relative to the "
                                  "savepoint root"),
    ("~/x", AbsolutePath, "an absolute path is not allowed"),
    ("", InvalidPath, "a path is required, relative to the savepoint root"),
    (".", InvalidPath, "'.' is the savepoint root itself; give a directory inside it"),
    ("exports/a\nb", InvalidPath, "the character '\\n' (U+000A) is not allowed in a path"),
])
def test_paths_that_could_leave_the_root_are_refused_by_name(root, user_path, error, message):
    with pytest.raises(error) as refused:
        resolve_under_root(root, user_path)
    assert message in str(refused.value)


@pytest.mark.parametrize("link", ["escape", "exports/escape"])
def test_a_symbolic_link_leading_outside_the_root_is_refused(root, tmp_path, link):
    os.symlink(tmp_path / "elsewhere", root / link)
    for user_path in (link, f"{link}/sp-000001"):
        with pytest.raises(OutsideRoot, match="leads outside the savepoint root through a symbolic link"):
            resolve_under_root(root, user_path)
