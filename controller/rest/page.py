"""The status page at ``/``: plain HTML, CSS and one script from ``static/``
(no build step, nothing from the web). The script polls ``/status``,
``/pipeline``, ``/history`` and ``/savepoints`` and redraws in place.

Both routes are in the OpenAPI document (their answers and the file names),
so the REST fuzz covers them like every other route."""

from __future__ import annotations

from pathlib import Path as FilePath
from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import FileResponse

from controller.core.errors import NotFound
from controller.rest.models import answers
from sparkpoint.errors import shown

STATIC = FilePath(__file__).resolve().parent / "static"
# What the page is made of: nothing else is served from the directory.
_FILES = {"page.css": "text/css", "page.js": "text/javascript", "favicon.svg": "image/svg+xml"}

StaticName = Annotated[str, Path(description="one of the page's files", json_schema_extra={"enum": sorted(_FILES)})]


def page_router() -> APIRouter:
    router = APIRouter()

    @router.get("/", response_class=FileResponse, summary="The status page (HTML)",
                responses={200: {"content": {"text/html": {}}, "description": "The page"}})
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html", headers={"Cache-Control": "no-cache"})

    @router.get("/static/{name}", response_class=FileResponse, summary="The page's style sheet, script and icon",
                responses={200: {"content": {media_type: {} for media_type in sorted(set(_FILES.values()))},
                                 "description": "The file"}, **answers(404)})
    def static(name: StaticName) -> FileResponse:
        if name not in _FILES:
            raise NotFound(f"no static file {shown(name)}")
        return FileResponse(STATIC / name, media_type=_FILES[name], headers={"Cache-Control": "no-cache"})

    return router
