"""gRPC client for the controller: registration, progress reports, checkpoint commits, standing by.

Every call carries the gRPC shared secret (``SP_GRPC_TOKEN_FILE``) as
``authorization: Bearer <token>`` metadata when one is configured. A
registration names the session it continues (this process's current one,
empty at first), so registering again -- to restart from a savepoint --
is not taken for another process claiming the id."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

import grpc

from sparkpoint import wire
from sparkpoint.backoff import Backoff
from sparkpoint.grpcauth import failure, open_channel, with_token
from sparkpoint.messages import (
    CheckpointInfo,
    CommitOutcome,
    PipelineNode,
    ProgressReport,
    RegisterResult,
    Registration,
    ReportOutcome,
    ReportStatus,
    StandbyReport,
    StandbyState,
    VolumeFence,
)
from sparkpoint.secrets import Secret, TlsFiles
from sparkpoint.v1 import controller_pb2_grpc as pb_grpc

log = logging.getLogger("sparkpoint.worker.control")

# Errors that mean "the controller is not reachable right now": retry.
RETRYABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED}
# A registration refused while another session of this worker id is alive
# (the previous process, crashed moments ago): retry until it is silent.
WAIT_FOR_SESSION = grpc.StatusCode.ALREADY_EXISTS


class RegistrationRefused(Exception):
    """The controller refused this worker; the message says why."""


class NotRegistered(Exception):
    """The controller has no record of this worker, or holds a newer
    registration of it: register again, then retry."""


@dataclass(frozen=True)
class WorkerIdentity:
    worker_id: str
    worker_index: int
    worker_count: int
    pipeline_fingerprint: str
    node_names: tuple[str, ...]
    nodes: tuple[PipelineNode, ...] = ()     # the graph, for the controller's status page
    fence: VolumeFence = VolumeFence()       # its checkpoint volume's, as this process holds it
    host: str = ""                           # where this process runs: its host name ...
    pid: int = 0                             # ... and pid


class ControllerClient:
    """The worker's gRPC edge: messages in, messages out (``sparkpoint.wire``
    converts); no protobuf type leaves this module."""

    def __init__(self, address: str, identity: WorkerIdentity, *, timeout_s: float = 5.0,
                 checkpoints: Callable[[], list[CheckpointInfo]] = list, token: Secret | None = None,
                 tls: TlsFiles | None = None) -> None:
        self._channel = open_channel(address, tls)
        self._stub = pb_grpc.ControllerStub(with_token(self._channel, token))
        self._identity = identity
        self._timeout_s = timeout_s
        self._checkpoints = checkpoints   # durable checkpoints on the volume, read at each registration
        self.address = address
        self.session_id = ""

    def register_once(self) -> RegisterResult:
        identity = self._identity
        registration = Registration(identity.worker_id, identity.worker_index, identity.worker_count,
                                    identity.pipeline_fingerprint, identity.node_names,
                                    tuple(self._checkpoints()), identity.nodes, self.session_id, identity.fence,
                                    identity.host, identity.pid)
        try:
            response = self._stub.Register(wire.registration_to_pb(registration), timeout=self._timeout_s)
        except grpc.RpcError as error:
            if error.code() in RETRYABLE or error.code() is WAIT_FOR_SESSION:
                raise
            raise RegistrationRefused(error.details()) from None
        result = wire.register_result_from_pb(response)
        self.session_id = result.session_id
        return result

    def register(self, stop: threading.Event, backoff: Backoff | None = None,
                 wait: Callable[[float], bool] | None = None) -> RegisterResult | None:
        """Register, retrying with backoff while the controller is unreachable.

        Returns None if ``stop`` is set first; raises RegistrationRefused if the
        controller says no.
        """
        backoff = backoff or Backoff()
        wait = wait or stop.wait
        announced = False
        while not stop.is_set():
            try:
                return self.register_once()
            except grpc.RpcError as error:
                if not announced and error.code() is WAIT_FOR_SESSION:
                    log.warning("the controller at %s refuses to register this worker yet: %s; retrying with "
                                "backoff", self.address, error.details())
                elif not announced:
                    log.warning("controller at %s unreachable (%s); retrying with backoff",
                                self.address, failure(error))
                announced = True
                wait(backoff.next_delay())
        return None

    def report(self, report: ProgressReport) -> ReportOutcome:
        """Send one progress report (this worker's identity and session filled
        in); returns the controller's status, its commands and pins."""
        report = replace(report, worker_id=self._identity.worker_id, session_id=self.session_id)
        ack = self._stub.ReportProgress(wire.report_to_pb(report), timeout=self._timeout_s)
        return wire.report_outcome_from_pb(ack)

    def commit_checkpoint(self, checkpoint: CheckpointInfo) -> int:
        """Commit a durable checkpoint; returns the id the controller holds as complete."""
        ack = self._stub.CommitCheckpoint(wire.commit_to_pb(self._identity.worker_id, self.session_id, checkpoint),
                                          timeout=self._timeout_s)
        outcome: CommitOutcome = wire.commit_outcome_from_pb(ack)
        if outcome.status is ReportStatus.UNKNOWN_WORKER:
            # A restarted controller that has not seen us yet: the reporter
            # re-registers; this commit is retried.
            raise NotRegistered("the controller does not know this worker yet (restarted?)")
        if outcome.status is ReportStatus.STALE:
            # Our session is not the controller's current one for this
            # worker: the reporter re-registers; this commit is retried.
            raise NotRegistered("the controller holds a newer registration of this worker")
        return outcome.completed_checkpoint_id

    def stand_by(self, state: StandbyState, started_at: float) -> None:
        """Say this process (its identity's host and pid) stands by,
        ``state``. Raises ``grpc.RpcError``."""
        report = StandbyReport(self._identity.worker_id, self._identity.host, self._identity.pid, state, started_at)
        self._stub.StandBy(wire.standby_report_to_pb(report), timeout=self._timeout_s)

    def close(self) -> None:
        self._channel.close()
