"""Thin gRPC adapter over ControllerService: convert, call, convert back.

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

from controller.core import errors
from controller.core.service import ControllerService
from controller.grpc.auth import TokenInterceptor
from sparkpoint import wire
from sparkpoint.errors import clip
from sparkpoint.secrets import Secret
from sparkpoint.v1 import controller_pb2 as pb
from sparkpoint.v1 import controller_pb2_grpc as pb_grpc

log = logging.getLogger("sparkpoint.controller.grpc")

# Far below gRPC's default metadata limit (8 KiB), which a longer message
# would exceed: the caller would get a transport error instead of the reason.
DETAILS_MAX = 1000


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
    @functools.wraps(method)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(self, request, context)
        except errors.ControllerError as error:
            context.abort(_status_for(error), clip(str(error), DETAILS_MAX))
        except Exception:
            log.exception("%s failed", method.__name__)
            context.abort(grpc.StatusCode.INTERNAL, "internal error; see the controller log")

    return wrapper  # type: ignore[return-value]


class ControllerServicer(pb_grpc.ControllerServicer):
    def __init__(self, service: ControllerService) -> None:
        self._service = service

    @_mapped
    def Register(self, request: pb.RegisterRequest, context: grpc.ServicerContext) -> pb.RegisterResponse:  # noqa: N802
        return wire.register_result_to_pb(self._service.register(wire.registration_from_pb(request)))

    @_mapped
    def ReportProgress(self, request: pb.ProgressReport, context: grpc.ServicerContext) -> pb.ProgressAck:  # noqa: N802
        return wire.report_outcome_to_pb(self._service.report_progress(wire.report_from_pb(request)))

    @_mapped
    def CommitCheckpoint(self, request: pb.CheckpointCommit, context: grpc.ServicerContext) -> pb.CheckpointAck:  # noqa: N802
        outcome = self._service.commit_checkpoint(request.worker_id, wire.checkpoint_from_pb(request.checkpoint),
                                                  request.session_id)
        return wire.commit_outcome_to_pb(outcome)


def start_grpc_server(service: ControllerService, bind: str, port: int, *,
                      token: Secret | None) -> tuple[grpc.Server, int]:
    """Start serving; returns the server and the port it bound (``port=0`` picks one).
    ``token``: the shared secret every call must carry (None: no authentication)."""
    interceptors = [TokenInterceptor(token)] if token is not None else []
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), interceptors=interceptors)
    pb_grpc.add_ControllerServicer_to_server(ControllerServicer(service), server)
    bound = server.add_insecure_port(f"{bind}:{port}")
    if bound == 0:
        raise OSError(f"cannot bind gRPC port {bind}:{port}")
    server.start()
    return server, bound
