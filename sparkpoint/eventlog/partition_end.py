"""A partition's committed end, kept across calls.

A stream reader asks for the end of each partition on every trigger. The
answer is cached with the file's identity and size: when the size has not
changed, a call costs one ``stat``; when it grew, only the appended bytes are
scanned (backwards from the new size, down to the end known before). A file
that shrank or was replaced by another is scanned afresh, from its tail.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkpoint.eventlog.scan import last_record_end, records_end


class PartitionEnd:
    """The end of one partition file's complete records, and of the next batch in it."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._identity: tuple[int, int] | None = None
        self._size = 0
        self._end = 0

    def end(self) -> int:
        """The offset after the last complete record (0 while the file does not exist)."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            self._forget(None)
            return 0
        identity = (stat.st_dev, stat.st_ino)
        if identity != self._identity or stat.st_size < self._size:
            self._forget(identity)
        if stat.st_size != self._size:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                self._end = last_record_end(fd, self._end, stat.st_size)
            finally:
                os.close(fd)
            self._size = stat.st_size
        return self._end

    def batch_end(self, start: int, max_records: int | None = None) -> int:
        """Where a batch from ``start`` ends: the committed end, or after ``max_records``
        records if that comes first. Never before ``start``; reads only from ``start`` on."""
        end = self.end()
        if end <= start:
            return start
        if max_records is None:
            return end
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return records_end(fd, start, max_records, end)
        finally:
            os.close(fd)

    def _forget(self, identity: tuple[int, int] | None) -> None:
        self._identity, self._size, self._end = identity, 0, 0
