"""The embedded replayable source: a partitioned, append-only event log on disk."""

from sparkpoint.eventlog.log import (
    EventLog,
    LogFormatError,
    committed_end,
    partition_for_key,
    read_range,
)

__all__ = ["EventLog", "LogFormatError", "committed_end", "partition_for_key", "read_range"]
