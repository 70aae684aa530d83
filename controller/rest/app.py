"""Thin REST adapter over ControllerService.

Core errors become HTTP status codes here and only here (``_HTTP_STATUS``);
every error body is JSON ``{"error": message}``: short (at most
``ERROR_MAX`` characters, never the whole input echoed back), never a stack
trace, never a 5xx for bad input. Requests: bodies up to ``MAX_BODY_BYTES``
(413), JSON only for requests that change something (``guard``: 415). The
OpenAPI document lists each endpoint's error answers and the input rules
(as documentation: the core checks them, so each rule has one wording).
Who may call (``access``): a bearer token on everything but ``/health``, and
trusted ``Host`` names, both middleware around the whole app.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.routing import Match

from controller.core import errors
from controller.core.service import RELEASE_SILENCE_S, ControllerService
from controller.core.status import PipelineStatus, WorkerStatus
from controller.progress.table import WorkerRecord
from controller.rest.access import Access, RequireToken, documented
from controller.rest.guard import BodySizeLimit, json_only
from controller.rest.models import (
    CHANGES,
    ERROR_MAX,
    MAX_BODY_BYTES,
    CreateSavepoint,
    ExportSavepoint,
    Health,
    ImportSavepoint,
    Released,
    ReleaseWorker,
    RestoreSavepoint,
    SavepointId,
    WorkerId,
    answers,
)
from controller.rest.operator import operator_router
from controller.savepoints.exported import NoSuchExport
from controller.savepoints.model import (
    RecordNotWritten,
    SavepointConflict,
    SavepointError,
)
from controller.savepoints.registry import UnknownSavepoint
from controller.savepoints.view import ExportView, RestoreView, SavepointView
from sparkpoint.errors import clip
from sparkpoint.paths import UnsafePath

log = logging.getLogger("sparkpoint.controller.rest")

# First match wins: specific kinds before their bases. A SavepointError that
# is neither unknown nor a conflict is the user's input (an id, a label, a
# path, an exported record).
_HTTP_STATUS: list[tuple[type[Exception], int]] = [
    (errors.InvalidRequest, 400), (errors.NotFound, 404), (errors.Conflict, 409), (errors.Unavailable, 503),
    (UnknownSavepoint, 404), (NoSuchExport, 404), (SavepointConflict, 409), (SavepointError, 400), (UnsafePath, 400),
    (RecordNotWritten, 503),
]


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": clip(message, ERROR_MAX)}, headers=headers)


def _validation_message(error: RequestValidationError) -> str:
    """``where: what`` per problem, without the input itself."""
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()[:5])


def _without_422(app: FastAPI, access: Access) -> Callable[[], dict[str, Any]]:
    """The OpenAPI document as served: bad input is 400 here (``validation_error``),
    never FastAPI's 422; with a token, its scheme and the 401 answers."""
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = FastAPI.openapi(app)
            for operations in schema["paths"].values():
                for operation in operations.values():
                    operation["responses"].pop("422", None)
            for unused in ("HTTPValidationError", "ValidationError"):
                schema.get("components", {}).get("schemas", {}).pop(unused, None)
            if access.token is not None:
                documented(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    return openapi


# The methods a 405's Allow header may name.
_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(app: FastAPI, request: Request) -> list[str]:
    """Every method some route of the app answers at the request's path.
    Starlette names only its first route's, and a path has one route per
    method; each method is tried against the routes as they are matched,
    included routers (the operator's) too."""
    return [method for method in _METHODS
            if any(route.matches({**request.scope, "method": method})[0] is Match.FULL
                   for route in app.router.routes)]


def create_app(service: ControllerService, problems: Callable[[], list[str]] = list, *, access: Access) -> FastAPI:
    """``problems``: what keeps the controller from working as it should
    besides its savepoint records (its checkpoint cannot be written, ...);
    any makes ``/health`` answer 503. ``access``: the token and host names
    (``SP_API_TOKEN_FILE``, ``SP_API_ALLOWED_HOSTS``)."""
    app = FastAPI(title="Sparkpoint controller", version="1",
                  dependencies=[Depends(json_only)],
                  description="Pipeline-wide progress, checkpoints and savepoints of a Sparkpoint deployment. "
                              "Every error is JSON {\"error\": message}.")
    # The last added runs first: the host, then the token, then the body's size.
    app.add_middleware(BodySizeLimit, max_body_bytes=MAX_BODY_BYTES)
    if access.token is not None:
        app.add_middleware(RequireToken, token=access.token)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(access.allowed_hosts))
    app.openapi = _without_422(app, access)  # type: ignore[method-assign]

    @app.exception_handler(errors.ControllerError)
    @app.exception_handler(SavepointError)
    @app.exception_handler(UnsafePath)
    @app.exception_handler(RecordNotWritten)
    async def controller_error(_: Request, error: Exception) -> JSONResponse:
        return _error(next((s for t, s in _HTTP_STATUS if isinstance(error, t)), 500), str(error))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        if error.status_code == 405:
            allowed = _allowed_methods(app, request)
            return _error(405, f"{request.method} is not allowed here; use {', '.join(allowed)}",
                          {"Allow": ", ".join(allowed)})
        return _error(error.status_code, str(error.detail), error.headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
        return _error(400, _validation_message(error))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return _error(500, "internal error; see the controller log")

    @app.get("/health", response_model=Health, responses={503: {"model": Health, "description": "Unhealthy"}},
             summary="Liveness: 503 naming each problem while the controller cannot write its state")
    def health() -> Health | JSONResponse:
        found = problems() + service.problems()
        if found:
            return JSONResponse(status_code=503, content=Health(status="unhealthy", problems=found).model_dump())
        return Health(status="ok")

    @app.get("/status", response_model=PipelineStatus)
    def status() -> PipelineStatus:
        return service.status()

    @app.get("/workers/{worker_id}", response_model=WorkerStatus, responses=answers(400, 404))
    def worker(worker_id: WorkerId) -> WorkerStatus:
        return service.worker_status(worker_id)

    @app.post("/workers/{worker_id}/release", response_model=Released, responses=answers(*CHANGES, 404, 409),
              summary=f"Forget a worker that is gone for good (silent for {RELEASE_SILENCE_S:.0f} s): another "
                      "worker id may take its index")
    def release_worker(worker_id: WorkerId, request: ReleaseWorker) -> Released:
        record: WorkerRecord = service.release_worker(worker_id)
        return Released(worker_id=record.worker_id, worker_index=record.worker_index,
                        last_checkpoint_id=record.last_checkpoint_id)

    @app.post("/savepoints", status_code=202, response_model=SavepointView, responses=answers(*CHANGES, 409),
              summary="Take a savepoint: every worker checkpoints now; poll GET /savepoints/{id} until complete")
    def create_savepoint(request: CreateSavepoint) -> SavepointView:
        return service.trigger_savepoint(request.label)

    @app.get("/savepoints", response_model=list[SavepointView], responses=answers(503))
    def list_savepoints() -> list[SavepointView]:
        return service.savepoints()

    @app.post("/savepoints/import", status_code=201, response_model=SavepointView,
              responses=answers(*CHANGES, 404, 409),
              summary="Record a savepoint exported by another deployment as a new savepoint")
    def import_savepoint(request: ImportSavepoint) -> SavepointView:
        return service.import_savepoint(request.path, request.label)

    @app.get("/savepoints/{savepoint_id:savepoint_id}", response_model=SavepointView, responses=answers(400, 404, 503))
    def get_savepoint(savepoint_id: SavepointId) -> SavepointView:
        return service.savepoint(savepoint_id)

    @app.delete("/savepoints/{savepoint_id:savepoint_id}", response_model=SavepointView, responses=answers(*CHANGES, 404),
                summary="Dispose a savepoint: retention may delete the checkpoints it pinned")
    def dispose_savepoint(savepoint_id: SavepointId) -> SavepointView:
        return service.dispose_savepoint(savepoint_id)

    @app.post("/savepoints/{savepoint_id:savepoint_id}/restore", status_code=202, response_model=RestoreView,
              responses=answers(*CHANGES, 404, 409), summary="Restart every worker from its part of the savepoint")
    def restore_savepoint(savepoint_id: SavepointId, request: RestoreSavepoint) -> RestoreView:
        return service.restore_savepoint(savepoint_id, request.allow_republish)

    @app.post("/savepoints/{savepoint_id:savepoint_id}/export", status_code=202, response_model=ExportView,
              responses=answers(*CHANGES, 404, 409),
              summary="Copy a savepoint into a self-contained directory; poll GET /savepoints/{id} until complete")
    def export_savepoint(savepoint_id: SavepointId, request: ExportSavepoint) -> ExportView:
        return service.export_savepoint(savepoint_id, request.path)

    # The status page, its data and /metrics (behind the token like the rest).
    app.include_router(operator_router(service))
    return app
