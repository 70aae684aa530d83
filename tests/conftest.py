from collections.abc import Iterator

import pytest

from tests.kafkaserver import KafkaServer
from tests.pgserver import CommitCutProxy, PostgresServer


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # Lets fixtures see whether the test body failed (to dump service logs).
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
    # A failed test that used PostgreSQL shows the end of the server's log.
    server = getattr(item, "funcargs", {}).get("postgres")
    if report.failed and isinstance(server, PostgresServer):
        report.sections.append((f"postgres log ({server.log_path})", server.log_tail()))
    broker = getattr(item, "funcargs", {}).get("kafka")
    if report.failed and isinstance(broker, KafkaServer):
        report.sections.append((f"kafka broker log ({broker.log_path})", broker.log()))


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A private PostgreSQL cluster shared by the session (its database:
    ``postgres.dsn``); started only if some test asks for it."""
    with PostgresServer() as server:
        yield server


@pytest.fixture
def commit_cut_proxy(postgres: PostgresServer) -> Iterator[CommitCutProxy]:
    """A CommitCutProxy in front of the session's server, for one test."""
    with CommitCutProxy("127.0.0.1", postgres.port) as proxy:
        yield proxy


@pytest.fixture(scope="session")
def kafka() -> Iterator[KafkaServer]:
    """A private Kafka broker shared by the session (``kafka.bootstrap``);
    started only if some test asks for it. Tests create topics of their own."""
    server = KafkaServer().start()
    try:
        yield server
    finally:
        server.stop()
