"""Secrets read from files (Docker secrets, ``make up``'s ``.secrets/``):
the REST API's bearer token, the gRPC shared secret, PostgreSQL's password.
``make up`` generates the compose stack's (:mod:`sparkpoint.stack_secrets`).

A setting names the file (``SP_API_TOKEN_FILE``, ...); the settings class
reads it once while parsing (``SecretFile``), so a missing, unreadable or
empty file is a startup error naming the variable. The value is kept in a
:class:`Secret` whose ``repr`` shows the path, never the value.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import PlainValidator, WithJsonSchema

# A token longer than this is not a token (a file named by mistake).
MAX_SECRET_BYTES = 4096


@dataclass(frozen=True)
class Secret:
    path: Path
    value: str = field(repr=False)

    def __str__(self) -> str:
        return str(self.path)

    def matches(self, given: str) -> bool:
        """Constant-time comparison: how long it takes says nothing about where ``given`` differs."""
        return hmac.compare_digest(given.encode(), self.value.encode())


def read_secret(path: Path) -> Secret:
    """The first line of ``path``, stripped; ValueError saying why not."""
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_SECRET_BYTES + 1)
    except OSError as error:
        raise ValueError(f"cannot read the secret file {path}: {error.strerror}") from None
    if len(data) > MAX_SECRET_BYTES:
        raise ValueError(f"the secret file {path} is longer than {MAX_SECRET_BYTES} bytes")
    try:
        lines = data.decode().strip().splitlines()
    except UnicodeDecodeError:
        raise ValueError(f"the secret file {path} is not UTF-8 text") from None
    if not lines or not lines[0].strip():
        raise ValueError(f"the secret file {path} is empty")
    return Secret(path, lines[0].strip())


@dataclass(frozen=True)
class TlsFiles:
    """Mutual TLS: this side's certificate and key, and the CA the other
    side's certificate must be signed by (PEM files, e.g. Docker secrets)."""

    certificate: Path
    key: Path
    ca: Path

    def read(self) -> tuple[bytes, bytes, bytes]:
        """The three files' contents (certificate, key, CA)."""
        return self.certificate.read_bytes(), self.key.read_bytes(), self.ca.read_bytes()


def _load(value: Any) -> Secret:
    if isinstance(value, Secret):
        return value
    if not isinstance(value, str | Path):
        raise ValueError(f"expected a file name, got {value!r}")
    return read_secret(Path(value).expanduser())


SecretFile = Annotated[Secret, PlainValidator(_load), WithJsonSchema({"type": "string", "format": "path"})]
"""A setting naming a secret's file: the secret is read while parsing."""


def new_token() -> str:
    """A random token: 256 bits, URL-safe."""
    return secrets.token_urlsafe(32)


class UnsafeSecretsDirectory(RuntimeError):
    """A directory for secrets that someone else could write into or own."""


def create_private_file(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` holding ``data``, with ``mode`` whatever the umask, in
    a directory only its owner reaches (0700, created if missing); leaves an
    existing file as it is. A directory found that another user owns, or
    that group or others may write (they could plant or swap a secret):
    ``UnsafeSecretsDirectory``."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    found = os.stat(path.parent)
    if found.st_uid != os.geteuid() or found.st_mode & 0o022:
        raise UnsafeSecretsDirectory(
            f"{path.parent}: {'owned by another user' if found.st_uid != os.geteuid() else 'writable by others'} "
            f"(mode {stat.S_IMODE(found.st_mode):04o}): secrets are kept only in a directory of your own that no one "
            f"else can write: chmod 700 {path.parent}, or remove it to start over")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except FileExistsError:
        return
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    os.chmod(path, mode)


def ensure_secret(path: Path, mode: int = 0o600) -> Path:
    """Create ``path`` with a new token unless it exists (its directory 0700);
    returns it."""
    create_private_file(path, (new_token() + "\n").encode(), mode)
    return path
