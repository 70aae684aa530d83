"""The controller's REST API as the CLI calls it: JSON over the standard
library's ``urllib`` (the CLI must run where only the runtime dependencies
are installed), with the bearer token of ``SP_API_TOKEN_FILE`` when set. Every failure becomes one line: ``Refused`` for a 409,
``CommandError`` for anything else."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sparkpoint.secrets import Secret
from sparkpoint_cli.errors import CommandError, Refused

if TYPE_CHECKING:
    from sparkpoint_cli.settings import CliSettings

DEFAULT_URL = "http://localhost:8080"

ControllerOption = Annotated[str | None, typer.Option(
    "--controller", metavar="URL", help=f"the controller's REST address (default: SP_CONTROLLER_URL, else {DEFAULT_URL})")]


def checked_url(url: str, source: str) -> str:
    """``url`` without a trailing slash if it is an http(s) base address;
    ``source`` (the option or variable it came from) names it in the error."""
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port     # noqa: B018 -- raises ValueError for a port that is not a number in range
    except ValueError:
        raise CommandError(f"{source}: {url!r} has an invalid port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise CommandError(f"{source}: expected the controller's address like {DEFAULT_URL}, got {url!r}")
    return url.rstrip("/")


def connect(option: str | None, settings: CliSettings) -> ControllerApi:
    """The controller at ``--controller`` if given, else at ``SP_CONTROLLER_URL``;
    with ``SP_API_TOKEN_FILE``'s token, if set."""
    token = settings.api_token_file
    if option is not None:
        return ControllerApi(checked_url(option, "--controller"), token=token)
    return ControllerApi(checked_url(settings.controller_url, "SP_CONTROLLER_URL"), token=token)


def quoted(segment: str) -> str:
    """A value as one path segment of a URL."""
    return urllib.parse.quote(segment, safe="")


class ControllerApi:
    def __init__(self, base_url: str, *, token: Secret | None = None, timeout_s: float = 10.0) -> None:
        self.base_url = base_url
        self._timeout_s = timeout_s
        self._headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token.value}"

    def get(self, path: str) -> Any:
        return self._call("GET", path)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        return self._call("POST", path, body)

    def delete(self, path: str) -> Any:
        return self._call("DELETE", path)

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        request = urllib.request.Request(
            self.base_url + path, method=method, headers=self._headers,
            data=None if body is None else json.dumps(body).encode())
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            message = _error_message(error)
            if error.code == 401:
                raise CommandError(f"{message} (HTTP 401): set SP_API_TOKEN_FILE to the file holding the "
                                   "controller's token") from None
            if error.code == 409:
                raise Refused(message) from None
            raise CommandError(f"{message} (HTTP {error.code})") from None
        except (urllib.error.URLError, OSError) as error:
            reason = error.reason if isinstance(error, urllib.error.URLError) else error
            raise CommandError(f"cannot reach the controller at {self.base_url}: {reason} (start it, or "
                               "set --controller / SP_CONTROLLER_URL)") from None
        except ValueError:
            raise CommandError(f"{method} {path}: the controller at {self.base_url} answered something that is "
                               "not JSON") from None


def _error_message(error: urllib.error.HTTPError) -> str:
    """The controller's ``{"error": ...}`` message, or the HTTP reason."""
    try:
        body = json.loads(error.read())
    except (ValueError, OSError):
        return str(error.reason)
    return str(body["error"]) if isinstance(body, dict) and "error" in body else str(error.reason)
