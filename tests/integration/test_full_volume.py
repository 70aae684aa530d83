"""Full disks, for real: small tmpfs volumes (``small_tmpfs``) filled to the
last page under a running controller and worker.

- The controller's state directory: a savepoint it cannot write is refused
  (503, short JSON) and never shown, /health turns 503 and back, and after
  a restart no acknowledged id is given out again.
- A worker's checkpoint volume: failed checkpoints are counted and shown in
  /status with the error and the volume's bytes; staging waits for space
  instead of failing the query (the worker stays up, no crash loop); once
  there is room again everything is published exactly once.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sparkpoint.eventlog import EventLog
from sparkpoint.messages import CheckpointInfo
from sparkpoint.producer import write_trades
from tests.integration.test_recovery import FAST, PARTITIONS, QUERIES, check_output, process_exited
from tests.support import all_published, bearer, caught_up, get_json, wait_until, worker_status
from worker.control.client import ControllerClient, WorkerIdentity

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


NEARLY_FULL = 1 << 20     # what a worker may free meanwhile (a temporary copy it removes) stays below this


def fill(volume: Path) -> Path:
    """Write a file until the volume has no page left; returns it."""
    filler = volume / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        for chunk in (1 << 20, 1 << 12, 1):
            try:
                while os.write(fd, b"\0" * chunk):
                    pass
            except OSError as error:
                assert error.errno == errno.ENOSPC
    finally:
        os.close(fd)
    assert shutil.disk_usage(volume).free < NEARLY_FULL
    return filler


def post(url: str, body: dict, token: str | None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **bearer(token)})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)


def test_a_full_controller_disk_refuses_savepoints_with_503_and_no_id_is_given_twice(make_stack, small_tmpfs):
    state = small_tmpfs("controller-state", 256 * 1024)
    stack = make_stack(workers=2, SP_CONTROLLER_CHECKPOINT_FREQ="200")
    base = f"http://localhost:{stack.config.http_port}"
    stack.start_controller(SP_CONTROLLER_STATE_DIR=str(state))
    token = stack.config.api_token
    wait_until(lambda: get_json(f"{base}/health").get("status") == "ok", timeout_s=60, what="the controller")
    # Two worker processes that live through the controller's restart below.
    clients = [ControllerClient(f"localhost:{stack.config.grpc_port}",
                                WorkerIdentity(f"worker-{index}", index, 2, "fp", ("trades",)), timeout_s=5,
                                token=stack.config.grpc_token)
               for index in (0, 1)]
    for client in clients:
        client.register_once()
        client.commit_checkpoint(CheckpointInfo(1))

    filler = fill(state)
    status, body = post(f"{base}/savepoints", {"label": "on a full disk"}, token)
    assert status == 503 and set(body) == {"error"}
    assert body["error"].startswith("cannot write savepoint record") and "No space left on device" in body["error"]
    assert get_json(f"{base}/savepoints", token) == []
    unhealthy = wait_until(lambda: (h := get_json(f"{base}/health")).get("http_status") == 503 and h,
                           timeout_s=30, what="/health to turn unhealthy")
    assert any("No space left on device" in problem for problem in unhealthy["problems"])
    assert stack.services["controller"].process.poll() is None

    filler.unlink()
    wait_until(lambda: get_json(f"{base}/health").get("status") == "ok", timeout_s=30,
               what="/health to turn healthy again")
    status, body = post(f"{base}/savepoints", {"label": "room again"}, token)
    assert (status, body["id"]) == (202, "sp-000002")

    assert stack.stop("controller") == 0
    stack.start_controller(SP_CONTROLLER_STATE_DIR=str(state))
    listed = wait_until(lambda: isinstance(s := get_json(f"{base}/savepoints", token), list) and s, timeout_s=60,
                        what="the restarted controller's savepoints")
    assert [s["id"] for s in listed] == ["sp-000002"]
    for client in clients:   # the same processes re-register with their sessions: no takeover wait
        client.register_once()
        client.close()
    status, body = post(f"{base}/savepoints", {"label": "after the restart"}, token)
    assert (status, body["id"]) == (202, "sp-000003")


CONSOLE_PIPELINE = """
from trading import TRADE_SCHEMA, VWAP_AGGREGATIONS

from worker import api as sp

trades = sp.read.from_log("trades", schema=TRADE_SCHEMA, name="trades")
sp.run(trades | sp.aggregate("sym", VWAP_AGGREGATIONS, name="vwap_state") | sp.write.to_console(name="shown"))
"""


def test_checkpoints_on_a_full_volume_fail_visibly_and_resume_when_there_is_room(make_stack, small_tmpfs, tmp_path):
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    shutil.copy(REPO / "pipelines" / "trading.py", pipelines)
    (pipelines / "console.py").write_text(CONSOLE_PIPELINE)
    volume = small_tmpfs("checkpoints", 16 << 20)
    # One checkpoint kept: a full volume has nothing to give up but the newest complete one.
    stack = make_stack(workers=1, pipeline=pipelines / "console.py", SP_CHECKPOINT_FREQ="500",
                       SP_CHECKPOINT_RETAIN="1", **FAST)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    write_trades(log, 1500, seed=31)
    stack.start_controller()
    worker = stack.start_worker(0, SP_CHECKPOINT_DIR=str(volume / "worker-0"))
    before = wait_until(lambda: (w := caught_up(stack, log, {"shown"})) and w["last_checkpoint"] and w,
                        timeout_s=240, what="the worker caught up with a checkpoint")

    filler = fill(volume)
    write_trades(log, 1500, seed=32)
    failing = wait_until(lambda: (w := worker_status(stack)) and w["failed_checkpoints"] >= 1 and w,
                         timeout_s=120, what="a failed checkpoint in /status")
    assert "No space left on device" in failing["checkpoint_error"]
    assert "the checkpoint volume is full" in failing["checkpoint_error"]
    assert failing["checkpoint_volume"]["free_bytes"] < NEARLY_FULL < failing["checkpoint_volume"]["used_bytes"]
    assert failing["state"] in ("running", "recovering") and not process_exited(worker)

    filler.unlink()
    write_trades(log, 500, seed=33)
    after = wait_until(lambda: (w := caught_up(stack, log, {"shown"})) and w["last_checkpoint"]["checkpoint_id"] >
                       failing["last_checkpoint"]["checkpoint_id"] and w, timeout_s=240,
                       what="checkpoints again once there is room")
    assert after["checkpoint_volume"]["free_bytes"] > 8 << 20
    assert after["last_checkpoint"]["checkpoint_id"] > before["last_checkpoint"]["checkpoint_id"]
    assert after["registrations"] == 1             # the worker never restarted


def test_staging_on_a_full_volume_waits_and_nothing_is_lost(make_stack, small_tmpfs):
    volume = small_tmpfs("checkpoints", 32 << 20)
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="500", **FAST)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, 1500, seed=41)
    stack.start_controller()
    worker = stack.start_worker(0, SP_CHECKPOINT_DIR=str(volume / "worker-0"))
    wait_until(lambda: caught_up(stack, log, QUERIES) and all_published(get_json(stack.config.status_url, stack.config.api_token)),
               timeout_s=240, what="the first events processed and published")

    filler = fill(volume)
    events += write_trades(log, 1500, seed=42)
    log_path = stack.services["worker-0"].log_path
    wait_until(lambda: "waiting for space" in log_path.read_text(errors="replace"), timeout_s=120,
               what="staging to wait for space")
    stalled = worker_status(stack)
    assert stalled["checkpoint_volume"]["free_bytes"] < NEARLY_FULL
    assert stalled["state"] != "failed" and not process_exited(worker)

    filler.unlink()
    final = wait_until(lambda: caught_up(stack, log, QUERIES), timeout_s=240, what="the worker to catch up")
    assert final["registrations"] == 1             # no restart, let alone a crash loop
    assert all(not query["error"] for query in final["queries"])
    check_output(stack, events)
