"""Controller settings: ``SP_*`` environment variables, parsed once in ``main``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from sparkpoint.settings import GrpcPort, HttpPort, Milliseconds, SavepointDir, Settings, UserPath, WorkerCount


class ControllerSettings(Settings):
    program = "controller"

    bind: str = Field("0.0.0.0", validation_alias="SP_CONTROLLER_BIND", description="listen address")
    grpc_port: GrpcPort = Field(50051, validation_alias="SP_CONTROLLER_GRPC_PORT")
    http_port: HttpPort = Field(8080, validation_alias="SP_CONTROLLER_HTTP_PORT")
    worker_count: WorkerCount = 1
    checkpoint_freq_ms: Milliseconds = Field(
        5000, ge=0, validation_alias="SP_CONTROLLER_CHECKPOINT_FREQ",
        description="milliseconds between the controller's own checkpoints of its progress table; `0` disables "
                    "them")
    state_dir: UserPath = Field(
        Path("var/controller"), validation_alias="SP_CONTROLLER_STATE_DIR",
        description="where the controller keeps its checkpoint and its savepoint records")
    savepoint_dir: SavepointDir = Path("var/savepoints")
    savepoint_timeout_ms: Milliseconds = Field(
        120000, ge=1, validation_alias="SP_SAVEPOINT_TIMEOUT",
        description="milliseconds a savepoint (or an export) may take before it fails, naming the workers that "
                    "did not answer")
