"""The PostgreSQL example pipeline (``pipelines/trades_postgres.py``) as the
integration tests run it: its settings, where its worker stands, and the
exactly-once check of its three sinks."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

from sparkpoint.devstack import REPO
from sparkpoint.eventlog import EventLog, committed_end
from tests.support import all_published, expected_vwap, get_json
from worker.publishing.targets.files import read_published
from worker.publishing.targets.postgres import PROGRESS_TABLE

PIPELINE = REPO / "pipelines" / "trades_postgres.py"
PARTITIONS = 4
QUERIES = {"enrich", "vwap_pg"}   # the two transactional sinks share a query
SETTINGS = {"SP_CHECKPOINT_FREQ": "1000", "SP_MAX_RECORDS_PER_BATCH": "300", "SP_TRIGGER_INTERVAL": "200",
            "SP_REPORT_INTERVAL": "300"}
# The one statement only a transactional sink's publish makes (its mark,
# step 5 of PostgresTransactionalTarget.publish), as the proxy sees it.
MARK_UPDATE = f'UPDATE "{PROGRESS_TABLE}"'.encode()


def worker(status: dict) -> dict | None:
    return next(iter(status.get("workers", [])), None)


def sink(worker_status: dict, name: str) -> dict:
    return next(s for s in worker_status["sinks"] if s["name"] == name)


def published_to_postgres(stack, after: int = 0) -> dict | None:
    """The worker, registered more than ``after`` times, once its
    transactional PostgreSQL sink has published a batch."""
    current = worker(get_json(stack.config.status_url, stack.config.api_token))
    return current if current and current["registrations"] > after and current["sinks"] and \
        sink(current, "enriched_pg")["published_batch_id"] >= 0 else None


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


def check_exactly_once(stack, database: str, events: list[dict], final: dict) -> None:
    """Every event id exactly once in the transactional table (whose mark is
    the one the worker reports) and in the files output; the upsert table
    equal to a batch computation over the whole input."""
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
