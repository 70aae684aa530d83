"""The REST API fuzzed from its own OpenAPI document (schemathesis, in
process over ASGI, every check): no input makes it answer 5xx, and every
answer is one the document lists, with the body it describes.

Each operation's run gets a fresh controller with two workers registered
(so savepoints can be taken) and one complete savepoint to restore, export
and dispose. Examples are bounded so the whole run stays well under a minute.
Every call sends the bearer token; schemathesis' ``ignored_auth`` check also
sends some without it and expects them refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.unit.conftest import CurrentApp
from tests.unit.fakes import FakeClock, new_service
from tests.unit.rest_support import AUTH, TOKEN, app_for
from tests.unit.savepoint_support import running_pipeline, take

APP = CurrentApp()
# The document does not depend on the controller's state: any controller
# serves it (this one reads and writes nothing).
APP.app = app_for(new_service(FakeClock(), Path("/nonexistent/sparkpoint-openapi")))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP, headers=AUTH)


@schema.auth()
class Token:
    """The bearer token on every case but the ones schemathesis sends without
    it on purpose (negative cases, expected to be 401)."""

    def get(self, case, context) -> str:
        return TOKEN

    def set(self, case, data: str, context) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@pytest.fixture(autouse=True)
def controller(tmp_path):
    service = new_service(FakeClock(), tmp_path)
    take(running_pipeline(service))
    APP.app = app_for(service)


@schema.parametrize()
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_answer_is_documented_and_none_is_a_server_error(case):
    # A generated ``Host`` header names a host the API does not serve: the
    # trusted-host guard answers it before any operation, in Starlette's
    # plain text (controller/rest/access.py; test_rest_auth.py checks it).
    case.headers = {name: value for name, value in (case.headers or {}).items() if name.lower() != "host"}
    case.call_and_validate()
