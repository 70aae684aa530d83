"""The PostgreSQL example pipeline (``pipelines/trades_postgres.py``) with real
processes and a real server: a worker SIGKILLed in the middle of a files
publish, restarted, SIGKILLed again at a random point and restarted. Every
event id is published exactly once to the transactional table and to the
files output, and the upsert table equals a batch computation.

One worker: its three queries already start six Python processes in Spark.
Nothing restarts a worker that exited by itself: any exit but the injected
fault's fails the test with its exit code and log."""

from __future__ import annotations

import os
import random

import pytest

from sparkpoint.eventlog import EventLog
from sparkpoint.producer import write_trades
from tests.integration.pg_pipeline import (
    PARTITIONS,
    PIPELINE,
    SETTINGS,
    check_exactly_once,
    finished,
    published_to_postgres,
    sink,
    worker,
)
from tests.support import alive, get_json, killed_by_fault, wait_until

pytestmark = pytest.mark.integration

EVENTS = 6000


def test_a_killed_worker_publishes_every_event_exactly_once_to_postgres_and_files(make_stack, database):
    seed = int(os.environ.get("SP_TEST_SEED", random.randrange(1 << 30)))
    print(f"kill schedule seed: SP_TEST_SEED={seed}")
    stack = make_stack(workers=1, pipeline=PIPELINE, SP_PG_DSN=database, **SETTINGS)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, EVENTS, seed=seed)
    stack.start_controller()

    # 1. The worker SIGKILLs itself in the middle of its 3rd files publish
    #    (files placed, mark not yet written).
    stack.start_worker(0, SP_TEST_FAULT="publish.files_placed:3")
    wait_until(lambda: killed_by_fault(stack, "publish.files_placed"), timeout_s=420,
               what="the fault sentinel to kill the worker")

    # 2. Restarted, it is SIGKILLed again at a random point once it has
    #    published more to PostgreSQL.
    stack.start_worker(0)
    more = random.Random(seed).randint(1, 4)
    restarted = wait_until(lambda: alive(stack) and published_to_postgres(stack, after=1),
                           timeout_s=420, what="the restarted worker to publish to PostgreSQL")
    target = sink(restarted, "enriched_pg")["published_batch_id"] + more
    wait_until(lambda: alive(stack) and (
               sink(worker(get_json(stack.config.status_url, stack.config.api_token)), "enriched_pg")["published_batch_id"] >= target
               or finished(stack, log, after=1)),
               timeout_s=420, what=f"the worker to publish batch {target} to PostgreSQL")
    killed = worker(get_json(stack.config.status_url, stack.config.api_token))
    print(f"killing the worker at {killed['sinks']}")
    stack.kill("worker-0")

    # 3. Restarted again, it processes and publishes the whole log.
    stack.start_worker(0)
    final = wait_until(lambda: alive(stack) and finished(stack, log, after=killed["registrations"]),
                       timeout_s=420, what="the worker to process and publish the whole log")
    assert final["recovery"]["restored_checkpoint_id"] > 0
    check_exactly_once(stack, database, events, final)
