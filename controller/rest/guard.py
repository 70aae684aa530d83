"""What a request must be before a handler sees it.

- JSON only (``json_only``, a dependency of every route, so routing answers
  first: 404, 405): a cross-site form, or a script's request without a
  body, reaches the API without a CORS preflight only with a "simple"
  content type (a form's, plain text) or none at all, so every ``POST`` and
  any request with a body must be ``Content-Type: application/json`` (415).
- Its size (``BodySizeLimit``, 413): a declared ``Content-Length`` over the
  limit is answered at once, a body sent in chunks is counted as it is read.
  (FastAPI's own ``max_body_size`` answers the first case in plain text,
  whatever the app's error handlers say.)
"""

from __future__ import annotations

from fastapi import HTTPException, Request
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

JSON = "application/json"


def json_only(request: Request) -> None:
    headers = request.headers
    has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
    media_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if (request.method == "POST" or has_body) and media_type != JSON:
        raise HTTPException(415, f"{request.method} takes a JSON body: send Content-Type: {JSON}")


class BodySizeLimit:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    def _too_large(self, size: str) -> str:
        return f"the body is {size} bytes, more than the {self.max_body_bytes} accepted"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            await JSONResponse(status_code=413, content={"error": self._too_large(declared)})(scope, receive, send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_body_bytes:
                # Raised where the handler reads its body: the app's own
                # error handler answers it.
                raise HTTPException(413, self._too_large(f"over {received}"))
            return message

        await self.app(scope, counted, send)
