from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from sparkpoint.devstack import LocalStack, StackConfig, free_port
from tests.integration.queries import Run
from tests.support import body_failed, log_tails
from worker import api as sp


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A worker's Spark session (``local[2]``) for one test module."""
    from worker.runtime.session import start_session
    from worker.settings import WorkerSettings

    root = tmp_path_factory.mktemp("spark")
    session = start_session(WorkerSettings.from_env({"SP_SPARK_MASTER": "local[2]", "SP_WORK_DIR": str(root)}))
    yield session
    session.stop()


@pytest.fixture
def make_stack(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator:
    """Build LocalStacks on free ports under tmp_path; stops them all afterwards
    and prints every service's log tail if the test failed."""
    stacks: list[LocalStack] = []

    def build(workers: int = 2, pipeline: Path | None = None, **env: str) -> LocalStack:
        config = StackConfig(root=tmp_path / f"stack{len(stacks)}", workers=workers, grpc_port=free_port(),
                             http_port=free_port(), env=env)
        if pipeline is not None:
            config.pipeline = pipeline
        stack = LocalStack(config)
        stacks.append(stack)
        return stack

    yield build
    failed = body_failed(request)
    for stack in stacks:
        if failed:
            print(log_tails(stack))
        stack.stop_all()


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator:
    """Mount small tmpfs volumes under tmp_path (a real full disk for the
    tests that need one; mounting needs root, as ``make`` does) and unmount
    them afterwards."""
    mounted: list[Path] = []

    def mount(name: str, size_bytes: int) -> Path:
        path = tmp_path / name
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=0755", "tmpfs", str(path)],
                       check=True, capture_output=True)
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "--lazy", str(path)], check=False, capture_output=True)


@pytest.fixture
def database(postgres) -> str:
    """A fresh database of the session's server, for a pipeline whose table
    names are fixed; returns its DSN."""
    name = f"pipeline_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres.dsn_for("postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return postgres.dsn_for(name)


@pytest.fixture
def run(spark, tmp_path):
    """Start ``Run``s of streams (``start(stream, **env)``); stops them afterwards."""
    runs: list[Run] = []

    def start(stream: sp.Stream, **env: str) -> Run:
        runs.append(Run(spark, tmp_path / f"run{len(runs)}", stream, **env))
        return runs[-1]
    yield start
    for started in runs:
        started.stop()


