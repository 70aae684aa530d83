"""Byte scans that find record boundaries in a partition file without reading
it from its start.

A record ends with ``\\n``; bytes after the last newline are a torn or
in-flight record and never count. Offsets are byte positions, so the end of
the log is found by reading backwards from the file's size to the last
newline, and a capped batch by reading forwards from its start only. Whole
chunks are counted with ``bytes.count``, never record by record in Python.
Every scan reads with ``os.pread`` on a file descriptor the caller opened.
"""

from __future__ import annotations

import os

from sparkpoint.eventlog.errors import LogFormatError

FORWARD_CHUNK = 1 << 20
BACKWARD_FIRST_CHUNK = 4096
BACKWARD_MAX_CHUNK = 1 << 20


def last_record_end(fd: int, floor: int, size: int) -> int:
    """The offset after the last newline in ``[floor, size)``, or ``floor`` if there is none.

    ``floor`` must be a record boundary. Reads backwards from ``size`` in growing
    chunks, so the cost is the length of the torn tail, not of the file.
    """
    position = size
    chunk = BACKWARD_FIRST_CHUNK
    while position > floor:
        begin = max(floor, position - chunk)
        data = os.pread(fd, position - begin, begin)
        index = data.rfind(b"\n")
        if index >= 0:
            return begin + index + 1
        position = begin
        chunk = min(chunk * 2, BACKWARD_MAX_CHUNK)
    return floor


def records_end(fd: int, start: int, max_records: int, limit: int) -> int:
    """The offset after the ``max_records``-th record from ``start``, or ``limit`` if fewer lie before it.

    ``start`` and ``limit`` must be record boundaries (``limit`` a committed end);
    only bytes of ``[start, limit)`` are read, up to the capped record.
    """
    position, remaining = start, max_records
    while position < limit and remaining > 0:
        data = os.pread(fd, min(FORWARD_CHUNK, limit - position), position)
        if not data:
            raise LogFormatError(f"fd {fd}: no bytes at offset {position} before the committed end {limit}"
                                 " (was the log truncated?)")
        newlines = data.count(b"\n")
        if newlines < remaining:
            remaining -= newlines
            position += len(data)
            continue
        index = -1
        for _ in range(remaining):
            index = data.find(b"\n", index + 1)
        return position + index + 1
    return position


def count_records(fd: int, size: int) -> int:
    """How many complete records ``[0, size)`` holds: one pass, a newline count per chunk."""
    total = position = 0
    while position < size:
        data = os.pread(fd, min(FORWARD_CHUNK, size - position), position)
        if not data:
            break
        total += data.count(b"\n")
        position += len(data)
    return total
