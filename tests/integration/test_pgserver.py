"""The PostgreSQL test infrastructure itself (tests/pgserver.py): the private
server and the proxy that cuts connections at COMMIT."""

from __future__ import annotations

import psycopg
import pytest

from tests.pgserver import CommitCutProxy, Cut, PostgresServer

pytestmark = pytest.mark.integration


@pytest.fixture
def probe(postgres: PostgresServer, request: pytest.FixtureRequest) -> str:
    """A key of its own for this test in a shared table; returns the key."""
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS probe (id text PRIMARY KEY)")
    return request.node.name


def present(postgres: PostgresServer, key: str) -> bool:
    """Whether ``key`` is committed, seen over a direct connection."""
    with psycopg.connect(postgres.dsn) as conn:
        return conn.execute("SELECT count(*) FROM probe WHERE id = %s", (key,)).fetchone()[0] == 1


def test_server_runs_private_cluster(postgres: PostgresServer):
    with psycopg.connect(postgres.dsn) as conn:
        database, address = conn.execute("SELECT current_database(), inet_server_addr()::text").fetchone()
    assert database == postgres.database
    assert address.startswith("127.0.0.1")
    assert postgres.log_path.exists()


@pytest.mark.parametrize("cut, committed", [(Cut.BEFORE_SERVER, False), (Cut.AFTER_SERVER, True)])
def test_cut_at_commit(postgres: PostgresServer, commit_cut_proxy: CommitCutProxy, probe: str,
                       cut: Cut, committed: bool):
    conn = psycopg.connect(commit_cut_proxy.dsn_through(postgres.dsn))
    conn.execute("INSERT INTO probe VALUES (%s)", (probe,))
    commit_cut_proxy.arm(cut)
    with pytest.raises(psycopg.OperationalError):
        conn.commit()
    assert conn.closed
    assert commit_cut_proxy.cuts == 1 and commit_cut_proxy.armed is None
    assert present(postgres, probe) is committed


def test_cuts_once_per_arming(postgres: PostgresServer, commit_cut_proxy: CommitCutProxy, probe: str):
    dsn = commit_cut_proxy.dsn_through(postgres.dsn)
    commit_cut_proxy.arm(Cut.BEFORE_SERVER)
    with pytest.raises(psycopg.OperationalError), psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO probe VALUES (%s)", (probe,))
    # The retry passes through: the arming was used up.
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO probe VALUES (%s)", (probe,))
    assert commit_cut_proxy.cuts == 1
    assert present(postgres, probe)


def test_an_arming_with_only_after_cuts_only_a_transaction_that_sent_it(postgres: PostgresServer,
                                                                        commit_cut_proxy: CommitCutProxy, probe: str):
    conn = psycopg.connect(commit_cut_proxy.dsn_through(postgres.dsn), autocommit=True)
    commit_cut_proxy.arm(Cut.BEFORE_SERVER, only_after=b"INSERT INTO probe")
    with conn.transaction():                     # another transaction's COMMIT passes
        conn.execute("SELECT count(*) FROM probe")
    assert commit_cut_proxy.cuts == 0 and commit_cut_proxy.armed is Cut.BEFORE_SERVER
    with pytest.raises(psycopg.OperationalError), conn.transaction():
        conn.execute("INSERT INTO probe VALUES (%s)", (probe,))
    assert commit_cut_proxy.cuts == 1 and commit_cut_proxy.armed is None
    assert not present(postgres, probe)


def test_an_arming_with_only_after_sees_a_prepared_statement_run_by_name(postgres: PostgresServer,
                                                                         commit_cut_proxy: CommitCutProxy, probe: str):
    conn = psycopg.connect(commit_cut_proxy.dsn_through(postgres.dsn), autocommit=True)
    insert = "INSERT INTO probe VALUES (%s)"
    with conn.transaction():                                    # prepared here: its text sent once
        conn.execute(insert, (probe + "-prepared",), prepare=True)
    commit_cut_proxy.arm(Cut.BEFORE_SERVER, only_after=b"INSERT INTO probe")
    with pytest.raises(psycopg.OperationalError), conn.transaction():
        conn.execute(insert, (probe,), prepare=True)            # only its name is sent now
    assert commit_cut_proxy.cuts == 1
    assert not present(postgres, probe)


def test_cut_all_breaks_open_connections(postgres: PostgresServer, commit_cut_proxy: CommitCutProxy):
    dsn = commit_cut_proxy.dsn_through(postgres.dsn)
    idle, in_transaction = psycopg.connect(dsn, autocommit=True), psycopg.connect(dsn)
    in_transaction.execute("SELECT 1")
    commit_cut_proxy.cut_all()
    for conn in (idle, in_transaction):
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with psycopg.connect(dsn) as conn:   # new connections go through
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_restart_keeps_committed_data(postgres: PostgresServer, probe: str):
    conn = psycopg.connect(postgres.dsn)
    with conn.transaction():
        conn.execute("INSERT INTO probe VALUES (%s)", (probe,))
    postgres.restart(mode="immediate")   # a crash, to the database
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    assert present(postgres, probe)
