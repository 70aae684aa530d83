"""The walking skeleton, end to end: a controller and two workers as real
processes run the example pipeline over a generated log; the sinks' output
equals a batch computation over the same input."""

from __future__ import annotations

import pytest

from sparkpoint.eventlog import EventLog, committed_end
from sparkpoint.producer import write_trades
from tests.support import all_published, expected_vwap, get_json, wait_until
from worker.publishing.targets.files import read_published

pytestmark = pytest.mark.integration

EVENTS = 3000
PARTITIONS = 4


def log_end_offsets(log: EventLog) -> dict[str, int]:
    return {str(p): committed_end(log.path(p), 0) for p in range(log.partitions())}


QUERIES = {"enriched_out", "vwap_out"}


def caught_up(status: dict, ends: dict[str, int], workers: int) -> bool:
    """Every worker's every query has read its partitions to the end."""
    if len(status.get("workers", [])) != workers:
        return False
    for worker in status["workers"]:
        if set(worker["offsets"]) != QUERIES:
            return False
        for offsets in worker["offsets"].values():
            mine = {p: e for p, e in ends.items() if int(p) % workers == worker["worker_index"]}
            if offsets != mine:
                return False
    return True


def test_two_workers_process_every_event_once(make_stack):
    stack = make_stack(workers=2, SP_MAX_RECORDS_PER_BATCH="1000", SP_TRIGGER_INTERVAL="500")
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, EVENTS, seed=7)
    ends = log_end_offsets(log)

    stack.start_controller()
    for index in range(2):
        stack.start_worker(index)
    status = wait_until(lambda: (s := get_json(stack.config.status_url, stack.config.api_token)) and caught_up(s, ends, 2) and s,
                        timeout_s=300, what="both workers to read the whole log")

    # /status: the pipeline, each worker, per-partition offsets, rows, heartbeat.
    assert status["state"] == "running"
    assert status["workers_registered"] == 2
    assert [w["worker_id"] for w in status["workers"]] == ["worker-0", "worker-1"]
    assert sum(w["rows_processed"] for w in status["workers"]) == EVENTS
    for worker in status["workers"]:
        assert worker["state"] == "running"
        assert worker["batch_id"] >= 0
        assert worker["heartbeat_age_s"] < 10
        
    # The files sinks publish when a checkpoint completes: the last batches
    # appear one checkpoint interval after they were processed.
    wait_until(lambda: all_published(get_json(stack.config.status_url, stack.config.api_token)), timeout_s=60,
               what="every staged batch to be published")
    for worker in get_json(stack.config.status_url, stack.config.api_token)["workers"]:
        assert {s["name"]: (s["state"], s["contract"]) for s in worker["sinks"]} == \
            {"enriched_out": ("ok", "transactional"), "vwap_out": ("ok", "transactional")}
        assert all(s["published_checkpoint_id"] > 0 for s in worker["sinks"])

    # Pass-through sink: every event id exactly once, enriched.
    enriched = read_published(stack.config.output_dir / "trades_enriched").to_pylist()
    ids = [row["id"] for row in enriched]
    assert len(ids) == len(set(ids)) == EVENTS
    assert set(ids) == {e["id"] for e in events}
    for row in enriched[:50]:
        assert row["notional"] == pytest.approx(row["price"] * row["size"])

    # Aggregate sink: each worker's current table, together, equals a batch computation.
    current = read_published(stack.config.output_dir / "vwap", latest_batch_only=True).to_pylist()
    assert len({row["sym"] for row in current}) == len(current), "a symbol's state lives on one worker"
    expected = expected_vwap(events)
    assert {row["sym"] for row in current} == set(expected)
    for row in current:
        want = expected[row["sym"]]
        assert row["trades"] == want["trades"]
        assert row["volume"] == want["volume"]
        assert row["notional"] == pytest.approx(want["notional"], rel=1e-9)
        assert row["vwap"] == pytest.approx(want["vwap"], rel=1e-9)

    # A graceful stop: every service exits cleanly.
    assert stack.stop_all() == {"worker-0": 0, "worker-1": 0, "controller": 0}
