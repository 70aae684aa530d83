"""A standby tells the controller it waits (``StandbyAnnouncer``), against
the controller served over gRPC in process: starting, then ready; its
words stop once it takes an index; an unreachable controller costs one
warning and never an exception."""

from __future__ import annotations

import logging
import socket

from sparkpoint.messages import StandbyState
from tests.support import wait_until
from tests.unit.grpc_support import GRPC_TOKEN
from worker.control.client import ControllerClient, WorkerIdentity
from worker.control.standby import StandbyAnnouncer

IDENTITY = WorkerIdentity("w0", 0, 2, "fp", ("src", "out"), host="c0ffee", pid=7)


def announcer(address: str, interval_s: float = 60.0) -> StandbyAnnouncer:
    return StandbyAnnouncer(ControllerClient(address, IDENTITY, token=GRPC_TOKEN), interval_s, started_at=990.0)


def listed(service) -> list[tuple[str, int, StandbyState, float]]:
    return [(s.host, s.pid, s.state, s.started_at) for s in service.status().standbys]


def test_a_standby_says_it_starts_then_that_it_is_ready(address, service):
    standby = announcer(address)
    try:
        assert standby.say()
        assert listed(service) == [("c0ffee", 7, StandbyState.STARTING, 990.0)]
        standby.ready()
        assert standby.say()
        assert listed(service) == [("c0ffee", 7, StandbyState.READY, 990.0)]
    finally:
        standby.stop()


def test_its_thread_says_it_at_once_and_ready_at_once_not_an_interval_later(address, service):
    standby = announcer(address, interval_s=3600.0)
    standby.start()
    try:
        wait_until(lambda: listed(service) == [("c0ffee", 7, StandbyState.STARTING, 990.0)], timeout_s=10,
                   what="the standby listed as starting", interval_s=0.05)
        standby.ready()
        wait_until(lambda: listed(service) == [("c0ffee", 7, StandbyState.READY, 990.0)], timeout_s=10,
                   what="the standby listed as ready", interval_s=0.05)
    finally:
        standby.stop()
    standby._thread.join(timeout=10)
    assert not standby._thread.is_alive()


def test_an_unreachable_controller_costs_one_warning_and_no_exception(caplog):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    standby = announcer(address)
    try:
        with caplog.at_level(logging.WARNING, logger="sparkpoint.worker.standby"):
            assert not standby.say()
            assert not standby.say()
    finally:
        standby.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"cannot tell the controller at {address}" in warnings[0], warnings


def test_once_stopped_it_says_nothing_more(address, service):
    standby = announcer(address)
    assert standby.say()
    standby.stop()
    assert not standby.say()        # its channel is closed
    assert listed(service) == [("c0ffee", 7, StandbyState.STARTING, 990.0)]
