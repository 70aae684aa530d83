"""A partitioned, append-only event log (think of a tickerplant log).

Layout of a log named ``trades`` under the log root::

    trades/log.json          {"partitions": 4}
    trades/p-0000.jsonl      one JSON object per line, appended
    trades/p-0001.jsonl      ...

An offset is a byte position in a partition file, always at a record
boundary. A record is complete once its terminating newline is on disk: a
reader ignores a trailing partial line (a producer crashed mid-write, or is
mid-write now), so a replay from any offset reads exactly the same records.
Ends are found from the file's tail (``scan``), never by reading it from the
start. (The worker's Spark source is the JVM's reading of the same format:
``jvm/sparkpoint/eventlog/``.)
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterable
from pathlib import Path

from sparkpoint.eventlog.errors import LogFormatError
from sparkpoint.eventlog.scan import count_records, last_record_end, records_end

_META = "log.json"


def partition_for_key(key: str, partitions: int) -> int:
    """Stable key -> partition map, so one key's state lives on one worker."""
    return zlib.crc32(key.encode("utf-8")) % partitions


def partition_file(directory: Path, partition: int) -> Path:
    return directory / f"p-{partition:04d}.jsonl"


class EventLog:
    """One named log: its directory, partition count and files."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    @classmethod
    def create(cls, directory: Path, partitions: int) -> EventLog:
        """Create the log, or open it if it exists with the same partition count."""
        if partitions < 1:
            raise LogFormatError(f"{directory}: a log needs at least one partition")
        log = cls(directory)
        meta = log.directory / _META
        if meta.exists():
            existing = log.partitions()
            if existing != partitions:
                raise LogFormatError(
                    f"{meta}: log exists with {existing} partitions, asked for {partitions}")
            return log
        log.directory.mkdir(parents=True, exist_ok=True)
        tmp = meta.with_suffix(".tmp")
        tmp.write_text(json.dumps({"partitions": partitions}))
        os.replace(tmp, meta)
        return log

    def exists(self) -> bool:
        return (self.directory / _META).exists()

    def partitions(self) -> int:
        meta = self.directory / _META
        try:
            count = json.loads(meta.read_text())["partitions"]
        except FileNotFoundError:
            raise LogFormatError(f"{meta}: no such event log (is the producer running?)") from None
        except (ValueError, KeyError, TypeError):
            raise LogFormatError(f"{meta}: not a valid event log header") from None
        if not isinstance(count, int) or count < 1:
            raise LogFormatError(f"{meta}: invalid partition count {count!r}")
        return count

    def path(self, partition: int) -> Path:
        return partition_file(self.directory, partition)

    def append(self, partition: int, records: Iterable[dict], *, sync: bool = False) -> int:
        """Append records to one partition in a single write; returns the new end offset."""
        payload = b"".join(
            json.dumps(record, separators=(",", ":")).encode("utf-8") + b"\n" for record in records)
        fd = os.open(self.path(partition), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, payload)
            if sync:
                os.fsync(fd)
            return os.fstat(fd).st_size
        finally:
            os.close(fd)


def committed_end(path: Path, start: int, max_records: int | None = None) -> int:
    """The offset after the last complete record reachable from ``start``.

    With ``max_records``, stop after that many records (the per-batch cap).
    A missing file has nothing in it yet: its end is ``start``. Reads the torn
    tail backwards from the file's end, and with a cap the records from
    ``start`` on: never the file from its beginning.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return start
    try:
        size = os.fstat(fd).st_size
        if size <= start:
            return start
        end = last_record_end(fd, start, size)
        if max_records is None or end <= start:
            return end
        return records_end(fd, start, max_records, end)
    finally:
        os.close(fd)


def record_count(path: Path) -> int:
    """How many complete records a partition file holds (0 if it does not exist): one pass over it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        return count_records(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)

