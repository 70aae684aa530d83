"""``sparkpoint savepoint ...`` against the real REST app, served by uvicorn
in a thread over real HTTP (``url``, tests/unit/conftest.py). The CLI's waits run on the fake clock: each of
its sleeps lets the test's workers take one step. Output tables and exit
statuses: 0 done, 1 error, 2 refused."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from sparkpoint.messages import ExportAnswer, SinkContract, SinkProgress
from sparkpoint_cli import main
from sparkpoint_cli.waiting import Waiting
from tests.unit.fakes import SAVEPOINT_TIMEOUT_S
from tests.unit.savepoint_support import Pipeline, take, write_part


class Steps:
    """The CLI's sleep: advances the fake clock and runs the next worker step."""

    def __init__(self, clock, steps: list[Callable[[], object]] = ()) -> None:
        self.clock = clock
        self.steps = list(steps)

    def sleep(self, seconds: float) -> None:
        self.clock.now += seconds
        if self.steps:
            self.steps.pop(0)()

    def waiting(self) -> Waiting:
        return Waiting(sleep=self.sleep, clock=self.clock, interval_s=1.0)


def run(url: str, *argv: str, waiting: Waiting | None = None) -> int:
    with pytest.raises(SystemExit) as exited:
        main(["savepoint", *argv[:1], "--controller", url, *argv[1:]], waiting=waiting)
    return exited.value.code


# --- create ------------------------------------------------------------------------------------

def test_create_shows_progress_until_complete_then_the_savepoint(url, pipeline, clock, capsys):
    def answer(index: int, checkpoint: int) -> None:
        pipeline.report(index, {"sp-000001": checkpoint})
        pipeline.commit(index, checkpoint)

    steps = Steps(clock, [lambda: None, lambda: answer(0, 5), lambda: answer(1, 10)])
    assert run(url, "create", "before v2", waiting=steps.waiting()) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == ["sp-000001: 0 of 2 workers pinned", "sp-000001: 1 of 2 workers pinned",
                                "sp-000001: complete"]
    lines = out.splitlines()
    assert lines[:3] == ["Savepoint:  sp-000001", "Label:      before v2", "State:      complete"]
    assert lines[-3:] == ["WORKER  CHECKPOINT", "0       5", "1       10"]


def test_create_without_waiting(url, pipeline, capsys):
    assert run(url, "create", "x", "--no-wait") == 0
    assert capsys.readouterr().out == "sp-000001: being taken; follow it with: sparkpoint savepoint show sp-000001\n"


def test_create_stops_waiting_at_its_deadline(url, pipeline, clock, capsys):
    assert run(url, "create", "x", "--timeout", "3", waiting=Steps(clock).waiting()) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "sparkpoint: error: sp-000001 is still being taken after 3 s (the controller goes on: sparkpoint "
        "savepoint show sp-000001)")


def test_a_savepoint_that_fails_on_the_controller_is_an_error(url, pipeline, clock, capsys):
    steps = Steps(clock, [lambda: setattr(clock, "now", clock.now + SAVEPOINT_TIMEOUT_S)])
    assert run(url, "create", "x", waiting=steps.waiting()) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "sparkpoint: error: savepoint sp-000001 failed: worker 0, 1 did not answer the request within 60 s")


def test_a_refused_savepoint_exits_2_with_the_controllers_reason(url, service, capsys):
    Pipeline(service).register(0)
    assert run(url, "create", "x") == 2
    assert capsys.readouterr().err == ("sparkpoint: refused: worker 1 of 2 is not registered: a savepoint needs a "
                                       "checkpoint of every worker\n")


@pytest.mark.parametrize(("label", "message"), [
    ("<script>", "label: '<' (U+003C) at position 1 is not allowed"),
    ("a\nb", "label: '\\n' (U+000A) at position 2 is not allowed"),
])
def test_an_odd_label_is_a_one_line_error(url, pipeline, capsys, label, message):
    assert run(url, "create", label) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"sparkpoint: error: {message}") and err.endswith(" (HTTP 400)\n")
    assert err.count("\n") == 1


# --- list, show, dispose -----------------------------------------------------------------------

def test_list_is_a_table_oldest_first(url, pipeline, capsys):
    assert run(url, "list") == 0
    assert capsys.readouterr().out == "No savepoints.\n"
    take(pipeline, "before v2")
    pipeline.service.trigger_savepoint("second try")
    assert run(url, "list") == 0
    header, first, second = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "LABEL", "STATE", "CREATED", "WORKERS:CHECKPOINTS", "IMPORTED", "FROM"]
    assert first == "sp-000001  before v2   complete  1970-01-01 00:16:40 UTC  0:5 1:10"
    assert second == "sp-000002  second try  pending   1970-01-01 00:16:40 UTC  -"


def test_show_names_each_workers_checkpoint(url, pipeline, capsys):
    savepoint_id = pipeline.service.trigger_savepoint("half").id
    pipeline.report(0, {savepoint_id: 9})
    pipeline.commit(0, 9)
    assert run(url, "show", savepoint_id) == 0
    assert capsys.readouterr().out == (
        "Savepoint:  sp-000001\nLabel:      half\nState:      pending\n"
        "Created:    1970-01-01 00:16:40 UTC\nPipeline:   fp-1\n\n"
        "WORKER  CHECKPOINT\n0       9\n1       -\n")


def test_dispose(url, pipeline, capsys):
    take(pipeline)
    assert run(url, "dispose", "sp-000001") == 0
    assert capsys.readouterr().out == ("Disposed sp-000001 (before v2): retention may now delete the checkpoints it "
                                       "pinned.\n")
    assert run(url, "dispose", "sp-000001") == 1
    assert capsys.readouterr().err == "sparkpoint: error: there is no savepoint sp-000001 (HTTP 404)\n"


@pytest.mark.parametrize("command", ["show", "dispose", "restore"])
@pytest.mark.parametrize("bad", ["sp-1", "../x", "sp-000001/../../etc"])
def test_bad_ids_are_refused_before_anything_is_sent(command, bad, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["savepoint", command, "--controller", "http://127.0.0.1:9", bad])
    assert exited.value.code == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"sparkpoint savepoint {command}: error: Invalid value for 'ID': {bad!r} is not a savepoint id: ids look like "
        "sp-000042")


# --- restore ---------------------------------------------------------------------------------------

def test_restore_says_what_each_worker_will_do(url, pipeline, capsys):
    take(pipeline)
    assert run(url, "restore", "sp-000001") == 0
    assert capsys.readouterr().out == (
        "Restoring savepoint sp-000001 (before v2):\n"
        "  worker 0 (w0) restarts from checkpoint 5\n"
        "  worker 1 (w1) restarts from checkpoint 10\n"
        "Workers will restart from the savepoint: input after it is processed again, and its output produced again.\n"
        "No transactional sink has published past it: none publishes anything twice.\n")


def test_a_restore_past_a_publish_is_refused_with_exit_2_until_allowed(url, pipeline, capsys):
    take(pipeline)
    pipeline.sinks[1] = (SinkProgress("events_pg", contract=SinkContract.TRANSACTIONAL, published_checkpoint_id=12),)
    pipeline.report(1)
    assert run(url, "restore", "sp-000001") == 2
    assert capsys.readouterr().err == (
        "sparkpoint: refused: restoring savepoint sp-000001 would publish output again: sink events_pg on worker 1 "
        "has published up to checkpoint 12, past checkpoint 10 in the savepoint. To restore it anyway, pass "
        "--allow-republish (CLI) or allow_republish=true (REST)\n")
    assert run(url, "restore", "sp-000001", "--allow-republish") == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "Transactional sinks will publish again what they published past it (--allow-republish):",
        "  - sink events_pg on worker 1 has published up to checkpoint 12, past checkpoint 10 in the savepoint"]


# --- export and import ------------------------------------------------------------------------------

def test_export_shows_progress_and_how_to_import_it(url, pipeline, clock, savepoint_root, capsys):
    take(pipeline)

    def write(index: int) -> None:
        [command] = pipeline.report(index).commands
        write_part(savepoint_root, command)
        pipeline.report(index, exports=(ExportAnswer("sp-000001", command.dir),))

    steps = Steps(clock, [lambda: write(0), lambda: write(1)])
    assert run(url, "export", "sp-000001", "exports/one", waiting=steps.waiting()) == 0
    out, err = capsys.readouterr()
    assert err.splitlines() == ["sp-000001 -> exports/one: 0 of 2 workers written",
                                "sp-000001 -> exports/one: 1 of 2 workers written",
                                "sp-000001 -> exports/one: 2 of 2 workers written"]
    assert out == ("Exported sp-000001 to exports/one under the savepoint root (SP_SAVEPOINT_DIR).\n"
                   "On a deployment whose savepoint root holds it: sparkpoint savepoint import exports/one\n")

    assert run(url, "import", "exports/one", "--label", "moved") == 0
    out = capsys.readouterr().out
    assert out.startswith("Imported exports/one as sp-000002.\n\nSavepoint:      sp-000002\nLabel:          moved\n")
    assert "Imported from:  exports/one\n" in out
    assert run(url, "list") == 0
    assert capsys.readouterr().out.splitlines()[2].endswith("0:5 1:10             exports/one")


def test_a_failed_export_is_an_error_naming_the_worker(url, pipeline, clock, capsys):
    take(pipeline)
    failing = Steps(clock, [lambda: pipeline.report(1, exports=(
        ExportAnswer("sp-000001", "exports/one/worker-1", "No space left on device"),))])
    assert run(url, "export", "sp-000001", "exports/one", waiting=failing.waiting()) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "sparkpoint: error: the export of sp-000001 to exports/one failed: worker 1 could not write "
        "exports/one/worker-1: No space left on device")


def test_an_export_the_controller_forgot_is_explained(url, pipeline, clock, capsys):
    take(pipeline)
    forget = Steps(clock, [lambda: pipeline.service.dispose_savepoint("sp-000001")])
    assert run(url, "export", "sp-000001", "exports/one", waiting=forget.waiting()) == 1
    assert capsys.readouterr().err.splitlines()[-1] == "sparkpoint: error: there is no savepoint sp-000001 (HTTP 404)"


@pytest.mark.parametrize(("path", "message"), [
    ("../outside", "'../outside': '..' is not allowed in a path under the savepoint root"),
    ("/etc", "'/etc': an absolute path is not allowed; give a path relative to the savepoint root"),
    ("escape/x", "'escape/x' leads outside the savepoint root through a symbolic link"),
])
def test_paths_outside_the_root_are_one_line_errors_and_touch_nothing(url, pipeline, savepoint_root, tmp_path,
                                                                      capsys, path, message):
    take(pipeline)
    outside = tmp_path / "outside"
    outside.mkdir()
    savepoint_root.mkdir()
    (savepoint_root / "escape").symlink_to(outside)
    assert run(url, "export", "sp-000001", path) == 1
    assert run(url, "import", path) == 1
    err = capsys.readouterr().err
    assert err == f"sparkpoint: error: {message} (HTTP 400)\n" * 2
    assert list(outside.iterdir()) == []


# --- the controller's address ------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_controller_is_one_line(capsys):
    address = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(SystemExit) as exited:
        main(["savepoint", "list", "--controller", address])
    assert exited.value.code == 1
    assert capsys.readouterr().err == (f"sparkpoint: error: cannot reach the controller at {address}: [Errno 111] "
                                       "Connection refused (start it, or set --controller / SP_CONTROLLER_URL)\n")


def test_sp_controller_url_is_the_default_address(url, pipeline, capsys, monkeypatch):
    monkeypatch.setenv("SP_CONTROLLER_URL", url + "/")
    with pytest.raises(SystemExit) as exited:
        main(["savepoint", "list"])
    assert exited.value.code == 0 and capsys.readouterr().out == "No savepoints.\n"


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--controller", "localhost:8080", "--controller: expected the controller's address like http://localhost:8080, "
                                       "got 'localhost:8080'"),
    ("--controller", "http://host:99999", "--controller: 'http://host:99999' has an invalid port"),
    ("SP_CONTROLLER_URL", "ftp://x", "SP_CONTROLLER_URL: expected the controller's address like "
                                     "http://localhost:8080, got 'ftp://x'"),
])
def test_a_bad_controller_address_names_where_it_came_from(option, value, message, capsys, monkeypatch):
    argv = ["savepoint", "list"]
    if option.startswith("--"):
        argv += [option, value]
    else:
        monkeypatch.setenv(option, value)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 1
    assert capsys.readouterr().err == f"sparkpoint: error: {message}\n"
