"""Settings from ``SP_*`` environment variables, on pydantic-settings.

Each program has one :class:`Settings` class: every variable a typed,
bounded field whose description is its documentation (the configuration
reference's table, docs/configuration.md, is generated from the classes: ``make settings-doc``).
``main`` parses the environment once with ``from_env(os.environ)`` into a
frozen object -- never at import time. A blank value counts as unset. A bad
value raises :class:`SettingsError` naming the variable, which ``main`` prints
as one line with :func:`exit_with_error` -- never a stack trace.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar, NoReturn, Self

from pydantic import AfterValidator, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict

from sparkpoint.secrets import SecretFile, TlsFiles

PREFIX = "SP_"


class SettingsError(ValueError):
    """A configuration value is missing or invalid; the message names it."""

    def __init__(self, variable: str, problem: str) -> None:
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


def exit_with_error(program: str, error: Exception) -> NoReturn:
    """Print one line naming what is wrong and exit with status 2."""
    print(f"{program}: error: {error}", file=sys.stderr)
    raise SystemExit(2)


class _Environ(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping (``os.environ``
    in ``main``, a dict in tests); values are stripped, blank ones are unset."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    # The hook pydantic-settings' own sources (dotenv, Azure Key Vault, GCP
    # Secret Manager) override to read variables from elsewhere.
    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {(name if self.case_sensitive else name.lower()): value.strip()
                for name, value in self._environ.items() if name.startswith(PREFIX) and value.strip()}


class Settings(BaseSettings):
    """One program's settings; a field ``name`` is read from ``SP_NAME`` unless
    its ``validation_alias`` names the variable."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, frozen=True, extra="ignore")

    program: ClassVar[str]      # who reads these variables, as the configuration reference names it

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Self:
        try:
            return cls(**_Environ(cls, environ)())
        except ValidationError as error:
            raise _settings_error(cls, error.errors()[0]) from None

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   **_: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only what ``from_env`` read from the mapping it was given: never
        ``os.environ`` behind its back, nor a ``.env`` file."""
        return (init_settings,)

    @classmethod
    def variable(cls, field: str) -> str:
        alias = cls.model_fields[field].validation_alias
        return alias if isinstance(alias, str) else PREFIX + field.upper()


def _settings_error(cls: type[Settings], error: ErrorDetails) -> SettingsError:
    """pydantic's first validation error as one line naming the variable."""
    cause = error.get("ctx", {}).get("error")
    if isinstance(cause, SettingsError):       # a check across fields (a model validator)
        return cause
    name = str(error["loc"][0])
    field = next(f for f in cls.model_fields if name in (f, cls.variable(f)))
    return SettingsError(cls.variable(field), _problem(cls, field, error, cause))


def _problem(cls: type[Settings], field: str, error: ErrorDetails, cause: Any) -> str:
    extra = cls.model_fields[field].json_schema_extra
    unit = f" ({extra['unit']})" if isinstance(extra, dict) and "unit" in extra else ""
    got = error.get("input")
    match error["type"]:
        case "int_parsing" | "int_from_float" | "int_type":
            return f"expected an integer{unit}, got {got!r}"
        case "bool_parsing" | "bool_type":
            return f"expected true or false, got {got!r}"
        case "greater_than_equal":
            return f"must be at least {error['ctx']['ge']}, got {got}"
        case "less_than_equal":
            return f"must be at most {error['ctx']['le']}, got {got}"
        case "value_error":                      # a field validator's own message
            return str(cause)
        case _:
            return f"{error['msg'][:1].lower()}{error['msg'][1:]}, got {got!r}"


# --- value types --------------------------------------------------------------

def _host_port(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected host:port, got {value!r}")
    return value


Address = Annotated[str, AfterValidator(_host_port)]
"""A ``host:port`` address."""

Port = Annotated[int, Field(ge=1, le=65535)]

UserPath = Annotated[Path, AfterValidator(Path.expanduser)]
"""A path; ``~`` is the user's home."""


def _pem(marker: str, what: str) -> Callable[[Path], Path]:
    """A check that a path is a readable PEM file of ``what`` (a TLS library
    would say so only at the first connection)."""
    def check(path: Path) -> Path:
        try:
            with open(path, "rb") as file:
                head = file.read(1 << 16)
        except OSError as error:
            raise ValueError(f"cannot read {path}: {error.strerror}") from None
        if marker.encode() not in head:
            raise ValueError(f"{path} holds no PEM {what} ({marker})")
        return path

    return check


CertificateFile = Annotated[UserPath, AfterValidator(_pem("-----BEGIN CERTIFICATE-----", "certificate"))]
PrivateKeyFile = Annotated[UserPath, AfterValidator(_pem("PRIVATE KEY-----", "private key"))]

Milliseconds = Annotated[int, Field(json_schema_extra={"unit": "milliseconds"})]
Seconds = Annotated[int, Field(json_schema_extra={"unit": "seconds"})]


# --- variables more than one program reads --------------------------------------

WorkerCount = Annotated[int, Field(
    ge=1, le=1024, description="number of workers; the controller refuses a worker with a different count")]
LogDir = Annotated[UserPath, Field(description="root of the event logs")]
SavepointDir = Annotated[UserPath, Field(
    description="the savepoint root, shared by the controller and every worker: exports are written and "
                "imports read here")]
ForceGraphChange = Annotated[bool, Field(
    description='restore a changed pipeline over a checkpoint that holds finished nodes (see "Pipeline changes")')]
HealthMaxAge = Annotated[Seconds, Field(
    ge=1, description="container health checks: seconds without progress (a worker's report, an append to the "
                      "producer's log) before the container counts as unhealthy")]
GrpcPort = Annotated[Port, Field(description="the controller's gRPC port (workers)")]
HttpPort = Annotated[Port, Field(description="the controller's REST port (people and tools)")]
ApiTokenFile = Annotated[SecretFile | None, Field(
    description="file holding the REST API's bearer token (a Docker secret): the controller requires "
                "`Authorization: Bearer <token>` on every endpoint but `/health` and refuses to start without one "
                "unless `SP_API_AUTH=none`; the CLI sends it")]
GrpcTlsCertFile = Annotated[CertificateFile | None, Field(
    description="this program's gRPC certificate (PEM, a Docker secret); with `SP_GRPC_TLS_KEY_FILE` and "
                "`SP_GRPC_TLS_CA_FILE`, gRPC runs over mutual TLS. A worker's certificate names its worker id "
                "(the subject's common name): the controller refuses its calls for any other worker id")]
GrpcTlsKeyFile = Annotated[PrivateKeyFile | None, Field(
    description="the private key of `SP_GRPC_TLS_CERT_FILE` (PEM, a Docker secret)")]
GrpcTlsCaFile = Annotated[CertificateFile | None, Field(
    description="the CA certificate the other side's gRPC certificate must be signed by (the controller: every "
                "worker's; a worker: the controller's, whose names must include the host of "
                "`SP_CONTROLLER_ADDR`)")]


class GrpcTlsSettings(Settings):
    """Settings of a program that speaks gRPC (the controller, a worker): its
    class defines the ``grpc_tls_*_file`` fields (``GrpcTlsCertFile`` ...,
    where its own variables are documented), given all three or none."""

    _TLS_FIELDS: ClassVar[tuple[str, ...]] = ("grpc_tls_cert_file", "grpc_tls_key_file", "grpc_tls_ca_file")

    @model_validator(mode="after")
    def _grpc_tls_in_full(self) -> Self:
        _ = self.grpc_tls
        return self

    @property
    def grpc_tls(self) -> TlsFiles | None:
        """The files of gRPC's mutual TLS; None: plain text. A SettingsError
        names the first one missing when some are given."""
        files = [getattr(self, name) for name in self._TLS_FIELDS]
        if not any(files):
            return None
        given = [self.variable(name) for name, file in zip(self._TLS_FIELDS, files) if file]
        for name, file in zip(self._TLS_FIELDS, files):
            if not file:
                raise SettingsError(self.variable(name), f"is required with {', '.join(given)} (mutual TLS needs "
                                                         "a certificate, its key and the CA)")
        return TlsFiles(*files)


GrpcTokenFile = Annotated[SecretFile | None, Field(
    description="file holding the gRPC shared secret (a Docker secret): the controller refuses calls without it "
                "(`UNAUTHENTICATED`) and to start without one unless `SP_GRPC_AUTH=none`; a worker sends it")]
