"""The status page at ``/``: plain HTML, CSS and one script from ``static/``
(no build step, nothing from the web). The script polls ``/status``,
``/pipeline``, ``/history`` and ``/savepoints`` and redraws in place."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

from controller.core.errors import NotFound

STATIC = Path(__file__).resolve().parent / "static"
# What the page is made of: nothing else is served from the directory.
_FILES = {"page.css": "text/css", "page.js": "text/javascript", "favicon.svg": "image/svg+xml"}


def page_router() -> APIRouter:
    router = APIRouter()

    @router.get("/", response_class=FileResponse, include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html", headers={"Cache-Control": "no-cache"})

    @router.get("/static/{name}", response_class=FileResponse, include_in_schema=False)
    def static(name: str) -> FileResponse:
        if name not in _FILES:
            raise NotFound(f"no static file {name!r}")
        return FileResponse(STATIC / name, media_type=_FILES[name], headers={"Cache-Control": "no-cache"})

    return router
