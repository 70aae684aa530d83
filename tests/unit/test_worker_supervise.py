"""The run's supervisor (worker.lifecycle.serve): a failed query is seen as
soon as Spark's listener says a query ended, and a run's queries are
stopped together. Fake queries, no Spark."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from worker.lifecycle.live import LiveRun
from worker.lifecycle.serve import RunEnd, stop_queries, supervise

NO_QUERIES = SimpleNamespace(queries=lambda: ())


class FakeQuery:
    def __init__(self, name: str, stop=lambda: None) -> None:
        self.name = name
        self.isActive = True
        self.error: str | None = None
        self._stop = stop

    def exception(self) -> str | None:
        return self.error

    def stop(self) -> None:
        self._stop()


def test_a_failed_query_wakes_the_supervisor_without_waiting_for_its_poll():
    query = FakeQuery("out")
    live = LiveRun(expected_queries=1, queries=[query])
    never = threading.Event()
    ended: list[RunEnd] = []
    # An hour between polls: only the listener's wake-up can end this in time.
    supervisor = threading.Thread(target=lambda: ended.append(
        supervise(live, NO_QUERIES, never, never, never, lambda: None, poll_s=3600)), daemon=True)
    supervisor.start()
    query.isActive, query.error = False, "StreamingQueryException: boom"
    live.terminated.set()                   # what Spark's listener does when a query ends
    supervisor.join(timeout=30)
    assert not supervisor.is_alive(), "the supervisor did not wake when a query ended"
    assert ended == [RunEnd.QUERY_FAILED]
    assert live.failure == "StreamingQueryException: boom"


def test_the_queries_of_a_run_are_stopped_together():
    # Each stop waits for every other to have begun: one after the other, the first would never return.
    everyone = threading.Barrier(3, timeout=30)
    stopped: list[str] = []

    def stop(name: str):
        def run() -> None:
            everyone.wait()
            stopped.append(name)
        return run

    stop_queries([FakeQuery(name, stop(name)) for name in ("a", "b", "c")])
    assert sorted(stopped) == ["a", "b", "c"]


def test_stopping_raises_a_query_stops_error_after_stopping_the_others():
    stopped: list[str] = []

    def fails() -> None:
        raise RuntimeError("py4j: the JVM is gone")

    with pytest.raises(RuntimeError, match="JVM is gone"):
        stop_queries([FakeQuery("a", fails), FakeQuery("b", lambda: stopped.append("b"))])
    assert stopped == ["b"]


def test_stopping_no_queries_does_nothing():
    stop_queries([])
