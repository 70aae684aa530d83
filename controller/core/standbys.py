"""The warm standbys the controller has heard from, for ``/status``.

A standby says it waits every report interval (gRPC ``StandBy``). It is
listed, by its process (host name and pid), until it has been silent for
``STANDBY_SILENCE_S`` -- stopped, crashed, or busy taking over -- or until
that process registers as a worker: then it runs that index, and
``/status`` shows the process on the worker.
Kept in memory only: a restarted controller hears from every standby
again within a report interval.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.core.errors import InvalidRequest
from sparkpoint.messages import StandbyReport, StandbyState

STANDBY_SILENCE_S = 10.0
# Far more than a deployment runs; bounds what authenticated callers can make it hold.
MAX_STANDBYS = 256


@dataclass(frozen=True)
class StandbyView:
    host: str
    pid: int
    state: StandbyState
    started_at: float           # when its process started (its clock)
    heartbeat_age_s: float      # since the controller last heard from it


class Standbys:
    """Pure bookkeeping; the service supplies time (and holds the lock)."""

    def __init__(self) -> None:
        self._heard: dict[tuple[str, int], tuple[StandbyReport, float]] = {}

    def heard(self, report: StandbyReport, now: float) -> None:
        """Raises ``InvalidRequest`` when ``MAX_STANDBYS`` others are listed."""
        self._forget_silent(now)
        process = (report.host, report.pid)
        if process not in self._heard and len(self._heard) >= MAX_STANDBYS:
            raise InvalidRequest(f"{MAX_STANDBYS} standbys are listed already")
        self._heard[process] = (report, now)

    def registered(self, host: str, pid: int) -> None:
        """That process registered as a worker: it stands by no more."""
        self._heard.pop((host, pid), None)

    def listing(self, now: float) -> list[StandbyView]:
        """The standbys heard within ``STANDBY_SILENCE_S``, by host and pid."""
        self._forget_silent(now)
        return [StandbyView(host, pid, report.state, report.started_at, round(max(0.0, now - at), 3))
                for (host, pid), (report, at) in sorted(self._heard.items())]

    def _forget_silent(self, now: float) -> None:
        self._heard = {process: (report, at) for process, (report, at) in self._heard.items()
                       if now - at <= STANDBY_SILENCE_S}
