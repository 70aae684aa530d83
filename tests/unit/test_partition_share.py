"""A worker refuses a checkpoint taken over another share of the log's
partitions (another SP_WORKER_COUNT): resuming it would read partitions
another worker already published from their start, or leave some unread."""

from __future__ import annotations

import pytest

from sparkpoint.eventlog import EventLog
from worker import api as sp
from worker.api.graph import Pipeline
from worker.checkpointing.manifest import Manifest, QueryCut
from worker.lifecycle.restoring import share_mismatch
from worker.settings import WorkerSettings


def checkpoint(**offsets: dict[str, int]) -> Manifest:
    return Manifest(7, "worker-0", 0.0, 0.0, 0, ("trades",),
                    tuple(QueryCut(query, 3, cut, {}) for query, cut in offsets.items()))


@pytest.fixture
def pipeline(tmp_path) -> Pipeline:
    EventLog.create(tmp_path / "trades", 4)
    trades = sp.read.from_log("trades", schema="id long", name="trades")
    # Two queries: a console sink publishes as batches come, so it never shares the files sink's query.
    return Pipeline.of(trades | sp.write.to_files("a", name="a_out"), trades | sp.write.to_console(name="b_out"))


def settings(tmp_path, index: int, count: int) -> WorkerSettings:
    return WorkerSettings.model_construct(log_dir=tmp_path, worker_index=index, worker_count=count,
                                          worker_id=f"worker-{index}")


def test_a_checkpoint_over_the_partitions_the_worker_owns_resumes(tmp_path, pipeline):
    assert share_mismatch(pipeline, settings(tmp_path, 0, 1), checkpoint(a_out={str(p): 9 for p in range(4)})) is None
    assert share_mismatch(pipeline, settings(tmp_path, 1, 2), checkpoint(a_out={"1": 9, "3": 0})) is None
    assert share_mismatch(pipeline, settings(tmp_path, 0, 1), None) is None


def test_a_checkpoint_taken_by_one_of_two_workers_is_refused_by_a_single_worker(tmp_path, pipeline):
    refused = share_mismatch(pipeline, settings(tmp_path, 0, 1),
                             checkpoint(a_out={"0": 5, "1": 5, "2": 5, "3": 5}, b_out={"0": 9, "2": 9}))
    assert refused == ("checkpoint 7 was taken over partitions [0, 2] of log trades, but worker-0 "
                       "(SP_WORKER_INDEX=0, SP_WORKER_COUNT=1) owns partitions [0, 1, 2, 3]: run the worker count "
                       "the checkpoints were taken with, or start on empty checkpoint volumes")


def test_a_single_workers_checkpoint_is_refused_by_one_of_two(tmp_path, pipeline):
    refused = share_mismatch(pipeline, settings(tmp_path, 0, 2), checkpoint(a_out={str(p): 1 for p in range(4)}))
    assert refused is not None and "owns partitions [0, 2]" in refused and "SP_WORKER_COUNT=2" in refused


def test_queries_the_pipeline_no_longer_has_or_that_never_read_are_not_compared(tmp_path, pipeline):
    assert share_mismatch(pipeline, settings(tmp_path, 0, 1), checkpoint(gone={"0": 1}, a_out={})) is None
