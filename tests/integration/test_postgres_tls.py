"""Issue 15: the workers reach PostgreSQL over TLS and verify it
(``SP_PG_SSLMODE=verify-full``, ``SP_PG_SSLROOTCERT``) with the certificates
``make up`` generates (sparkpoint/stack_secrets.py): a real server, the
worker's own connection string."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sparkpoint import pki
from sparkpoint.stack_secrets import ensure_compose_secrets
from tests.pgserver import PostgresServer
from worker.settings import WorkerSettings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def secrets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("secrets") / ".secrets"
    ensure_compose_secrets(directory)
    return directory


@pytest.fixture(scope="module")
def tls_server(secrets: Path) -> Iterator[PostgresServer]:
    with PostgresServer(tls=(secrets / "postgres.crt", secrets / "postgres.key")) as server:
        yield server


def worker_conninfo(server: PostgresServer, host: str, ca: Path) -> str:
    return WorkerSettings.from_env({
        "SP_PG_HOST": host, "SP_PG_PORT": str(server.port), "SP_PG_USER": server.SUPERUSER,
        "SP_PG_DATABASE": server.database, "SP_PG_SSLMODE": "verify-full", "SP_PG_SSLROOTCERT": str(ca)}).postgres


def test_a_worker_connects_over_tls_to_the_certificate_make_up_generated(tls_server, secrets):
    with psycopg.connect(worker_conninfo(tls_server, "127.0.0.1", secrets / "ca.crt")) as conn:
        encrypted, = conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone()
    assert encrypted is True


def test_a_server_signed_by_another_ca_is_refused(tls_server, tmp_path):
    pki.ensure_ca(tmp_path)
    with pytest.raises(psycopg.OperationalError, match="certificate verify failed"):
        psycopg.connect(worker_conninfo(tls_server, "127.0.0.1", tmp_path / "ca.crt"), connect_timeout=5)


def test_a_name_the_certificate_does_not_hold_is_refused(tls_server, secrets, tmp_path):
    # The same CA, a certificate for another name: verify-full checks the name too.
    ca = pki.ensure_ca(secrets)
    pki.ensure_certificate(tmp_path, "elsewhere", ["elsewhere.example"], ca)
    with PostgresServer(tls=(tmp_path / "elsewhere.crt", tmp_path / "elsewhere.key")) as server:
        with pytest.raises(psycopg.OperationalError, match="does not match host name"):
            psycopg.connect(worker_conninfo(server, "127.0.0.1", secrets / "ca.crt"), connect_timeout=5)
