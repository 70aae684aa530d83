"""File writes that survive a crash: a temporary name, fsync, rename, fsync
the directory. A crash leaves the old file or the new one, never a torn one."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

_CHUNK = 1 << 20


def fsync_path(path: Path) -> None:
    """fsync a file or directory someone else wrote."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: Path) -> None:
    fsync_path(directory)


def atomic_write(path: Path, data: bytes) -> None:
    _place(path, data, os.replace)


def atomic_create(path: Path, data: bytes) -> None:
    """``atomic_write``, but never replacing a file: ``FileExistsError`` if
    ``path`` exists (a hard link from the temporary name, not a rename)."""
    _place(path, data, os.link)


def _place(path: Path, data: bytes, put: Callable[[str, Path], None]) -> None:
    """Write ``data`` to a temporary file beside ``path``, fsync it, ``put``
    it at ``path``, fsync the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        put(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    fsync_dir(path.parent)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
