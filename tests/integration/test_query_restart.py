"""A failed query restarts inside the living worker (issue 13, point 1): a
fault sentinel fails a staged sink's commit; the same process restores its
last complete checkpoint into its Spark session and goes on, every event
published exactly once. The same failure again and again stops it."""

from __future__ import annotations

import time

import pytest

from sparkpoint.eventlog import EventLog
from sparkpoint.producer import write_trades
from tests.integration.test_recovery import FAST, PARTITIONS, QUERIES, check_output, process_exited
from tests.support import caught_up, new_run_processed, wait_until, worker_status

pytestmark = pytest.mark.integration

TARGET_S = 5.0      # issue 13: a query failure -> its first new batch


def test_a_failed_query_restarts_in_the_living_worker_and_output_stays_exactly_once(make_stack):
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="1000", **FAST)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, 6000, seed=13)
    stack.start_controller()
    # The 24th staged commit (of either query) fails: some checkpoints are complete by then.
    worker = stack.start_worker(0, SP_TEST_FAULT="staging.commit:24")
    sentinel = stack.config.checkpoint_dir(0) / ".fault-staging.commit"
    wait_until(sentinel.exists, timeout_s=240, what="the fault sentinel to fail a query", interval_s=0.1)
    failed_at = sentinel.stat().st_mtime

    # The same process registers again, restores and commits a batch with rows.
    seen: list[dict] = []

    def first_new_batch() -> dict | None:
        worker = worker_status(stack)
        seen.append(worker)
        return worker if new_run_processed(worker, {"registrations": 1}) else None

    try:
        restarted = wait_until(first_new_batch, timeout_s=120, what="the restarted run's first batch with rows",
                               interval_s=0.1)
    finally:
        print("last status seen:", seen[-1] if seen else None)
    seconds = time.time() - failed_at
    print(f"query failure -> first new batch with rows, in the living worker: {seconds:.1f} s (target {TARGET_S} s)")
    assert not process_exited(worker), "the worker exited instead of restarting its queries"
    assert restarted["recovery"]["restored_checkpoint_id"] >= 1
    assert restarted["restarts"]["count"] == 1 and restarted["restarts"]["same_in_a_row"] == 1
    assert "InjectedFaultError: fault staging.commit fired" in restarted["restarts"]["last_error"]
    assert seconds < 3 * TARGET_S, "as slow as a cold start: the JVM was not reused?"

    wait_until(lambda: caught_up(stack, log, QUERIES), timeout_s=300, what="the worker to process the whole log")
    check_output(stack, events)
    worker_log = stack.services["worker-0"].log_path.read_text()
    assert "restart 1: restoring the last complete checkpoint into this Spark session" in worker_log
    assert not process_exited(worker)


def test_the_same_failure_again_and_again_stops_the_worker_with_a_clear_error(make_stack):
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="1000", SP_MAX_SAME_FAILURES="2", **FAST)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    write_trades(log, 2000, seed=14)
    stack.start_controller()
    worker = stack.start_worker(0, SP_TEST_FAULT="staging.commit:1:always")
    code = wait_until(lambda: worker.process.poll(), timeout_s=300, what="the worker to give up")
    assert code == 1
    worker_log = stack.services["worker-0"].log_path.read_text()
    assert ("sparkpoint-worker: error: the same query failure 2 times in a row (SP_MAX_SAME_FAILURES=2): "
            "sparkpoint.faults.InjectedFaultError: fault staging.commit fired") in worker_log
    shown = worker_status(stack)
    assert shown["state"] == "failed"
    assert (shown["restarts"]["count"], shown["restarts"]["same_in_a_row"]) == (1, 2)
