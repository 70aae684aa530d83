"""/metrics after a short real run: a controller, a worker running Spark and
the example pipeline over a generated log, restarted once. Parsed with
prometheus_client's parser, the exposition has every family with plausible
values: rows processed, checkpoint durations observed, the lag back to 0 once
the log is read, the worker's recovery counted and timed."""

from __future__ import annotations

import pytest

from sparkpoint.eventlog import EventLog
from sparkpoint.producer import write_trades
from tests.support import all_published, caught_up, get_json, scrape, wait_until, worker_status
from tests.unit.test_metrics import FAMILIES

pytestmark = pytest.mark.integration

QUERIES = {"enriched_out", "vwap_out"}


def sample(families: dict, family: str, name: str | None = None, **labels: str) -> float:
    return families[family]["samples"][(name or family, tuple(sorted(labels.items())))]


def test_the_exposition_after_a_short_run_and_a_recovery(make_stack):
    stack = make_stack(workers=1, SP_CHECKPOINT_FREQ="1000", SP_MAX_RECORDS_PER_BATCH="400",
                       SP_TRIGGER_INTERVAL="500", SP_REPORT_INTERVAL="300")
    log = EventLog.create(stack.config.log_dir / "trades", 2)
    write_trades(log, 1500, seed=11)
    stack.start_controller()
    stack.start_worker(0)
    # Its sinks publish once the controller says that checkpoint completed: a moment later.
    wait_until(lambda: caught_up(stack, log, QUERIES) and
               (w := worker_status(stack))["last_checkpoint"] and
               w["last_checkpoint"]["batch_ids"] == {q: w["batch_id"] for q in QUERIES} and
               all_published(get_json(stack.config.status_url, stack.config.api_token)),
               timeout_s=300, what="the worker to read the log, checkpoint its last batch and publish it")

    families = scrape(stack)
    assert {name: family["type"] for name, family in families.items()} == FAMILIES
    assert sample(families, "sparkpoint_worker_state", worker="worker-0", state="running") == 1
    assert sample(families, "sparkpoint_worker_rows_processed", "sparkpoint_worker_rows_processed_total",
                  worker="worker-0") == 1500
    for query in QUERIES:
        labels = {"worker": "worker-0", "query": query}
        assert sample(families, "sparkpoint_query_batches", "sparkpoint_query_batches_total", **labels) >= 4
        assert sample(families, "sparkpoint_query_input_lag_bytes", **labels) == 0     # read to the end
        assert sample(families, "sparkpoint_query_active", **labels) == 1
    durations = "sparkpoint_worker_checkpoint_duration_seconds"
    assert sample(families, durations, durations + "_count", worker="worker-0") >= 1
    assert sample(families, durations, durations + "_sum", worker="worker-0") > 0
    assert sample(families, "sparkpoint_worker_checkpoint_size_bytes", worker="worker-0") > 0
    assert sample(families, "sparkpoint_worker_checkpoints_durable", worker="worker-0") >= 1
    assert sample(families, "sparkpoint_pipeline_node_finished", node="vwap_state", kind="aggregate",
                  stateful="true") == 0
    sinks = [dict(labels) for (_, labels), value in families["sparkpoint_sink_info"]["samples"].items() if value]
    assert {(s["sink"], s["contract"]) for s in sinks} == {("enriched_out", "transactional"),
                                                           ("vwap_out", "transactional")}
    for sink in ("enriched_out", "vwap_out"):
        assert sample(families, "sparkpoint_sink_published_batch_id", worker="worker-0", sink=sink) >= 0
    assert sample(families, "sparkpoint_worker_recoveries", "sparkpoint_worker_recoveries_total",
                  worker="worker-0") == 0

    # Killed and started again: it restores its checkpoint and replays what
    # came after; the recovery is counted once and timed.
    before = worker_status(stack)
    stack.kill("worker-0")
    write_trades(log, 500, seed=12)
    stack.start_worker(0)
    wait_until(lambda: (w := worker_status(stack))["registrations"] > before["registrations"] and
               w["recovery"]["restored_checkpoint_id"] > 0 and not w["recovery"]["active"] and
               caught_up(stack, log, QUERIES), timeout_s=300, what="the restarted worker to recover and catch up")
    families = scrape(stack)
    assert sample(families, "sparkpoint_worker_recoveries", "sparkpoint_worker_recoveries_total",
                  worker="worker-0") == 1
    recoveries = "sparkpoint_worker_recovery_duration_seconds"
    assert sample(families, recoveries, recoveries + "_count", worker="worker-0") == 1
    assert sample(families, recoveries, recoveries + "_sum", worker="worker-0") > 0
    assert sample(families, "sparkpoint_worker_restored_checkpoint_id", worker="worker-0") >= \
        before["last_checkpoint"]["checkpoint_id"]
    assert sample(families, "sparkpoint_worker_registrations", "sparkpoint_worker_registrations_total",
                  worker="worker-0") == 2
