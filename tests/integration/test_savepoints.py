"""Savepoints end to end with real processes, real Spark and the CLI:
taken mid-run, restored (refused without consent once a sink published past
it), exported and restored on another deployment. The files sinks are
transactional: the output is checked event by event, the aggregates against
a batch computation over the input."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from sparkpoint.devstack import REPO
from sparkpoint.eventlog import EventLog
from sparkpoint.producer import write_trades
from tests.support import all_published, caught_up, expected_vwap, get_json, wait_until, worker_status
from worker.publishing.targets.files import read_published

pytestmark = pytest.mark.integration

QUERIES = {"enriched_out", "vwap_out"}
SETTINGS = {"SP_CHECKPOINT_FREQ": "500", "SP_MAX_RECORDS_PER_BATCH": "500", "SP_TRIGGER_INTERVAL": "200",
            "SP_REPORT_INTERVAL": "300"}


def cli(stack, *args: str) -> subprocess.CompletedProcess:
    """``sparkpoint savepoint ...`` against the stack's controller."""
    return subprocess.run([sys.executable, "-m", "sparkpoint_cli", "savepoint", *args,
                           "--controller", f"http://localhost:{stack.config.http_port}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SP_API_TOKEN_FILE": str(stack.config.api_token_file)})


def drained(stack, log: EventLog, workers: int) -> list[dict]:
    """Every worker read its share of the log to the end, and published it."""
    def probe():
        found = [caught_up(stack, log, QUERIES, index, workers=workers) for index in range(workers)]
        return all(found) and all_published(get_json(stack.config.status_url, stack.config.api_token)) and found
    return wait_until(probe, timeout_s=300, what="every worker to process and publish its share of the log")


def restarted_from(stack, savepoint: dict, before: list[dict]) -> None:
    """Wait until every worker registered again and restored exactly its
    checkpoint of ``savepoint`` (a worker that restored its latest checkpoint
    instead, ignoring the savepoint, fails)."""
    for index, old in enumerate(before):
        want = savepoint["checkpoints"][str(index)]
        back = wait_until(lambda: (w := worker_status(stack, index)) and w["registrations"] > old["registrations"]
                          and w["state"] in ("running", "recovering") and w,
                          timeout_s=240, what=f"worker-{index} to restart after restoring savepoint {savepoint['id']}")
        assert back["recovery"]["restored_checkpoint_id"] == want, \
            f"worker-{index} restored checkpoint {back['recovery']['restored_checkpoint_id']}, not savepoint " \
            f"{savepoint['id']}'s {want}"


def published_ids(stack) -> list[int]:
    return read_published(stack.config.output_dir / "trades_enriched").column("id").to_pylist()


def vwap_table(stack) -> dict[str, tuple[int, int]]:
    rows = read_published(stack.config.output_dir / "vwap", latest_batch_only=True).to_pylist()
    return {row["sym"]: (row["trades"], row["volume"]) for row in rows}


def batch_vwap(events: list[dict]) -> dict[str, tuple[int, int]]:
    return {sym: (want["trades"], want["volume"]) for sym, want in expected_vwap(events).items()}


def savepoint_of(stack, label: str) -> dict:
    return next(s for s in get_json(f"http://localhost:{stack.config.http_port}/savepoints", stack.config.api_token) if s["label"] == label)


def test_a_savepoint_taken_mid_run_restores_exactly_and_refuses_to_republish_without_consent(make_stack, tmp_path):
    stack = make_stack(workers=2, SP_SAVEPOINT_DIR=str(tmp_path / "savepoints"), **SETTINGS)
    log = EventLog.create(stack.config.log_dir / "trades", 4)
    first = write_trades(log, 1500, seed=41)
    stack.start_controller()
    for index in range(2):
        stack.start_worker(index)
    drained(stack, log, 2)

    created = cli(stack, "create", "before the second load")
    assert created.returncode == 0, created.stderr
    savepoint = savepoint_of(stack, "before the second load")
    assert savepoint["state"] == "complete" and set(savepoint["checkpoints"]) == {"0", "1"}
    assert savepoint["id"] in cli(stack, "list").stdout

    # Restored while it is the latest: nothing was published past it, so no
    # consent is needed and the output stays exactly once.
    before = [worker_status(stack, index) for index in range(2)]
    restored = cli(stack, "restore", savepoint["id"])
    assert restored.returncode == 0, restored.stderr
    restarted_from(stack, savepoint, before)
    drained(stack, log, 2)
    ids = published_ids(stack)
    assert sorted(ids) == sorted(e["id"] for e in first)
    assert vwap_table(stack) == batch_vwap(first)

    # More input, published past the savepoint: restoring it now would
    # publish that again, and is refused without consent.
    second = write_trades(log, 1000, seed=42)
    drained(stack, log, 2)
    refused = cli(stack, "restore", savepoint["id"])
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--allow-republish" in refused.stderr and "Traceback" not in refused.stderr

    # With consent the workers go back to the savepoint and replay the second
    # load: state is exact, and the files sinks took back what they had
    # published past it, so every event is still there once.
    before = [worker_status(stack, index) for index in range(2)]
    consented = cli(stack, "restore", savepoint["id"], "--allow-republish")
    assert consented.returncode == 0, consented.stderr
    restarted_from(stack, savepoint, before)
    drained(stack, log, 2)
    assert vwap_table(stack) == batch_vwap(first + second)
    ids = published_ids(stack)
    assert sorted(ids) == sorted(e["id"] for e in first + second)


def test_an_exported_savepoint_restores_on_another_deployment(make_stack, tmp_path):
    savepoints = tmp_path / "savepoints"
    old = make_stack(workers=1, SP_SAVEPOINT_DIR=str(savepoints), **SETTINGS)
    log = EventLog.create(old.config.log_dir / "trades", 2)
    first = write_trades(log, 1200, seed=51)
    old.start_controller()
    old.start_worker(0)
    drained(old, log, 1)
    assert cli(old, "create", "nightly").returncode == 0
    savepoint = savepoint_of(old, "nightly")
    exported = cli(old, "export", savepoint["id"], "exports/nightly")
    assert exported.returncode == 0, exported.stderr
    assert (savepoints / "exports" / "nightly" / "savepoint.json").is_file()
    old.stop_all()

    # Another deployment: its own volumes (checkpoints, work, output), the
    # same input log carried over and grown, the savepoint root mounted.
    new = make_stack(workers=1, SP_SAVEPOINT_DIR=str(savepoints), **SETTINGS)
    shutil.copytree(old.config.log_dir, new.config.log_dir)
    log = EventLog(new.config.log_dir / "trades")
    second = write_trades(log, 800, seed=52)
    new.start_controller()
    wait_until(lambda: get_json(new.config.status_url, new.config.api_token), timeout_s=60, what="the new controller")
    imported = cli(new, "import", "exports/nightly", "--label", "from the old deployment")
    assert imported.returncode == 0, imported.stderr
    copy = savepoint_of(new, "from the old deployment")
    assert copy["imported_from"] == "exports/nightly"
    assert cli(new, "restore", copy["id"]).returncode == 0
    new.start_worker(0)
    drained(new, log, 1)
    # State came along (aggregates over both loads); the new deployment's
    # sink got only what came after the savepoint.
    assert vwap_table(new) == batch_vwap(first + second)
    assert sorted(published_ids(new)) == sorted(e["id"] for e in second)
    assert worker_status(new)["recovery"]["restored_checkpoint_id"] > 0
