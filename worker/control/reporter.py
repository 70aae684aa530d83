"""Background progress reporting that survives the controller going away.

The worker never stops processing because the controller is down: reports
fail, the reporter backs off and retries, and re-registers when a restarted
controller no longer knows this worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from proto.sparkpoint.v1 import controller_pb2 as pb
from worker.control.backoff import Backoff
from worker.control.client import ControllerClient, ExportAnswer, RegistrationRefused, ReportReply
from worker.publishing.publisher import SinkStatus
from worker.runtime.progress import QueryStatus

log = logging.getLogger("sparkpoint.worker.reporter")


@dataclass(frozen=True)
class WorkerSnapshot:
    state: int
    queries: list[QueryStatus] = field(default_factory=list)
    dropped_checkpoints: int = 0
    restored_checkpoint_id: int = 0
    recovery: pb.Recovery | None = None
    sinks: list[SinkStatus] = field(default_factory=list)
    savepoint_answers: dict[str, int] = field(default_factory=dict)
    exports: list[ExportAnswer] = field(default_factory=list)


class Reporter:
    def __init__(self, client: ControllerClient, snapshot: Callable[[], WorkerSnapshot], interval_s: float,
                 on_reply: Callable[[ReportReply], None] = lambda reply: None) -> None:
        self._client = client
        self._snapshot = snapshot
        self._on_reply = on_reply   # the controller's commands and pins
        self._interval_s = interval_s
        self._seq = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkpoint-reporter", daemon=True)
        self._backoff = Backoff(initial_s=interval_s, maximum_s=max(5.0, interval_s))
        self.controller_reachable = True

    def start(self) -> None:
        self._thread.start()

    def report_now(self) -> int:
        """Send one report and hand the reply to ``on_reply``; returns the controller's status."""
        self._seq += 1
        snap = self._snapshot()
        reply = self._client.report(self._seq, snap.state, snap.queries,
                                    dropped_checkpoints=snap.dropped_checkpoints,
                                    restored_checkpoint_id=snap.restored_checkpoint_id, recovery=snap.recovery,
                                    sinks=snap.sinks, savepoint_answers=snap.savepoint_answers,
                                    exports=snap.exports)
        if reply.status == pb.REPORT_STATUS_UNKNOWN_WORKER:
            # A restarted controller: register again, keep running what runs.
            registered = self._client.register_once()
            self._seq = 0
            log.info("re-registered with the controller (session %s)", registered.session_id)
        else:
            self._on_reply(reply)
        return reply.status

    def _run(self) -> None:
        delay = self._interval_s
        while not self._stop.wait(delay):
            try:
                self.report_now()
                if not self.controller_reachable:
                    log.info("controller reachable again")
                self.controller_reachable = True
                self._backoff.reset()
                delay = self._interval_s
            except (grpc.RpcError, RegistrationRefused) as error:
                if self.controller_reachable:
                    log.warning("cannot report to the controller (%s); still processing, retrying",
                                error.code().name if isinstance(error, grpc.RpcError) else error)
                self.controller_reachable = False
                delay = self._backoff.next_delay()

    def stop(self, final_report: bool = True) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if final_report:
            try:
                self.report_now()
            except (grpc.RpcError, RegistrationRefused):
                pass
