"""``sparkpoint status``, ``checkpoints``, ``plan SAVEPOINT_ID`` and
``--output json`` against the real REST app over real HTTP (uvicorn in a
thread, tests/unit/conftest.py). Waits run on the fake clock."""

from __future__ import annotations

import io
import json
import re

import pytest
from rich.console import Console

from sparkpoint.messages import (
    CheckpointInfo,
    ProgressReport,
    QueryCut,
    QueryProgress,
    Recovery,
    Registration,
    Restarts,
    SinkContract,
    SinkProgress,
    SinkState,
    StandbyReport,
    StandbyState,
    WorkerState,
)
from sparkpoint_cli import main
from sparkpoint_cli.waiting import Waiting
from tests.support import get_json
from tests.unit.plan_support import SCHEMAS, take_checkpoint, write_pipeline
from tests.unit.rest_support import TOKEN
from tests.unit.savepoint_support import export, take


def run(url: str, *argv: str, waiting: Waiting | None = None, **kwargs) -> int:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--controller", url], waiting=waiting, **kwargs)
    return exited.value.code


def cells(line: str) -> list[str]:
    """A table row's cells (columns are two or more spaces apart)."""
    return re.split(r"\s{2,}", line.strip())


def report(pipeline, index: int, state=WorkerState.RUNNING, **fields) -> None:
    pipeline.seq += 1
    pipeline.service.report_progress(ProgressReport(f"w{index}", pipeline.sessions[index], pipeline.seq, state,
                                                    **fields))


def busy(pipeline, clock) -> None:
    """w0 runs behind its input with a waiting sink; w1 recovers."""
    report(pipeline, 0, queries=(QueryProgress("out", 41, {"0": 1000}, 250, 48.5, latest_offsets={"0": 3048}),),
           sinks=(SinkProgress("out", "files out (transactional)", SinkContract.TRANSACTIONAL, SinkState.WAITING,
                               "OSError: disk full", clock.now - 30, clock.now + 2, 4, 38, 3, 7),))
    report(pipeline, 1, WorkerState.RECOVERING, queries=(QueryProgress("out", 7, {"1": 100}),),
           restored_checkpoint_id=9, recovery=Recovery(True, 4096, 1024, started_at=clock.now - 5))


# --- status ---------------------------------------------------------------------------------------

def test_status_shows_the_pipeline_its_workers_standbys_and_sinks(url, pipeline, clock, capsys):
    busy(pipeline, clock)
    pipeline.sessions[1] = pipeline.service.register(Registration(      # w1 runs on host beef now
        "w1", 1, 2, "fp-1", ("src", "out"), session_id=pipeline.sessions[1], host="beef", pid=7)).session_id
    report(pipeline, 1, WorkerState.RECOVERING, queries=(QueryProgress("out", 7, {"1": 100}),),
           restored_checkpoint_id=9, recovery=Recovery(True, 4096, 1024, started_at=clock.now - 5))
    pipeline.service.stand_by(StandbyReport("w0", "c0ffee", 7, StandbyState.READY, clock.now - 60))
    pipeline.service.stand_by(StandbyReport("w0", "f00d", 12, StandbyState.STARTING, clock.now - 5))
    clock.now += 3
    assert run(url, "status") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("Pipeline recovering: 2 of 2 workers, 2 standbys (1 ready), 48.5 rows/s, input lag 2.0 KiB, "
                        "0 savepoints")
    assert cells(lines[2]) == ["WORKER", "PROCESS", "STATE", "BATCH", "ROWS/S", "LAG", "CHECKPOINT", "RECOVERY",
                               "REPORTED"]
    assert cells(lines[3]) == ["w0", "-", "running", "41", "48.5", "2.0 KiB", "4 (17 min ago)", "-", "3.0 s ago"]
    assert cells(lines[4]) == ["w1", "pid 7 on beef", "recovering", "7", "0.0", "0 B", "9 (17 min ago)", "25.0% of 4.0 KiB",
                               "3.0 s ago"]
    assert cells(lines[6]) == ["STANDBY", "STATE", "REPORTED"]
    assert cells(lines[7]) == ["pid 7 on c0ffee", "ready", "3.0 s ago"]
    assert cells(lines[8]) == ["pid 12 on f00d", "starting", "3.0 s ago"]
    assert cells(lines[10]) == ["WORKER", "SINK", "STATE", "PUBLISHED", "PENDING", "LAG", "RETRIES", "TARGET"]
    assert cells(lines[11]) == ["w0", "out", "waiting", "batch 38", "3", "3", "7",
                                "files out (transactional): OSError: disk full, retry in 0 ms"]
    assert len(lines) == 12                     # no error lines: none failed


def test_status_names_failed_queries_and_checkpoints(url, pipeline, clock, capsys):
    report(pipeline, 0, WorkerState.FAILED, queries=(QueryProgress("out", 3, active=False,
                                                                   error="ZeroDivisionError: division by zero"),),
           failed_checkpoints=1, checkpoint_error="checkpoint 7: OSError: disk full")
    assert run(url, "status") == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "error: w0: checkpoint 7: OSError: disk full", "error: w0: out: ZeroDivisionError: division by zero"]


def test_status_names_the_last_failure_a_worker_restarted_after(url, pipeline, clock, capsys):
    report(pipeline, 0, WorkerState.RESTARTING,
           restarts=Restarts(2, 2, "ZeroDivisionError: division by zero", clock.now - 1))
    assert run(url, "status") == 0
    lines = capsys.readouterr().out.splitlines()
    assert cells(lines[3])[:3] == ["w0", "-", "restarting"]
    assert lines[-1] == ("error: w0: restarted 2 times after a query failed (last failure 2 in a row): "
                         "ZeroDivisionError: division by zero")


def test_status_as_json_is_the_controllers(url, pipeline, clock, capsys):
    busy(pipeline, clock)
    assert run(url, "status", "--output", "json") == 0
    assert json.loads(capsys.readouterr().out) == get_json(url + "/status", TOKEN)


class Steps:
    """The CLI's sleep: each call runs the next step; Ctrl-C when none is left."""

    def __init__(self, *steps) -> None:
        self.steps = list(steps)
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if not self.steps:
            raise KeyboardInterrupt
        self.steps.pop(0)()


@pytest.mark.parametrize("output", ["text", "json"])
def test_status_watch_follows_a_change_until_ctrl_c(url, pipeline, clock, capsys, output):
    report(pipeline, 0)
    steps = Steps(lambda: report(pipeline, 0, WorkerState.FAILED))
    assert run(url, "status", "--watch", "--interval", "5", "-o", output, waiting=Waiting(sleep=steps.sleep)) == 0
    out = capsys.readouterr().out
    assert steps.slept == [5.0, 5.0]
    if output == "json":
        first, second = (json.loads(line) for line in out.splitlines())
        assert (first["workers"][0]["state"], second["workers"][0]["state"]) == ("running", "failed")
    else:
        first, second = out.split("\n\nPipeline ")
        assert first.startswith("Pipeline starting") and second.startswith("failed")
        assert cells(first.splitlines()[3])[:3] == ["w0", "-", "running"]
        assert cells(second.splitlines()[3])[:3] == ["w0", "-", "failed"]


# --- checkpoints ----------------------------------------------------------------------------------

def test_checkpoints_lists_a_workers_durable_checkpoints(url, pipeline, clock, capsys):
    take(pipeline)                                              # pins w0's checkpoint 5
    report(pipeline, 0, checkpoints=(
        CheckpointInfo(5, (QueryCut("out", 40),), 2048, 1500.0, clock.now - 90, 2048),
        CheckpointInfo(6, (QueryCut("out", 44),), 3072, 250.0, clock.now - 4, 1024)))
    assert run(url, "checkpoints", "w0") == 0
    header, first, second = capsys.readouterr().out.splitlines()
    assert cells(header) == ["CHECKPOINT", "STATE", "BATCHES", "SIZE", "ADDED", "TOOK", "AGE", "PINNED BY"]
    assert cells(first) == ["5", "complete", "out:40", "2.0 KiB", "2.0 KiB", "1.5 s", "90.0 s", "sp-000001"]
    assert cells(second) == ["6", "pending", "out:44", "3.0 KiB", "1.0 KiB", "250 ms", "4.0 s", "-"]
    assert run(url, "checkpoints", "w0", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out) == get_json(url + "/workers/w0/checkpoints", TOKEN)


def test_checkpoints_of_a_worker_without_any_or_unknown(url, pipeline, capsys):
    report(pipeline, 1, checkpoints=())
    assert run(url, "checkpoints", "w1") == 0
    assert capsys.readouterr().out == "w1 holds no durable checkpoints (as it last reported).\n"
    assert run(url, "checkpoints", "nobody") == 1
    assert capsys.readouterr().err == "sparkpoint: error: no worker 'nobody' has registered (HTTP 404)\n"


# --- plan SAVEPOINT_ID -------------------------------------------------------------------------------

@pytest.fixture
def pipeline_file(tmp_path):
    return write_pipeline(tmp_path / "pipeline.py")


def test_plan_reads_a_savepoints_checkpoint_from_the_workers_directory(url, pipeline, pipeline_file, tmp_path,
                                                                       capsys):
    take(pipeline)                                              # w0: checkpoint 5, w1: 10
    take_checkpoint(tmp_path / "w1", pipeline_file, checkpoint_id=10)
    take_checkpoint(tmp_path / "w1", pipeline_file, checkpoint_id=11)       # newer, not the savepoint's
    argv = ("plan", "--pipeline", str(pipeline_file), "--from", "sp-000001", "--worker", "1")
    assert run(url, *argv, "--checkpoint-dir", str(tmp_path / "w1"), derive=lambda p: SCHEMAS) == 0
    out = capsys.readouterr().out
    assert out.startswith("Checkpoint 10 of worker-0 (savepoint sp-000001) (taken 2023-11-14 22:13:20 UTC")
    assert out.rstrip().endswith("Restore would go ahead: 3 kept, 0 fresh, 0 dropped.")
    assert run(url, *argv, "--checkpoint-dir", str(tmp_path / "w1"), "-o", "json", derive=lambda p: SCHEMAS) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["savepoint_id"], plan["checkpoint_id"], plan["refused"]) == ("sp-000001", 10, False)
    assert {n["node"]: n["action"] for n in plan["nodes"]} == {"trades": "keep", "vwap_state": "keep",
                                                               "vwap_out": "keep"}


def test_plan_reads_an_exported_savepoint_under_the_savepoint_root(url, pipeline, pipeline_file, savepoint_root,
                                                                   capsys, monkeypatch):
    savepoint = take(pipeline)
    export(pipeline, savepoint_root, savepoint)                 # each worker's part under exports/one/worker-<i>
    take_checkpoint(savepoint_root / "exports/one/worker-0", pipeline_file, checkpoint_id=5)
    monkeypatch.setenv("SP_SAVEPOINT_DIR", str(savepoint_root))
    assert run(url, "plan", "--pipeline", str(pipeline_file), "--from", savepoint, derive=lambda p: SCHEMAS) == 0
    assert capsys.readouterr().out.startswith("Checkpoint 5 of worker-0 (savepoint sp-000001)")


def test_plan_says_where_it_looked_for_a_savepoints_checkpoint(url, pipeline, pipeline_file, tmp_path, capsys):
    take(pipeline)
    assert run(url, "plan", "--pipeline", str(pipeline_file), "--from", "sp-000001", "--checkpoint-dir",
               str(tmp_path)) == 1
    assert capsys.readouterr().err == (
        f"sparkpoint: error: savepoint sp-000001: checkpoint 5 of worker 0 is not in {tmp_path}; give worker 0's "
        "SP_CHECKPOINT_DIR with --checkpoint-dir, or export the savepoint (sparkpoint savepoint export) and set "
        "SP_SAVEPOINT_DIR to its root\n")
    assert run(url, "plan", "--pipeline", str(pipeline_file), "--from", "sp-000002") == 1
    assert capsys.readouterr().err == "sparkpoint: error: there is no savepoint sp-000002 (HTTP 404)\n"


# --- savepoints: json and the progress bar -------------------------------------------------------------

def test_savepoint_list_and_show_as_json(url, pipeline, capsys):
    take(pipeline)
    assert run(url, "savepoint", "list", "-o", "json") == 0
    assert json.loads(capsys.readouterr().out) == get_json(url + "/savepoints", TOKEN)
    assert run(url, "savepoint", "show", "sp-000001", "--output", "json") == 0
    assert json.loads(capsys.readouterr().out)["checkpoints"] == {"0": 5, "1": 10}


def test_create_shows_a_progress_bar_on_a_terminal(url, pipeline, clock, monkeypatch, capsys):
    terminal = io.StringIO()
    monkeypatch.setattr("sparkpoint_cli.waiting.stderr",
                        lambda: Console(file=terminal, force_terminal=True, width=100, color_system=None))

    def answer(index: int, checkpoint: int) -> None:
        pipeline.report(index, {"sp-000001": checkpoint})
        pipeline.commit(index, checkpoint)

    steps = Steps(lambda: answer(0, 5), lambda: answer(1, 10))
    assert run(url, "savepoint", "create", "nightly", waiting=Waiting(sleep=steps.sleep, clock=clock)) == 0
    final = terminal.getvalue().rsplit("\r", 1)[-1]       # the bar as last drawn
    assert "sp-000001: complete" in final and "2/2" in final
    assert capsys.readouterr().out.startswith("Savepoint:  sp-000001\n")
