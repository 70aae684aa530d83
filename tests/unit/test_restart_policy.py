"""The in-process restart policy (worker.lifecycle.restarts): restart at
once, back off when failures follow each other, stop on the same failure N
times in a row; a different failure, or a healthy run, starts over."""

from __future__ import annotations

import pytest

from sparkpoint.messages import Restarts
from worker.lifecycle.restarts import STABLE_RUN_S, RestartDecision, RestartPolicy, failure_signature
from worker.settings import WorkerSettings

SINK_FAILED = ("org.apache.spark.sql.streaming.StreamingQueryException: [STREAM_FAILED] Query [id = 1a2b] "
               "terminated with exception\nsparkpoint.faults.InjectedFaultError: fault staging.commit at batch {}")
TIMEOUT = "py4j.protocol.Py4JError: connect-back timed out after {} ms"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def run_and_fail(policy: RestartPolicy, clock: Clock, error: str, ran_s: float = 1.0) -> RestartDecision:
    policy.run_started()
    clock.now += ran_s
    return policy.failed(error)


def test_the_first_failure_restarts_at_once_and_the_next_ones_back_off(clock):
    policy = RestartPolicy(max_same=10, clock=clock)
    delays = [run_and_fail(policy, clock, SINK_FAILED.format(batch)).delay_s for batch in range(6)]
    assert delays == [0.0, 1.0, 2.0, 4.0, 8.0, 15.0]
    assert policy.view() == Restarts(count=6, same_in_a_row=6, last_error="sparkpoint.faults.InjectedFaultError: fault "
                                     "staging.commit at batch 5", last_failed_at=clock.now)


def test_the_same_failure_n_times_in_a_row_stops_the_worker(clock):
    policy = RestartPolicy(max_same=3, clock=clock)
    # Numbers differ (batch ids): still the same failure.
    assert run_and_fail(policy, clock, SINK_FAILED.format(7)).restart
    assert run_and_fail(policy, clock, SINK_FAILED.format(8)).restart
    third = run_and_fail(policy, clock, SINK_FAILED.format(9))
    assert not third.restart
    assert third.reason == ("the same query failure 3 times in a row (SP_MAX_SAME_FAILURES=3): "
                            "sparkpoint.faults.InjectedFaultError: fault staging.commit at batch 9")
    view = policy.view()
    assert (view.count, view.same_in_a_row) == (2, 3)


def test_a_different_failure_starts_the_count_again_but_keeps_backing_off(clock):
    policy = RestartPolicy(max_same=2, clock=clock)
    assert run_and_fail(policy, clock, SINK_FAILED.format(1)).restart
    other = run_and_fail(policy, clock, TIMEOUT.format(5000))
    assert other.restart and other.delay_s == 1.0      # failures in a row: backing off
    assert policy.view().same_in_a_row == 1
    assert run_and_fail(policy, clock, SINK_FAILED.format(2)).restart
    assert not run_and_fail(policy, clock, SINK_FAILED.format(3)).restart


def test_a_healthy_run_between_two_failures_starts_over(clock):
    policy = RestartPolicy(max_same=2, clock=clock)
    assert run_and_fail(policy, clock, SINK_FAILED.format(1)).delay_s == 0.0
    again = run_and_fail(policy, clock, SINK_FAILED.format(2), ran_s=STABLE_RUN_S)
    assert again == RestartDecision(True, 0.0)
    assert policy.view().count == 2


def test_a_run_just_short_of_healthy_does_not_start_over(clock):
    policy = RestartPolicy(max_same=2, clock=clock)
    run_and_fail(policy, clock, SINK_FAILED.format(1))
    assert not run_and_fail(policy, clock, SINK_FAILED.format(2), ran_s=STABLE_RUN_S - 0.5).restart


def test_failure_signature_masks_numbers_and_keeps_the_python_error():
    assert failure_signature(SINK_FAILED.format(41)) == failure_signature(SINK_FAILED.format(42))
    assert failure_signature(SINK_FAILED.format(1)) != failure_signature(TIMEOUT.format(1))
    assert failure_signature(TIMEOUT.format(5000)) == "py#j.protocol.Py#JError: connect-back timed out after # ms"


def test_the_limit_is_a_setting():
    assert WorkerSettings.from_env({}).max_same_failures == 5
    assert WorkerSettings.from_env({"SP_MAX_SAME_FAILURES": "2"}).max_same_failures == 2
