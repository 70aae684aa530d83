"""Test doubles shared by the unit tests."""

from __future__ import annotations

import itertools
from pathlib import Path

from controller.core.service import ControllerService, ServiceConfig
from controller.savepoints.service import SavepointConfig, SavepointService

SAVEPOINT_TIMEOUT_S = 60.0


class FakeClock:
    """An injected clock: tests advance ``now``; nothing sleeps."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def savepoint_config(directory: Path, worker_count: int = 2) -> SavepointConfig:
    """Savepoint records in ``directory/controller/savepoints``, the savepoint root ``directory/savepoints``."""
    return SavepointConfig(records=directory / "controller" / "savepoints", root=directory / "savepoints",
                           timeout_s=SAVEPOINT_TIMEOUT_S, worker_count=worker_count)


def new_service(clock: FakeClock, directory: Path, worker_count: int = 2, **extra) -> ControllerService:
    """A controller core with the fake clock and session ids s1, s2, ...,
    started as ``controller/main.py`` does over the files in ``directory``
    (a second one over the same directory is the controller restarted);
    ``extra``: more of ``ControllerService``'s arguments (``save_table``)."""
    ids = itertools.count(1)
    savepoints, _ = SavepointService.open(savepoint_config(directory, worker_count), clock=clock)
    return ControllerService(ServiceConfig(worker_count=worker_count), clock=clock, savepoints=savepoints,
                             new_session_id=lambda: f"s{next(ids)}", **extra)


def process_died(clock: FakeClock) -> None:
    """A worker's process ended: its session falls silent long enough for a
    new process under the same id to register (``TAKEOVER_SILENCE_S``)."""
    from controller.core.service import TAKEOVER_SILENCE_S

    clock.now += TAKEOVER_SILENCE_S
