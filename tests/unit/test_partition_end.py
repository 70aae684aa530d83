"""A partition's committed end found from the file's tail and kept across
calls: appends in arbitrary chunks (records split anywhere, torn tails), caps,
files that shrink or are replaced, and what each call reads."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkpoint.eventlog import PartitionEnd, committed_end, record_count, scan
from tests.unit.read_counter import bytes_read

# Records: short runs of non-newline bytes, each ending in a newline.
records = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"x") + b"\n"), max_size=40)


def record_ends(data: bytes) -> list[int]:
    """The reference: the offset after each complete record of ``data``."""
    return [i + 1 for i, byte in enumerate(data) if byte == ord("\n")]


def expected_batch_end(data: bytes, start: int, cap: int | None) -> int:
    after = [end for end in record_ends(data) if end > start]
    if not after:
        return start
    return after[-1] if cap is None else after[min(cap, len(after)) - 1]


@settings(max_examples=150, deadline=None)
@given(stream=records, tail=st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"y")),
       cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
       cap=st.one_of(st.none(), st.integers(min_value=1, max_value=8)), start_pick=st.integers(min_value=0))
def test_end_follows_appends_in_random_chunks(stream, tail, cuts, cap, start_pick):
    data = b"".join(stream) + tail                  # a torn record last
    bounds = sorted({min(c, len(data)) for c in cuts} | {len(data)})
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as root:
        # Chunks of a few bytes, so records straddle chunk boundaries.
        patch.setattr(scan, "FORWARD_CHUNK", 7)
        patch.setattr(scan, "BACKWARD_FIRST_CHUNK", 3)
        patch.setattr(scan, "BACKWARD_MAX_CHUNK", 11)
        path = Path(root) / "p-0000.jsonl"
        tracker = PartitionEnd(path)
        assert tracker.end() == 0                   # no file yet
        written = 0
        for bound in bounds:
            with open(path, "ab") as f:
                f.write(data[written:bound])
            written = bound
            so_far = data[:bound]
            boundaries = [0, *record_ends(so_far)]
            start = boundaries[start_pick % len(boundaries)]
            assert tracker.end() == boundaries[-1]
            assert tracker.end() == boundaries[-1]  # asked again, nothing appended
            assert tracker.batch_end(start, cap) == expected_batch_end(so_far, start, cap)
            assert committed_end(path, start, cap) == expected_batch_end(so_far, start, cap)
            assert record_count(path) == len(boundaries) - 1


def test_a_file_that_shrank_or_was_replaced_is_scanned_afresh(tmp_path):
    path = tmp_path / "p-0000.jsonl"
    path.write_bytes(b'{"id":0}\n{"id":1}\n')
    tracker = PartitionEnd(path)
    assert tracker.end() == 18
    path.write_bytes(b'{"i":0}\n{"i')                # truncated and rewritten in place
    assert tracker.end() == 8
    replacement = tmp_path / "new"
    replacement.write_bytes(b'{"id":0}\n{"id":1}\n{"id":2}\n')
    os.replace(replacement, path)                    # another file (a new inode), larger
    assert tracker.end() == 27
    path.unlink()
    assert tracker.end() == 0
    assert tracker.batch_end(9, 4) == 9              # never before start


def test_a_call_with_nothing_appended_reads_nothing_and_an_append_reads_only_it(tmp_path):
    path = tmp_path / "p-0000.jsonl"
    record = b'{"id":1,"sym":"AAPL","price":101.25,"size":10}\n'
    with open(path, "wb") as f:
        f.write(record * (8 * 1024 * 1024 // len(record)))
        f.write(b'{"id":2,"sym":')                  # a producer mid-write
    tracker = PartitionEnd(path)
    before = bytes_read()
    end = tracker.end()
    assert bytes_read() - before < 64 * 1024         # the tail only, on a fresh start
    assert end == path.stat().st_size - len(b'{"id":2,"sym":')

    before = bytes_read()
    assert tracker.end() == end
    assert tracker.batch_end(end, 10_000) == end
    assert tracker.batch_end(end) == end
    assert bytes_read() - before < 1024              # /proc/self/io itself: no scan

    appended = record * 100
    with open(path, "ab") as f:
        f.write(b'"AAPL"}\n' + appended)
    before = bytes_read()
    assert tracker.end() == path.stat().st_size
    assert bytes_read() - before < len(appended) + 4096


def test_a_capped_batch_reads_from_its_start_only(tmp_path):
    path = tmp_path / "p-0000.jsonl"
    record = b'{"id":1,"sym":"MSFT"}\n'
    path.write_bytes(record * (8 * 1024 * 1024 // len(record)))
    tracker = PartitionEnd(path)
    end = tracker.end()
    start = end - 1000 * len(record)
    before = bytes_read()
    assert tracker.batch_end(start, 10) == start + 10 * len(record)
    assert tracker.batch_end(start, 5000) == end
    assert bytes_read() - before < 2 * (end - start) + 1024


def test_a_missing_file_ends_at_start(tmp_path):
    assert PartitionEnd(tmp_path / "absent").batch_end(42, 3) == 42
    assert record_count(tmp_path / "absent") == 0


def test_committed_end_from_zero_reads_only_the_tail(tmp_path):
    # Start-up (the recovery target, the tests' expected ends) asks from offset 0.
    path = tmp_path / "p-0000.jsonl"
    record = b'{"id":1,"sym":"IBM"}\n'
    path.write_bytes(record * (8 * 1024 * 1024 // len(record)) + b'{"id":')
    before = bytes_read()
    assert committed_end(path, 0) == path.stat().st_size - len(b'{"id":')
    assert bytes_read() - before < 64 * 1024
