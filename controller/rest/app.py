"""Thin REST adapter over ControllerService.

Core errors become HTTP status codes here and only here; every error body is
JSON ``{"error": message}``, never a stack trace.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from controller.core import errors
from controller.core.service import ControllerService
from controller.core.status import PipelineStatus, WorkerStatus

log = logging.getLogger("sparkpoint.controller.rest")

_HTTP_STATUS = {errors.InvalidRequest: 400, errors.NotFound: 404, errors.Conflict: 409}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": message})


def create_app(service: ControllerService) -> FastAPI:
    app = FastAPI(title="Sparkpoint controller", version="1",
                  description="Pipeline-wide progress, checkpoints and savepoints of a Sparkpoint deployment.")

    @app.exception_handler(errors.ControllerError)
    async def controller_error(_: Request, error: errors.ControllerError) -> JSONResponse:
        return _error(next((s for t, s in _HTTP_STATUS.items() if isinstance(error, t)), 500), str(error))

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

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok" if service.healthy() else "unhealthy"}

    @app.get("/status", response_model=PipelineStatus)
    def status() -> PipelineStatus:
        return service.status()

    @app.get("/workers/{worker_id}", response_model=WorkerStatus)
    def worker(worker_id: str) -> WorkerStatus:
        for worker_status in service.status().workers:
            if worker_status.worker_id == worker_id:
                return worker_status
        raise errors.NotFound(f"no worker {worker_id!r} has registered")

    return app
