"""The committed end of a partition as the worker's Python finds it (the
recovery target at start-up; the tests' expected ends): from the file's tail,
appends in arbitrary chunks (records split anywhere, torn tails), caps, and
what a call reads. The JVM's source finds the same ends
(tests/integration/test_log_source.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkpoint.eventlog import committed_end, record_count, scan
from tests.log_reference import append_in_chunks, expected_batch_end, record_ends, records, torn_tails
from tests.unit.read_counter import bytes_read


@settings(max_examples=150, deadline=None)
@given(stream=records, tail=torn_tails,
       cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
       cap=st.one_of(st.none(), st.integers(min_value=1, max_value=8)), start_pick=st.integers(min_value=0))
def test_committed_end_follows_appends_in_random_chunks(stream, tail, cuts, cap, start_pick):
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as root:
        # Chunks of a few bytes, so records straddle chunk boundaries.
        patch.setattr(scan, "FORWARD_CHUNK", 7)
        patch.setattr(scan, "BACKWARD_FIRST_CHUNK", 3)
        patch.setattr(scan, "BACKWARD_MAX_CHUNK", 11)
        path = Path(root) / "p-0000.jsonl"
        assert committed_end(path, 0) == 0          # no file yet
        for so_far in append_in_chunks(path, b"".join(stream) + tail, cuts):   # a torn record last
            boundaries = [0, *record_ends(so_far)]
            start = boundaries[start_pick % len(boundaries)]
            assert committed_end(path, start, cap) == expected_batch_end(so_far, start, cap)
            assert record_count(path) == len(boundaries) - 1


def test_a_missing_file_has_no_records(tmp_path):
    assert record_count(tmp_path / "absent") == 0


def test_committed_end_from_zero_reads_only_the_tail(tmp_path):
    # Start-up (the recovery target, the tests' expected ends) asks from offset 0.
    path = tmp_path / "p-0000.jsonl"
    record = b'{"id":1,"sym":"IBM"}\n'
    path.write_bytes(record * (8 * 1024 * 1024 // len(record)) + b'{"id":')
    before = bytes_read()
    assert committed_end(path, 0) == path.stat().st_size - len(b'{"id":')
    assert bytes_read() - before < 64 * 1024
