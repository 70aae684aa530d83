"""Background progress reporting that survives the controller going away.

The worker never stops processing because the controller is down: reports
fail, the reporter backs off and retries, and re-registers when a restarted
controller no longer knows this worker (``UNKNOWN_WORKER``) or holds another
session for it (``STALE``: a registration under the same worker id since,
e.g. a restarted controller's record of an older run).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace

import grpc

from sparkpoint.backoff import Backoff
from sparkpoint.grpcauth import failure
from sparkpoint.messages import ProgressReport, RegisterResult, ReportOutcome, ReportStatus
from worker.control.client import ControllerClient, RegistrationRefused

log = logging.getLogger("sparkpoint.worker.reporter")


class Reporter:
    """``snapshot()`` gives the worker's progress as a report without identity
    or sequence number: the reporter numbers it, the client adds the rest."""

    def __init__(self, client: ControllerClient, snapshot: Callable[[], ProgressReport], interval_s: float,
                 on_reply: Callable[[ReportOutcome], None] = lambda reply: None,
                 on_registered: Callable[[RegisterResult], None] = lambda result: None) -> None:
        self._client = client
        self._snapshot = snapshot
        self._on_reply = on_reply   # the controller's commands and pins
        self._on_registered = on_registered     # a registration in the middle of the run
        self._interval_s = interval_s
        self._seq = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkpoint-reporter", daemon=True)
        self._backoff = Backoff(initial_s=interval_s, maximum_s=max(5.0, interval_s))
        self.controller_reachable = True
        # Set when registering again was refused (another worker id holds
        # our index now: this worker was released): the run must stop.
        self.refused = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Report now, not at the next interval (a restored run's first
        batch: the controller, and whoever watches it, sees it at once)."""
        self._wake.set()

    def report_now(self) -> ReportStatus:
        """Send one report and hand the reply to ``on_reply``; returns the controller's status."""
        self._seq += 1
        reply = self._client.report(replace(self._snapshot(), seq=self._seq))
        if reply.status in (ReportStatus.UNKNOWN_WORKER, ReportStatus.STALE):
            # A restarted controller, or our session replaced: register
            # again, keep running what runs.
            registered = self._client.register_once()
            self._seq = 0
            log.info("re-registered with the controller (%s; session %s)", reply.status.value,
                     registered.session_id)
            self._on_registered(registered)
        else:
            self._on_reply(reply)
        return reply.status

    def _run(self) -> None:
        delay = self._interval_s
        while True:
            self._wake.wait(delay)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.report_now()
                if not self.controller_reachable:
                    log.info("controller reachable again")
                self.controller_reachable = True
                self._backoff.reset()
                delay = self._interval_s
            except RegistrationRefused as error:
                log.error("the controller refused to register this worker again: %s", error)
                self.refused.set()
                return
            except grpc.RpcError as error:
                if self.controller_reachable:
                    log.warning("cannot report to the controller (%s); still processing, retrying",
                                failure(error))
                self.controller_reachable = False
                delay = self._backoff.next_delay()

    def stop(self, final_report: bool = True) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=5)
        if final_report:
            try:
                self.report_now()
            except (grpc.RpcError, RegistrationRefused):
                pass
