"""The log source's planning calls on a large log: a trigger with nothing new
does not read the log from its start (issue 12), counted as the bytes this
process reads through the source."""

from __future__ import annotations

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import LongType, StringType, StructField, StructType

from sparkpoint.eventlog import EventLog
from tests.unit.read_counter import bytes_read
from worker.sources.log_source import SPLIT_BYTES, EventLogStreamReader

SCHEMA = StructType([StructField("id", LongType()), StructField("sym", StringType())])
RECORD = b'{"id":1,"sym":"AAPL","price":101.25,"size":10,"time":"2026-01-01T00:00:00.000000Z"}\n'
LARGE = 24 * 1024 * 1024          # per partition: the whole log is 48 MiB
FEW = 64 * 1024                   # the tail of a partition, and then some


def large_log(root, torn_tail: bytes = b'{"id":2,"sym":"MS') -> EventLog:
    log = EventLog.create(root / "trades", 2)
    for partition in range(2):
        with open(log.path(partition), "wb") as f:
            f.write(RECORD * (LARGE // len(RECORD)))
            f.write(torn_tail)                       # a producer mid-write
    return log


def reader(log: EventLog, cap: int = 10_000) -> EventLogStreamReader:
    return EventLogStreamReader(log.directory, SCHEMA, worker_index=0, worker_count=1, max_records_per_batch=cap)


def test_a_fresh_start_reads_only_the_tail_of_a_large_log(tmp_path):
    source = reader(large_log(tmp_path))
    before = bytes_read()
    latest = source.reportLatestOffset()
    assert bytes_read() - before < 2 * FEW
    expected = (LARGE // len(RECORD)) * len(RECORD)
    assert latest == {"0": expected, "1": expected}


def test_an_idle_trigger_reads_almost_nothing_of_a_large_log(tmp_path):
    source = reader(large_log(tmp_path))
    latest = source.reportLatestOffset()
    for _ in range(3):                               # triggers with nothing appended
        before = bytes_read()
        assert source.reportLatestOffset() == latest
        assert source.latestOffset(latest, ReadMaxRows(10_000)) == latest
        assert source.latestOffset(latest, ReadAllAvailable()) == latest
        assert bytes_read() - before < 4096


def test_a_trigger_reads_only_what_was_appended_and_its_capped_batch(tmp_path):
    log = large_log(tmp_path, torn_tail=b"")
    source = reader(log, cap=10)
    latest = source.reportLatestOffset()
    log.append(0, [{"id": i, "sym": "AAPL"} for i in range(1000)])
    before = bytes_read()
    offsets = source.latestOffset(latest, ReadMaxRows(10))
    assert bytes_read() - before < 2 * FEW
    assert offsets["1"] == latest["1"]
    assert offsets["0"] - latest["0"] == sum(len(f'{{"id":{i},"sym":"AAPL"}}\n') for i in range(5))
    assert source.latestOffset(latest, ReadAllAvailable())["0"] == log.path(0).stat().st_size


def read_ids(source: EventLogStreamReader, partition) -> list[int]:
    return [i for batch in source.read(partition) for i in batch.column("id").to_pylist()]


def test_a_small_batch_is_one_task_and_a_large_one_a_task_per_partition(tmp_path):
    """Each task costs Spark a fixed price: a live stream's small batches are
    read by one; a batch of ``SPLIT_BYTES`` or more by one per partition."""
    log = EventLog.create(tmp_path / "trades", 2)
    source = reader(log, cap=0)
    start = source.reportLatestOffset()
    log.append(0, [{"id": i, "sym": "AAPL"} for i in range(3)])
    log.append(1, [{"id": i, "sym": "MSFT"} for i in range(3, 5)])
    small = source.partitions(start, source.latestOffset(start, ReadAllAvailable()))
    assert len(small) == 1
    assert sorted(read_ids(source, small[0])) == [0, 1, 2, 3, 4]

    start = source.reportLatestOffset()
    per_partition = SPLIT_BYTES // len(RECORD) + 1
    for partition in range(2):
        with open(log.path(partition), "ab") as f:
            f.write(RECORD * per_partition)
    large = source.partitions(start, source.latestOffset(start, ReadAllAvailable()))
    assert len(large) == 2
    assert [len(read_ids(source, part)) for part in large] == [per_partition, per_partition]
    assert source.partitions(start, start) == []
