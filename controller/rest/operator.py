"""The operator's routes, gathered in one router: the status page, the JSON
it and the CLI read beyond ``/status``, and the Prometheus metrics. ``create_app``
includes it once; the bearer token (``access.RequireToken``) guards it like
every other route but ``/health``."""

from __future__ import annotations

from fastapi import APIRouter

from controller.core.service import ControllerService
from controller.rest.metrics import metrics_router
from controller.rest.page import page_router
from controller.rest.views import views_router


def operator_router(service: ControllerService) -> APIRouter:
    router = APIRouter()
    router.include_router(page_router())
    router.include_router(views_router(service))
    router.include_router(metrics_router(service))
    return router
