"""The checkpoint store's lock: which one process writes for an index.

Files at the store's root::

    LOCK      held (flock) by the one live holder, which names itself in it:
              "<worker id> (pid <pid> on <host>)"; its holder touches it every
              second (``touch``), so its mtime says the holder still runs
    FENCE     "<volume id> <generation>": the store's id, and how many processes
              have taken LOCK (the epoch the controller checks: a later one
              proves every earlier holder gone or fenced off)
    TAKEOVER  flock'd by a process breaking a silent holder's lock: one at a time

The kernel drops a lock the moment its holder dies, however it dies. A
holder that is alive but hung -- a paused container, a process cut off from
the volume's host -- keeps its flock, so a lock left untouched for
``silence_s`` is broken: the breaker writes a new ``LOCK`` file and renames
it over the old one. The old holder's flock is then on a file no longer
named ``LOCK``, which is how it learns (``lost``), before its next write to
the store and within a second from its heartbeat, that it no longer holds
the index.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from sparkpoint.fileio import atomic_write, fsync_dir
from sparkpoint.messages import VolumeFence

log = logging.getLogger("sparkpoint.worker.checkpoints")

LOCK = "LOCK"


class FenceError(RuntimeError):
    """Another live worker holds this checkpoint directory; ``holder``
    names it (as it wrote itself into ``LOCK``)."""

    def __init__(self, message: str, holder: str) -> None:
        super().__init__(message)
        self.holder = holder


class Superseded(RuntimeError):
    """This process held the lock, and another has broken it since: it must
    write nothing more to the store (the message names the new holder)."""


class StoreLock:
    def __init__(self, root: Path, *, clock: Callable[[], float] = time.time) -> None:
        self.root = Path(root)
        self._path = self.root / LOCK
        self._clock = clock
        self._fd: int | None = None

    def acquire(self, owner: str, *, silence_s: float | None = None) -> VolumeFence:
        """Take the lock for this process's lifetime, or raise ``FenceError``
        naming the holder; count this taking of it (``FENCE``, durable before
        it is returned). ``silence_s``: break the lock of a holder that has
        not touched it for that long (None: never)."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd, holder, silent_s = self._try_take(owner)
        if fd is None and (silence_s is None or silent_s < silence_s or (fd := self._break(owner, silence_s)) is None):
            raise FenceError(f"checkpoint directory {self.root} is in use by {holder}; "
                             "two live workers must not share one", holder)
        self._fd = fd
        return self._next_fence()

    def _try_take(self, owner: str) -> tuple[int | None, str, float]:
        """``LOCK`` taken if free (its descriptor, named after ``owner``);
        else None, who holds it and for how long they have not touched it."""
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o644)
        if _flocked(fd) and self._named(fd):
            _name(fd, owner)
            return fd, owner, 0.0
        holder, silent_s = _holder(fd), self._clock() - os.fstat(fd).st_mtime
        os.close(fd)
        return None, holder, silent_s

    def _break(self, owner: str, silence_s: float) -> int | None:
        """Under ``TAKEOVER``: if ``LOCK``'s holder is still silent, a new
        ``LOCK``, held by this process, in its place (its descriptor); None if
        another process is breaking it or the holder spoke meanwhile.

        Steps:
        1. Take ``TAKEOVER`` (or give up: another process is at it).
        2. Look again: the lock free now is simply taken; one touched since
           is kept.
        3. Write a new lock file, held and naming this process, and rename it
           over ``LOCK``; fsync the directory.
        """
        # 1.
        guard = os.open(self.root / "TAKEOVER", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not _flocked(guard):
                return None
            # 2.
            fd, holder, silent_s = self._try_take(owner)
            if fd is not None or silent_s < silence_s:
                return fd
            # 3.
            tmp = self.root / f".{LOCK}.{uuid.uuid4().hex}.tmp"
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            _name(fd, owner)
            os.replace(tmp, self._path)
            fsync_dir(self.root)
            log.warning("%s: %s has not touched the lock for %.0f s (hung or cut off?): taking the index over",
                        self.root, holder, silent_s)
            return fd
        finally:
            os.close(guard)

    def _named(self, fd: int) -> bool:
        """Whether ``fd`` is the file named ``LOCK`` now (not one broken and replaced)."""
        try:
            named = os.stat(self._path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def _next_fence(self) -> VolumeFence:
        """Under the lock: one more taking of it. An unreadable ``FENCE``
        starts a new volume id, and one that cannot be written (a full
        volume) gives no fence: either way the controller then waits out the
        old session's silence instead."""
        path = self.root / "FENCE"
        try:
            volume_id, generation = path.read_text().split()
            fence = VolumeFence(volume_id, int(generation) + 1)
        except (FileNotFoundError, ValueError):
            fence = VolumeFence(uuid.uuid4().hex, 1)
        try:
            atomic_write(path, f"{fence.volume_id} {fence.generation}\n".encode())
        except OSError as error:
            log.warning("%s: cannot count this worker's taking of the lock (%s); registering without a fence",
                        path, error.strerror or error)
            return VolumeFence()
        return fence

    def touch(self) -> None:
        """The holder's heartbeat: it still runs."""
        if self._fd is not None:
            os.utime(self._fd)

    def lost(self) -> str | None:
        """Why this process no longer holds the lock it took (None: it does)."""
        if self._fd is None or self._named(self._fd):
            return None
        try:
            holder = self._path.read_text().strip() or "another process"
        except FileNotFoundError:
            holder = "nobody (the LOCK file is gone)"
        return f"checkpoint directory {self.root} was taken over by {holder}"

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _flocked(fd: int) -> bool:
    """Whether this process now holds ``fd``'s flock (it is taken if free)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _holder(fd: int) -> str:
    return os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"


def _name(fd: int, owner: str) -> None:
    """Write this process into the lock file it holds (which touches it)."""
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{owner} (pid {os.getpid()} on {socket.gethostname()})".encode(), 0)
