"""Bytes this process has read, as the kernel counts them (``rchar`` of
/proc/self/io): every read(2)/pread(2), whatever code path made it."""

from __future__ import annotations

from pathlib import Path


def bytes_read() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == "rchar":
            return int(value)
    raise RuntimeError("/proc/self/io has no rchar line")
