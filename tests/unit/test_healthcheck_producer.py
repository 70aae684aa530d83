"""The producer container's health check (docker/healthcheck-producer.py)
against an event log directory: healthy while the log is appended to, or
once a bounded producer is done; with the compose file's variables set it
imports no settings class (half a second of CPU at every check)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docker" / "healthcheck-producer.py"
# Runs the check, then says which of the settings' heavy imports it made.
PROBE = ("import runpy, sys\ntry:\n    runpy.run_path(sys.argv[1], run_name='__main__')\nexcept SystemExit as end:\n"
         "    print(end.code, sorted(m for m in ('pydantic', 'sparkpoint.producer') if m in sys.modules))\n")


def check(log_dir: Path, **environ: str) -> list[str]:
    env = {"SP_LOG_DIR": str(log_dir), "SP_PRODUCER_LOG": "trades", "SP_PRODUCER_COUNT": "0",
           "SP_HEALTH_MAX_AGE": "30", **environ}
    result = subprocess.run([sys.executable, "-c", PROBE, str(SCRIPT)], cwd=REPO, capture_output=True, text=True,
                            env={**{k: v for k, v in env.items() if v is not None}, "PATH": "/usr/bin:/bin",
                                 "PYTHONPATH": str(REPO)}, timeout=60)
    return result.stdout.splitlines()


@pytest.fixture
def log_dir(tmp_path) -> Path:
    (tmp_path / "trades").mkdir()
    return tmp_path


def appended(log_dir: Path, seconds_ago: float) -> None:
    partition = log_dir / "trades" / "p-0000.jsonl"
    partition.write_text('{"id": 0}\n')
    stamp = partition.stat().st_mtime - seconds_ago
    os.utime(partition, (stamp, stamp))


def test_healthy_while_appended_to_without_importing_the_settings(log_dir):
    assert check(log_dir) == [f"unhealthy: nothing written to {log_dir / 'trades'} yet", "1 []"]
    appended(log_dir, seconds_ago=5)
    assert check(log_dir) == ["healthy", "0 []"]
    appended(log_dir, seconds_ago=45)
    assert check(log_dir) == [f"unhealthy: {log_dir / 'trades'} not appended to for 45s", "1 []"]
    assert check(log_dir, SP_HEALTH_MAX_AGE="60") == ["healthy", "0 []"]
    # A bounded producer that wrote its events is done, not stuck.
    assert check(log_dir, SP_PRODUCER_COUNT="1000") == ["healthy", "0 []"]


def test_without_the_compose_files_variables_the_settings_give_the_defaults(log_dir):
    appended(log_dir, seconds_ago=5)
    assert check(log_dir, SP_HEALTH_MAX_AGE=None, SP_PRODUCER_COUNT=None) == [
        "healthy", "0 ['pydantic', 'sparkpoint.producer']"]
    appended(log_dir, seconds_ago=45)       # the default SP_HEALTH_MAX_AGE, 30 s
    assert check(log_dir, SP_HEALTH_MAX_AGE=None)[0] == f"unhealthy: {log_dir / 'trades'} not appended to for 45s"
    assert check(log_dir, SP_HEALTH_MAX_AGE="-1", SP_PRODUCER_COUNT=None)[0].startswith(
        "unhealthy: SP_HEALTH_MAX_AGE")


def test_producing_to_kafka_it_is_the_heartbeat_the_producer_touches_after_each_acknowledged_tick(log_dir, tmp_path):
    from sparkpoint.kafka_producer import HEARTBEAT

    heartbeat = tmp_path / HEARTBEAT.name
    kafka = {"SP_PRODUCER_KAFKA_BOOTSTRAP": "kafka:9092", "TMPDIR": str(tmp_path)}
    appended(log_dir, seconds_ago=5)        # the log does not count
    assert check(log_dir, **kafka) == [f"unhealthy: nothing written to {heartbeat} yet", "1 []"]
    heartbeat.touch()
    assert check(log_dir, **kafka) == ["healthy", "0 []"]
    stamp = heartbeat.stat().st_mtime - 45
    os.utime(heartbeat, (stamp, stamp))
    assert check(log_dir, **kafka) == [f"unhealthy: {heartbeat} not appended to for 45s", "1 []"]
