"""Exactly once across the PostgreSQL COMMIT of a transactional sink, made
deterministic in a full pipeline (``pipelines/trades_postgres.py``: a real
worker, real Spark, a real server):

- the worker SIGKILLs itself inside the publishing transaction (rows and
  mark written, COMMIT not sent: fault point ``publish.postgres_written``);
- the connection is cut at that sink's COMMIT (``CommitCutProxy``) on either
  side of the server: the COMMIT lost before it reached PostgreSQL, or
  committed with its answer lost. The worker does not know which; it reads
  its mark again and publishes what is missing, once.

Either way every event id is in the table once, and the other sinks stay exact."""

from __future__ import annotations

import pytest

from sparkpoint.eventlog import EventLog
from sparkpoint.producer import write_trades
from tests.integration.pg_pipeline import (
    MARK_UPDATE,
    PARTITIONS,
    PIPELINE,
    SETTINGS,
    check_exactly_once,
    finished,
    published_to_postgres,
)
from tests.pgserver import CommitCutProxy, Cut
from tests.support import alive, killed_by_fault, wait_until

pytestmark = pytest.mark.integration

EVENTS = 3000


def test_a_worker_killed_inside_the_publishing_transaction_publishes_exactly_once(make_stack, database):
    stack = make_stack(workers=1, pipeline=PIPELINE, SP_PG_DSN=database, **SETTINGS)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, EVENTS, seed=61)
    stack.start_controller()

    # 1. Killed in its 2nd publish to the transactional table, before COMMIT.
    stack.start_worker(0, SP_TEST_FAULT="publish.postgres_written:2")
    wait_until(lambda: killed_by_fault(stack, "publish.postgres_written"), timeout_s=420,
               what="the fault to kill the worker inside the PostgreSQL transaction")

    # 2. Restarted, it publishes the whole log once.
    stack.start_worker(0)
    final = wait_until(lambda: alive(stack) and finished(stack, log, after=1), timeout_s=420,
                       what="the restarted worker to process and publish the whole log")
    assert final["recovery"]["restored_checkpoint_id"] > 0
    check_exactly_once(stack, database, events, final)


@pytest.mark.parametrize("cut", [Cut.BEFORE_SERVER, Cut.AFTER_SERVER])
def test_a_connection_cut_at_the_sinks_commit_in_a_running_pipeline_publishes_exactly_once(
        make_stack, database, commit_cut_proxy: CommitCutProxy, cut: Cut):
    stack = make_stack(workers=1, pipeline=PIPELINE, SP_PG_DSN=commit_cut_proxy.dsn_through(database), **SETTINGS)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, EVENTS, seed=62)
    stack.start_controller()
    stack.start_worker(0)

    # 1. Once the sink has published, cut the COMMIT of its next publish
    #    (the transaction that moves its mark; the upsert sink's pass).
    wait_until(lambda: alive(stack) and published_to_postgres(stack), timeout_s=420,
               what="the worker to publish to PostgreSQL")
    commit_cut_proxy.arm(cut, only_after=MARK_UPDATE)
    wait_until(lambda: alive(stack) and commit_cut_proxy.cuts == 1, timeout_s=120,
               what="the transactional sink's next COMMIT to be cut")

    # 2. The same run carries on: it read its mark again and published the rest.
    final = wait_until(lambda: alive(stack) and finished(stack, log, after=0), timeout_s=420,
                       what="the worker to process and publish the whole log")
    assert final["registrations"] == 1, "the worker restarted"
    worker_log = stack.services["worker-0"].log_path.read_text()
    assert "sink enriched_pg: cannot publish to PostgreSQL table trades_enriched (transactional)" in worker_log
    check_exactly_once(stack, database, events, final)
