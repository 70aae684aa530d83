"""A stream joined with a PostgreSQL reference table (``sp.join``), on real
Spark and a real server: the table is read again at every micro-batch, so
a row updated in it is seen from the next batch on; ``how="left"`` keeps a
row without a match, ``"inner"`` drops it."""

from __future__ import annotations

import psycopg
import pytest

from tests.integration.queries import SCHEMA, event
from worker import api as sp

pytestmark = pytest.mark.integration


@pytest.fixture
def symbols(database: str) -> str:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE TABLE symbols (sym text PRIMARY KEY, sector text, weight double precision)")
        conn.execute("INSERT INTO symbols VALUES ('AAPL', 'Technology', 0.5), ('XOM', 'Energy', 0.25)")
    return database


def trades() -> sp.Stream:
    return sp.read.from_log("trades", schema=SCHEMA, name="trades")


def sectors() -> sp.Table:
    return sp.read.table_from_postgres("symbols", schema="sym string, sector string, weight double")


def test_a_row_updated_in_the_table_is_seen_from_the_next_batch_on(run, symbols):
    query = run(trades() | sp.join(sectors(), on="sym", name="sectors"), SP_PG_DSN=symbols)
    first = query.feed([event(0, "AAPL", 5, 1), event(1, "IBM", 7, 2)])
    assert sorted((r["id"], r["sym"], r["sector"], r["weight"]) for r in first) == [
        (0, "AAPL", "Technology", 0.5), (1, "IBM", None, None)]      # left: IBM has no row
    with psycopg.connect(symbols, autocommit=True) as conn:
        conn.execute("UPDATE symbols SET sector = 'Hardware' WHERE sym = 'AAPL'")
        conn.execute("INSERT INTO symbols VALUES ('IBM', 'Services', 1.0)")
    second = query.feed([event(2, "AAPL", 3, 4), event(3, "IBM", 1, 5)])
    assert sorted((r["id"], r["sector"], r["weight"]) for r in second) == [(2, "Hardware", 0.5), (3, "Services", 1.0)]


def test_an_inner_join_drops_rows_without_a_match(run, symbols):
    query = run(trades() | sp.join(sectors(), on="sym", how="inner", name="sectors"), SP_PG_DSN=symbols)
    rows = query.feed([event(0, "XOM", 5, 1), event(1, "IBM", 7, 2)])
    assert [(r["sym"], r["sector"]) for r in rows] == [("XOM", "Energy")]
