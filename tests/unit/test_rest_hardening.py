"""Issue 15's REST findings as regression tests: bodies over the size limit
413, JSON only for requests that change something (a cross-site form POST
refused), 405 with Allow, over-long paths 400, short errors that never echo
the input, the OpenAPI document listing each endpoint's answers and rules,
releasing a dead worker's index, and a full controller disk answered 503
with nothing acknowledged that was not written."""

from __future__ import annotations

import errno
import json
import os
import re

import jsonschema_rs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.rest.models import ERROR_MAX, LABEL_PATTERN, MAX_BODY_BYTES
from controller.savepoints import store as savepoint_store
from controller.savepoints.model import InvalidLabel, validate_label
from controller.savepoints.store import SavepointStore
from sparkpoint.messages import Registration, ReportStatus, Restart
from sparkpoint.paths import PATH_CHARS, PATH_PATTERN, UnsafePath, resolve_under_root
from sparkpoint_cli import main
from tests.unit.fakes import new_service
from tests.unit.rest_support import client_for
from tests.unit.savepoint_support import Pipeline, take


@pytest.fixture
def rest(service):
    with client_for(service, raise_server_exceptions=False) as client:
        yield client


def error(response, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and len(body["error"]) <= ERROR_MAX
    return body["error"]


# --- sizes and content types ----------------------------------------------------------------

def test_a_body_over_the_limit_is_413_and_nothing_is_taken(rest, pipeline):
    huge = {"label": "x" * (MAX_BODY_BYTES + 1)}
    assert error(rest.post("/savepoints", json=huge), 413).endswith(f"bytes, more than the {MAX_BODY_BYTES} accepted")
    assert rest.get("/savepoints").json() == []


def test_a_chunked_body_over_the_limit_is_413(rest, pipeline):
    chunks = (b'{"label": "' + b"x" * 4096 for _ in range(MAX_BODY_BYTES // 4096 + 2))
    response = rest.post("/savepoints", content=chunks, headers={"Content-Type": "application/json"})
    assert error(response, 413).startswith("the body is over ")
    assert rest.get("/savepoints").json() == []


@pytest.mark.parametrize("request_kwargs", [
    {"data": {"allow_republish": "true"}},                                    # a cross-site <form>
    {},                                                                       # fetch() without a body
    {"content": b'{"allow_republish": true}', "headers": {"Content-Type": "text/plain"}},
    {"files": {"allow_republish": b"true"}},                                  # multipart/form-data
])
def test_a_cross_site_restore_is_refused_415_and_nothing_restarts(rest, pipeline, request_kwargs):
    savepoint_id = take(pipeline)
    message = error(rest.post(f"/savepoints/{savepoint_id}/restore", **request_kwargs), 415)
    assert message == "POST takes a JSON body: send Content-Type: application/json"
    assert Restart() not in pipeline.report(0).commands
    assert rest.post(f"/savepoints/{savepoint_id}/restore", json={}).status_code == 202
    assert Restart() in pipeline.report(0).commands


def test_a_delete_with_a_form_body_is_415(rest, pipeline):
    savepoint_id = take(pipeline)
    assert error(rest.request("DELETE", f"/savepoints/{savepoint_id}", data={"x": "1"}), 415)
    assert rest.delete(f"/savepoints/{savepoint_id}").status_code == 200


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("post", "/status", "GET"), ("put", "/savepoints", "GET, POST"),
    ("patch", "/savepoints/sp-000001", "GET, DELETE"), ("get", "/savepoints/import", "POST"),
    # The operator's routes, an included router of their own.
    ("post", "/metrics", "GET"), ("delete", "/workers/w0/checkpoints", "GET"), ("put", "/", "GET"),
    ("post", "/static/page.js", "GET"), ("get", "/workers/w0/release", "POST"),
])
def test_405_carries_allow(rest, method, path, allow):
    response = rest.request(method.upper(), path, json={})
    error(response, 405)
    assert set(response.headers["allow"].split(", ")) == set(allow.split(", "))


# --- paths and echoes -----------------------------------------------------------------------

@pytest.mark.parametrize(("path", "message"), [
    ("n" * 64, "names are 1 to 63 characters"),
    ("n" * 256, "names are 1 to 63 characters"),
    ("exports/" + "é" * 128, "the character 'é' (U+00E9) is not allowed in a path"),
    ("a/" * 16 + "a", "17 names deep, at most 16 are allowed"),
    ("a/" * 600, "601 names deep"),
])
def test_export_paths_over_the_name_limit_are_400(rest, pipeline, savepoint_root, path, message):
    savepoint_id = take(pipeline)
    assert message in error(rest.post(f"/savepoints/{savepoint_id}/export", json={"path": path}), 400)
    assert message in error(rest.post("/savepoints/import", json={"path": path}), 400)
    assert not savepoint_root.exists() or list(savepoint_root.iterdir()) == []


@pytest.mark.parametrize(("request_", "status"), [
    (lambda rest, big: rest.get(f"/savepoints/{big}"), 400),
    (lambda rest, big: rest.get(f"/workers/{big}"), 400),
    (lambda rest, big: rest.post(f"/workers/{big}/release", json={}), 400),
    (lambda rest, big: rest.get(f"/workers/{big}/checkpoints"), 400),
    (lambda rest, big: rest.get(f"/static/{big}"), 404),
    (lambda rest, big: rest.get("/history", params={"since": big}), 400),
    (lambda rest, big: rest.post("/savepoints", json={"label": big}), 400),
    (lambda rest, big: rest.post("/savepoints/import", json={"path": big}), 400),
    (lambda rest, big: rest.post("/savepoints/import", json={"path": "x", "label": big}), 404),
])
def test_errors_never_echo_the_input(rest, pipeline, request_, status):
    big = "Z" * 20_000
    message = error(request_(rest, big), status)
    assert "Z" * 100 not in message


@pytest.mark.parametrize("since", ["-1", "nan", "inf", "soon"])
def test_history_takes_only_a_finite_time(rest, since):
    assert error(rest.get("/history", params={"since": since}), 400).startswith("query.since: ")


def test_the_operators_routes_answer_errors_in_json(rest, pipeline):
    assert error(rest.get("/workers/w9/checkpoints"), 404) == "no worker 'w9' has registered"
    assert error(rest.get("/workers/-w0/checkpoints"), 400).startswith("worker id: '-w0' is not a valid name")
    assert error(rest.get("/static/index.html"), 404) == "no static file 'index.html'"
    assert rest.get("/history", params={"since": "0"}).status_code == 200


def test_a_body_that_is_not_json_is_400_not_500(rest, pipeline):
    response = rest.post("/savepoints", content=b"{not json", headers={"Content-Type": "application/json"})
    assert error(response, 400).startswith("body.1: JSON decode error")


# --- the OpenAPI document ---------------------------------------------------------------------

def test_openapi_lists_each_endpoints_answers_and_rules(rest):
    document = rest.get("/openapi.json").json()
    paths = document["paths"]
    expected = {
        ("/workers/{worker_id}", "get"): {"200", "400", "404"},
        ("/workers/{worker_id}/release", "post"): {"200", "400", "404", "409", "413", "415", "503"},
        ("/savepoints", "post"): {"202", "400", "409", "413", "415", "503"},
        ("/savepoints", "get"): {"200", "503"},
        ("/savepoints/import", "post"): {"201", "400", "404", "409", "413", "415", "503"},
        ("/savepoints/{savepoint_id}", "get"): {"200", "400", "404", "503"},
        ("/savepoints/{savepoint_id}", "delete"): {"200", "400", "404", "413", "415", "503"},
        ("/savepoints/{savepoint_id}/restore", "post"): {"202", "400", "404", "409", "413", "415", "503"},
        ("/savepoints/{savepoint_id}/export", "post"): {"202", "400", "404", "409", "413", "415", "503"},
        # The operator's routes.
        ("/", "get"): {"200"},
        ("/static/{name}", "get"): {"200", "404"},
        ("/metrics", "get"): {"200"},
        ("/pipeline", "get"): {"200"},
        ("/history", "get"): {"200", "400"},
        ("/workers/{worker_id}/checkpoints", "get"): {"200", "400", "404"},
    }
    for (path, method), codes in expected.items():
        responses = paths[path][method]["responses"]
        # The token (test_rest_auth), on all but the status page's shell.
        assert set(responses) == codes | ({"401"} if path not in ("/", "/static/{name}") else set()), (path, method)
        for code in codes - {"200", "201", "202"}:
            assert responses[code]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/"
                                                                                        "ErrorBody"}
    assert set(paths) == {path for path, _ in expected} | {"/health", "/status"}
    assert paths["/static/{name}"]["get"]["parameters"][0]["schema"]["enum"] == ["favicon.svg", "page.css", "page.js"]
    assert set(paths["/metrics"]["get"]["responses"]["200"]["content"]) == {"text/plain",
                                                                            "application/openmetrics-text"}
    parameter = paths["/savepoints/{savepoint_id}"]["get"]["parameters"][0]
    assert parameter["schema"]["pattern"] == "^sp-[0-9]{6,12}$"
    label = document["components"]["schemas"]["CreateSavepoint"]["properties"]["label"]
    assert label["maxLength"] == 100 and "pattern" in label
    assert "HTTPValidationError" not in document["components"]["schemas"]


# --- releasing a dead worker's index ------------------------------------------------------------

def test_a_silent_worker_is_released_and_its_index_taken_by_another(rest, service, pipeline, clock):
    assert "it is alive" in error(rest.post("/workers/w0/release", json={}), 409)
    clock.now += 31
    pipeline.report(1)      # w1 is alive, w0 silent
    released = rest.post("/workers/w0/release", json={})
    assert released.status_code == 200
    assert released.json() == {"worker_id": "w0", "worker_index": 0, "last_checkpoint_id": 4}
    assert error(rest.get("/workers/w0"), 404) == "no worker 'w0' has registered"
    assert service.register(Registration("replacement", 0, 2, "fp-1")).worker_index == 0
    assert error(rest.post("/workers/w0/release", json={}), 404) == "no worker 'w0' has registered"


def test_the_cli_releases_a_worker(url, service, pipeline, clock, capsys):
    clock.now += 60
    with pytest.raises(SystemExit) as exited:
        main(["worker", "release", "w1", "--controller", url])
    assert exited.value.code == 0
    assert capsys.readouterr().out == ("Released w1: worker index 1 is free for another worker id (its last "
                                       "checkpoint was 9).\n")
    assert service.worker("w1") is None


def release(url: str, *argv: str) -> int:
    with pytest.raises(SystemExit) as exited:
        main(["worker", "release", *argv, "--controller", url])
    return exited.value.code


def test_the_cli_says_json_when_asked(url, service, pipeline, clock, capsys):
    clock.now += 60
    assert release(url, "w0", "--output", "json") == 0
    assert json.loads(capsys.readouterr().out) == {"worker_id": "w0", "worker_index": 0, "last_checkpoint_id": 4}


@pytest.mark.parametrize(("worker", "code", "message"), [
    ("w0", 2, "sparkpoint: refused: w0 reported 0 s ago: it is alive."),       # refused: exit 2
    ("w9", 1, "sparkpoint: error: no worker 'w9' has registered (HTTP 404)"),  # could not: exit 1
    ("w 0", 1, "sparkpoint: error: worker id: 'w 0' is not a valid name"),
])
def test_the_cli_exits_2_when_refused_and_1_when_it_cannot(url, service, pipeline, capsys, worker, code, message):
    assert release(url, worker) == code
    assert capsys.readouterr().err.startswith(message)
    assert service.worker("w0") is not None


def test_a_release_the_controller_cannot_write_is_503_and_not_made(clock, tmp_path):
    def full(snapshot):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    service = new_service(clock, tmp_path, save_table=full)
    Pipeline(service).register(0)
    clock.now += 60
    with client_for(service) as rest:
        message = error(rest.post("/workers/w0/release", json={}), 503)
    assert message == "cannot write the controller's checkpoint: No space left on device; w0 is not released"
    assert service.worker("w0") is not None


# --- a full disk under the controller's savepoint records -------------------------------------------

class Disk:
    """The write boundary of savepoint records: ``full`` makes every write
    fail as a full disk does (ENOSPC), with nothing left behind."""

    def __init__(self) -> None:
        self.full = False


@pytest.fixture
def disk(monkeypatch) -> Disk:
    disk = Disk()
    write = savepoint_store.atomic_write

    def guarded(path, data):
        if disk.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        write(path, data)

    monkeypatch.setattr(savepoint_store, "atomic_write", guarded)
    return disk


def test_a_savepoint_that_cannot_be_written_is_refused_503_never_shown_and_its_id_never_reused(
        rest, service, pipeline, disk, clock, tmp_path):
    disk.full = True
    message = error(rest.post("/savepoints", json={"label": "on a full disk"}), 503)
    assert message.startswith("cannot write savepoint record ") and message.endswith("No space left on device")
    assert rest.get("/savepoints").json() == []
    assert pipeline.report(0).commands == ()            # no worker is asked for it
    health = rest.get("/health")
    assert health.status_code == 503 and health.json()["problems"] == [
        f"cannot write savepoint records in {tmp_path / 'controller' / 'savepoints'}: No space left on device"]

    disk.full = False
    assert rest.get("/health").status_code == 200
    acknowledged = rest.post("/savepoints", json={"label": "room again"}).json()["id"]
    assert acknowledged == "sp-000002"
    restarted = new_service(clock, tmp_path)
    assert [s.id for s in restarted.savepoints()] == ["sp-000002"]
    Pipeline(restarted).register(0)
    Pipeline(restarted).register(1)
    assert restarted.trigger_savepoint("after restart").id == "sp-000003"


def test_an_import_that_cannot_be_written_is_503_and_not_kept(rest, pipeline, disk, savepoint_root):
    savepoint_id = take(pipeline)
    from tests.unit.savepoint_support import export
    export(pipeline, savepoint_root, savepoint_id)
    disk.full = True
    error(rest.post("/savepoints/import", json={"path": "exports/one"}), 503)
    disk.full = False
    assert [s["id"] for s in rest.get("/savepoints").json()] == [savepoint_id]


def test_a_completion_not_yet_written_is_not_shown_until_it_is(rest, pipeline, disk, clock, tmp_path):
    savepoint_id = pipeline.service.trigger_savepoint("before v2").id
    disk.full = True
    for index, checkpoint in ((0, 5), (1, 10)):
        pipeline.report(index, {savepoint_id: checkpoint})
        pipeline.commit(index, checkpoint)      # the worker's calls go on
    assert "No space left on device" in error(rest.get(f"/savepoints/{savepoint_id}"), 503)
    assert rest.get("/health").status_code == 503
    disk.full = False
    assert rest.get("/health").status_code == 200       # written by the health check's retry
    assert rest.get(f"/savepoints/{savepoint_id}").json()["state"] == "complete"
    assert [s.state.value for s in new_service(clock, tmp_path).savepoints()] == ["complete"]


def test_a_dispose_that_cannot_delete_the_record_is_503_and_keeps_it(rest, pipeline, monkeypatch):
    savepoint_id = take(pipeline)

    def read_only(self, savepoint_id):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(SavepointStore, "delete", read_only)
    assert error(rest.delete(f"/savepoints/{savepoint_id}"), 503).endswith("Read-only file system")
    assert rest.get(f"/savepoints/{savepoint_id}").json()["state"] == "complete"
    assert pipeline.report(0).status is ReportStatus.ACCEPTED


# --- the documented rules are the enforced ones ------------------------------------------------

# Characters assigned in Python's Unicode version: the validator's tables
# may be newer, and a character Python does not know yet is no letter to it.
_ASSIGNED = st.characters(exclude_categories=("Cn", "Cs"))
_LABEL_CHARS = st.characters(categories=("L", "N")) | st.sampled_from(" -_.,:()/+@#")


@given(st.text(_ASSIGNED, max_size=12) | st.text(_LABEL_CHARS, max_size=12))
@settings(max_examples=500, deadline=None)
def test_the_label_pattern_says_what_validate_label_accepts(label):
    """As the API's users and the REST fuzz read the pattern: as JSON Schema
    does (ECMA-262, where \\w would be ASCII only), with the validator
    schemathesis checks answers with."""
    try:
        validate_label(label)
        accepted = True
    except InvalidLabel:
        accepted = False
    schema = jsonschema_rs.validator_for({"type": "string", "pattern": LABEL_PATTERN, "maxLength": 100})
    assert accepted == schema.is_valid(label)


@given(st.text(alphabet=st.sampled_from("ab./ ~-é\n"), max_size=10) | st.from_regex(PATH_PATTERN, fullmatch=True))
@settings(max_examples=300, deadline=None)
def test_the_path_pattern_says_what_resolve_under_root_accepts(tmp_path_factory, path):
    root = tmp_path_factory.getbasetemp() / "empty-root"
    try:
        resolve_under_root(root, path)
        accepted = True
    except UnsafePath:
        accepted = False
    assert accepted == (re.fullmatch(PATH_PATTERN, path) is not None and len(path) <= PATH_CHARS)
