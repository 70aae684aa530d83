"""When a query fails: restart in the living Spark session, back off, or give up.

A failed query does not end the worker: its run restores the last complete
checkpoint into the same Spark session and starts its queries again
(``worker.main``). Pure bookkeeping with an injected clock:

- the first failure after a healthy run restarts at once; each further one
  in a row waits longer (``Backoff``, capped below the controller's
  release silence, so a worker backing off is never taken for gone);
- the same failure (its summary, numbers masked) ``max_same`` times in a
  row stops the worker; a different failure starts the count again;
- a run that lasted ``STABLE_RUN_S`` was healthy: the failure that ends it
  counts as the first in a row again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkpoint.backoff import Backoff
from sparkpoint.messages import Restarts
from worker.runtime.progress import summarize_error

STABLE_RUN_S = 60.0
_NUMBER = re.compile(r"\d+")


def failure_signature(error: str) -> str:
    """What makes two failures "the same": the error's summary line with its
    numbers (batch ids, offsets, ports, timestamps) masked."""
    return _NUMBER.sub("#", summarize_error(error))


@dataclass(frozen=True)
class RestartDecision:
    """``restart``: restore and start again after ``delay_s``; else stop
    the worker, saying ``reason``."""

    restart: bool
    delay_s: float = 0.0
    reason: str = ""


@dataclass
class RestartPolicy:
    max_same: int                                   # SP_MAX_SAME_FAILURES
    clock: Callable[[], float]                      # seconds since the epoch
    backoff: Backoff = field(default_factory=lambda: Backoff(initial_s=1.0, maximum_s=15.0))
    _count: int = 0                 # restarts since the process started
    _in_a_row: int = 0              # failures without a healthy run between them
    _same: int = 0                  # of those, the last ones with the same signature
    _signature: str = ""
    _last_error: str = ""
    _last_at: float = 0.0
    _run_started: float | None = None

    def run_started(self) -> None:
        """A run's queries started."""
        self._run_started = self.clock()

    def failed(self, error: str) -> RestartDecision:
        """A query of the current run failed with ``error`` (Spark's text)."""
        now = self.clock()
        if self._run_started is not None and now - self._run_started >= STABLE_RUN_S:
            self._in_a_row, self._same, self._signature = 0, 0, ""
            self.backoff.reset()
        self._run_started = None
        signature = failure_signature(error)
        self._same = self._same + 1 if signature == self._signature else 1
        self._signature = signature
        self._in_a_row += 1
        self._last_error, self._last_at = summarize_error(error), now
        if self._same >= self.max_same:
            return RestartDecision(False, reason=f"the same query failure {self._same} times in a row "
                                                 f"(SP_MAX_SAME_FAILURES={self.max_same}): {self._last_error}")
        self._count += 1
        delay = 0.0 if self._in_a_row == 1 else self.backoff.next_delay()
        return RestartDecision(True, delay_s=delay)

    def view(self) -> Restarts:
        """What the worker reports of its restarts."""
        return Restarts(count=self._count, same_in_a_row=self._same, last_error=self._last_error,
                        last_failed_at=self._last_at)
