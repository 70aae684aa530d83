"""The controller container's health check (docker/healthcheck-http.py)
against a real HTTP server standing in for the controller's /health."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "docker" / "healthcheck-http.py"
# Runs the check, then says which of the settings' heavy imports it made.
PROBE = ("import runpy, sys\ntry:\n    runpy.run_path(sys.argv[1], run_name='__main__')\nexcept SystemExit as end:\n"
         "    print(end.code, sorted(m for m in ('pydantic', 'controller.settings') if m in sys.modules))\n")


@pytest.fixture
def controller() -> Iterator[tuple[int, dict]]:
    answer = {"status": "ok"}

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = json.dumps(answer if self.path == "/health" else {}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], answer
    finally:
        server.shutdown()
        server.server_close()


def check(port: int) -> list[str]:
    result = subprocess.run([sys.executable, "-c", PROBE, str(SCRIPT)], cwd=REPO, capture_output=True, text=True,
                            env={"SP_CONTROLLER_HTTP_PORT": str(port), "PATH": "/usr/bin:/bin",
                                 "PYTHONPATH": str(REPO)}, timeout=60)
    return result.stdout.splitlines()


def test_healthy_while_the_controller_says_ok_without_importing_the_settings(controller):
    port, answer = controller
    assert check(port) == ["healthy", "0 []"]
    answer["status"] = "degraded"
    assert check(port) == ["unhealthy: status 'degraded'", "1 []"]


def test_unhealthy_when_nothing_answers(controller):
    port, _ = controller
    lines = check(port + 1 if port < 65535 else port - 1)
    assert lines[0].startswith("unhealthy: ") and lines[-1] == "1 []"
