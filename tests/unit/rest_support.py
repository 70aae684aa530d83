"""The REST app as the unit tests call it: with a bearer token, answering
TestClient's and the local server's host names, every client sending the token."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient

from controller.core.service import ControllerService
from controller.rest.access import Access
from controller.rest.app import create_app
from sparkpoint.secrets import Secret

TOKEN = "unit-test-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ACCESS = Access(Secret(Path("/run/secrets/api_token"), TOKEN), ("testserver", "127.0.0.1", "localhost"))


def app_for(service: ControllerService, problems: Callable[[], list[str]] = list) -> FastAPI:
    return create_app(service, problems, access=ACCESS)


def client_for(service: ControllerService, problems: Callable[[], list[str]] = list, **options) -> TestClient:
    """A TestClient of ``app_for(service, problems)`` that sends the token."""
    return TestClient(app_for(service, problems), headers=AUTH, **options)
