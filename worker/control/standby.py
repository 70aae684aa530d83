"""A standby's word to the controller: every report interval, on a thread
of its own, it says that it waits (``StandBy``) -- starting, then ready --
so that ``/status`` lists it. A call that fails (the controller down or
restarting) is logged once and tried again at the next interval; nothing
here ever holds up a take-over: ``stop`` does not wait for a call.
"""

from __future__ import annotations

import logging
import threading

import grpc

from sparkpoint.grpcauth import failure
from sparkpoint.messages import StandbyState
from worker.control.client import ControllerClient

log = logging.getLogger("sparkpoint.worker.standby")


class StandbyAnnouncer:
    def __init__(self, client: ControllerClient, interval_s: float, *, started_at: float) -> None:
        self._client = client
        self._interval_s = interval_s
        self._started_at = started_at
        self._state = StandbyState.STARTING
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sparkpoint-standby", daemon=True)
        self.reachable = True

    def start(self) -> None:
        self._thread.start()

    def ready(self) -> None:
        """Its Spark session is up and rehearsed: say so now."""
        self._state = StandbyState.READY
        self._wake.set()

    def say(self) -> bool:
        """Say it once; False if the controller could not be told."""
        try:
            self._client.stand_by(self._state, self._started_at)
        except ValueError:
            if not self._stop.is_set():
                raise
            return False        # ``stop`` closed the channel
        except grpc.RpcError as error:
            if self.reachable and not self._stop.is_set():
                log.warning("cannot tell the controller at %s that this process stands by (%s); retrying",
                            self._client.address, failure(error))
            self.reachable = False
            return False
        if not self.reachable:
            log.info("the controller knows again that this process stands by")
        self.reachable = True
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            self.say()
            self._wake.wait(self._interval_s)
            self._wake.clear()

    def stop(self) -> None:
        """It stands by no more (it took an index, or it stops). Closing the
        channel ends a call under way: the next words to the controller are
        the registration, with the taken index's credentials."""
        self._stop.set()
        self._wake.set()
        self._client.close()
