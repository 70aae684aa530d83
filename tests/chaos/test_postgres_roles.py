"""PostgreSQL's roles in the compose stack, as PostgreSQL itself enforces
them (the guarantee the stack relies on, checked against the server, not
assumed): the sinks' role is no superuser and cannot run a program on the
server, yet owns what it creates; the read-only role reads and writes
nothing; the superuser cannot log in over the network at all."""

from __future__ import annotations

import pytest

from tests.support import wait_until

pytestmark = pytest.mark.chaos

PROBE = """
import json, psycopg

def attempt(dsn, *statements):
    try:
        with psycopg.connect(dsn, connect_timeout=5, autocommit=True) as conn:
            rows = None
            for statement in statements:
                cursor = conn.execute(statement)
                rows = cursor.fetchall() if cursor.description else None
            return {'rows': rows}
    except psycopg.Error as error:
        return {'sqlstate': error.sqlstate, 'error': str(error).splitlines()[0]}

sinks, reader, superuser = %(sinks)r, %(reader)r, %(superuser)r
if %(ready_only)r:
    print(json.dumps(attempt(sinks, "SELECT 1")))
    raise SystemExit
print(json.dumps({
    'sinks_role': attempt(sinks, "SELECT rolsuper, rolcreaterole, rolcreatedb, "
                                 "pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER'), "
                                 "pg_has_role(current_user, 'pg_read_server_files', 'MEMBER') "
                                 "FROM pg_roles WHERE rolname = current_user"),
    'sinks_program': attempt(sinks, "COPY (SELECT 1) TO PROGRAM 'id'"),
    'sinks_authid': attempt(sinks, "SELECT rolpassword FROM pg_authid"),
    'sinks_create': attempt(sinks, "CREATE TABLE roles_probe (id int)", "INSERT INTO roles_probe VALUES (1)",
                            "SELECT count(*) FROM roles_probe"),
    'reader_select': attempt(reader, "SELECT count(*) FROM roles_probe"),
    'reader_insert': attempt(reader, "INSERT INTO roles_probe VALUES (2)"),
    'reader_create': attempt(reader, "CREATE TABLE reader_probe (id int)"),
    'superuser': attempt(superuser, "SELECT 1"),
}))
"""
INSUFFICIENT_PRIVILEGE = "42501"


def test_the_sinks_role_owns_its_tables_only_the_reader_reads_and_the_superuser_stays_inside(stack):
    compose = stack()
    compose.up("postgres")
    roles = {"sinks": compose._dsn("sinks"), "reader": compose._dsn("reader"), "superuser": compose._dsn("superuser")}
    wait_until(lambda: compose.on_data_network(PROBE % {**roles, "ready_only": True}).get("rows") == [[1]],
               timeout_s=120, what="PostgreSQL to answer the sinks' role")
    found = compose.on_data_network(PROBE % {**roles, "ready_only": False})
    assert found["sinks_role"] == {"rows": [[False, False, False, False, False]]}
    assert found["sinks_program"]["sqlstate"] == INSUFFICIENT_PRIVILEGE, found["sinks_program"]
    assert found["sinks_authid"]["sqlstate"] == INSUFFICIENT_PRIVILEGE, found["sinks_authid"]
    assert found["sinks_create"] == {"rows": [[1]]}
    assert found["reader_select"] == {"rows": [[1]]}
    assert found["reader_insert"]["sqlstate"] == INSUFFICIENT_PRIVILEGE, found["reader_insert"]
    assert found["reader_create"]["sqlstate"] == INSUFFICIENT_PRIVILEGE, found["reader_create"]
    assert "rejects connection" in found["superuser"]["error"], found["superuser"]
