"""Thin gRPC adapter over ControllerService: convert, call, convert back.

With mutual TLS, a call acts for the worker its certificate names or is
refused ``PERMISSION_DENIED`` (``_as_named_worker``): holding one worker's
credential does not let a process register, report or commit as another.

Core errors become gRPC status codes here and only here (``_status_for``);
their messages travel in the status details, which gRPC carries in a
metadata frame of bounded size: each is clipped to ``DETAILS_MAX``. Anything
else is a bug: logged, and answered ``INTERNAL`` without its message.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from concurrent import futures
from typing import Any, TypeVar

import grpc

from controller.core import errors, validation
from controller.core.service import ControllerService
from controller.grpc.auth import TokenInterceptor, peer_name, server_credentials
from sparkpoint import wire
from sparkpoint.errors import clip, shown
from sparkpoint.secrets import Secret, TlsFiles
from sparkpoint.v1 import controller_pb2 as pb
from sparkpoint.v1 import controller_pb2_grpc as pb_grpc

log = logging.getLogger("sparkpoint.controller.grpc")

# Far below gRPC's default metadata limit (8 KiB), which a longer message
# would exceed: the caller would get a transport error instead of the reason.
DETAILS_MAX = 1000
# Explicit limits instead of gRPC's defaults. A message: 16 MiB (the largest a
# worker sends, a registration listing its durable checkpoints, holds
# limits.MAX_CHECKPOINTS of a few hundred bytes each). Calls in flight: beyond 64 a
# call is refused RESOURCE_EXHAUSTED, not queued without end (a worker
# reports every SP_REPORT_INTERVAL, so a handful per worker is plenty).
# Keepalive: a ping every 60 s finds a client that vanished; a client may
# ping at most every 30 s, twice too often and it is disconnected.
MESSAGE_MAX_BYTES = 16 << 20
MAX_CONCURRENT_RPCS = 64
SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", MESSAGE_MAX_BYTES),
    ("grpc.max_send_message_length", MESSAGE_MAX_BYTES),
    ("grpc.max_concurrent_streams", 16),            # per connection
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 30_000),
    ("grpc.http2.max_ping_strikes", 2),
]


def _status_for(error: errors.ControllerError) -> grpc.StatusCode:
    if isinstance(error, errors.InvalidRequest):
        return grpc.StatusCode.INVALID_ARGUMENT
    if isinstance(error, errors.NotFound):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(error, errors.SessionActive):
        return grpc.StatusCode.ALREADY_EXISTS
    if isinstance(error, errors.Conflict):
        return grpc.StatusCode.FAILED_PRECONDITION
    return grpc.StatusCode.INTERNAL


Handler = TypeVar("Handler", bound=Callable[..., Any])


def _mapped(method: Handler) -> Handler:
    """Its request's collections checked before it is converted
    (``validation.collections``); core errors mapped to status codes."""
    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            validation.collections(request)
            return method(self, request, context)
        except errors.ControllerError as error:
            context.abort(_status_for(error), clip(str(error), DETAILS_MAX))
        except Exception:
            log.exception("%s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, "internal error; see the controller log")

    return wrapper  # type: ignore[return-value]


def _as_named_worker(method: Handler) -> Handler:
    """Refuse a call for a worker id other than the one the caller's
    certificate names (when the servicer binds identities)."""
    @functools.wraps(method)
    def wrapper(self: ControllerServicer, request: Any, context: grpc.ServicerContext) -> Any:
        if self._bind_identity and (name := peer_name(context)) != request.worker_id:
            context.abort(grpc.StatusCode.PERMISSION_DENIED, clip(
                f"this client's certificate is for {shown(name) if name else 'no worker'}, not for worker "
                f"{shown(request.worker_id)}",
                DETAILS_MAX))
        return method(self, request, context)

    return wrapper  # type: ignore[return-value]


class ControllerServicer(pb_grpc.ControllerServicer):
    def __init__(self, service: ControllerService, *, bind_identity: bool = False) -> None:
        """``bind_identity``: every call must come from the worker its
        client certificate names (mutual TLS)."""
        self._service = service
        self._bind_identity = bind_identity

    @_as_named_worker
    @_mapped
    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.RegisterResponse:  # noqa: N802
        return wire.register_result_to_pb(self._service.register(wire.registration_from_pb(request)))

    @_as_named_worker
    @_mapped
    def ReportProgress(self, request: pb.ProgressReport, context: grpc.ServicerContext) -> pb.ProgressAck:  # noqa: N802
        return wire.report_outcome_to_pb(self._service.report_progress(wire.report_from_pb(request)))

    @_as_named_worker
    @_mapped
    def CommitCheckpoint(self, request: pb.CheckpointCommit, context: grpc.ServicerContext) -> pb.CheckpointAck:  # noqa: N802
        outcome = self._service.commit_checkpoint(request.worker_id, wire.checkpoint_from_pb(request.checkpoint),
                                                  request.session_id)
        return wire.commit_outcome_to_pb(outcome)

    @_as_named_worker
    @_mapped
    def StandBy(self, request: pb.StandbyReport, context: grpc.ServicerContext) -> pb.StandbyAck:  # noqa: N802
        self._service.stand_by(wire.standby_report_from_pb(request))
        return pb.StandbyAck()


def start_grpc_server(service: ControllerService, bind: str, port: int, *, token: Secret | None,
                      tls: TlsFiles | None = None) -> tuple[grpc.Server, int]:
    """Start serving; returns the server and the port it bound (``port=0`` picks one).
    ``token``: the shared secret every call must carry (None: no authentication).
    ``tls``: serve mutual TLS, each call bound to its certificate's worker (None: plain text)."""
    interceptors = [TokenInterceptor(token)] if token is not None else []
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), interceptors=interceptors,
                         options=SERVER_OPTIONS, maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS)
    pb_grpc.add_ControllerServicer_to_server(ControllerServicer(service, bind_identity=tls is not None), server)
    address = f"{bind}:{port}"
    bound = (server.add_secure_port(address, server_credentials(tls)) if tls is not None
             else server.add_insecure_port(address))
    if bound == 0:
        raise OSError(f"cannot bind gRPC port {bind}:{port}")
    server.start()
    return server, bound
