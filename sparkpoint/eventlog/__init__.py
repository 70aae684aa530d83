"""The embedded replayable source: a partitioned, append-only event log on disk."""

from sparkpoint.eventlog.errors import LogFormatError
from sparkpoint.eventlog.log import (
    EventLog,
    committed_end,
    partition_for_key,
    record_count,
)

__all__ = ["EventLog", "LogFormatError", "committed_end", "partition_for_key", "record_count"]
