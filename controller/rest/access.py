"""Who may call the REST API: a bearer token and trusted ``Host`` names.

``RequireToken`` is one ASGI middleware around the whole app, so every route
-- the API, ``/metrics``, the OpenAPI document and ``/docs`` -- needs
``Authorization: Bearer <token>`` except the open ones (``is_open``):
``/health``, for container health checks, and the status page's shell (``/``
and ``/static/*``: HTML, CSS and a script, no data; the script asks for the
token and sends it with every request for data). A missing or wrong token is 401
with ``WWW-Authenticate: Bearer`` and a short JSON error; the comparison is
constant-time (``Secret.matches``). ``documented`` adds the security scheme
and the 401 answers to the OpenAPI document.

Trusted hosts (Starlette's ``TrustedHostMiddleware``, against DNS
rebinding) answer any other ``Host`` with 400 ``Invalid host header`` (plain
text: Starlette's answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from sparkpoint.secrets import Secret

OPEN = frozenset({"/health", "/"})
OPEN_PREFIX = "/static/"
SCHEME = "bearerAuth"
UNAUTHORIZED = {"description": "Missing or wrong bearer token",
                "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}}


@dataclass(frozen=True)
class Access:
    """``token``: None serves everyone (``SP_API_AUTH=none``); ``allowed_hosts``:
    the ``Host`` names answered (``*``: any)."""

    token: Secret | None
    allowed_hosts: tuple[str, ...] = ("localhost", "127.0.0.1")


def is_open(path: str) -> bool:
    """Paths anyone may fetch: they answer nothing about the pipeline."""
    return path in OPEN or path.startswith(OPEN_PREFIX)


def _bearer(headers: Headers) -> str | None:
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" and credentials.strip() else None


class RequireToken:
    def __init__(self, app: ASGIApp, token: Secret) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_open(scope["path"]):
            await self.app(scope, receive, send)
            return
        given = _bearer(Headers(scope=scope))
        if given is not None and self.token.matches(given):
            await self.app(scope, receive, send)
            return
        problem = "a bearer token is required" if given is None else "wrong bearer token"
        response = JSONResponse(status_code=401, content={"error": f"{problem}: send Authorization: Bearer <token>"},
                                headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


def documented(schema: dict[str, Any]) -> None:
    """The bearer scheme, required by every operation but the open ones, each
    of which lists its 401."""
    schema.setdefault("components", {}).setdefault("securitySchemes", {})[SCHEME] = {
        "type": "http", "scheme": "bearer", "description": "SP_API_TOKEN_FILE's token"}
    schema["security"] = [{SCHEME: []}]
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            if is_open(path):
                operation["security"] = []
            else:
                operation["responses"].setdefault("401", UNAUTHORIZED)
