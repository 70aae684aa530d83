"""The PostgreSQL example pipeline (``pipelines/trades_postgres.py``) with real
processes and a real server: a worker SIGKILLed in the middle of a files
publish, restarted, SIGKILLed again at a random point and restarted. Every
event id is published exactly once to the transactional table and to the
files output, and the upsert table equals a batch computation.

One worker: its three queries already start six Python processes in Spark,
which on a loaded two-core machine can miss Spark's fixed connect-back timeout."""

from __future__ import annotations

import os
import random
import uuid

import psycopg
import pytest
from psycopg import sql

from sparkpoint.devstack import REPO
from sparkpoint.eventlog import EventLog, committed_end
from sparkpoint.producer import write_trades
from tests.support import all_published, expected_vwap, get_json, wait_until
from worker.publishing.targets.files import read_published
from worker.publishing.targets.postgres import PROGRESS_TABLE

pytestmark = pytest.mark.integration

PIPELINE = REPO / "pipelines" / "trades_postgres.py"
EVENTS = 6000
PARTITIONS = 4
QUERIES = {"enriched_pg", "enriched_out", "vwap_pg"}
SETTINGS = {"SP_CHECKPOINT_FREQ": "1000", "SP_MAX_RECORDS_PER_BATCH": "300", "SP_TRIGGER_INTERVAL": "200",
            "SP_REPORT_INTERVAL": "300"}


@pytest.fixture
def database(postgres) -> str:
    """A fresh database of the session's server (the pipeline's table names are fixed)."""
    name = f"pipeline_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres.dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return postgres.dsn_for(name)


def worker(status: dict) -> dict | None:
    return next(iter(status.get("workers", [])), None)


def sink(worker_status: dict, name: str) -> dict:
    return next(s for s in worker_status["sinks"] if s["name"] == name)


def finished(stack, log: EventLog, after: int) -> dict | None:
    """The worker, registered more than ``after`` times (the controller shows
    a killed run until its successor registers), read the log to the end and
    published all of it."""
    status = get_json(stack.config.status_url, stack.config.api_token)
    ends = {str(p): committed_end(log.path(p), 0) for p in range(log.partitions())}
    current = worker(status)
    if current is None or current["registrations"] <= after or current["state"] != "running" or \
            set(current["offsets"]) != QUERIES or any(offsets != ends for offsets in current["offsets"].values()):
        return None
    return current if all_published(status) else None


def restarted_on_failure(stack, **env: str) -> None:
    """What the restart policy does in Docker: a worker that exited by itself
    (on a loaded machine Spark may miss its fixed 10 s wait for a Python
    process to connect back, which fails a query) is started again.
    Exactly-once must hold across any crash, so this only adds one."""
    service = stack.services["worker-0"]
    if service.process.poll() is not None:
        print(f"worker-0 exited by itself ({service.process.returncode}): restarting it")
        stack.start_worker(0, **env)


def test_a_killed_worker_publishes_every_event_exactly_once_to_postgres_and_files(make_stack, database):
    seed = int(os.environ.get("SP_TEST_SEED", random.randrange(1 << 30)))
    print(f"kill schedule seed: SP_TEST_SEED={seed}")
    stack = make_stack(workers=1, pipeline=PIPELINE, SP_PG_DSN=database, **SETTINGS)
    log = EventLog.create(stack.config.log_dir / "trades", PARTITIONS)
    events = write_trades(log, EVENTS, seed=seed)
    stack.start_controller()

    # 1. The worker SIGKILLs itself in the middle of its 3rd files publish
    #    (files placed, mark not yet written).
    fault = {"SP_TEST_FAULT": "publish.files_placed:3"}
    sentinel = stack.config.checkpoint_dir(0) / ".fault-publish.files_placed"
    stack.start_worker(0, **fault)
    wait_until(lambda: sentinel.exists() or restarted_on_failure(stack, **fault), timeout_s=420,
               what="the fault sentinel to kill the worker")
    wait_until(lambda: stack.services["worker-0"].process.poll() is not None, timeout_s=30, what="the worker to die")

    # 2. Restarted, it is SIGKILLed again at a random point once it has
    #    published more to PostgreSQL.
    stack.start_worker(0)
    more = random.Random(seed).randint(1, 4)
    restarted = wait_until(lambda: restarted_on_failure(stack) or (w := worker(get_json(stack.config.status_url, stack.config.api_token)))
                           and w["registrations"] >= 2 and w["sinks"] and
                           sink(w, "enriched_pg")["published_batch_id"] >= 0 and w,
                           timeout_s=420, what="the restarted worker to publish to PostgreSQL")
    target = sink(restarted, "enriched_pg")["published_batch_id"] + more
    wait_until(lambda: restarted_on_failure(stack) or
               sink(worker(get_json(stack.config.status_url, stack.config.api_token)), "enriched_pg")["published_batch_id"] >= target
               or finished(stack, log, after=1),
               timeout_s=420, what=f"the worker to publish batch {target} to PostgreSQL")
    killed = worker(get_json(stack.config.status_url, stack.config.api_token))
    print(f"killing the worker at {killed['sinks']}")
    stack.kill("worker-0")

    # 3. Restarted again, it processes and publishes the whole log.
    stack.start_worker(0)
    final = wait_until(lambda: restarted_on_failure(stack) or finished(stack, log, after=killed["registrations"]),
                       timeout_s=420, what="the worker to process and publish the whole log")
    assert final["recovery"]["restored_checkpoint_id"] > 0
    expected_ids = {e["id"] for e in events}
    with psycopg.connect(database) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM trades_enriched")]
        vwap = {row[0]: row[1:] for row in conn.execute("SELECT sym, notional, volume, trades, vwap FROM vwap")}
        marks = dict(((s, w), (c, b)) for s, w, c, b in conn.execute(
            sql.SQL("SELECT sink, worker, checkpoint_id, batch_id FROM {}").format(sql.Identifier(PROGRESS_TABLE))))

    # Transactional table: every event id exactly once; its mark is the one the worker reports.
    assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} events published twice to PostgreSQL"
    assert set(ids) == expected_ids, f"{len(expected_ids - set(ids))} events missing from PostgreSQL"
    reported = sink(final, "enriched_pg")
    assert marks == {("enriched_pg", "worker-0"): (reported["published_checkpoint_id"],
                                                   reported["published_batch_id"])}

    # Files: every event id exactly once.
    file_ids = read_published(stack.config.output_dir / "trades_enriched").column("id").to_pylist()
    assert len(file_ids) == len(set(file_ids)), f"{len(file_ids) - len(set(file_ids))} events published twice"
    assert set(file_ids) == expected_ids

    # Upsert table: equal to a batch computation over the whole input.
    expected = expected_vwap(events)
    assert set(vwap) == set(expected)
    for sym, (notional, volume, trades, row_vwap) in vwap.items():
        want = expected[sym]
        assert (trades, volume) == (want["trades"], want["volume"]), sym
        assert notional == pytest.approx(want["notional"], rel=1e-9)
        assert row_vwap == pytest.approx(want["vwap"], rel=1e-9)
    assert {s["name"]: s["contract"] for s in final["sinks"]} == \
        {"enriched_pg": "transactional", "enriched_out": "transactional", "vwap_pg": "upsert"}
