"""ControllerService: the one place the controller's behaviour lives.

The gRPC servicer and the REST app are thin adapters over it. Time and
session ids are injected, so tests drive it without sleeps.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from controller.core.errors import Conflict, InvalidRequest
from controller.core.model import (
    ProgressReport,
    RegisterResult,
    Registration,
    ReportOutcome,
    RestoreDecision,
    WorkerState,
)
from controller.core.progress import ProgressTable, WorkerRecord
from controller.core.status import PipelineStatus, build_status


@dataclass(frozen=True)
class ServiceConfig:
    worker_count: int


class ControllerService:
    def __init__(self, config: ServiceConfig, *, clock: Callable[[], float],
                 new_session_id: Callable[[], str] = lambda: uuid.uuid4().hex) -> None:
        self._config = config
        self._clock = clock
        self._new_session_id = new_session_id
        self._lock = threading.Lock()
        self._table = ProgressTable()

    def register(self, registration: Registration) -> RegisterResult:
        """Admit a worker (first start, restart, or after a controller restart).

        Steps:
        1. Validate its identity against the configured worker count.
        2. Refuse a second worker id claiming an index another worker holds.
        3. Record it under a new session id: reports of older sessions become stale.
        4. Decide what it restores (nothing, until checkpoints exist).
        """
        # 1.
        if not registration.worker_id:
            raise InvalidRequest("worker_id is required")
        if registration.worker_count != self._config.worker_count:
            raise Conflict(
                f"{registration.worker_id} was started with SP_WORKER_COUNT={registration.worker_count}, "
                f"but the controller expects {self._config.worker_count} workers")
        if not 0 <= registration.worker_index < registration.worker_count:
            raise InvalidRequest(
                f"worker_index {registration.worker_index} is outside 0..{registration.worker_count - 1}")
        with self._lock:
            # 2.
            holder = self._table.by_index(registration.worker_index)
            if holder is not None and holder.worker_id != registration.worker_id:
                raise Conflict(
                    f"worker index {registration.worker_index} is already held by {holder.worker_id}; "
                    f"{registration.worker_id} needs a different SP_WORKER_INDEX")
            # 3.
            record = self._table.register(registration, self._new_session_id(), self._clock())
        # 4.
        return RegisterResult(
            session_id=record.session_id,
            worker_index=record.worker_index,
            worker_count=record.worker_count,
            restore=RestoreDecision(),
        )

    def report_progress(self, report: ProgressReport) -> ReportOutcome:
        with self._lock:
            status = self._table.report(report, self._clock())
        return ReportOutcome(status)

    def worker(self, worker_id: str) -> WorkerRecord | None:
        with self._lock:
            return self._table.workers.get(worker_id)

    def status(self) -> PipelineStatus:
        with self._lock:
            records = list(self._table.workers.values())
        return build_status(records, self._config.worker_count, self._clock())

    def healthy(self) -> bool:
        return True


__all__ = ["ControllerService", "ServiceConfig", "WorkerState"]
