"""Thin REST adapter over ControllerService.

Core errors become HTTP status codes here and only here; every error body is
JSON ``{"error": message}``, never a stack trace.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from controller.core import errors
from controller.core.service import ControllerService
from controller.core.status import PipelineStatus, WorkerStatus
from controller.rest.operator import operator_router
from controller.savepoints.model import SavepointConflict, SavepointError
from controller.savepoints.registry import UnknownSavepoint
from controller.savepoints.view import ExportView, RestoreView, SavepointView
from sparkpoint.paths import UnsafePath

log = logging.getLogger("sparkpoint.controller.rest")

# First match wins: specific kinds before their bases. A SavepointError that
# is neither unknown nor a conflict is the user's input (an id, a label, a
# path, an exported record).
_HTTP_STATUS: list[tuple[type[Exception], int]] = [
    (errors.InvalidRequest, 400), (errors.NotFound, 404), (errors.Conflict, 409),
    (UnknownSavepoint, 404), (SavepointConflict, 409), (SavepointError, 400), (UnsafePath, 400),
]


class CreateSavepoint(BaseModel):
    label: str = Field(description="Letters, digits, spaces and - _ . , : ( ) / + @ #; at most 100 characters")


class RestoreSavepoint(BaseModel):
    allow_republish: bool = Field(False, description="Accept that transactional sinks publish again what they "
                                                     "published past the savepoint")


class ExportSavepoint(BaseModel):
    path: str = Field(description="A new directory, relative to the savepoint root (SP_SAVEPOINT_DIR)")


class ImportSavepoint(BaseModel):
    path: str = Field(description="An exported savepoint's directory, relative to the savepoint root")
    label: str | None = Field(None, description="Replaces the exported savepoint's label")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message})


class Health(BaseModel):
    status: str = Field(description="ok, or unhealthy")
    problems: list[str] = Field(default_factory=list, description="What is wrong, one line each")


def create_app(service: ControllerService, problems: Callable[[], list[str]] = list) -> FastAPI:
    """``problems``: what keeps the controller from working as it should (its
    state cannot be written, ...); any makes ``/health`` answer 503."""
    app = FastAPI(title="Sparkpoint controller", version="1",
                  description="Pipeline-wide progress, checkpoints and savepoints of a Sparkpoint deployment.")

    @app.exception_handler(errors.ControllerError)
    @app.exception_handler(SavepointError)
    @app.exception_handler(UnsafePath)
    async def controller_error(_: Request, error: Exception) -> JSONResponse:
        return _error(next((s for t, s in _HTTP_STATUS if isinstance(error, t)), 500), str(error))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, error: StarletteHTTPException) -> JSONResponse:
        return _error(error.status_code, str(error.detail))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
        return _error(422, "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors()))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, error: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return _error(500, "internal error; see the controller log")

    @app.get("/health", response_model=Health, responses={503: {"model": Health}})
    def health() -> Health | JSONResponse:
        found = problems()
        if found:
            return JSONResponse(status_code=503, content=Health(status="unhealthy", problems=found).model_dump())
        return Health(status="ok")

    @app.get("/status", response_model=PipelineStatus)
    def status() -> PipelineStatus:
        return service.status()

    @app.get("/workers/{worker_id}", response_model=WorkerStatus)
    def worker(worker_id: str) -> WorkerStatus:
        for worker_status in service.status().workers:
            if worker_status.worker_id == worker_id:
                return worker_status
        raise errors.NotFound(f"no worker {worker_id!r} has registered")

    @app.post("/savepoints", status_code=202, response_model=SavepointView,
              summary="Take a savepoint: every worker checkpoints now; poll GET /savepoints/{id} until complete")
    def create_savepoint(request: CreateSavepoint) -> SavepointView:
        return service.trigger_savepoint(request.label)

    @app.get("/savepoints", response_model=list[SavepointView])
    def list_savepoints() -> list[SavepointView]:
        return service.savepoints()

    @app.post("/savepoints/import", status_code=201, response_model=SavepointView,
              summary="Record a savepoint exported by another deployment as a new savepoint")
    def import_savepoint(request: ImportSavepoint) -> SavepointView:
        return service.import_savepoint(request.path, request.label)

    @app.get("/savepoints/{savepoint_id}", response_model=SavepointView)
    def get_savepoint(savepoint_id: str) -> SavepointView:
        return service.savepoint(savepoint_id)

    @app.delete("/savepoints/{savepoint_id}", response_model=SavepointView,
                summary="Dispose a savepoint: retention may delete the checkpoints it pinned")
    def dispose_savepoint(savepoint_id: str) -> SavepointView:
        return service.dispose_savepoint(savepoint_id)

    @app.post("/savepoints/{savepoint_id}/restore", status_code=202, response_model=RestoreView,
              summary="Restart every worker from its part of the savepoint")
    def restore_savepoint(savepoint_id: str, request: RestoreSavepoint | None = None) -> RestoreView:
        return service.restore_savepoint(savepoint_id, (request or RestoreSavepoint()).allow_republish)

    @app.post("/savepoints/{savepoint_id}/export", status_code=202, response_model=ExportView,
              summary="Copy a savepoint into a self-contained directory; poll GET /savepoints/{id} until complete")
    def export_savepoint(savepoint_id: str, request: ExportSavepoint) -> ExportView:
        return service.export_savepoint(savepoint_id, request.path)

    # The status page, its data and /metrics: one router, so issue 15's
    # bearer-token check is one `dependencies=[...]` here.
    app.include_router(operator_router(service))
    return app
