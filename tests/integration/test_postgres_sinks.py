"""The PostgreSQL targets against a real server (tests/pgserver.py): table
creation and types, the mark recorded in the publishing transaction, upserts
that never move a row backwards, a connection cut at COMMIT on either side of
the server, and a server restart."""

from __future__ import annotations

import datetime as dt
import re
import threading
from decimal import Decimal

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sparkpoint.messages import SinkContract, SinkState, VolumeFence
from tests.pgserver import CommitCutProxy, Cut, PostgresServer
from tests.unit.fakes import FakeClock
from worker.checkpointing.manifest import Manifest, QueryCut
from worker.publishing.book import Contract, Mark, SinkBook
from worker.publishing.publisher import Publication, Publisher
from worker.publishing.staging import StagedBatch, StagingArea
from worker.publishing.targets import Fenced, Outcome
from worker.publishing.targets.postgres import (
    PROGRESS_TABLE,
    PostgresTransactionalTarget,
    PostgresUpsertTarget,
    session_name,
)

pytestmark = pytest.mark.integration

WORKER = "worker-0"


@pytest.fixture
def name(request) -> str:
    """A table and sink name of this test's own."""
    return re.sub(r"[^a-z0-9]+", "_", request.node.name.lower().removeprefix("test_"))[-60:].strip("_")


def staged(tmp_path, batch_id: int, table: pa.Table) -> StagedBatch:
    directory = tmp_path / f"b{batch_id}"
    directory.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, directory / "0000.parquet")
    return StagedBatch(batch_id, (directory / "0000.parquet",))


def events(ids: range) -> pa.Table:
    return pa.table({"id": pa.array(list(ids), pa.int64()), "sym": [f"S{i % 3}" for i in ids]})


def query(postgres: PostgresServer, statement: str, *args) -> list[tuple]:
    with psycopg.connect(postgres.dsn) as conn:
        return conn.execute(statement, args).fetchall()


def test_transactional_creates_the_table_and_records_the_mark_in_the_same_transaction(postgres, tmp_path, name):
    target = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=False)
    assert target.resume() is None
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.timezone.utc)
    typed = pa.table({
        "id": pa.array([1, 2], pa.int64()), "sym": ["A", None], "price": [1.5, 2.25],
        "size": pa.array([10, 20], pa.int32()), "ok": [True, False],
        "time": pa.array([when, when], pa.timestamp("us", tz="UTC")),
        "naive": pa.array([when.replace(tzinfo=None)] * 2, pa.timestamp("us")),
        "day": pa.array([when.date()] * 2, pa.date32()),
        "amount": pa.array([Decimal("1.25"), Decimal("3.50")], pa.decimal128(10, 2)),
    })
    assert target.publish([staged(tmp_path, 0, typed)], Mark(3, 0)) is Outcome.PUBLISHED
    columns = dict(query(postgres, "SELECT column_name, data_type FROM information_schema.columns "
                                   "WHERE table_name = %s", name))
    assert columns == {"id": "bigint", "sym": "text", "price": "double precision", "size": "integer",
                       "ok": "boolean", "time": "timestamp with time zone",
                       "naive": "timestamp without time zone", "day": "date", "amount": "numeric"}
    assert query(postgres, f"SELECT id, sym, time, amount FROM {name} ORDER BY id") == \
        [(1, "A", when, Decimal("1.25")), (2, None, when, Decimal("3.50"))]
    [(checkpoint_id, batch_id, published_at)] = query(
        postgres, f"SELECT checkpoint_id, batch_id, published_at FROM {PROGRESS_TABLE} "
                  "WHERE sink = %s AND worker = %s", name, WORKER)
    assert (checkpoint_id, batch_id) == (3, 0) and published_at is not None
    # A second target instance (a restarted worker) reads the same mark.
    assert PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER,
                                       complete=False).resume() == Mark(3, 0)


def test_transactional_publishes_several_batches_at_once(postgres, tmp_path, name):
    target = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=False)
    target.resume()
    target.publish([staged(tmp_path, 0, events(range(0, 5))), staged(tmp_path, 1, events(range(5, 9)))], Mark(1, 1))
    assert query(postgres, f"SELECT count(*), count(DISTINCT id) FROM {name}") == [(9, 9)]


def test_a_stale_mark_writes_nothing(postgres, tmp_path, name):
    first = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=False)
    second = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=False)
    first.resume()
    second.resume()
    assert first.publish([staged(tmp_path, 0, events(range(3)))], Mark(1, 0)) is Outcome.PUBLISHED
    # Planned from "nothing published": the record moved meanwhile.
    assert second.publish([staged(tmp_path, 0, events(range(3)))], Mark(1, 0)) is Outcome.MARK_MOVED
    assert query(postgres, f"SELECT count(*) FROM {name}") == [(3,)]
    assert second.resume() == Mark(1, 0)


def test_a_holder_superseded_by_a_later_fence_writes_nothing_under_the_records_lock(postgres, tmp_path, name):
    paused = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=False,
                                         fence=VolumeFence("v1", 3))
    assert paused.resume() is None
    assert paused.publish([staged(tmp_path, 0, events(range(3)))], Mark(1, 0)) is Outcome.PUBLISHED
    # While it was paused, another process took the index over (generation 4) and resumed.
    heir = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=False,
                                       fence=VolumeFence("v1", 4))
    assert heir.resume() == Mark(1, 0)
    record = "SELECT batch_id, fence_volume, fence_generation FROM sparkpoint_sink_progress WHERE sink = %s"
    assert query(postgres, record, name) == [(0, "v1", 4)]
    # The heir ended the paused process's session: its next call fails, and
    # the one after, on a new connection, was planned from the same mark:
    # refused under the record's lock, nothing written.
    with pytest.raises(psycopg.OperationalError, match="terminating connection"):
        paused.publish([staged(tmp_path, 1, events(range(3, 6)))], Mark(2, 1))
    with pytest.raises(Fenced, match=r"fence generation 4; this process holds 3"):
        paused.publish([staged(tmp_path, 1, events(range(3, 6)))], Mark(2, 1))
    with pytest.raises(Fenced):
        paused.resume()
    assert query(postgres, f"SELECT count(*) FROM {name}") == [(3,)]
    assert query(postgres, record, name) == [(0, "v1", 4)]
    assert heir.publish([staged(tmp_path, 1, events(range(3, 6)))], Mark(2, 1)) is Outcome.PUBLISHED
    assert query(postgres, f"SELECT count(*), count(DISTINCT id) FROM {name}") == [(6, 6)]


class PausedAt:
    """Fault points where the publishing process stops, inside its
    transaction, until released: a paused container, as the server sees it."""

    def __init__(self, point: str) -> None:
        self.point = point
        self.reached = threading.Event()
        self.released = threading.Event()

    def hit(self, point: str, sink: str = "") -> None:
        if point == self.point:
            self.reached.set()
            self.released.wait()


def sessions(postgres: PostgresServer) -> set[str]:
    return {name for (name,) in query(postgres, "SELECT application_name FROM pg_stat_activity")}


def test_a_later_holder_ends_a_paused_holders_open_transaction_and_publishes(postgres, tmp_path, name):
    pause = PausedAt("publish.postgres_written")
    paused = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=False,
                                         fence=VolumeFence("v1", 3), faults=pause)
    assert paused.resume() is None
    outcome: dict = {}

    def publish() -> None:
        try:
            outcome["published"] = paused.publish([staged(tmp_path, 0, events(range(3)))], Mark(1, 0))
        except psycopg.Error as error:
            outcome["error"] = error
    thread = threading.Thread(target=publish)
    thread.start()
    try:
        assert pause.reached.wait(60), "the publish never reached its COMMIT"
        # Paused there: its transaction holds the record's lock, rows and a mark, uncommitted.
        assert "sparkpoint-worker-0 g3" in sessions(postgres)
        heir = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=False,
                                           fence=VolumeFence("v1", 4))
        # It would wait LOCK_TIMEOUT for the record and fail, again and again.
        assert heir.resume() is None
    finally:
        pause.released.set()
        thread.join(60)
    assert "published" not in outcome and isinstance(outcome["error"], psycopg.OperationalError)
    assert "sparkpoint-worker-0 g3" not in sessions(postgres)
    assert query(postgres, "SELECT to_regclass(%s)::text", name) == [(None,)], "the paused publish's table"
    assert heir.publish([staged(tmp_path, 0, events(range(3)))], Mark(1, 0)) is Outcome.PUBLISHED
    assert query(postgres, f"SELECT count(*), count(DISTINCT id) FROM {name}") == [(3, 3)]


def test_an_upserting_holder_ends_only_its_earlier_holders_sessions(postgres, tmp_path, name):
    upsert = {"key": ["sym"], "version": "trades", "worker_id": WORKER}
    PostgresUpsertTarget(postgres.dsn, name, **upsert).publish(
        [staged(tmp_path, 0, pa.table({"sym": ["A"], "trades": [1]}))], Mark(0, 0))
    # Inside open transactions: an earlier holder's upsert of A (paused), and
    # sessions of another worker and of a later holder of this index.
    held = {}
    for worker, generation in ((WORKER, 3), ("worker-1", 2), (WORKER, 5)):
        conn = psycopg.connect(postgres.dsn, application_name=session_name(worker, VolumeFence("v1", generation)))
        conn.execute(f"UPDATE {name} SET trades = 2 WHERE sym = 'A'" if generation == 3 else "SELECT 1")
        held[(worker, generation)] = conn
    try:
        heir = PostgresUpsertTarget(postgres.dsn, name, **upsert, fence=VolumeFence("v1", 4))
        assert heir.resume() is None
        # Without that, it would wait LOCK_TIMEOUT for A's row lock and fail.
        heir.publish([staged(tmp_path, 1, pa.table({"sym": ["A"], "trades": [4]}))], Mark(1, 1))
        assert query(postgres, f"SELECT sym, trades FROM {name}") == [("A", 4)]
        with pytest.raises(psycopg.OperationalError):
            held[(WORKER, 3)].commit()
        for alive in ((WORKER, 5), ("worker-1", 2)):
            held[alive].commit()
        assert sessions(postgres) >= {"sparkpoint-worker-0 g5", "sparkpoint-worker-1 g2", "sparkpoint-worker-0 g4"}
    finally:
        for conn in held.values():
            conn.close()


def test_a_progress_table_from_before_fences_gets_their_columns(postgres, tmp_path, name):
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {PROGRESS_TABLE}")
        conn.execute(f"CREATE TABLE {PROGRESS_TABLE} (sink text NOT NULL, worker text NOT NULL, checkpoint_id "
                     "bigint NOT NULL, batch_id bigint NOT NULL, published_at timestamptz, PRIMARY KEY (sink, worker))")
        conn.execute(f"INSERT INTO {PROGRESS_TABLE} VALUES (%s, %s, 2, 5, now())", (name, WORKER))
    target = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=False,
                                         fence=VolumeFence("v1", 1))
    assert target.resume() == Mark(2, 5)
    assert query(postgres, f"SELECT fence_volume, fence_generation FROM {PROGRESS_TABLE} WHERE sink = %s",
                 name) == [("v1", 1)]


def test_a_rewound_mark_keeps_the_rows_and_publishes_past_it_again(postgres, tmp_path, name):
    target = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=False)
    target.resume()
    target.publish([staged(tmp_path, 0, events(range(0, 3))), staged(tmp_path, 1, events(range(3, 5)))], Mark(4, 1))
    # The user restored an older savepoint (checkpoint 2, batch 0) and consented.
    target.rewind(Mark(2, 0))
    assert PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER,
                                       complete=False).resume() == Mark(2, 0)
    # The replayed batch 1 publishes on top of the rewound mark: its rows twice, as consented.
    assert target.publish([staged(tmp_path, 1, events(range(3, 5)))], Mark(6, 1)) is Outcome.PUBLISHED
    assert query(postgres, f"SELECT id, count(*) FROM {name} GROUP BY id ORDER BY id") == \
        [(0, 1), (1, 1), (2, 1), (3, 2), (4, 2)]


def test_transactional_complete_mode_replaces_this_workers_table_only(postgres, tmp_path, name):
    mine = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=True)
    other = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id="worker-1", complete=True)
    for target in (mine, other):
        target.resume()
    table = pa.table({"sym": ["A", "B"], "volume": [10, 20]})
    mine.publish([staged(tmp_path, 0, table)], Mark(1, 0))
    other.publish([staged(tmp_path, 0, pa.table({"sym": ["C"], "volume": [5]}))], Mark(1, 0))
    mine.publish([staged(tmp_path, 1, pa.table({"sym": ["A", "B"], "volume": [15, 25]}))], Mark(2, 1))
    assert query(postgres, f"SELECT sym, volume, sparkpoint_worker FROM {name} ORDER BY sym") == \
        [("A", 15, WORKER), ("B", 25, WORKER), ("C", 5, "worker-1")]


def test_upsert_creates_a_keyed_table_and_never_moves_a_row_backwards(postgres, tmp_path, name):
    target = PostgresUpsertTarget(postgres.dsn, name, key=["sym"], version="trades", worker_id=WORKER)
    assert target.resume() is None
    target.publish([staged(tmp_path, 0, pa.table({"sym": ["A", "B"], "trades": [3, 1], "vwap": [1.0, 2.0]}))],
                   Mark(0, 0))
    # A replay of an older state (A at 2 trades) and a newer B, with B twice in
    # one batch: the newest version per key wins, older ones change nothing.
    target.publish([staged(tmp_path, 1, pa.table({"sym": ["A", "B", "B"], "trades": [2, 4, 5],
                                                   "vwap": [9.0, 3.0, 4.0]}))], Mark(0, 1))
    assert query(postgres, f"SELECT sym, trades, vwap FROM {name} ORDER BY sym") == [("A", 3, 1.0), ("B", 5, 4.0)]
    [(primary_key,)] = query(postgres, "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
                                       "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                                       "WHERE i.indrelid = %s::regclass AND i.indisprimary", name)
    assert primary_key == "sym"


def test_upsert_names_a_missing_key_column(postgres, tmp_path, name):
    target = PostgresUpsertTarget(postgres.dsn, name, key=["sym"], version="trades", worker_id=WORKER)
    with pytest.raises(ValueError, match="no column 'trades'"):
        target.publish([staged(tmp_path, 0, pa.table({"sym": ["A"]}))], Mark(0, 0))


# --- the publisher against the server -----------------------------------------------------

def publisher_with(target, tmp_path, clock) -> tuple[Publisher, StagingArea]:
    staging = StagingArea(tmp_path / "staging", "run-1")
    staging.recover(None)
    publisher = Publisher([Publication("events", "events", SinkContract.TRANSACTIONAL,
                                       SinkBook(Contract.ON_COMPLETION, complete=False), target, staging)],
                          clock=clock)
    assert publisher.resume_all(threading.Event())
    return publisher, staging


def stage(staging: StagingArea, batch_id: int, ids: range) -> None:
    directory = staging.run_dir / f"b{batch_id:010d}"
    directory.mkdir()
    pq.write_table(events(ids), directory / "0000.parquet")


def complete(publisher: Publisher, checkpoint_id: int, batch_id: int) -> None:
    publisher.durable(Manifest(checkpoint_id, WORKER, 0.0, 0.0, 0, (), (QueryCut("events", batch_id, {}, {}),)))
    publisher.completed(checkpoint_id)


@pytest.mark.parametrize("cut", [Cut.BEFORE_SERVER, Cut.AFTER_SERVER])
def test_a_connection_cut_at_commit_publishes_every_row_exactly_once(postgres, commit_cut_proxy: CommitCutProxy,
                                                                      tmp_path, name, cut):
    clock = FakeClock()
    target = PostgresTransactionalTarget(commit_cut_proxy.dsn_through(postgres.dsn), name, sink=name,
                                         worker_id=WORKER, complete=False)
    publisher, staging = publisher_with(target, tmp_path, clock)
    stage(staging, 0, range(0, 10))
    stage(staging, 1, range(10, 20))
    complete(publisher, 1, 0)
    publisher.step()
    assert query(postgres, f"SELECT count(*) FROM {name}") == [(10,)]

    complete(publisher, 2, 1)
    commit_cut_proxy.arm(cut)
    publisher.step()
    assert commit_cut_proxy.cuts == 1
    status = publisher.statuses()[0]
    assert status.state is SinkState.WAITING and status.pending_batches == 1
    clock.now += 60
    publisher.step()
    assert publisher.statuses()[0].state is SinkState.OK
    assert query(postgres, f"SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {name}") == [(20, 20, 0, 19)]
    assert target.resume() == Mark(2, 1)
    assert staging.batches() == []


def test_a_server_restart_makes_the_sink_wait_and_lose_nothing(postgres, tmp_path, name):
    clock = FakeClock()
    target = PostgresTransactionalTarget(postgres.dsn, name, sink=name, worker_id=WORKER, complete=False)
    publisher, staging = publisher_with(target, tmp_path, clock)
    stage(staging, 0, range(0, 5))
    complete(publisher, 1, 0)
    publisher.step()
    postgres.restart(mode="immediate")
    stage(staging, 1, range(5, 9))
    complete(publisher, 2, 1)
    publisher.step()            # the connection it held died with the server
    status = publisher.statuses()[0]
    assert status.state is SinkState.WAITING and "OperationalError" in status.error and status.pending_batches == 1
    clock.now += 60
    publisher.step()
    assert publisher.statuses()[0].state is SinkState.OK
    assert query(postgres, f"SELECT count(*), count(DISTINCT id) FROM {name}") == [(9, 9)]
