"""The gRPC shared secret the unit tests' servers check and their clients send."""

from __future__ import annotations

from pathlib import Path

from sparkpoint.secrets import Secret

GRPC_TOKEN = Secret(Path("/run/secrets/grpc_token"), "unit-test-grpc-token-0123456789")
