"""PostgreSQL targets, published from staging by the worker's publisher.

- ``PostgresTransactionalTarget`` (``sp.write.to_postgres(table)``): when a
  checkpoint completes, everything staged up to it is written in one
  transaction that also records "published up to checkpoint k, batch b" for
  (sink, worker) in ``sparkpoint_sink_progress``. If the connection breaks
  during COMMIT the outcome is unknown: the publisher reads that record again
  (it moved iff the transaction committed) before anything else, and every
  transaction first locks the record and checks it is the one it was planned
  from, so an attempt can never commit on top of another that did. The
  record carries the fence of the worker's checkpoint volume (its id and
  generation, the index's epoch) as the last process to resume or publish
  held it: a process holding an earlier generation -- paused while another
  took its index over -- is refused under the record's lock (``Fenced``).
- ``PostgresUpsertTarget`` (``to_postgres(table, key=, version=)``): each staged
  batch at once, ``INSERT ... ON CONFLICT (key) DO UPDATE ... WHERE
  table.version < EXCLUDED.version``: a replay never moves a row backwards.

Tables are created if missing, with columns from the batch's Arrow schema.

Each process's connections are named after its worker and its fence
generation (``session_name``). A process paused inside a publishing
transaction keeps that transaction open, and with it the record's row lock
and the table's advisory lock, for as long as it is paused: the server never
notices, since the paused container's kernel still answers. So whatever
takes an index over ends the sessions of its earlier holders first
(``end_older_sessions``), as Kafka's transactional producer aborts a
zombie's open transaction: their transactions roll back, their locks are
free, and their next call fails.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import psycopg
from psycopg import sql

from sparkpoint.faults import NO_FAULTS, FaultInjector
from sparkpoint.messages import VolumeFence
from worker.publishing.book import Mark
from worker.publishing.staging import StagedBatch
from worker.publishing.targets import Outcome, check_fence

log = logging.getLogger("sparkpoint.worker.publisher")

PROGRESS_TABLE = "sparkpoint_sink_progress"
# Complete mode (a transactional aggregate): whose rows a publish replaces.
WORKER_COLUMN = "sparkpoint_worker"
# A publish waits this long for the progress record or table a broken
# connection's transaction may still hold, then fails and is retried.
LOCK_TIMEOUT = "30s"
# How long ending an earlier holder's session waits for it to be gone.
TERMINATE_WAIT_MS = 5_000
# PostgreSQL keeps at most this many bytes of an application_name.
_APPLICATION_NAME_MAX = 63
# A dead server or network must fail a call, not hang it: libpq's timeouts.
_CONNECT_OPTIONS = {
    "connect_timeout": 5,
    "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}


class UnsupportedType(ValueError):
    """A column's type has no PostgreSQL column type here; the message names it."""


def column_type(field) -> str:
    """The PostgreSQL type of an Arrow field."""
    import pyarrow.types as t

    kind = field.type
    simple = [
        (t.is_boolean, "boolean"), (t.is_int8, "smallint"), (t.is_int16, "smallint"),
        (t.is_uint8, "smallint"), (t.is_int32, "integer"), (t.is_uint16, "integer"),
        (t.is_int64, "bigint"), (t.is_uint32, "bigint"), (t.is_uint64, "numeric(20)"),
        (t.is_float16, "real"), (t.is_float32, "real"), (t.is_float64, "double precision"),
        (t.is_string, "text"), (t.is_large_string, "text"), (t.is_binary, "bytea"),
        (t.is_large_binary, "bytea"), (t.is_date, "date"), (t.is_time, "time"),
    ]
    for test, name in simple:
        if test(kind):
            return name
    if t.is_timestamp(kind):
        return "timestamptz" if kind.tz else "timestamp"
    if t.is_decimal(kind):
        return f"numeric({kind.precision},{kind.scale})"
    raise UnsupportedType(f"column {field.name!r}: no PostgreSQL type for Arrow type {kind}")


def table_identifier(table: str) -> sql.Identifier:
    return sql.Identifier(*table.split("."))


class PostgresConnection:
    """One connection, opened on first use; closed after any error (it may be
    broken), so the next use reconnects."""

    def __init__(self, conninfo: str, application_name: str) -> None:
        self._conninfo = conninfo
        self._application_name = application_name
        self._conn: psycopg.Connection | None = None

    def get(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self._conninfo, autocommit=True,
                                         application_name=self._application_name, **_CONNECT_OPTIONS)
        return self._conn

    @contextmanager
    def using(self) -> Iterator[psycopg.Connection]:
        """The connection, closed if the block raises (anything: it may be broken)."""
        try:
            yield self.get()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _session_prefix(worker_id: str) -> str:
    prefix = f"sparkpoint-{worker_id}"
    # Room for " g<generation>": a longer worker id is named by its digest.
    return prefix if len(prefix) <= _APPLICATION_NAME_MAX - 21 else \
        f"sparkpoint-{hashlib.blake2b(worker_id.encode(), digest_size=8).hexdigest()}"


def session_name(worker_id: str, fence: VolumeFence) -> str:
    """The application_name of the connections of ``worker_id``'s process
    holding ``fence``: "sparkpoint-worker-0 g4"."""
    return f"{_session_prefix(worker_id)} g{fence.generation}"


def end_older_sessions(conn: psycopg.Connection, worker_id: str, fence: VolumeFence) -> list[int]:
    """End the database sessions of ``worker_id``'s processes holding an
    earlier generation than ``fence`` (taken over, paused or cut off): their
    open transactions roll back and free their locks. Returns their pids
    (none without a fence: there is no earlier holder to tell)."""
    if not fence.generation:
        return []
    prefix = f"{_session_prefix(worker_id)} g"
    rows = conn.execute("SELECT pid, application_name FROM pg_stat_activity "
                        "WHERE starts_with(application_name, %s) AND pid <> pg_backend_pid()", (prefix,)).fetchall()
    older = [pid for pid, name in rows
             if name[len(prefix):].isdigit() and int(name[len(prefix):]) < fence.generation]
    for pid in older:
        conn.execute("SELECT pg_terminate_backend(%s, %s)", (pid, TERMINATE_WAIT_MS))
    if older:
        log.warning("%s: ended %d database session(s) of an earlier holder of this index (paused or cut off?), "
                    "rolling back what it had not committed: pid %s", worker_id, len(older),
                    ", ".join(map(str, older)))
    return older


def _bound_lock_waits(conn: psycopg.Connection) -> None:
    """The transaction under way waits at most ``LOCK_TIMEOUT`` for any lock."""
    conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(LOCK_TIMEOUT)))


def _rows_of(batches: Sequence[StagedBatch]):
    """The batches' rows as one Arrow table (None if there are none)."""
    import pyarrow as pa

    tables = [table for table in (batch.read() for batch in batches) if table is not None]
    return pa.concat_tables(tables) if tables else None


def _create_table(conn: psycopg.Connection, table: str, rows, *, extra: sql.Composable = sql.SQL("")) -> None:
    """CREATE TABLE IF NOT EXISTS, serialised by an advisory lock: two workers
    creating one table at once would otherwise race in the catalog."""
    columns = sql.SQL(", ").join(
        sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(column_type(f))) for f in rows.schema)
    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (table,))
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({}{})").format(table_identifier(table), columns, extra))


def _copy(conn: psycopg.Connection, into: sql.Composable, rows, constants: Sequence[tuple[str, object]] = ()) -> None:
    names = [f.name for f in rows.schema] + [name for name, _ in constants]
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(into, sql.SQL(", ").join(map(sql.Identifier, names)))
    values = [value for _, value in constants]
    with conn.cursor().copy(statement) as copy:
        for row in zip(*(column.to_pylist() for column in rows.columns)):
            copy.write_row((*row, *values))


class PostgresTransactionalTarget:
    def __init__(self, conninfo: str, table: str, *, sink: str, worker_id: str, complete: bool,
                 fence: VolumeFence = VolumeFence(), faults: FaultInjector = NO_FAULTS) -> None:
        """``fence``: this process's of the worker's checkpoint volume."""
        self.table = table
        self.sink = sink
        self.worker_id = worker_id
        self.complete = complete
        self.description = f"PostgreSQL table {table} (transactional)"
        self._connection = PostgresConnection(conninfo, session_name(worker_id, fence))
        self._mark: Mark | None = None      # as last read or written
        self._fence = fence
        self._faults = faults

    def resume(self) -> Mark | None:
        """End the earlier holders' sessions; read (sink, worker)'s record,
        creating the progress table (or adding the fence's columns to an
        older one) and the record (batch -1: nothing published) if missing,
        and claim it for this process's fence. Raises ``Fenced`` if a later
        holder of the index claimed it."""
        with self._connection.using() as conn:
            end_older_sessions(conn, self.worker_id, self._fence)
            with conn.transaction():
                _bound_lock_waits(conn)
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (PROGRESS_TABLE,))
                conn.execute(sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (sink text NOT NULL, worker text NOT NULL, "
                    "checkpoint_id bigint NOT NULL, batch_id bigint NOT NULL, published_at timestamptz, "
                    "fence_volume text NOT NULL DEFAULT '', fence_generation bigint NOT NULL DEFAULT 0, "
                    "PRIMARY KEY (sink, worker))").format(sql.Identifier(PROGRESS_TABLE)))
                # A table of an earlier version: ALTER only then (it would lock the
                # table against the other workers' publishing at every resume).
                if conn.execute("SELECT NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass "
                                "AND attname = 'fence_generation' AND NOT attisdropped)",
                                (PROGRESS_TABLE,)).fetchone()[0]:
                    conn.execute(sql.SQL(
                        "ALTER TABLE {} ADD COLUMN IF NOT EXISTS fence_volume text NOT NULL DEFAULT '', "
                        "ADD COLUMN IF NOT EXISTS fence_generation bigint NOT NULL DEFAULT 0").format(
                        sql.Identifier(PROGRESS_TABLE)))
                conn.execute(sql.SQL("INSERT INTO {} (sink, worker, checkpoint_id, batch_id) VALUES (%s, %s, 0, -1) "
                                     "ON CONFLICT DO NOTHING").format(sql.Identifier(PROGRESS_TABLE)),
                             (self.sink, self.worker_id))
                self._mark = self._read_mark(conn)
                conn.execute(sql.SQL("UPDATE {} SET fence_volume = %s, fence_generation = %s "
                                     "WHERE sink = %s AND worker = %s").format(sql.Identifier(PROGRESS_TABLE)),
                             (self._fence.volume_id, self._fence.generation, self.sink, self.worker_id))
        return self._mark

    def rewind(self, mark: Mark) -> None:
        """The older mark; the rows published past it stay (a database's
        readers may have used them) and are published again."""
        with self._connection.using() as conn:
            self._write_mark(conn, mark)
        self._mark = mark

    def _write_mark(self, conn: psycopg.Connection, mark: Mark) -> None:
        conn.execute(sql.SQL("UPDATE {} SET checkpoint_id = %s, batch_id = %s, published_at = now() "
                             "WHERE sink = %s AND worker = %s").format(sql.Identifier(PROGRESS_TABLE)),
                     (mark.checkpoint_id, mark.batch_id, self.sink, self.worker_id))

    def _read_mark(self, conn: psycopg.Connection) -> Mark | None:
        """The record's mark, locked until the transaction ends; raises
        ``Fenced`` if its fence supersedes this process's."""
        query = sql.SQL("SELECT checkpoint_id, batch_id, fence_volume, fence_generation FROM {} "
                        "WHERE sink = %s AND worker = %s FOR UPDATE").format(sql.Identifier(PROGRESS_TABLE))
        checkpoint_id, batch_id, volume, generation = conn.execute(query, (self.sink, self.worker_id)).fetchone()
        check_fence(VolumeFence(volume, generation), self._fence, self.description)
        return Mark(checkpoint_id, batch_id) if batch_id >= 0 else None

    def publish(self, batches: Sequence[StagedBatch], mark: Mark) -> Outcome:
        """One transaction. Steps:
        1. Lock (sink, worker)'s record; if a later holder of the index claimed
           it, roll back (``Fenced``); if it is not the mark this publish was
           planned from, roll back: another attempt committed.
        2. Create the table if missing (complete mode: with a worker column).
        3. Complete mode: delete this worker's rows (the new table replaces them).
        4. COPY the staged rows.
        5. Record the mark.
        6. COMMIT: the commit point.
        """
        rows = _rows_of(batches)
        moved = False
        with self._connection.using() as conn:
            with conn.transaction():
                # 1.
                _bound_lock_waits(conn)
                if self._read_mark(conn) != self._mark:
                    moved = True
                    raise psycopg.Rollback()
                if rows is not None:
                    # 2.
                    extra = sql.SQL(", {} text NOT NULL").format(sql.Identifier(WORKER_COLUMN)) \
                        if self.complete else sql.SQL("")
                    _create_table(conn, self.table, rows, extra=extra)
                    # 3.
                    if self.complete:
                        conn.execute(sql.SQL("DELETE FROM {} WHERE {} = %s").format(
                            table_identifier(self.table), sql.Identifier(WORKER_COLUMN)), (self.worker_id,))
                    # 4.
                    constants = [(WORKER_COLUMN, self.worker_id)] if self.complete else []
                    _copy(conn, table_identifier(self.table), rows, constants)
                # 5.
                self._write_mark(conn, mark)
                self._faults.hit("publish.postgres_written", self.sink)
            # 6. (leaving the block commits; a rolled-back step 1 lands here too)
        if moved:
            return Outcome.MARK_MOVED
        self._mark = mark
        return Outcome.PUBLISHED

    def close(self) -> None:
        self._connection.close()


class PostgresUpsertTarget:
    """Keeps no mark: publishing a batch again changes nothing."""

    def __init__(self, conninfo: str, table: str, *, key: Sequence[str], version: str, worker_id: str,
                 fence: VolumeFence = VolumeFence()) -> None:
        """``fence``: this process's of the worker's checkpoint volume."""
        self.table = table
        self.key = list(key)
        self.version = version
        self.worker_id = worker_id
        self.description = f"PostgreSQL table {table} (upsert on {', '.join(self.key)}, version {version})"
        self._connection = PostgresConnection(conninfo, session_name(worker_id, fence))
        self._fence = fence

    def resume(self) -> Mark | None:
        """End the earlier holders' sessions (their open upserts lock rows
        and the table's creation lock); there is no mark."""
        with self._connection.using() as conn:
            end_older_sessions(conn, self.worker_id, self._fence)
        return None

    def rewind(self, mark: Mark) -> None:
        pass        # no mark: versions keep replays from moving rows backwards

    def publish(self, batches: Sequence[StagedBatch], mark: Mark) -> Outcome:
        """One transaction. Steps:
        1. Create the table if missing, the key as its primary key (waiting at
           most ``LOCK_TIMEOUT`` for a lock here and below).
        2. COPY the rows into a temporary table.
        3. Upsert the newest version of each key; a row whose stored version
           is not older stays as it is.
        """
        rows = _rows_of(batches)
        if rows is None:
            return Outcome.PUBLISHED
        names = [f.name for f in rows.schema]
        missing = [c for c in [*self.key, self.version] if c not in names]
        if missing:
            raise ValueError(f"table {self.table}: the rows have no column {', '.join(map(repr, missing))} "
                             f"(they have {', '.join(names)})")
        target, staged = table_identifier(self.table), sql.Identifier("sparkpoint_upsert")
        key = sql.SQL(", ").join(map(sql.Identifier, self.key))
        columns = sql.SQL(", ").join(map(sql.Identifier, names))
        updates = sql.SQL(", ").join(sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n))
                                     for n in names if n not in self.key)
        with self._connection.using() as conn:
            with conn.transaction():
                # 1.
                _bound_lock_waits(conn)
                _create_table(conn, self.table, rows, extra=sql.SQL(", PRIMARY KEY ({})").format(key))
                # 2.
                conn.execute(sql.SQL("CREATE TEMPORARY TABLE {} (LIKE {}) ON COMMIT DROP").format(staged, target))
                _copy(conn, staged, rows)
                # 3.
                conn.execute(sql.SQL(
                    "INSERT INTO {target} AS stored ({columns}) SELECT DISTINCT ON ({key}) {columns} FROM {staged} "
                    "ORDER BY {key}, {version} DESC "
                    "ON CONFLICT ({key}) DO UPDATE SET {updates} WHERE stored.{version} < EXCLUDED.{version}"
                ).format(target=target, columns=columns, key=key, staged=staged, updates=updates,
                         version=sql.Identifier(self.version)))
        return Outcome.PUBLISHED

    def close(self) -> None:
        self._connection.close()
