"""File writes that survive a crash: a temporary name, fsync, rename, fsync
the directory. A crash leaves the old file or the new one, never a torn one.

And reads of files others may have planted (an export, a checkpoint
volume): regular files only, never through a link, never blocking on a FIFO
or a device, their size bounded before a byte is read."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

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


class NotARegularFile(OSError):
    """A link, a directory, a FIFO, a device: not read."""


class FileTooLarge(OSError):
    pass


def open_regular(path: Path) -> BinaryIO:
    """The regular file at ``path``, open for reading. A link (as the last
    component) raises ``OSError`` (ELOOP); a FIFO or a device is opened
    without blocking and refused (``NotARegularFile``)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotARegularFile(errno.EINVAL, "not a regular file", str(path))
    return os.fdopen(fd, "rb")


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The content of the regular file at ``path`` (``open_regular``), at most
    ``max_bytes`` (else ``FileTooLarge``, before reading it)."""
    with open_regular(path) as f:
        if os.fstat(f.fileno()).st_size > max_bytes:
            raise FileTooLarge(errno.EFBIG, f"larger than {max_bytes:,} bytes", str(path))
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:       # it grew meanwhile
        raise FileTooLarge(errno.EFBIG, f"larger than {max_bytes:,} bytes", str(path))
    return data


def sha256_of(path: Path, size: int | None = None) -> str | None:
    """The SHA-256 of the regular file at ``path`` (``open_regular``); with
    ``size``: None, unread, if the file is not that large."""
    digest = hashlib.sha256()
    with open_regular(path) as f:
        if size is not None and os.fstat(f.fileno()).st_size != size:
            return None
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
