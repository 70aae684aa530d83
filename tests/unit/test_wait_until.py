"""``tests/support.py: wait_until``: a probe's assertion fails at once, other
errors are retried until the deadline. An injected clock: nothing sleeps."""

from __future__ import annotations

import pytest

from tests.support import wait_until
from tests.unit.fakes import FakeClock


class Polling:
    """A fake clock whose ``sleep`` advances it, and a probe that answers
    from a script: an exception is raised, anything else returned."""

    def __init__(self, *answers) -> None:
        self.clock = FakeClock()
        self.answers = list(answers)
        self.calls = 0
        self.slept = 0.0

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.clock.now += seconds

    def probe(self):
        self.calls += 1
        answer = self.answers.pop(0) if self.answers else None
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def wait(self, timeout_s: float = 10.0):
        return wait_until(self.probe, timeout_s=timeout_s, what="the thing", interval_s=1.0,
                          clock=self.clock, sleep=self.sleep)


def test_an_assertion_in_the_probe_fails_at_once_not_at_the_deadline():
    polling = Polling(AssertionError("volume of S1: 3 != 4"))
    with pytest.raises(AssertionError, match=r"^volume of S1: 3 != 4$"):
        polling.wait()
    assert polling.calls == 1 and polling.slept == 0


def test_an_assertion_after_retried_errors_still_fails_at_once():
    polling = Polling(ConnectionRefusedError("starting"), None, AssertionError("exact sums"), 42)
    with pytest.raises(AssertionError, match=r"^exact sums$"):
        polling.wait()
    assert polling.calls == 3 and polling.slept == 2.0


def test_other_errors_and_falsy_answers_are_retried_until_a_truthy_one():
    polling = Polling(ConnectionRefusedError("starting"), OSError("no file yet"), None, {}, {"ok": 1})
    assert polling.wait() == {"ok": 1}
    assert polling.calls == 5 and polling.slept == 4.0


def test_the_deadline_fails_naming_what_and_the_last_error():
    polling = Polling(*[ConnectionRefusedError("still starting")] * 100)
    with pytest.raises(AssertionError, match=r"timed out after 10s waiting for the thing "
                                             r"\(last error: still starting\)"):
        polling.wait(timeout_s=10)
    assert polling.calls == 10 and polling.clock.now == 1010.0
