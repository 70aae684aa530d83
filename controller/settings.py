"""Controller settings, read once from ``SP_*`` environment variables in ``main``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkpoint.env import Env


@dataclass(frozen=True)
class ControllerSettings:
    bind: str
    grpc_port: int
    http_port: int
    worker_count: int
    checkpoint_freq_ms: int     # 0 = the controller keeps no checkpoint
    state_dir: Path             # its checkpoint, and its savepoint records (kept whatever the frequency)
    savepoint_dir: Path         # the savepoint root the workers share: exports and imports
    savepoint_timeout_ms: int   # for every worker's part of a savepoint, and of an export

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ControllerSettings:
        env = Env(environ)
        return cls(
            bind=env.string("SP_CONTROLLER_BIND", "0.0.0.0"),
            grpc_port=env.port("SP_CONTROLLER_GRPC_PORT", 50051),
            http_port=env.port("SP_CONTROLLER_HTTP_PORT", 8080),
            worker_count=env.integer("SP_WORKER_COUNT", 1, minimum=1, maximum=1024),
            checkpoint_freq_ms=env.integer("SP_CONTROLLER_CHECKPOINT_FREQ", 5000, minimum=0, unit="milliseconds"),
            state_dir=env.path("SP_CONTROLLER_STATE_DIR", "var/controller"),
            savepoint_dir=env.path("SP_SAVEPOINT_DIR", "var/savepoints"),
            savepoint_timeout_ms=env.integer("SP_SAVEPOINT_TIMEOUT", 120000, minimum=1, unit="milliseconds"),
        )
