"""Controller settings: ``SP_*`` environment variables, parsed once in ``main``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sparkpoint.secrets import Secret
from sparkpoint.settings import (
    ApiTokenFile,
    GrpcPort,
    GrpcTlsCaFile,
    GrpcTlsCertFile,
    GrpcTlsKeyFile,
    GrpcTlsSettings,
    GrpcTokenFile,
    HttpPort,
    Milliseconds,
    SavepointDir,
    SettingsError,
    UserPath,
    WorkerCount,
)

Auth = Literal["token", "none"]


class ControllerSettings(GrpcTlsSettings):
    program = "controller"

    bind: str = Field(
        "127.0.0.1", validation_alias="SP_CONTROLLER_BIND",
        description="listen address (REST and gRPC); `0.0.0.0` for every interface (the compose stack sets it "
                    "inside its networks)")
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
    api_token_file: ApiTokenFile = None
    api_auth: Auth = Field(
        "token", description="`none` runs the REST API without authentication (logged as a warning); anything "
                             "but `token` and `none` is refused")
    api_allowed_hosts: str = Field(
        "localhost,127.0.0.1,controller",
        description="comma-separated `Host` names the REST API answers (`*.example.com` patterns, `*` for any); "
                    "others get 400, against DNS rebinding")

    grpc_token_file: GrpcTokenFile = None
    grpc_auth: Auth = Field(
        "token", description="`none` runs the gRPC service without authentication (logged as a warning); "
                             "anything but `token` and `none` is refused")
    grpc_tls_cert_file: GrpcTlsCertFile = None
    grpc_tls_key_file: GrpcTlsKeyFile = None
    grpc_tls_ca_file: GrpcTlsCaFile = None

    @field_validator("api_allowed_hosts")
    @classmethod
    def _host_names(cls, hosts: str) -> str:
        names = [name.strip() for name in hosts.split(",")]
        if not all(names):
            raise ValueError(f"expected comma-separated host names, got {hosts!r}")
        for name in names:
            if "*" in name[1:] or (name.startswith("*") and name != "*" and not name.startswith("*.")):
                raise ValueError(f"a pattern is like *.example.com, got {name!r}")
        return ",".join(names)

    @model_validator(mode="after")
    def _api_token_unless_none(self) -> ControllerSettings:
        _one_of(self.api_auth, self.api_token_file, "SP_API_TOKEN_FILE", "SP_API_AUTH", "the REST API's bearer token")
        _one_of(self.grpc_auth, self.grpc_token_file, "SP_GRPC_TOKEN_FILE", "SP_GRPC_AUTH", "the gRPC shared secret")
        return self

    @property
    def allowed_hosts(self) -> tuple[str, ...]:
        return tuple(self.api_allowed_hosts.split(","))

    @property
    def api_token(self) -> Secret | None:
        """The REST API's token; None when ``SP_API_AUTH=none``."""
        return self.api_token_file if self.api_auth == "token" else None

    @property
    def grpc_token(self) -> Secret | None:
        """The gRPC shared secret; None when ``SP_GRPC_AUTH=none``."""
        return self.grpc_token_file if self.grpc_auth == "token" else None


def _one_of(auth: Auth, secret: Secret | None, file_variable: str, auth_variable: str, what: str) -> None:
    """A secret file, or authentication turned off explicitly: not neither, not both."""
    if auth == "token" and secret is None:
        raise SettingsError(file_variable, f"is required: the file holding {what} (a Docker secret); set "
                                           f"{auth_variable}=none to run without authentication")
    if auth == "none" and secret is not None:
        raise SettingsError(auth_variable, f"is none, but {file_variable} is set: unset one of them")

