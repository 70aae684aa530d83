"""Test doubles shared by the unit tests."""

from __future__ import annotations

import itertools

from controller.core.service import ControllerService, ServiceConfig


class FakeClock:
    """An injected clock: tests advance ``now``; nothing sleeps."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def new_service(clock: FakeClock, worker_count: int = 2) -> ControllerService:
    """A controller core with the fake clock and session ids s1, s2, ..."""
    ids = itertools.count(1)
    return ControllerService(ServiceConfig(worker_count=worker_count), clock=clock,
                             new_session_id=lambda: f"s{next(ids)}")
