"""Savepoints over REST (FastAPI's TestClient): status codes, JSON errors that
say what is wrong, and nothing read or written outside the savepoint root."""

from __future__ import annotations

import pytest

from sparkpoint.messages import ExportAnswer, SinkContract, SinkProgress
from tests.unit.rest_support import client_for
from tests.unit.savepoint_support import Pipeline, take, write_part


@pytest.fixture
def rest(service):
    with client_for(service) as client:
        yield client


@pytest.fixture
def outside(tmp_path):
    """A directory beside the root that nothing may touch; a link in the root points at it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "savepoint.json").write_text("{}")
    (tmp_path / "savepoints").mkdir()
    (tmp_path / "savepoints" / "escape").symlink_to(outside)
    return outside


def error(response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and "Traceback" not in body["error"]
    return body["error"]


def test_a_savepoint_is_created_polled_listed_and_disposed(rest, pipeline):
    created = rest.post("/savepoints", json={"label": "before v2"})
    assert created.status_code == 202
    assert {k: created.json()[k] for k in ("id", "label", "state", "checkpoints", "worker_count", "imported_from")} \
        == {"id": "sp-000001", "label": "before v2", "state": "pending", "checkpoints": {}, "worker_count": 2,
            "imported_from": ""}
    for index, checkpoint in ((0, 5), (1, 10)):
        pipeline.report(index, {"sp-000001": checkpoint})
        pipeline.commit(index, checkpoint)
    shown = rest.get("/savepoints/sp-000001").json()
    assert (shown["state"], shown["checkpoints"], shown["exports"]) == ("complete", {"0": 5, "1": 10}, [])
    assert [s["id"] for s in rest.get("/savepoints").json()] == ["sp-000001"]
    assert rest.get("/status").json()["savepoints"] == {"count": 1, "newest_id": "sp-000001",
                                                        "newest_label": "before v2", "newest_state": "complete"}
    assert rest.delete("/savepoints/sp-000001").json()["id"] == "sp-000001"
    assert error(rest.get("/savepoints/sp-000001"), 404) == "there is no savepoint sp-000001"


def test_a_savepoint_without_every_worker_is_refused_409(rest, service):
    Pipeline(service).register(0)
    assert error(rest.post("/savepoints", json={"label": "x"}), 409).startswith("worker 1 of 2 is not registered")


@pytest.mark.parametrize(("label", "message"), [
    ("a\nb", "label: '\\n' (U+000A) at position 2 is not allowed"),
    ("<script>", "label: '<' (U+003C) at position 1 is not allowed"),
    ("x" * 101, "label: 101 characters, at most 100 are allowed"),
])
def test_odd_labels_are_400_naming_the_problem(rest, pipeline, label, message):
    assert error(rest.post("/savepoints", json={"label": label}), 400).startswith(message)
    assert rest.get("/savepoints").json() == []


def test_a_label_that_is_not_text_is_400(rest, pipeline):
    assert error(rest.post("/savepoints", json={"label": 7}), 400) == "body.label: Input should be a valid string"


@pytest.mark.parametrize("savepoint_id", ["sp-1", "%2e%2e", "sp-000001x", "sp-000001%0a"])
@pytest.mark.parametrize("method", ["get", "delete"])
def test_bad_savepoint_ids_are_400(rest, method, savepoint_id):
    message = error(getattr(rest, method)(f"/savepoints/{savepoint_id}"), 400)
    assert message.endswith("is not a savepoint id: ids look like sp-000042")


@pytest.mark.parametrize("action", ["restore", "export"])
def test_bad_and_unknown_ids_for_actions(rest, action):
    body = {"path": "exports/x"}
    assert error(rest.post(f"/savepoints/%2e%2e/{action}", json=body), 400).startswith("'..' is not a savepoint id")
    assert error(rest.post(f"/savepoints/sp-000042/{action}", json=body), 404) == "there is no savepoint sp-000042"


def test_a_restore_is_accepted_and_says_what_each_worker_does(rest, pipeline):
    savepoint_id = take(pipeline)
    response = rest.post(f"/savepoints/{savepoint_id}/restore", json={})
    assert response.status_code == 202
    assert response.json() == {"savepoint_id": savepoint_id, "label": "before v2", "allow_republish": False,
                               "workers": [{"worker_index": 0, "checkpoint_id": 5, "import_dir": "", "worker_id": "w0"},
                                           {"worker_index": 1, "checkpoint_id": 10, "import_dir": "",
                                            "worker_id": "w1"}],
                               "republished": []}


def test_a_restore_past_a_transactional_publish_is_409_until_allowed(rest, pipeline):
    savepoint_id = take(pipeline)
    pipeline.sinks[0] = (SinkProgress("events_pg", contract=SinkContract.TRANSACTIONAL, published_checkpoint_id=7),)
    pipeline.report(0)
    message = error(rest.post(f"/savepoints/{savepoint_id}/restore", json={}), 409)
    assert "sink events_pg on worker 0 has published up to checkpoint 7, past checkpoint 5" in message
    assert message.endswith("pass --allow-republish (CLI) or allow_republish=true (REST)")
    allowed = rest.post(f"/savepoints/{savepoint_id}/restore", json={"allow_republish": True})
    assert allowed.status_code == 202 and allowed.json()["allow_republish"] is True


def test_a_pending_savepoint_cannot_be_restored_409(rest, pipeline):
    rest.post("/savepoints", json={"label": "x"})
    assert "is still being taken" in error(rest.post("/savepoints/sp-000001/restore", json={}), 409)


def test_an_export_is_shown_while_it_runs_and_when_done(rest, pipeline, savepoint_root):
    savepoint_id = take(pipeline)
    started = rest.post(f"/savepoints/{savepoint_id}/export", json={"path": "exports/one"})
    assert started.status_code == 202
    assert (started.json()["path"], started.json()["state"]) == ("exports/one", "pending")
    for index in (0, 1):
        [command] = pipeline.report(index).commands
        write_part(savepoint_root, command)
        pipeline.report(index, exports=(ExportAnswer(savepoint_id, command.dir),))
    [export] = rest.get(f"/savepoints/{savepoint_id}").json()["exports"]
    assert (export["state"], export["workers_written"], export["worker_count"]) == ("complete", 2, 2)
    assert (savepoint_root / "exports/one/savepoint.json").is_file()
    assert "already exists and is not an empty directory" in error(
        rest.post(f"/savepoints/{savepoint_id}/export", json={"path": "exports/one"}), 409)
    imported = rest.post("/savepoints/import", json={"path": "exports/one", "label": "copy"})
    assert imported.status_code == 201
    assert (imported.json()["id"], imported.json()["label"], imported.json()["imported_from"]) == (
        "sp-000002", "copy", "exports/one")


@pytest.mark.parametrize(("path", "message"), [
    ("..", "'..': '..' is not allowed in a path under the savepoint root"),
    ("../outside", "'..' is not allowed in a path under the savepoint root"),
    ("/tmp/x", "'/tmp/x': an absolute path is not allowed"),
    ("escape", "'escape' leads outside the savepoint root through a symbolic link"),
    ("escape/deeper", "leads outside the savepoint root through a symbolic link"),
    ("", "a path is required"),
    ("a\nb", "the character '\\n' (U+000A) is not allowed in a path"),
])
def test_paths_outside_the_root_are_400_and_nothing_outside_is_touched(rest, pipeline, outside, path, message):
    savepoint_id = take(pipeline)
    assert message in error(rest.post(f"/savepoints/{savepoint_id}/export", json={"path": path}), 400)
    assert message in error(rest.post("/savepoints/import", json={"path": path}), 400)
    assert sorted(p.name for p in outside.iterdir()) == ["savepoint.json"]
    assert (outside / "savepoint.json").read_text() == "{}"
    assert [s["id"] for s in rest.get("/savepoints").json()] == [savepoint_id]
    assert pipeline.report(0).commands == ()


def test_importing_what_is_not_an_export_is_400_naming_the_file_and_nothing_there_404(rest, savepoint_root):
    (savepoint_root / "junk").mkdir(parents=True)
    (savepoint_root / "junk" / "savepoint.json").write_text("not json")
    assert error(rest.post("/savepoints/import", json={"path": "junk"}), 400).startswith(
        "junk/savepoint.json: not a valid savepoint record")
    assert error(rest.post("/savepoints/import", json={"path": "nothing"}), 404).startswith(
        "nothing/savepoint.json: no such file")


def test_openapi_lists_the_savepoint_endpoints(rest):
    paths = rest.get("/openapi.json").json()["paths"]
    assert {"/savepoints", "/savepoints/{savepoint_id}", "/savepoints/{savepoint_id}/restore",
            "/savepoints/{savepoint_id}/export", "/savepoints/import"} <= set(paths)
    assert set(paths["/savepoints/{savepoint_id}"]) == {"get", "delete"}
