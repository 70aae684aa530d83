"""Container health check: ``python -m worker.healthcheck``.

Healthy means: registered with the controller at least once, every query
alive, and the worker wrote this within the last ``SP_HEALTH_MAX_AGE``
seconds (default 30) -- or, for a standby, only the last. The worker
writes ``<SP_WORK_DIR>/health.json`` with each progress report, whether or
not the controller is reachable -- a worker that keeps processing while the
controller is down is healthy.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

FILE_NAME = "health.json"
STANDBY = "standby"


def write_health(work_dir: Path, *, registered: bool, queries_alive: bool, state: str) -> None:
    work_dir.mkdir(parents=True, exist_ok=True)
    tmp = work_dir / f".{FILE_NAME}.tmp"
    tmp.write_text(json.dumps({"registered": registered, "queries_alive": queries_alive, "state": state,
                               "updated_at": time.time()}))
    os.replace(tmp, work_dir / FILE_NAME)


def standing_by(work_dir: Path, every_s: float = 5.0) -> None:
    """A standby's health: its Spark session is up and it is waiting for an
    index (written at most every ``every_s`` seconds)."""
    path = work_dir / FILE_NAME
    if not path.exists() or time.time() - path.stat().st_mtime >= every_s:
        write_health(work_dir, registered=False, queries_alive=False, state=STANDBY)


def clear_health(work_dir: Path) -> None:
    """At start-up: a file left by a killed run must not vouch for this one."""
    (work_dir / FILE_NAME).unlink(missing_ok=True)


def check(work_dir: Path, max_age_s: float, now: float) -> str | None:
    """None if healthy, else what is wrong."""
    try:
        health = json.loads((work_dir / FILE_NAME).read_text())
    except FileNotFoundError:
        return "not started yet (no health file)"
    except ValueError:
        return "health file unreadable"
    age = now - float(health.get("updated_at", 0))
    if health.get("state") == STANDBY:
        return None if age <= max_age_s else f"standby silent for {age:.0f}s"
    if not health.get("registered"):
        return "not registered with the controller"
    if not health.get("queries_alive"):
        return f"queries not running (state {health.get('state')})"
    if age > max_age_s:
        return f"no progress report for {age:.0f}s"
    return None


def where(environ: Mapping[str, str]) -> tuple[Path, float]:
    """The health file's directory and how old it may be. Taken straight
    from ``SP_WORK_DIR`` and ``SP_HEALTH_MAX_AGE`` when both are set (the
    compose file sets them): importing the settings classes costs 0.6 s of
    CPU, at every check of every worker container. Else from the settings,
    which know the defaults. Raises ``ValueError`` (``SettingsError``)."""
    if "SP_WORK_DIR" in environ and "SP_HEALTH_MAX_AGE" in environ:
        return Path(environ["SP_WORK_DIR"]), float(environ["SP_HEALTH_MAX_AGE"])
    from worker.settings import WorkerSettings

    settings = WorkerSettings.from_env(environ)
    return settings.work_dir, settings.health_max_age_s


def main() -> None:
    try:
        work_dir, max_age_s = where(os.environ)
    except ValueError as error:
        print(f"unhealthy: {error}")
        sys.exit(1)
    problem = check(work_dir, max_age_s, time.time())
    print(f"unhealthy: {problem}" if problem else "healthy")
    sys.exit(1 if problem else 0)


if __name__ == "__main__":
    main()
