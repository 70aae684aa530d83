"""The embedded replayable source: a partitioned, append-only event log on disk."""

from sparkpoint.eventlog.errors import LogFormatError
from sparkpoint.eventlog.log import (
    EventLog,
    committed_end,
    partition_for_key,
    read_range,
    record_count,
)
from sparkpoint.eventlog.partition_end import PartitionEnd

__all__ = ["EventLog", "LogFormatError", "PartitionEnd", "committed_end", "partition_for_key", "read_range",
           "record_count"]
