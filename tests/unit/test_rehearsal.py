"""A standby's rehearsal (worker/runtime/rehearsal.py): when its first round ends, and what its restart runs again."""

from worker.runtime.rehearsal import BATCHES, RECORDS, rehearsed, uncommit_last


def test_a_query_rehearses_its_batches_or_to_the_end_of_the_log():
    assert not rehearsed(None)                                                  # no batch yet
    assert not rehearsed({"batchId": BATCHES - 2, "numInputRows": RECORDS})    # full batches to go
    assert rehearsed({"batchId": BATCHES - 1, "numInputRows": RECORDS})
    assert rehearsed({"batchId": 0, "numInputRows": RECORDS - 1})               # the log has no more


def spark_checkpoint(root, offsets, commits):
    for directory, batches in (("offsets", offsets), ("commits", commits)):
        (root / directory).mkdir(parents=True)
        for batch in batches:
            (root / directory / str(batch)).write_text("v1\n")
    return root


def test_a_restarted_rehearsal_runs_its_last_committed_batch_again(tmp_path):
    query = spark_checkpoint(tmp_path / "q", offsets=[0, 1, 2], commits=[0, 1, 2])
    (query / "commits" / ".2.crc").write_bytes(b"crc")
    uncommit_last(query)
    assert sorted(p.name for p in (query / "commits").iterdir()) == ["0", "1"]
    assert sorted(p.name for p in (query / "offsets").iterdir()) == ["0", "1", "2"]


def test_a_rehearsal_stopped_mid_batch_keeps_its_commits(tmp_path):
    # Batch 3 was planned but not committed: started again, Spark runs it again.
    query = spark_checkpoint(tmp_path / "q", offsets=[0, 1, 2, 3], commits=[0, 1, 2])
    uncommit_last(query)
    assert sorted(p.name for p in (query / "commits").iterdir()) == ["0", "1", "2"]


def test_a_rehearsal_that_committed_nothing_has_nothing_to_remove(tmp_path):
    uncommit_last(tmp_path / "never-started")
    uncommit_last(spark_checkpoint(tmp_path / "q", offsets=[0], commits=[]))
    assert not list((tmp_path / "q" / "commits").iterdir())
