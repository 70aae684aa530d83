"""The on-disk event log: creation, appends, committed ends, reads, and the
producer's ids and partitioning."""

from __future__ import annotations

import json

import pytest

from sparkpoint.eventlog import EventLog, LogFormatError, committed_end, partition_for_key, scan
from sparkpoint.producer import SYMBOLS, write_trades


def read_range(path, start: int, end: int) -> bytes:
    return path.read_bytes()[start:end]


def lines(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines()]


def test_create_is_idempotent(tmp_path):
    first = EventLog.create(tmp_path / "trades", 4)
    second = EventLog.create(tmp_path / "trades", 4)
    assert first.exists() and second.partitions() == 4


def test_create_with_other_partition_count_names_the_header(tmp_path):
    EventLog.create(tmp_path / "trades", 4)
    with pytest.raises(LogFormatError) as caught:
        EventLog.create(tmp_path / "trades", 2)
    message = str(caught.value)
    assert str(tmp_path / "trades" / "log.json") in message
    assert "4" in message and "2" in message
    assert EventLog(tmp_path / "trades").partitions() == 4


def test_create_needs_a_partition(tmp_path):
    with pytest.raises(LogFormatError):
        EventLog.create(tmp_path / "trades", 0)


def test_partitions_of_missing_log_names_path(tmp_path):
    with pytest.raises(LogFormatError, match="no such event log"):
        EventLog(tmp_path / "absent").partitions()


def test_append_round_trip(tmp_path):
    log = EventLog.create(tmp_path / "l", 1)
    end1 = log.append(0, [{"id": 0}, {"id": 1}])
    end2 = log.append(0, [{"id": 2}])
    path = log.path(0)
    assert end2 == path.stat().st_size > end1 > 0
    assert committed_end(path, 0) == end2
    assert lines(read_range(path, 0, end2)) == [{"id": 0}, {"id": 1}, {"id": 2}]
    assert lines(read_range(path, end1, end2)) == [{"id": 2}]
    assert read_range(path, end2, end2) == b""


def test_partial_last_record_is_ignored_until_complete(tmp_path):
    log = EventLog.create(tmp_path / "l", 1)
    end = log.append(0, [{"id": 0}])
    path = log.path(0)
    with open(path, "ab") as f:
        f.write(b'{"id":1,"sym":"AA')          # a producer mid-write
    assert committed_end(path, 0) == end
    assert committed_end(path, end) == end
    assert committed_end(path, 0, max_records=5) == end
    with open(path, "ab") as f:
        f.write(b'PL"}\n')
    full = committed_end(path, 0)
    assert full == path.stat().st_size
    assert lines(read_range(path, end, full)) == [{"id": 1, "sym": "AAPL"}]


def test_missing_partition_file_ends_at_start(tmp_path):
    assert committed_end(tmp_path / "p-0000.jsonl", 0) == 0
    assert committed_end(tmp_path / "p-0000.jsonl", 123, max_records=4) == 123


def ends_after_each_record(data: bytes) -> list[int]:
    ends, position = [], 0
    for line in data.splitlines(keepends=True):
        position += len(line)
        if line.endswith(b"\n"):
            ends.append(position)
    return ends


def test_max_records_across_real_chunks_with_large_records(tmp_path):
    # Records of ~300 KiB straddle the 1 MiB read chunks.
    log = EventLog.create(tmp_path / "l", 1)
    log.append(0, [{"id": i, "pad": "x" * (300 * 1024 + i)} for i in range(12)])
    path = log.path(0)
    ends = ends_after_each_record(path.read_bytes())
    assert len(ends) == 12 and ends[-1] > 3 * (1 << 20)
    for cap in (1, 3, 4, 7, 11, 12, 50):
        assert committed_end(path, 0, max_records=cap) == ends[min(cap, 12) - 1], cap
    assert committed_end(path, ends[2], max_records=4) == ends[6]


def test_max_records_many_records_across_real_chunks(tmp_path):
    log = EventLog.create(tmp_path / "l", 1)
    log.append(0, [{"id": i} for i in range(150_000)])        # ~2 MiB
    path = log.path(0)
    ends = ends_after_each_record(path.read_bytes())
    assert ends[-1] > 1 << 20
    for cap in (1, 70_000, 99_999, 150_000, 200_000):
        assert committed_end(path, 0, max_records=cap) == ends[min(cap, len(ends)) - 1], cap


def test_max_records_with_tiny_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(scan, "FORWARD_CHUNK", 5)
    monkeypatch.setattr(scan, "BACKWARD_FIRST_CHUNK", 2)
    monkeypatch.setattr(scan, "BACKWARD_MAX_CHUNK", 7)
    log = EventLog.create(tmp_path / "l", 1)
    log.append(0, [{"id": i, "v": "y" * (i % 7)} for i in range(40)])
    path = log.path(0)
    with open(path, "ab") as f:
        f.write(b'{"id":')                                     # partial tail
    ends = ends_after_each_record(path.read_bytes())
    assert committed_end(path, 0) == ends[-1]
    for start_record in (0, 1, 17):
        start = 0 if start_record == 0 else ends[start_record - 1]
        for cap in (1, 2, 9, 23, 39, 40, 100):
            expected = ends[min(start_record + cap, len(ends)) - 1]
            assert committed_end(path, start, max_records=cap) == expected, (start_record, cap)


def test_partition_for_key_is_stable_and_in_range():
    # crc32-based: the same on every process and machine (not Python's salted hash).
    assert [partition_for_key(sym, 4) for sym in ("AAPL", "MSFT", "GOOG", "IBM")] == [0, 3, 0, 3]
    for partitions in (1, 2, 3, 7, 16):
        for i in range(200):
            key = f"key-{i}"
            p = partition_for_key(key, partitions)
            assert 0 <= p < partitions
            assert p == partition_for_key(key, partitions)


def read_log(log: EventLog) -> dict[int, list[dict]]:
    result = {}
    for p in range(log.partitions()):
        path = log.path(p)
        result[p] = lines(read_range(path, 0, committed_end(path, 0))) if path.exists() else []
    return result


def test_write_trades_ids_unique_and_continuing(tmp_path):
    log = EventLog.create(tmp_path / "trades", 4)
    first = write_trades(log, 50, seed=3)
    second = write_trades(log, 30, seed=3)
    assert [e["id"] for e in first] == list(range(50))
    assert [e["id"] for e in second] == list(range(50, 80))
    on_disk = [e["id"] for events in read_log(log).values() for e in events]
    assert sorted(on_disk) == list(range(80))


def test_write_trades_partitions_by_symbol(tmp_path):
    log = EventLog.create(tmp_path / "trades", 3)
    write_trades(log, 400, seed=7)
    partitions_of: dict[str, set[int]] = {}
    for partition, events in read_log(log).items():
        for event in events:
            assert event["sym"] in SYMBOLS
            partitions_of.setdefault(event["sym"], set()).add(partition)
    assert len(partitions_of) > 1
    for sym, partitions in partitions_of.items():
        assert partitions == {partition_for_key(sym, 3)}, sym
