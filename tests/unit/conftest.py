import socket
import threading
from pathlib import Path

import pytest
import uvicorn

from controller.core.service import ControllerService
from controller.grpc.servicer import start_grpc_server
from tests.unit.fakes import FakeClock, new_service
from tests.unit.grpc_support import GRPC_TOKEN
from tests.unit.rest_support import TOKEN, app_for
from tests.unit.savepoint_support import Pipeline, running_pipeline


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def service(clock, tmp_path) -> ControllerService:
    return new_service(clock, tmp_path)


@pytest.fixture
def address(service) -> str:
    """``service`` served over gRPC in process: its address."""
    server, port = start_grpc_server(service, "127.0.0.1", 0, token=GRPC_TOKEN)
    yield f"127.0.0.1:{port}"
    server.stop(grace=None).wait()


@pytest.fixture
def pipeline(service) -> Pipeline:
    """Both workers of ``service`` registered, with checkpoints 4 and 9 committed."""
    return running_pipeline(service)


@pytest.fixture
def savepoint_root(tmp_path) -> Path:
    """The savepoint root (SP_SAVEPOINT_DIR) of ``service``."""
    return tmp_path / "savepoints"


class CurrentApp:
    """An ASGI app that forwards to this test's REST app: one server serves
    every test (stopping uvicorn takes a tick of its loop, 0.1 s or more)."""

    def __init__(self) -> None:
        self.app = None

    async def __call__(self, scope, receive, send) -> None:
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def server():
    """The socket listens before the server thread starts, so the first
    request waits in its backlog: no polling for readiness."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    current = CurrentApp()
    server = uvicorn.Server(uvicorn.Config(current, lifespan="off", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    yield current, f"http://127.0.0.1:{listener.getsockname()[1]}"
    server.should_exit = True
    thread.join(timeout=10)
    listener.close()


@pytest.fixture
def url(server, service, tmp_path, monkeypatch) -> str:
    """The controller's REST address, serving this test's service; the CLI
    finds its token in SP_API_TOKEN_FILE."""
    current, address = server
    current.app = app_for(service)
    token_file = tmp_path / "api-token"
    token_file.write_text(TOKEN + "\n")
    monkeypatch.setenv("SP_API_TOKEN_FILE", str(token_file))
    return address
