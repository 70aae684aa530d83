"""The event log source in the worker's JVM (``jvm/sparkpoint/eventlog/``),
driven through py4j as Spark drives it: each partition's end found from the
file's tail and kept across triggers, caps, files that shrink or are
replaced, what each call reads (the source's own count of the bytes it read,
``bytesScanned`` in a query's progress: a trigger with no new data does not
read the log from its start, issue 12), how a batch is split into tasks, and
records parsed into the query's schema in a real query."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.errors import StreamingQueryException

from sparkpoint.eventlog import EventLog, committed_end, record_count
from tests.log_reference import append_in_chunks, expected_batch_end, record_ends, records, torn_tails
from worker.sources.log_source import read_log

pytestmark = pytest.mark.integration

RECORD = b'{"id":1,"sym":"AAPL","price":101.25,"size":10,"time":"2026-01-01T00:00:00.000000Z"}\n'
LARGE = 24 * 1024 * 1024          # per partition: the whole log is 48 MiB
FEW = 64 * 1024                   # the tail of a partition, and then some
SPLIT_BYTES = 1024 * 1024         # EventLogStream.SPLIT_BYTES


@pytest.fixture(scope="module")
def jvm(spark):
    return spark._jvm


def partition_end(jvm, path: Path, scan=None):
    scan = scan if scan is not None else jvm.sparkpoint.eventlog.RecordScan()
    return jvm.sparkpoint.eventlog.PartitionEnd(str(path), scan), scan


def test_end_follows_appends_in_random_chunks(jvm):
    # Chunks of a few bytes, so records straddle chunk boundaries.
    @settings(max_examples=100, deadline=None)
    @given(stream=records, tail=torn_tails,
           cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
           cap=st.one_of(st.none(), st.integers(min_value=1, max_value=8)), start_pick=st.integers(min_value=0))
    def check(stream, tail, cuts, cap, start_pick):
        with tempfile.TemporaryDirectory() as root:
            path = Path(root) / "p-0000.jsonl"
            tracker, _ = partition_end(jvm, path, jvm.sparkpoint.eventlog.RecordScan(7, 3, 11))
            assert tracker.end() == 0                   # no file yet
            # A torn record last.
            for so_far in append_in_chunks(path, b"".join(stream) + tail, cuts):
                boundaries = [0, *record_ends(so_far)]
                start = boundaries[start_pick % len(boundaries)]
                assert tracker.end() == boundaries[-1]
                assert tracker.end() == boundaries[-1]  # asked again, nothing appended
                expected = expected_batch_end(so_far, start, cap)
                assert tracker.batchEnd(start, cap or 0).end() == expected
                # The worker's Python finds the same ends (recovery targets, tests).
                assert committed_end(path, start, cap) == expected
                assert record_count(path) == len(boundaries) - 1

    check()


def test_a_file_that_shrank_or_was_replaced_is_scanned_afresh(jvm, tmp_path):
    path = tmp_path / "p-0000.jsonl"
    path.write_bytes(b'{"id":0}\n{"id":1}\n')
    tracker, _ = partition_end(jvm, path)
    assert tracker.end() == 18
    path.write_bytes(b'{"i":0}\n{"i')                # truncated and rewritten in place
    assert tracker.end() == 8
    replacement = tmp_path / "new"
    replacement.write_bytes(b'{"id":0}\n{"id":1}\n{"id":2}\n')
    os.replace(replacement, path)                    # another file (a new inode), larger
    assert tracker.end() == 27
    path.unlink()
    assert tracker.end() == 0
    assert tracker.batchEnd(9, 4).end() == 9              # never before start
    assert partition_end(jvm, tmp_path / "absent")[0].batchEnd(42, 3).end() == 42


def test_a_call_with_nothing_appended_reads_nothing_and_an_append_reads_only_it(jvm, tmp_path):
    path = tmp_path / "p-0000.jsonl"
    record = b'{"id":1,"sym":"AAPL","price":101.25,"size":10}\n'
    with open(path, "wb") as f:
        f.write(record * (8 * 1024 * 1024 // len(record)))
        f.write(b'{"id":2,"sym":')                  # a producer mid-write
    tracker, scan = partition_end(jvm, path)
    end = tracker.end()
    assert scan.bytesRead() < FEW                    # the tail only, on a fresh start
    assert end == path.stat().st_size - len(b'{"id":2,"sym":')

    before = scan.bytesRead()
    assert tracker.end() == end
    assert tracker.batchEnd(end, 10_000).end() == end
    assert tracker.batchEnd(end, 0).end() == end
    assert scan.bytesRead() == before                # a stat, no scan

    appended = record * 100
    with open(path, "ab") as f:
        f.write(b'"AAPL"}\n' + appended)
    assert tracker.end() == path.stat().st_size
    assert scan.bytesRead() - before < len(appended) + 4096


def test_a_capped_batch_reads_from_its_start_only(jvm, tmp_path):
    path = tmp_path / "p-0000.jsonl"
    record = b'{"id":1,"sym":"MSFT"}\n'
    path.write_bytes(record * (8 * 1024 * 1024 // len(record)))
    tracker, scan = partition_end(jvm, path)
    end = tracker.end()
    start = end - 1000 * len(record)
    before = scan.bytesRead()
    ten, all_of_them = tracker.batchEnd(start, 10), tracker.batchEnd(start, 5000)
    assert (ten.end(), ten.records()) == (start + 10 * len(record), 10)
    assert (all_of_them.end(), all_of_them.records()) == (end, 1000)
    assert scan.bytesRead() - before < 2 * (end - start) + 1024


# -- the stream, as Spark asks it on each trigger ----------------------------------------

def large_log(root: Path, torn_tail: bytes = b'{"id":2,"sym":"MS') -> EventLog:
    log = EventLog.create(root / "trades", 2)
    for partition in range(2):
        with open(log.path(partition), "wb") as f:
            f.write(RECORD * (LARGE // len(RECORD)))
            f.write(torn_tail)                       # a producer mid-write
    return log


def stream(jvm, log: EventLog, cap: int = 10_000, index: int = 0, count: int = 1):
    schema = jvm.org.apache.spark.sql.types.StructType.fromDDL("id long, sym string")
    return jvm.sparkpoint.eventlog.EventLogStream(str(log.directory), index, count, cap, schema)


def offsets(offset) -> dict[str, int]:
    return json.loads(offset.json())


def test_a_fresh_start_reads_only_the_tail_of_a_large_log(jvm, tmp_path):
    source = stream(jvm, large_log(tmp_path))
    latest = offsets(source.reportLatestOffset())
    assert source.bytesScanned() < 2 * FEW
    expected = (LARGE // len(RECORD)) * len(RECORD)
    assert latest == {"0": expected, "1": expected}


def test_an_idle_trigger_reads_nothing_of_a_large_log(jvm, tmp_path):
    limits = jvm.org.apache.spark.sql.connector.read.streaming.ReadLimit
    source = stream(jvm, large_log(tmp_path))
    latest = source.reportLatestOffset()
    before = source.bytesScanned()
    for _ in range(3):                               # triggers with nothing appended
        assert source.reportLatestOffset().json() == latest.json()
        assert source.latestOffset(latest, limits.maxRows(10_000)).json() == latest.json()
        assert source.latestOffset(latest, limits.allAvailable()).json() == latest.json()
    assert source.bytesScanned() == before
    assert source.metrics(jvm.java.util.Optional.empty()).get("bytesScanned") == str(before)


def test_a_trigger_reads_only_what_was_appended_and_its_capped_batch(jvm, tmp_path):
    limits = jvm.org.apache.spark.sql.connector.read.streaming.ReadLimit
    log = large_log(tmp_path, torn_tail=b"")
    source = stream(jvm, log, cap=10)
    assert source.getDefaultReadLimit().maxRows() == 10
    latest = source.reportLatestOffset()
    log.append(0, [{"id": i, "sym": "AAPL"} for i in range(1000)])
    before = source.bytesScanned()
    capped = offsets(source.latestOffset(latest, limits.maxRows(10)))
    assert source.bytesScanned() - before < 2 * FEW
    assert capped["1"] == offsets(latest)["1"]
    # Partition 1 has nothing new: partition 0 takes the whole cap.
    assert capped["0"] - offsets(latest)["0"] == sum(len(f'{{"id":{i},"sym":"AAPL"}}\n') for i in range(10))
    assert offsets(source.latestOffset(latest, limits.allAvailable()))["0"] == log.path(0).stat().st_size


def record_lengths(partition: int, ids) -> int:
    return sum(len(f'{{"id":{i},"sym":"S{partition}"}}\n') for i in ids)


def test_a_capped_batch_holds_the_cap_across_uneven_partitions(jvm, tmp_path):
    limits = jvm.org.apache.spark.sql.connector.read.streaming.ReadLimit
    log = EventLog.create(tmp_path / "trades", 3)
    for partition, count in ((0, 2), (1, 100), (2, 5)):
        log.append(partition, [{"id": i, "sym": f"S{partition}"} for i in range(count)])
    source = stream(jvm, log, cap=0)
    start = source.initialOffset()
    # Shares of 12: 4 each; partition 0 has 2, partition 2 then 1 more of the rest.
    capped = offsets(source.latestOffset(start, limits.maxRows(12)))
    assert capped == {"0": record_lengths(0, range(2)), "1": record_lengths(1, range(5)),
                      "2": record_lengths(2, range(5))}
    assert offsets(source.latestOffset(start, limits.maxRows(1000))) == offsets(source.reportLatestOffset())
    # A cap below the partitions' count still moves on: one record each until it is used.
    assert offsets(source.latestOffset(start, limits.maxRows(2))) == {
        "0": record_lengths(0, range(1)), "1": record_lengths(1, range(1)), "2": 0}


def test_a_small_batch_is_one_task_and_a_large_one_a_task_per_partition(jvm, tmp_path):
    """Each task costs Spark a fixed price: a live stream's small batches are
    read by one; a batch of ``SPLIT_BYTES`` or more by one per partition."""
    limits = jvm.org.apache.spark.sql.connector.read.streaming.ReadLimit
    log = EventLog.create(tmp_path / "trades", 2)
    source = stream(jvm, log, cap=0)
    assert source.getDefaultReadLimit() == limits.allAvailable()
    start = source.initialOffset()
    assert offsets(start) == {"0": 0, "1": 0}
    assert len(source.planInputPartitions(start, start)) == 0
    log.append(0, [{"id": i, "sym": "AAPL"} for i in range(3)])
    log.append(1, [{"id": i, "sym": "MSFT"} for i in range(3, 5)])
    assert len(source.planInputPartitions(start, source.latestOffset(start, limits.allAvailable()))) == 1

    start = source.reportLatestOffset()
    for partition in range(2):
        with open(log.path(partition), "ab") as f:
            f.write(RECORD * (SPLIT_BYTES // len(RECORD) + 1))
    assert len(source.planInputPartitions(start, source.latestOffset(start, limits.allAvailable()))) == 2


def test_offsets_round_trip_and_a_worker_owns_every_nth_partition(jvm, tmp_path):
    log = EventLog.create(tmp_path / "trades", 5)
    second_of_two = stream(jvm, log, cap=0, index=1, count=2)
    assert offsets(second_of_two.initialOffset()) == {"1": 0, "3": 0}
    # Spark's checkpoints written before the source moved to the JVM hold Python's JSON.
    restored = second_of_two.deserializeOffset('{"1": 120, "3": 0}')
    assert restored.json() == '{"1":120,"3":0}'
    for wrong in ('{"1": -4}', '{"one": 4}', '{"-1": 4}', '[1]'):
        with pytest.raises(Exception, match="not an event log offset"):
            second_of_two.deserializeOffset(wrong)
    with pytest.raises(Exception, match="no such event log"):
        stream(jvm, EventLog(tmp_path / "absent"))


# -- records through a real query ---------------------------------------------------------

def read_all(spark, log: EventLog, schema: str, name: str, cap: int = 0) -> tuple[list, dict]:
    """Every record of ``log`` through a query (``awaitTermination`` raises its failure)."""
    query = (read_log(spark, log.directory, schema, max_records_per_batch=cap).writeStream
             .format("memory").queryName(name).trigger(availableNow=True).start())
    assert query.awaitTermination(300), "the query did not end"
    return spark.sql(f"select * from {name}").collect(), query.lastProgress


def test_a_query_reads_every_record_once_parsed_by_its_schema(spark, tmp_path):
    log = EventLog.create(tmp_path / "trades", 3)
    for partition in range(3):
        log.append(partition, [{"id": i, "sym": f"S{i}", "price": i / 4, "time": "2026-01-01T00:00:01.250000Z",
                                "extra": [1, 2]} for i in range(partition, 600, 3)])
    with open(log.path(0), "ab") as f:
        f.write(b'{"id":9999,"sym":"TORN"')         # a producer mid-write: not read
    rows, progress = read_all(spark, log, "id long, sym string, price double, size long, time timestamp",
                              "parsed", cap=100)
    assert sorted(row.id for row in rows) == list(range(600))
    first = next(row for row in rows if row.id == 5)
    assert (first.sym, first.price, first.size) == ("S5", 1.25, None)   # missing field: null
    assert first.time.timestamp() == 1767225601.25
    assert int(progress["sources"][0]["metrics"]["bytesScanned"]) < 64 * 1024


def test_a_malformed_record_fails_the_query_instead_of_becoming_nulls(spark, tmp_path):
    log = EventLog.create(tmp_path / "trades", 1)
    log.append(0, [{"id": 1, "sym": "A"}])
    with open(log.path(0), "ab") as f:
        f.write(b'{"id": "not a number", \n')
    with pytest.raises(StreamingQueryException, match="MALFORMED_RECORD_IN_PARSING"):
        read_all(spark, log, "id long, sym string", "malformed")
