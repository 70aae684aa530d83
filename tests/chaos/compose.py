"""Driving the real compose stack from tests, with the Docker SDK.

Each project has its own secrets (as `make up` generates them) under
``.secrets-<project>/``; the REST calls send its API token."""

from __future__ import annotations

import datetime
import inspect
import json
import os
import re
import shutil
import signal
import subprocess
from http import HTTPStatus
from pathlib import Path

import docker
from sparkpoint.stack_secrets import ensure_compose_secrets
from tests.chaos.windows_check import compared
from tests.kafkaserver import CONSUMER_CONFIG, read_committed
from tests.support import SECTORS, expected_vwap, get_json

REPO = Path(__file__).resolve().parents[2]
WORKER_SERVICES = ("worker-0", "worker-1", "standby")     # containers that run a worker index, or stand by
KAFKA_PROFILE = ("docker/compose.kafka.yml",)             # ComposeStack(files=...): the kafka profile

# Runs inside a container of the project's own image, on the stack's volumes
# and networks, and prints a summary (the input is millions of events): the
# input against what each output holds -- ids missing, duplicated or never
# produced -- the aggregates computed in one batch over the whole input
# (``expected_vwap``, sent along) and PostgreSQL's vwap table (absent, like
# its enriched table, until a first publish creates it). A head reads the
# input and the outputs other than PostgreSQL; the tail is shared.
_RESULTS_TAIL = """
import collections, json, psycopg
%(expected_vwap)s
pg = {'ids': [], 'vwap': []}
with psycopg.connect(%(dsn)r, connect_timeout=5) as conn:
    for table, query in (('ids', 'SELECT id FROM trades_enriched'),
                         ('vwap', 'SELECT sym, notional, volume, trades FROM vwap')):
        try:
            with conn.transaction():
                cursor = conn.execute(query)
                names = [c.name for c in cursor.description]
                pg[table] = [dict(zip(names, row)) for row in cursor]
        except psycopg.errors.UndefinedTable:
            pass
produced = {e['id'] for e in events}

def compared(published):
    counts = collections.Counter(published)
    missing = produced - counts.keys()
    return {'missing': len(missing), 'missing_sample': sorted(missing)[:10],
            'duplicated': sorted(i for i, n in counts.items() if n > 1)[:20],
            'unknown': sorted(counts.keys() - produced)[:20]}

print(json.dumps({
    'events': len(events),
    'distinct_events': len(produced),
    **{name: compared(ids) for name, ids in outputs.items()},
    'pg': compared([row['id'] for row in pg['ids']]),
    'expected_vwap': expected_vwap(events),
    'pg_vwap': pg['vwap'],
}))
"""
# The event log's complete records.
_LOG_EVENTS = """
import json, pathlib
events = []
for path in sorted(pathlib.Path('/log/trades').glob('p-*.jsonl')):
    data = path.read_bytes()
    data = data[: data.rfind(b'\\n') + 1]
    events += [json.loads(line) for line in data.splitlines()]
"""
# The default stack: the event log against the files sink.
_READ_RESULTS = _LOG_EVENTS + """
from worker.publishing.targets.files import read_published
enriched = read_published(pathlib.Path('/out/trades_enriched'))
outputs = {'files': enriched.column('id').to_pylist() if enriched is not None else []}
""" + _RESULTS_TAIL
# The kafka profile: the input topic against the output topic, as a
# read_committed consumer reads them (``read_committed``, sent along).
_READ_KAFKA_RESULTS = """
from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient
CONSUMER_CONFIG = %(consumer_config)r
%(read_committed)s
admin = AdminClient({'bootstrap.servers': 'kafka:9092'})

def records(topic):
    try:
        partitions = len(admin.describe_topics(TopicCollection([topic]))[topic].result(30).partitions)
    except KafkaException:
        return []           # not created yet
    return [value for _, _, value in read_committed('kafka:9092', topic, partitions)]

events = records('trades')
outputs = {'kafka': [record['id'] for record in records('trades_enriched')]}
""" + _RESULTS_TAIL


# pipelines/trades_windows.py: the event log against its three tables,
# compared in the container (tests/chaos/windows_check.py, sent along).
_READ_WINDOWS_RESULTS = _LOG_EVENTS + """
import psycopg
%(compared)s
tables = {}
with psycopg.connect(%(dsn)r, connect_timeout=5) as conn:
    for name, query in (
            ('bars', 'SELECT sym, extract(epoch FROM window_start)::float8, open, high, low, close, volume, trades, '
                     'notional FROM bars_1m'),
            ('volumes', 'SELECT sym, extract(epoch FROM window_start)::float8, volume, trades FROM volume_5m'),
            ('joined', 'SELECT id, sym, sector FROM trades_by_sector')):
        try:
            with conn.transaction():
                tables[name] = [tuple(row) for row in conn.execute(query)]
        except psycopg.errors.UndefinedTable:
            tables[name] = []
print(json.dumps(compared(events, tables['bars'], tables['volumes'], tables['joined'], %(sectors)r)))
"""


def docker_time(stamp: str) -> float:
    """An RFC 3339 time as Docker writes it (nanoseconds, ``Z``): seconds since the epoch."""
    head, _, fraction = stamp.rstrip("Z").partition(".")
    return datetime.datetime.fromisoformat(head).replace(tzinfo=datetime.timezone.utc).timestamp() + float(
        f"0.{fraction or 0}")


def compose_command() -> list[str]:
    """``docker compose`` where the plugin exists, else ``docker-compose``."""
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
    return ["docker", "compose"] if probe.returncode == 0 else ["docker-compose"]


class ComposeStack:
    def __init__(self, project: str, env: dict[str, str], http_port: int, files: tuple[str, ...] = ()) -> None:
        """``files``: compose files beside docker-compose.yml (docker/compose.kafka.yml)."""
        self.project = project
        self.files = ("docker-compose.yml", *files)
        self.secrets = REPO / f".secrets-{project}"
        ensure_compose_secrets(self.secrets)
        self.env = {**os.environ, **env, "SP_HTTP_PUBLISH_PORT": str(http_port), "COMPOSE_PROJECT_NAME": project,
                    "SP_SECRETS_DIR": str(self.secrets)}
        self.status_url = f"http://127.0.0.1:{http_port}/status"
        self.api_token = (self.secrets / "api-token").read_text().strip()
        self.client = docker.from_env()

    def compose(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([*compose_command(), "-p", self.project, *(f"--file={REPO / f}" for f in self.files),
                               *args],
                              cwd=REPO, env=self.env, check=check, capture_output=True, text=True)

    def up(self, *services: str) -> None:
        self.compose("up", "-d", *services)

    def container(self, service: str):
        found = self.client.containers.list(all=True, filters={
            "label": [f"com.docker.compose.project={self.project}", f"com.docker.compose.service={service}"]})
        assert found, f"no container for {service}"
        return found[0]

    def crash(self, service: str) -> None:
        """SIGKILL the container's init process from the host: a crash, which
        the restart policy handles (``docker kill`` is a manual stop to Docker,
        and restart policies ignore it)."""
        container = self.container(service)
        container.reload()
        pid = container.attrs["State"]["Pid"]
        if pid:
            os.kill(pid, signal.SIGKILL)

    def pause(self, service: str, *, attempts: int = 5) -> None:
        """``docker pause`` the service's container. runc gives up freezing a
        cgroup whose tasks do not freeze in time ("unable to freeze",
        moby/moby#48205: busy processes on a loaded host) and leaves it
        running: that alone is tried again, up to ``attempts`` times."""
        container = self.container(service)
        for attempt in range(1, attempts + 1):
            try:
                container.pause()
                return
            except docker.errors.APIError as error:
                if "unable to freeze" not in str(error) or attempt == attempts:
                    raise
                print(f"{service}: pause attempt {attempt} failed ({error}); trying again")

    def runner_of(self, index: int) -> str:
        """The worker service whose container holds index ``index``'s
        checkpoint lock: the holder names its host -- its container's short
        id -- in ``LOCK`` (a holder that died is named until the next takes
        the lock: ask once the index runs again)."""
        containers = {c.id[:12]: c for c in self.client.containers.list(filters={
            "label": f"com.docker.compose.project={self.project}"})
            if c.labels["com.docker.compose.service"] in WORKER_SERVICES}
        lock = self.read_from_a_worker(f"/var/lib/sparkpoint/checkpoints/{index}/LOCK", containers.values())
        host = re.search(r" on (\w+)\)$", lock.strip())
        assert host and host[1] in containers, f"index {index}'s LOCK names no running worker container: {lock!r}"
        return containers[host[1]].labels["com.docker.compose.service"]

    @staticmethod
    def read_from_a_worker(path: str, containers) -> str:
        """The file at ``path`` on the checkpoint volumes, read through the
        first of ``containers`` that can: Docker lists a container crashed a
        moment ago as running until it notices, a paused one cannot exec, and
        one listed running may be restarting by the time it is asked (409
        Conflict: the next container is asked instead)."""
        failures = []
        for container in containers:
            if container.status == "running":
                try:
                    read = container.exec_run(["cat", path])
                except docker.errors.APIError as error:
                    if error.status_code != HTTPStatus.CONFLICT:
                        raise
                    failures.append(f"{container.name}: {error.explanation}")
                    continue
                if read.exit_code == 0:
                    return read.output.decode()
                failures.append(f"{container.name}: {read.output.decode(errors='replace').strip()}")
        raise AssertionError(f"no running worker container could read {path}: {failures}")

    def standing_by(self, service: str) -> bool:
        """Whether the worker container of ``service`` waits as a standby,
        its Spark session up (its log since it last started says so last)."""
        container = self.container(service)
        container.reload()
        if container.status != "running":
            return False
        lines = container.logs(since=docker_time(container.attrs["State"]["StartedAt"])).decode(errors="replace")
        roles = re.findall(r"standby: (every index|taking over)", lines)
        return bool(roles) and roles[-1] == "every index"

    def restart_count(self, service: str) -> int:
        container = self.container(service)
        container.reload()
        return container.attrs["RestartCount"]

    def status(self) -> dict:
        return get_json(self.status_url, self.api_token)

    def worker(self, index: int) -> dict | None:
        return next((w for w in self.status().get("workers", []) if w["worker_index"] == index), None)

    def _dsn(self, role: str = "reader") -> str:
        """A role's connection, as the workers connect: the read-only role's
        (results are read, never written), ``sinks``: the workers' own, or
        ``superuser``: postgres, with the sinks' password."""
        user = self.env.get("POSTGRES_USER", "sparkpoint")
        user, secret = {"reader": (f"{user}_reader", "postgres-reader-password"),
                        "sinks": (user, "postgres-password"), "superuser": ("postgres", "postgres-password")}[role]
        return (f"host=postgres dbname={self.env.get('POSTGRES_DB', 'sparkpoint')} user={user} "
                f"password={(self.secrets / secret).read_text().strip()} sslmode=verify-full sslrootcert=/ca.crt")

    def kafka_results(self) -> dict:
        """The kafka profile's input topic against its outputs
        (``_READ_KAFKA_RESULTS``), read on the stack's kafka and data networks."""
        script = _READ_KAFKA_RESULTS % {
            "dsn": self._dsn(), "expected_vwap": inspect.getsource(expected_vwap),
            "read_committed": inspect.getsource(read_committed), "consumer_config": CONSUMER_CONFIG}
        container = self.client.containers.create(
            "sparkpoint-controller:latest", ["python", "-c", script], network=f"{self.project}_kafka",
            volumes={str(self.secrets / "ca.crt"): {"bind": "/ca.crt", "mode": "ro"}})
        try:
            self.client.networks.get(f"{self.project}_data").connect(container)
            container.start()
            status = container.wait(timeout=300)
            output = container.logs(stdout=True, stderr=False).decode()
            assert status["StatusCode"] == 0, container.logs().decode(errors="replace")[-3000:]
        finally:
            container.remove(force=True)
        return json.loads(output)

    def on_data_network(self, script: str, volumes: tuple[str, ...] = ()) -> dict:
        """The JSON ``script`` prints, run by Python in a container of the
        project's image on the stack's data network (PostgreSQL's), with the
        CA's certificate at /ca.crt and each of the stack's ``volumes``
        (``eventlog`` at /log, ``output`` at /out) read-only."""
        mounts = {"eventlog": "/log", "output": "/out"}
        output = self.client.containers.run(
            "sparkpoint-controller:latest", ["python", "-c", script], remove=True, network=f"{self.project}_data",
            volumes={str(self.secrets / "ca.crt"): {"bind": "/ca.crt", "mode": "ro"},
                     **{f"{self.project}_{volume}": {"bind": mounts[volume], "mode": "ro"} for volume in volumes}})
        return json.loads(output)

    def results(self) -> dict:
        """The input against the outputs (``_READ_RESULTS``); raises while
        PostgreSQL is unreachable."""
        return self.on_data_network(
            _READ_RESULTS % {"dsn": self._dsn(), "expected_vwap": inspect.getsource(expected_vwap)},
            ("eventlog", "output"))

    def windows_results(self) -> dict:
        """``pipelines/trades_windows.py``'s tables against the event log
        (``windows_check.compared``); raises while PostgreSQL is unreachable."""
        return self.on_data_network(_READ_WINDOWS_RESULTS % {
            "dsn": self._dsn(), "compared": inspect.getsource(compared), "sectors": SECTORS}, ("eventlog",))

    def psql(self, statements: str) -> None:
        """Run ``statements`` in the stack's database as the sink role,
        over the PostgreSQL container's local socket (in /tmp, docker/postgres/entrypoint.sh)."""
        user, db = self.env.get("POSTGRES_USER", "sparkpoint"), self.env.get("POSTGRES_DB", "sparkpoint")
        done = self.container("postgres").exec_run(["psql", "-h", "/tmp", "-v", "ON_ERROR_STOP=1", "-U", user,
                                                    "-d", db, "-c", statements])
        assert done.exit_code == 0, done.output.decode(errors="replace")

    def save_logs(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for container in self.client.containers.list(all=True, filters={
                "label": f"com.docker.compose.project={self.project}"}):
            (directory / f"{container.name}.log").write_bytes(container.logs())

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "-t", "20", check=False)
        shutil.rmtree(self.secrets, ignore_errors=True)
